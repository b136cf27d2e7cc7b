//! `/api/v1/write/msgpack`: an array of msgpack points
//! (`write::parse::msgpack_points`, shape in docs/api.md).

use super::params::precision_param;
use super::{error_response, parse_params, read_body, write_response};
use crate::auth::presented_token;
use crate::error::Error;
use crate::metrics;
use crate::state::Router;
use crate::write::admit::{admit_write, charge_write};
use crate::write::parse;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use std::sync::Arc;
use std::time::Instant;

pub(crate) async fn write_msgpack(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "msgpack";
    let started = Instant::now();
    let prep = async {
        let params = parse_params(query.as_deref())?;
        let precision = precision_param(&params, true)?;
        let db = params
            .get("db")
            .or_else(|| params.get("bucket"))
            .cloned()
            .unwrap_or_else(|| "default".into());
        let token = presented_token(&headers, Some(&params));
        let access = admit_write(&r.auth, token.as_deref(), &db)?;
        let body = read_body(&headers, body, r.options.max_body_bytes).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(body.len() as u64);
        let rp = params.get("rp").filter(|r| !r.is_empty()).cloned();
        Ok::<_, Error>((db, rp, precision, body, access))
    };
    let (db, rp, precision, body, access) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let points = match parse::msgpack_points(&body) {
        Ok(p) => p,
        Err(e) => return error_response(endpoint, &e),
    };
    let res = r
        .write(endpoint, &db, rp.as_deref(), body.len(), precision, |b| {
            parse::add_msgpack(b, &points, precision)
        })
        .await;
    charge_write(&r.auth, access, &res);
    write_response(endpoint, "point", res, started)
}
