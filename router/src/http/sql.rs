//! `/api/v1/sql`: SQL read-back over every shard (`read::sql`).

use super::{error_response, parse_params, read_body};
use crate::auth::{presented_token, Role};
use crate::error::Error;
use crate::metrics;
use crate::read::sql as query;
use crate::state::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub(crate) async fn sql(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "sql";
    let res = async {
        let params = parse_params(query.as_deref())?;
        let db_named = params.get("db").map_or("", String::as_str);
        let token = presented_token(&headers, Some(&params));
        r.auth.authorize(token.as_deref(), Role::Read, &[db_named])?;
        let q = match params.get("q") {
            Some(q) => q.clone(),
            None => {
                let b = read_body(&headers, body, r.options.max_body_bytes).await?;
                let text = String::from_utf8(b.to_vec())
                    .map_err(|_| Error::BadRequest("query is not UTF-8".into()))?;
                // Form posts (`q=...`) and raw SQL bodies both work.
                let form = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
                if form || text.starts_with("q=") {
                    parse_params(Some(&text))?
                        .remove("q")
                        .ok_or_else(|| Error::BadRequest("the form has no `q` field".into()))?
                } else {
                    text
                }
            }
        };
        let opts = query::SqlOptions::from_params(&params)?;
        let db = params.get("db").ok_or_else(|| {
            Error::BadRequest(
                "name the database to read with `db=` (tables are that database's measurements, `_series` and `_samples`)".into(),
            )
        })?;
        shardhouse_common::names::validate_database(db)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        query::run(&r, db, &q, opts).await
    }
    .await;
    match res {
        Ok((content_type, body)) => {
            metrics::REQUESTS
                .with_label_values(&[endpoint, "200"])
                .inc();
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(e) => error_response(endpoint, &e),
    }
}
