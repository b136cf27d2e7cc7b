//! Every HTTP path and the handler that answers it (`http::*`). A new API
//! is a handler module in `http/` and its lines here.

use crate::http::{admin, health, msgpack, prom, sql, v1, v2};
use crate::state::Router;
use axum::routing::{get, post};
use std::sync::Arc;

pub fn app(router: Arc<Router>) -> axum::Router {
    axum::Router::new()
        // Writes.
        .route("/write", post(v1::write_v1))
        .route("/api/v2/write", post(v2::write_v2))
        .route("/api/v1/write/msgpack", post(msgpack::write_msgpack))
        .route("/api/v1/prom/write", post(prom::write_prom))
        // Reads.
        .route("/query", get(v1::query).post(v1::query))
        .route("/api/v1/sql", get(sql::sql).post(sql::sql))
        // Databases, retention and deletes.
        .route(
            "/api/v1/databases",
            get(admin::databases)
                .post(admin::databases)
                .delete(admin::databases),
        )
        .route("/api/v1/retention", post(admin::retention))
        .route("/api/v1/drop_measurement", post(admin::drop_measurement))
        .route("/api/v1/delete", post(admin::delete))
        // Liveness, readiness and metrics.
        .route("/ping", get(health::ping).head(health::ping))
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/metrics", get(health::metrics_text))
        .with_state(router)
}
