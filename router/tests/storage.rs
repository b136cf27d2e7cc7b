//! Issue 13, end to end with real parts (etcd, three `shardhouse-node`
//! processes at RF=3, the `shardhouse-router` binary): databases, field
//! merge, the tag index, Prometheus samples in one table, retention and
//! deletes, checked on every replica and across kill -9 and WAL replay.
//!
//! One cluster for all scenarios (each uses its own database) keeps the
//! suite's cost to one start-up.

mod support;

use anyhow::{anyhow, bail, ensure, Result};
use serde_json::Value;
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::proto::QueryRequest;
use std::time::Duration;
use support::{now_ns, poll, wait_writable, LocalCluster};

const SHARDS: u32 = 4;

struct Stack {
    http: reqwest::Client,
    base: String,
    cluster: LocalCluster,
}

impl Stack {
    async fn write(&self, path: &str, body: impl Into<reqwest::Body>) -> Result<(u16, String)> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .body(body)
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    async fn write_ok(&self, db: &str, lines: &str) -> Result<()> {
        let (status, body) = self
            .write(&format!("/write?db={db}"), lines.to_owned())
            .await?;
        ensure!(status == 204, "write to {db} answered {status}: {body}");
        Ok(())
    }

    /// An InfluxQL statement through `/query`, its JSON answer.
    async fn influx(&self, db: &str, q: &str) -> Result<Value> {
        let r = self
            .http
            .post(format!("{}/query", self.base))
            .query(&[("db", db), ("q", q)])
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        ensure!(status == 200, "{q:?} answered {status}: {text}");
        Ok(serde_json::from_str(&text)?)
    }

    /// Rows of a SQL read through the router (every shard, one replica each).
    async fn sql(&self, db: &str, q: &str) -> Result<Vec<Value>> {
        let r = self
            .http
            .get(format!("{}/api/v1/sql", self.base))
            .query(&[("db", db), ("q", q)])
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        ensure!(status == 200, "sql {q:?} in {db} answered {status}: {text}");
        Ok(serde_json::from_str(&text)?)
    }

    async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await?;
        let status = r.status();
        let text = r.text().await?;
        ensure!(status == 200, "{path} answered {status}: {text}");
        Ok(serde_json::from_str(&text)?)
    }

    /// `sql`'s first column summed over every shard of ONE node's replicas:
    /// what that replica stores, not what a leader answers.
    async fn replica_sum(&self, node: usize, db: &str, sql: &str) -> Result<i64> {
        let addr = &self.cluster.nodes[node].grpc;
        let mut c = NodeClient::connect(format!("http://{addr}"))
            .await?
            .max_decoding_message_size(256 << 20);
        let mut total = 0;
        for shard in 0..SHARDS {
            let r = c
                .query(QueryRequest {
                    shard,
                    sql: sql.into(),
                    database: db.into(),
                    ..Default::default()
                })
                .await;
            let ipc = match r {
                Ok(r) => r.into_inner().result_ipc,
                Err(s)
                    if shardhouse_common::status::Missing::of(&s)
                        == Some(shardhouse_common::status::Missing::Table) =>
                {
                    continue
                }
                Err(s) => bail!(
                    "node {} shard {shard}: {}",
                    self.cluster.nodes[node].id,
                    s.message()
                ),
            };
            let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None)?;
            for b in reader {
                let b = b?;
                if b.num_columns() == 0 {
                    continue;
                }
                total += sum_i64(b.column(0).as_ref())?;
            }
        }
        Ok(total)
    }

    /// Waits until every replica answers `want` for `sql`.
    async fn every_replica(&self, what: &str, db: &str, sql: &str, want: i64) -> Result<()> {
        for node in 0..self.cluster.nodes.len() {
            poll(
                &format!("{what} on node {}", self.cluster.nodes[node].id),
                Duration::from_secs(60),
                || async move {
                    let got = self.replica_sum(node, db, sql).await?;
                    if got != want {
                        bail!("{sql}: {got}, want {want}");
                    }
                    Ok(Some(()))
                },
            )
            .await?;
        }
        Ok(())
    }

    fn kill9_and_restart_all(&mut self) -> Result<()> {
        for n in &mut self.cluster.nodes {
            n.restart()?;
        }
        Ok(())
    }
}

