//! The node's small HTTP surface: Prometheus metrics and probes.

use crate::context::NodeContext;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::Encoder;
use std::sync::Arc;

pub fn router(ctx: Arc<NodeContext>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .with_state(ctx)
}

async fn metrics() -> impl IntoResponse {
    let encoder = prometheus::TextEncoder::new();
    let mut buf = Vec::new();
    match encoder.encode(&prometheus::gather(), &mut buf) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            buf,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn ready(State(ctx): State<Arc<NodeContext>>) -> impl IntoResponse {
    if ctx.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}
