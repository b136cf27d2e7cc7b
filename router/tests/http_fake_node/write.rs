//! The write endpoint's answers: partial writes naming the bad line, the
//! batch schema the nodes receive, gzip and body limits, tokens, and how
//! node verdicts (overloaded, not leader, rejected) map to HTTP status.

use crate::fake::*;
use arrow_array::{Array, UInt64Array};
use std::io::Write;
use std::sync::Arc;
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_write_names_the_bad_line_and_writes_the_good_points() {
    let h = harness(2, 4, |_| {}).await;
    let body = "cpu,host=a usage=1.5 1000\n\
                cpu,host=b usage=oops 1000\n\
                # comment\n\
                cpu,host=c usage=2.5 2000\n\
                mem,host=a used=10i 3000\n";
    let resp = h.post("/write?db=telegraf", body).await;
    assert_eq!(resp.status(), 400);
    assert!(resp.headers().contains_key("x-influxdb-error"));
    let v = json_body(resp).await;
    assert_eq!(v["code"], "invalid");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("line 2"), "{msg}");
    assert!(msg.contains("usage") && msg.contains("oops"), "{msg}");
    assert!(msg.contains("1 of 4 points rejected"), "{msg}");
    assert_eq!(
        h.total_rows().await,
        3,
        "the three good points reached the nodes"
    );

    // Read-back through the router: every good point, merged across
    // shards (issue 14: one answer, no `shard` column); per_shard=true is
    // the plain fan-out, rows tagged with their shard.
    for (per_shard, tagged) in [("false", false), ("true", true)] {
        let resp = h
            .client
            .get(h.url("/api/v1/sql"))
            .query(&[
                ("q", "SELECT * FROM cpu"),
                ("db", "d"),
                ("per_shard", per_shard),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let rows = json_body(resp).await;
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), 2, "the two good cpu points: {rows:?}");
        assert!(rows
            .iter()
            .all(|r| r.get("shard").is_some() == tagged && r.get("series_id").is_some()));
    }

    // CSV read-back has a header and one line per row.
    let resp = h
        .client
        .get(h.url("/api/v1/sql"))
        .query(&[("q", "SELECT * FROM cpu"), ("format", "csv"), ("db", "d")])
        .send()
        .await
        .unwrap();
    let csv = resp.text().await.unwrap();
    assert!(csv.lines().next().unwrap().contains("series_id"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "{csv}");

    // Non-SELECT statements are refused.
    let resp = h
        .client
        .post(h.url("/api/v1/sql?db=d&q=DROP%20TABLE%20cpu"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_carry_the_contract_schema_and_series() {
    let h = harness(1, 1, |_| {}).await;
    let resp = h
        .post(
            "/api/v2/write?org=o&bucket=b&precision=s",
            "cpu,host=a,region=eu v=1,n=2i,ok=t,s=\"x\",u=3u 7\ncpu,region=eu,host=a v=2 8\n",
        )
        .await;
    assert_eq!(resp.status(), 204);
    let writes = h.nodes[0].writes().await;
    assert_eq!(writes.len(), 1, "one batch per (shard, measurement)");
    let w = &writes[0];
    assert_eq!(w.measurement, "cpu");
    assert_eq!(w.shard_map_epoch, 1);
    let b = &decode(&w.points_ipc)[0];
    let names: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["time", "series_id", "v", "n", "ok", "s", "u"]);
    assert!(!b.schema().field(0).is_nullable() && b.schema().field(2).is_nullable());
    let ids = b.column(1).as_any().downcast_ref::<UInt64Array>().unwrap();
    let want = shardhouse_common::series::series_id("cpu", &[("host", "a"), ("region", "eu")]);
    assert_eq!(
        (ids.value(0), ids.value(1)),
        (want, want),
        "tag order does not matter"
    );
    assert_eq!(b.column(3).null_count(), 1, "missing field is null");
    let series = &decode(&w.series_ipc)[0];
    assert_eq!(series.num_rows(), 1);
    let tags = series
        .column(2)
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .unwrap();
    assert_eq!(tags.value(0), "cpu,host=a,region=eu");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bodies_are_accepted_and_bad_gzip_is_400() {
    let h = harness(1, 2, |_| {}).await;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b"cpu,host=a v=1\ncpu,host=b v=2\n").unwrap();
    let gz = enc.finish().unwrap();
    let resp = h
        .client
        .post(h.url("/api/v2/write?bucket=b"))
        .header("content-encoding", "gzip")
        .body(gz)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(h.total_rows().await, 2);
    let resp = h
        .client
        .post(h.url("/api/v2/write?bucket=b"))
        .header("content-encoding", "gzip")
        .body("not gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413_compressed_or_not() {
    let h = harness(1, 1, |o| o.max_body_bytes = 1000).await;
    let big = "cpu v=1\n".repeat(200);
    let resp = h.post("/write?db=d", big.clone()).await;
    assert_eq!(resp.status(), 413);
    // A small gzip body that inflates past the limit is refused too.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(big.as_bytes()).unwrap();
    let gz = enc.finish().unwrap();
    assert!(gz.len() < 1000);
    let resp = h
        .client
        .post(h.url("/write?db=d"))
        .header("content-encoding", "gzip")
        .body(gz)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(h.total_rows().await, 0);
    assert_eq!(h.post("/write?db=d", "cpu v=1\n").await.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_401_without_or_with_a_wrong_token() {
    let h = harness(1, 1, |o| o.auth_tokens = vec!["s3cret".into()]).await;
    let line = "cpu v=1\n";
    assert_eq!(h.post("/api/v2/write?bucket=b", line).await.status(), 401);
    let send = |path: &str, auth: Option<&str>| {
        let mut r = h.client.post(h.url(path)).body(line);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    assert_eq!(
        send("/api/v2/write?bucket=b", Some("Token wrong"))
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        send("/api/v2/write?bucket=b", Some("Token s3cret"))
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        send("/write?db=d&u=me&p=s3cret", None)
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        send("/write?db=d&u=me&p=nope", None)
            .await
            .unwrap()
            .status(),
        401
    );
    // Basic me:s3cret
    assert_eq!(
        send("/write?db=d", Some("Basic bWU6czNjcmV0"))
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(h.total_rows().await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_shard_answers_429_with_retry_after() {
    let h = harness(1, 1, |o| o.max_shard_inflight_bytes = 1).await;
    let hold = Arc::new(Notify::new());
    h.nodes[0].set_mode(Mode::Hold(hold.clone())).await;
    let first = {
        let c = h.client.clone();
        let url = h.url("/write?db=d");
        tokio::spawn(async move { c.post(url).body("cpu v=1\n").send().await.unwrap().status() })
    };
    // Wait until the first write is in flight at the node.
    h.nodes[0].arrived.notified().await;
    let resp = h.post("/write?db=d", "cpu v=2\n").await;
    assert_eq!(resp.status(), 429);
    let retry = resp
        .headers()
        .get("retry-after")
        .expect("Retry-After header");
    assert!(retry.to_str().unwrap().parse::<u64>().unwrap() >= 1);
    hold.notify_one();
    assert_eq!(first.await.unwrap(), 204);
    assert_eq!(h.total_rows().await, 1, "the refused write was not queued");
    let metrics = h
        .client
        .get(h.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("shardhouse_router_rejected_total{reason=\"overloaded\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_is_retried_at_the_hint_and_node_verdicts_map_to_status() {
    let h = harness(2, 1, |_| {}).await;
    // Shard 0 is placed on node 1 only (rf 1); node 1 points at node 2.
    h.nodes[0]
        .set_mode(Mode::NotLeader(2, h.addrs[1].clone()))
        .await;
    assert_eq!(h.post("/write?db=d", "cpu v=1\n").await.status(), 204);
    assert_eq!(h.nodes[1].rows().await, 1, "retried at the leader hint");
    h.nodes[1].set_mode(Mode::Overloaded).await;
    let resp = h.post("/write?db=d", "cpu v=1\n").await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    h.nodes[1]
        .set_mode(Mode::Rejected("field v is float, got integer".into()))
        .await;
    let resp = h.post("/write?db=d", "cpu v=1\n").await;
    assert_eq!(resp.status(), 400);
    let v = json_body(resp).await;
    assert!(
        v["message"].as_str().unwrap().contains("field v is float"),
        "{v}"
    );
}
