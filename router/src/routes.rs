//! Every HTTP path and the handler that answers it (`http::*`). A new API
//! is a handler module in `http/` and its lines here.

use crate::http::{admin, health, msgpack, otlp, prom, prom_read, promql, sql, v1, v2};
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
        .route("/v1/metrics", post(otlp::write_metrics))
        // Reads.
        .route("/query", get(v1::query).post(v1::query))
        .route("/api/v1/sql", get(sql::sql).post(sql::sql))
        // Prometheus remote_read (and InfluxDB 1.x's path for it).
        .route("/api/v1/read", post(prom_read::read_prom))
        .route("/api/v1/prom/read", post(prom_read::read_prom))
        // The Prometheus query API (PromQL).
        .route("/api/v1/query", get(promql::query).post(promql::query))
        .route(
            "/api/v1/query_range",
            get(promql::query_range).post(promql::query_range),
        )
        .route("/api/v1/series", get(promql::series).post(promql::series))
        .route("/api/v1/labels", get(promql::labels).post(promql::labels))
        .route("/api/v1/label/{name}/values", get(promql::label_values))
        .route(
            "/api/v1/metadata",
            get(promql::metadata).post(promql::metadata),
        )
        .route("/api/v1/status/buildinfo", get(promql::buildinfo))
        .route(
            "/api/v1/query_exemplars",
            get(promql::exemplars).post(promql::exemplars),
        )
        .route(
            "/api/v1/format_query",
            get(promql::format_query).post(promql::format_query),
        )
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
