//! Liveness and readiness as InfluxDB answers them, and `/metrics`.

use crate::metrics;
use crate::read::sql::rfc3339_utc;
use crate::state::Router;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub(crate) async fn ping() -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        "x-influxdb-version",
        HeaderValue::from_static("shardhouse-1.8"),
    );
    resp
}

/// Git commit of the build, when the build set `SHARDHOUSE_GIT_COMMIT`.
const GIT_COMMIT: &str = match option_env!("SHARDHOUSE_GIT_COMMIT") {
    Some(c) => c,
    None => "",
};

/// The body of `/health`, shaped as InfluxDB 1.8/2.x answer it (the v2
/// client libraries' `health()` reads `name`, `message`, `status`,
/// `checks`, `version`, `commit`), plus `shard_map_epoch`.
pub fn health_body(shard_map_epoch: u64) -> serde_json::Value {
    serde_json::json!({
        "name": "shardhouse",
        "message": "ready for queries and writes",
        "status": "pass",
        "checks": [],
        "version": env!("CARGO_PKG_VERSION"),
        "commit": GIT_COMMIT,
        "shard_map_epoch": shard_map_epoch,
    })
}

pub(crate) async fn health(State(r): State<Arc<Router>>) -> Response {
    let epoch = r.cluster.shard_map().map(|m| m.epoch).unwrap_or(0);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        health_body(epoch).to_string(),
    )
        .into_response()
}

/// A duration as Go prints it (`1h2m3.5s`, `250ms` is `0.25s` here: whole
/// seconds and a trimmed fraction), as InfluxDB's `/ready` `up` field.
pub fn go_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3_600, secs % 3_600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    if d.subsec_nanos() > 0 {
        let frac = format!("{:09}", d.subsec_nanos());
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// Ready once a shard map is known (writes can be routed), answered as
/// InfluxDB 2.x does: 200 `{"status":"ready","started":..,"up":..}`;
/// before, 503 `{"status":"starting","message":<why>}`.
pub(crate) async fn ready(State(r): State<Arc<Router>>) -> Response {
    let (status, body) = match r.cluster.shard_map() {
        Ok(_) => {
            let started = r
                .started
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (
                StatusCode::OK,
                serde_json::json!({
                    "status": "ready",
                    "started": rfc3339_utc(started.as_secs() as i64, started.subsec_nanos()),
                    "up": go_duration(r.started.elapsed().unwrap_or_default()),
                }),
            )
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "starting", "message": e.to_string()}),
        ),
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) async fn metrics_text() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_has_influxdb_fields_and_durations_print_as_go() {
        let h = health_body(7);
        for k in ["name", "message", "status", "version", "commit"] {
            assert!(h[k].is_string(), "{k}: {h}");
        }
        assert_eq!(h["status"], "pass");
        assert_eq!(h["checks"], serde_json::json!([]));
        assert_eq!(h["shard_map_epoch"], 7);
        use std::time::Duration;
        assert_eq!(go_duration(Duration::from_millis(14_250)), "14.25s");
        assert_eq!(go_duration(Duration::from_secs(3_723)), "1h2m3s");
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
