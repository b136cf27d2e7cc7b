//! The non-write endpoints: ping, health, ready and metrics, SQL reads of
//! zone-labelled times, readiness before a shard map, and the InfluxDB v2
//! Python client's health and ready calls.

use crate::fake::*;
use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use shardhouse_router::cluster::Cluster;
use shardhouse_router::config::RouterOptions;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_health_ready_and_metrics() {
    let h = harness(1, 1, |_| {}).await;
    let get = |p: &str| h.client.get(h.url(p)).send();
    assert_eq!(get("/ping").await.unwrap().status(), 204);
    // /health and /ready as InfluxDB answers them (issue 12: the v2
    // client's health() said "fail", ready() returned nothing).
    let resp = get("/health").await.unwrap();
    assert_eq!(resp.status(), 200);
    let v = json_body(resp).await;
    assert_eq!(v["name"], "shardhouse");
    assert_eq!(v["status"], "pass");
    assert_eq!(v["message"], "ready for queries and writes");
    assert_eq!(v["checks"], serde_json::json!([]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["commit"].is_string() && v["shard_map_epoch"] == 1, "{v}");
    let resp = get("/ready").await.unwrap();
    assert_eq!(resp.status(), 200);
    let v = json_body(resp).await;
    assert_eq!(v["status"], "ready");
    let started = v["started"].as_str().unwrap();
    assert!(started.ends_with('Z') && started.len() >= 20, "{v}");
    assert!(v["up"].as_str().unwrap().ends_with('s'), "{v}");
    assert_eq!(h.post("/write?db=d", "cpu v=1\n").await.status(), 204);
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    for name in [
        "shardhouse_router_requests_total",
        "shardhouse_router_points_total",
        "shardhouse_router_bytes_total",
        "shardhouse_router_parse_seconds",
        "shardhouse_router_series_hash_seconds",
        "shardhouse_router_batch_build_seconds",
        "shardhouse_router_forward_seconds",
        "shardhouse_router_write_seconds",
        "shardhouse_router_inflight_bytes",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    assert!(text.contains("shardhouse_router_requests_total{endpoint=\"v1\",status=\"204\"}"));
    // Missing db and bad precision are 400s.
    assert_eq!(h.post("/write", "cpu v=1\n").await.status(), 400);
    assert_eq!(
        h.post("/write?db=d&precision=x", "cpu v=1\n")
            .await
            .status(),
        400
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_reads_zone_labelled_times_and_checks_statements_on_tokens() {
    let h = harness(1, 2, |_| {}).await;
    let body = "cpu,host=a v=1 1700000000000000000\na;b,host=a v=2 1700000000500000000\n";
    assert_eq!(h.post("/write?db=d", body).await.status(), 204);
    let sql = |q: &'static str, csv: bool| {
        let mut params = vec![("q", q), ("db", "d")];
        if csv {
            params.push(("format", "csv"));
        }
        h.client.get(h.url("/api/v1/sql")).query(&params).send()
    };
    // The node labels times "Etc/UTC" (as chDB does): JSON and CSV are 200.
    let resp = sql("SELECT * FROM cpu FINAL", false).await.unwrap();
    assert_eq!(resp.status(), 200);
    let rows = json_body(resp).await;
    assert_eq!(rows[0]["time"], "2023-11-14T22:13:20Z", "{rows}");
    let resp = sql("SELECT * FROM cpu", true).await.unwrap();
    assert_eq!(resp.status(), 200);
    let csv = resp.text().await.unwrap();
    assert!(csv.contains("2023-11-14T22:13:20Z"), "{csv}");
    // A measurement named `a;b` can be queried.
    let resp = sql("SELECT * FROM `a;b`", false).await.unwrap();
    assert_eq!(resp.status(), 200);
    let rows = json_body(resp).await;
    assert_eq!(rows[0]["time"], "2023-11-14T22:13:20.5Z", "{rows}");
    // Table functions and settings are refused, naming them and where.
    for (q, want) in [
        (
            "SELECT * FROM file('/etc/passwd', 'LineAsString')",
            "function \"file\" at line 1, column 15",
        ),
        ("SELECT 1 SETTINGS readonly=0", "SETTINGS"),
        ("SELECT 1; SELECT 2", "one statement per request"),
    ] {
        let resp = sql(q, false).await.unwrap();
        assert_eq!(resp.status(), 400, "{q}");
        let msg = json_body(resp).await["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(msg.contains(want), "{q}: {msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_with_a_reason_until_a_shard_map_is_known() {
    let opts = RouterOptions {
        http_listen: "127.0.0.1:0".into(),
        grpc_listen: "127.0.0.1:0".into(),
        ..Default::default()
    };
    let cluster = Arc::new(Cluster::new("test", 1 << 20, Duration::from_secs(1)));
    let router = shardhouse_router::start(opts, cluster.clone())
        .await
        .unwrap();
    let url = format!("http://{}/ready", router.http_addr);
    let resp = reqwest::get(&url).await.unwrap();
    assert_eq!(resp.status(), 503);
    let v = json_body(resp).await;
    assert_eq!(v["status"], "starting");
    assert!(v["message"].as_str().unwrap().contains("shard map"), "{v}");
    cluster.set_shard_map(ShardMap::initial(
        1,
        1,
        vec![NodeInfo {
            node_id: 1,
            grpc_addr: "127.0.0.1:1".into(),
            http_addr: "127.0.0.1:1".into(),
            cores: 1,
        }],
    ));
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
}

/// The InfluxDB v2 Python client's `health()` and `ready()` (issue 12),
/// when python3 can import `influxdb_client` (`pip install
/// influxdb-client`); skipped otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxdb_v2_python_client_health_and_ready_pass() {
    let have = std::process::Command::new("python3")
        .args(["-c", "import influxdb_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("skipped: python3 cannot import influxdb_client (pip install influxdb-client)");
        return;
    }
    let h = harness(1, 1, |_| {}).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/influxdb_v2_health.py"
    );
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .arg(format!("http://{}", h.router.http_addr))
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("OK"), "{text}");
}
