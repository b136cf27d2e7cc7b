//! Prometheus: remote_write (`/api/v1/prom/write`, samples into the
//! database's `_samples` table, `write::parse::add_remote_write`).

use super::{content_encoding, error_response, parse_params, read_raw_body, write_response};
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
use shardhouse_common::lineproto::Precision;
use std::sync::Arc;
use std::time::Instant;

pub(crate) async fn write_prom(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "prom";
    let started = Instant::now();
    let limit = r.options.max_body_bytes;
    let prep = async {
        let params = parse_params(query.as_deref())?;
        let db = params
            .get("db")
            .cloned()
            .unwrap_or_else(|| "prometheus".into());
        let token = presented_token(&headers, Some(&params));
        let access = admit_write(&r.auth, token.as_deref(), &db)?;
        // remote_write bodies are snappy block format (Prometheus says
        // `Content-Encoding: snappy`); nothing else is read.
        content_encoding(&headers, &["snappy"])?;
        let compressed = read_raw_body(&headers, body, limit).await?;
        metrics::BYTES
            .with_label_values(&[endpoint])
            .inc_by(compressed.len() as u64);
        let req = parse::remote_write_request(&compressed, limit)?;
        let rp = params.get("rp").filter(|r| !r.is_empty()).cloned();
        Ok::<_, Error>((db, rp, req, compressed.len(), access))
    };
    let (db, rp, req, size, access) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(endpoint, &e),
    };
    let res = r
        .write(
            endpoint,
            &db,
            rp.as_deref(),
            size,
            Precision::Millisecond,
            |b| parse::add_remote_write(b, &req),
        )
        .await;
    charge_write(&r.auth, access, &res);
    write_response(endpoint, "sample", res, started)
}