/// Sum of an integer or float column (NULLs skipped).
fn sum_i64(a: &dyn arrow_array::Array) -> Result<i64> {
    use arrow_array::{Float64Array, Int64Array, UInt64Array};
    let any = a.as_any();
    if let Some(x) = any.downcast_ref::<UInt64Array>() {
        return Ok(x.iter().flatten().map(|v| v as i64).sum());
    }
    if let Some(x) = any.downcast_ref::<Int64Array>() {
        return Ok(x.iter().flatten().sum());
    }
    if let Some(x) = any.downcast_ref::<Float64Array>() {
        return Ok(x.iter().flatten().map(|v| v as i64).sum());
    }
    bail!("column of type {} is not a number", a.data_type())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storage_semantics_on_every_replica() -> Result<()> {
    let cluster = support::cluster(
        "storage",
        3,
        SHARDS,
        3,
        &["--retention-check-interval-ms", "200"],
    )?;
    let mut s = Stack {
        http: reqwest::Client::new(),
        base: cluster.router_url(),
        cluster,
    };
    wait_writable(&s.http, &s.base).await?;

    // 1. Two databases, same series and time: two points.
    s.write_ok("a", "cpu,host=h v=1 1000\n").await?;
    s.write_ok("b", "cpu,host=h v=2 1000\n").await?;
    for (db, v) in [("a", 1.0), ("b", 2.0)] {
        let rows = s.sql(db, "SELECT v FROM cpu FINAL").await?;
        ensure!(
            rows.len() == 1 && rows[0]["v"].as_f64() == Some(v),
            "{db}: {rows:?}"
        );
        s.every_replica(
            "one point per database",
            db,
            "SELECT count() FROM cpu FINAL",
            1,
        )
        .await?;
    }
    let list = s
        .admin(reqwest::Method::GET, "/api/v1/databases", None)
        .await?;
    let names: Vec<&str> = list["databases"]
        .as_array()
        .ok_or_else(|| anyhow!("{list}"))?
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    ensure!(names.contains(&"a") && names.contains(&"b"), "{list}");
    s.admin(reqwest::Method::DELETE, "/api/v1/databases?db=a", None)
        .await?;
    s.every_replica(
        "b intact after dropping a",
        "b",
        "SELECT sum(v) FROM cpu FINAL",
        2,
    )
    .await?;
    s.every_replica("a dropped", "a", "SELECT count() FROM cpu FINAL", 0)
        .await?;

    // 2. Field merge: a rewrite keeps the fields it does not carry.
    s.write_ok("m", "cpu,host=a u=1i 5000\n").await?;
    s.write_ok("m", "cpu,host=a s=2i 5000\n").await?;
    s.every_replica(
        "u and s merged",
        "m",
        "SELECT toInt64(sum(u) * 10 + sum(s)) FROM cpu FINAL",
        12,
    )
    .await?;
    s.write_ok("m", "cpu,host=a u=3i 5000\n").await?;
    s.every_replica(
        "u replaced, s kept",
        "m",
        "SELECT toInt64(sum(u) * 10 + sum(s)) FROM cpu FINAL",
        32,
    )
    .await?;
    s.every_replica("one row per point", "m", "SELECT count() FROM cpu FINAL", 1)
        .await?;

    // 3. A new tag key while writing: filterable and groupable at once;
    // earlier series read it as ''.
    s.write_ok("t", "mem,host=a v=1 1000\nmem,host=b v=2 1000\n")
        .await?;
    s.write_ok("t", "mem,host=c,dc=x v=4 1000\n").await?;
    s.every_replica(
        "filter by the new tag",
        "t",
        "SELECT toInt64(sum(v)) FROM mem FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE measurement = 'mem' AND tags['dc'] = 'x')",
        4,
    )
    .await?;
    let rows = s
        .sql(
            "t",
            "SELECT s.tags['dc'] AS dc, toInt64(sum(v)) AS total FROM mem AS f FINAL \
             INNER JOIN (SELECT series_id, tags FROM _series WHERE measurement = 'mem') AS s USING series_id \
             GROUP BY dc ORDER BY dc",
        )
        .await?;
    // One row per dc, merged across shards (issue 14).
    ensure!(
        rows == vec![
            serde_json::json!({"dc": "", "total": 3}),
            serde_json::json!({"dc": "x", "total": 4})
        ],
        "{rows:?}"
    );

    // 4. A tag key equal to a field key is stored twice over (InfluxDB
    // keeps both); `time` as a key is refused with a 400 naming it.
    s.write_ok("t", "dup,v=tagged v=7 1000\n").await?;
    s.every_replica(
        "tag and field of one name",
        "t",
        "SELECT toInt64(sum(v)) FROM dup FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE tags['v'] = 'tagged')",
        7,
    )
    .await?;
    for line in ["dup time=1 1000\n", "dup,time=x v=1 1000\n"] {
        let (status, body) = s.write("/write?db=t", line).await?;
        ensure!(
            status == 400 && body.contains("\\\"time\\\""),
            "{line}: {status} {body}"
        );
    }

    // 5. Deletes by tag predicate while writing, exactly the matched
    // points, on every replica, also after kill -9 and replay.
    let t0 = 1_000_000_000i64;
    let mut written = 0i64;
    for batch in 0..10 {
        let mut body = String::new();
        for i in 0..100 {
            let n = batch * 100 + i;
            body.push_str(&format!("del,host=h{} v={n}i {}\n", n % 4, t0 + n));
        }
        s.write_ok("d", &body).await?;
        written += 100;
        if batch == 4 {
            // Points 0..500 are acknowledged; delete h1's among 0..300.
            s.admin(
                reqwest::Method::POST,
                "/api/v1/delete?db=d",
                Some(serde_json::json!({
                    "measurement": "del",
                    "stop": t0 + 299,
                    "tags": [{"key": "host", "op": "=", "value": "h1"}]
                })),
            )
            .await?;
        }
    }
    let h1 = "SELECT count() FROM del FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE tags['host'] = 'h1')";
    s.every_replica("h1 after the delete", "d", h1, 250 - 75)
        .await?;
    s.every_replica(
        "everything else",
        "d",
        "SELECT count() FROM del FINAL",
        written - 75,
    )
    .await?;
    s.kill9_and_restart_all()?;
    s.every_replica("h1 after kill -9 and replay", "d", h1, 250 - 75)
        .await?;
    s.every_replica(
        "field merge after kill -9",
        "m",
        "SELECT toInt64(sum(u) * 10 + sum(s)) FROM cpu FINAL",
        32,
    )
    .await?;
    s.every_replica(
        "b after every node restarted",
        "b",
        "SELECT sum(v) FROM cpu FINAL",
        2,
    )
    .await?;
    s.every_replica(
        "a stays dropped after restarts",
        "a",
        "SELECT count() FROM cpu FINAL",
        0,
    )
    .await?;

    // 6. Prometheus: 2,000 metric names, one samples table per database.
    use shardhouse_common::prom_proto as pp;
    let ts = now_ns() / 1_000_000;
    let series: Vec<pp::TimeSeries> = (0..2000)
        .map(|i| pp::TimeSeries {
            labels: vec![
                pp::Label {
                    name: "__name__".into(),
                    value: format!("metric_{i}"),
                },
                pp::Label {
                    name: "job".into(),
                    value: format!("job{}", i % 3),
                },
            ],
            samples: vec![pp::Sample {
                value: i as f64,
                timestamp: ts,
            }],
        })
        .collect();
    let raw = prost::Message::encode_to_vec(&pp::WriteRequest { timeseries: series });
    let body = snap::raw::Encoder::new().compress_vec(&raw)?;
    let (status, text) = s.write("/api/v1/prom/write?db=prom", body).await?;
    ensure!(status == 204, "{status} {text}");
    s.every_replica(
        "2,000 samples",
        "prom",
        "SELECT count() FROM _samples FINAL",
        2000,
    )
    .await?;
    // The documented bound: `_database`, `_samples`, `_series` per shard.
    for node in 0..s.cluster.nodes.len() {
        let tables = s
            .replica_sum(
                node,
                "prom",
                "SELECT count() FROM system.tables WHERE database = currentDatabase()",
            )
            .await?;
        ensure!(
            tables <= 3 * SHARDS as i64,
            "node {node}: {tables} tables for 2,000 metrics"
        );
    }
    let rows = s
        .sql(
            "prom",
            "SELECT s.measurement AS metric, s.tags['job'] AS job, value FROM _samples AS p FINAL \
             INNER JOIN (SELECT series_id, measurement, tags FROM _series WHERE measurement = 'metric_7') AS s USING series_id",
        )
        .await?;
    ensure!(
        rows.len() == 1 && rows[0]["job"] == "job1" && rows[0]["value"].as_f64() == Some(7.0),
        "{rows:?}"
    );
    // InfluxQL reads a metric as InfluxDB 1.x's remote_write stores it:
    // the metric name is also the tag `__name__`.
    let answer = s.influx("prom", "SELECT * FROM metric_7").await?;
    let series = &answer["results"][0]["series"][0];
    ensure!(
        series["columns"] == serde_json::json!(["time", "__name__", "job", "value"])
            && series["values"][0][1] == "metric_7"
            && series["values"][0][2] == "job1"
            && series["values"][0][3].as_f64() == Some(7.0),
        "{answer}"
    );
    // A measurement may start with `_` (InfluxDB's `_cpu`); only the
    // engine's own table names are refused.
    s.write_ok("prom", &format!("_cpu value=1i {}\n", now_ns()))
        .await?;
    let answer = s.influx("prom", "SELECT * FROM _cpu").await?;
    ensure!(
        answer["results"][0]["series"][0]["name"] == "_cpu"
            && answer["results"][0]["series"][0]["values"][0][1] == 1,
        "{answer}"
    );
    let (status, text) = s.write("/write?db=prom", "_series v=1").await?;
    ensure!(
        status == 400 && text.contains("reserved for the engine"),
        "{status} {text}"
    );

    // 7. Retention: old days disappear on every replica and their parts
    // are gone; recent points stay.
    let old = now_ns() - 3 * 86_400_000_000_000;
    s.write_ok(
        "r",
        &format!("ret,host=a v=1 {old}\nret,host=a v=2 {}\n", now_ns()),
    )
    .await?;
    s.every_replica(
        "both points stored",
        "r",
        "SELECT count() FROM ret FINAL",
        2,
    )
    .await?;
    s.admin(
        reqwest::Method::POST,
        "/api/v1/retention?db=r&retention=1d",
        None,
    )
    .await?;
    s.every_replica("old point expired", "r", "SELECT count() FROM ret FINAL", 1)
        .await?;
    s.every_replica(
        "no part of the old day left",
        "r",
        "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = 'ret' AND max_time < now() - INTERVAL 2 DAY",
        0,
    )
    .await?;
    let list = s
        .admin(reqwest::Method::GET, "/api/v1/databases", None)
        .await?;
    let r = list["databases"]
        .as_array()
        .and_then(|l| l.iter().find(|d| d["name"] == "r"))
        .ok_or_else(|| anyhow!("{list}"))?;
    ensure!(r["retention"] == "24h0m0s", "{list}");

    // 7b. Retention policies: a second policy is its own storage with
    // its own retention on every replica; `rp=` writes to it, `db.rp.m`
    // reads it, the default policy is untouched, and dropping the policy
    // drops its storage.
    for q in [
        "CREATE DATABASE rpdb",
        "CREATE RETENTION POLICY short ON rpdb DURATION 1h REPLICATION 1",
    ] {
        let answer = s.influx("rpdb", q).await?;
        ensure!(answer["results"][0].get("error").is_none(), "{q}: {answer}");
    }
    let lines = format!("ret,host=a v=1 {old}\nret,host=a v=2 {}\n", now_ns());
    let (status, body) = s.write("/write?db=rpdb&rp=short", lines.clone()).await?;
    ensure!(status == 204, "write rp=short: {status} {body}");
    s.write_ok("rpdb", &lines).await?;
    s.every_replica(
        "the 3-day-old point expired in the 1h policy",
        "rpdb/short",
        "SELECT count() FROM ret FINAL",
        1,
    )
    .await?;
    s.every_replica(
        "the default policy keeps both",
        "rpdb",
        "SELECT count() FROM ret FINAL",
        2,
    )
    .await?;
    let short = s
        .influx("rpdb", "SELECT count(v) FROM rpdb.short.ret")
        .await?;
    ensure!(
        short["results"][0]["series"][0]["values"][0][1] == 1,
        "{short}"
    );
    let autogen = s.influx("rpdb", "SELECT count(v) FROM ret").await?;
    ensure!(
        autogen["results"][0]["series"][0]["values"][0][1] == 2,
        "{autogen}"
    );
    let shown = s.influx("rpdb", "SHOW RETENTION POLICIES ON rpdb").await?;
    ensure!(
        shown["results"][0]["series"][0]["values"]
            == serde_json::json!([
                ["autogen", "0s", "168h0m0s", 1, true],
                ["short", "1h0m0s", "1h0m0s", 1, false]
            ]),
        "{shown}"
    );
    let (status, body) = s.write("/write?db=rpdb&rp=nope", "x v=1\n").await?;
    ensure!(
        status == 500 && body.contains("retention policy not found: nope"),
        "{status} {body}"
    );
    let missing = s.influx("rpdb", "SELECT v FROM rpdb.nope.ret").await?;
    ensure!(
        missing["results"][0]["error"] == "retention policy not found: nope",
        "{missing}"
    );
    let dbs = s.influx("", "SHOW DATABASES").await?;
    ensure!(!dbs.to_string().contains("rpdb/short"), "{dbs}");
    s.influx("rpdb", "DROP RETENTION POLICY short ON rpdb")
        .await?;
    s.every_replica(
        "the dropped policy's storage is gone",
        "rpdb/short",
        "SELECT count() FROM ret FINAL",
        0,
    )
    .await?;
    s.every_replica(
        "the default policy untouched",
        "rpdb",
        "SELECT count() FROM ret FINAL",
        2,
    )
    .await?;

    // 8. Bad input.
    let (status, body) = s.write("/write?db=a%2Fb", "x v=1\n").await?;
    ensure!(
        status == 400 && body.contains("database"),
        "{status} {body}"
    );
    let mut many = String::new();
    for i in 0..10_000 {
        many.push_str(&format!("wide,k{i}=v x=1 1000\n"));
    }
    s.write_ok("w", &many).await?;
    s.every_replica(
        "10,000 tag keys, one series each",
        "w",
        "SELECT count() FROM wide FINAL",
        10_000,
    )
    .await?;
    let big = "v".repeat(64 * 1024);
    let (status, body) = s
        .write(
            "/write?db=w",
            format!("big,t={big} x=1 1000\nsmall,t=a x=1 1000\n"),
        )
        .await?;
    ensure!(status == 400 && body.contains("65535"), "{status} {body}");
    s.every_replica(
        "the valid line of that request",
        "w",
        "SELECT count() FROM small FINAL",
        1,
    )
    .await?;
    Ok(())
}
