//! InfluxDB 2.x `/api/v2/write` (`bucket=`, `org` ignored): line protocol
//! as v1 `/write` reads it.

use super::v1::write_lines;
use crate::state::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use std::sync::Arc;

pub(crate) async fn write_v2(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write_lines(r, "v2", query, headers, body).await
}
