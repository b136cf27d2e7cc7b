//! Issue 14, `/query` end to end with real parts (etcd, three
//! `shardhouse-node` processes at RF=3 with 8 shards, the router binary):
//! random points written over line protocol, InfluxQL answers compared
//! with the same computed here in plain Rust over the points the test
//! wrote (the oracle), the SHOW and DELETE statements, errors, and a query
//! loop while a node is killed with kill -9.

#[path = "influx_query/dashboard.rs"]
mod dashboard;
#[path = "influx_query/eval.rs"]
mod eval;
#[path = "influx_query/percentile.rs"]
mod percentile;
#[path = "influx_query/selects.rs"]
mod selects;
#[path = "influx_query/statements.rs"]
mod statements;
mod support;

use anyhow::{ensure, Result};
use serde_json::Value;
use support::{now_ns, wait_writable, LocalCluster, Rng};

const SHARDS: u32 = 8;
const DB: &str = "oracle";
const S: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * S;

/// One written point of `cpu`.
#[derive(Debug, Clone)]
struct Pt {
    host: String,
    region: String,
    time: i64,
    usage: Option<f64>,
    load: i64,
}

struct Stack {
    http: reqwest::Client,
    base: String,
    cluster: LocalCluster,
}

impl Stack {
    async fn query_raw(&self, q: &str, extra: &[(&str, &str)]) -> Result<(u16, String)> {
        self.query_raw_in(DB, q, extra).await
    }

    async fn query_raw_in(
        &self,
        db: &str,
        q: &str,
        extra: &[(&str, &str)],
    ) -> Result<(u16, String)> {
        let mut params = vec![("db", db), ("q", q)];
        params.extend_from_slice(extra);
        let r = self
            .http
            .get(format!("{}/query", self.base))
            .query(&params)
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// The first statement's result, times as integer nanoseconds.
    async fn query(&self, q: &str) -> Result<Value> {
        self.query_in(DB, q).await
    }

    /// [`Stack::query`] over database `db`.
    async fn query_in(&self, db: &str, q: &str) -> Result<Value> {
        let (status, body) = self.query_raw_in(db, q, &[("epoch", "ns")]).await?;
        ensure!(status == 200, "{q} answered {status}: {body}");
        let v: Value = serde_json::from_str(&body)?;
        let r = v["results"][0].clone();
        ensure!(r.get("error").is_none(), "{q} failed: {body}");
        Ok(r)
    }
}

/// What the test wrote: the `cpu` points and their time range.
struct Written {
    points: Vec<Pt>,
    start: i64,
    range: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn influxql_answers_equal_one_place_evaluation() -> Result<()> {
    let cluster = support::cluster("influxql", 3, SHARDS, 3, &[])?;
    let mut s = Stack {
        http: reqwest::Client::new(),
        base: cluster.router_url(),
        cluster,
    };
    wait_writable(&s.http, &s.base).await?;

    // Two hours of points from 10 hosts in two regions, a point every
    // ~20 s per host; one point in ten has no `usage`. `mem` only from
    // three hosts, so some shards never have that table.
    let start = (now_ns() - 3 * 3600 * S) / (60 * MINUTE) * (60 * MINUTE);
    let end = start + 120 * MINUTE;
    let mut rng = Rng(0x5eed_1234_abcd);
    let mut points = Vec::new();
    let mut lines = String::new();
    for h in 0..10 {
        let host = format!("h{h}");
        let region = format!("r{}", h % 2);
        let mut t = start + rng.below(20) as i64 * S;
        while t < end {
            let usage = (rng.below(10) != 0).then(|| rng.below(100_000) as f64 / 1000.0);
            let load = rng.below(50) as i64 - 10;
            match usage {
                Some(u) => lines.push_str(&format!(
                    "cpu,host={host},region={region} usage={u},load={load}i {t}\n"
                )),
                None => lines.push_str(&format!(
                    "cpu,host={host},region={region} load={load}i {t}\n"
                )),
            }
            if h < 3 {
                lines.push_str(&format!("mem,host={host} free={}i {t}\n", load * 3));
            }
            points.push(Pt {
                host: host.clone(),
                region: region.clone(),
                time: t,
                usage,
                load,
            });
            t += (15 + rng.below(10) as i64) * S;
        }
    }
    for chunk in lines.lines().collect::<Vec<_>>().chunks(2000) {
        let r = s
            .http
            .post(format!("{}/write?db={DB}", s.base))
            .body(chunk.join("\n"))
            .send()
            .await?;
        ensure!(r.status().as_u16() == 204, "write: {}", r.text().await?);
    }
    let range = format!("time >= {start} AND time < {end}");
    let w = Written {
        points,
        start,
        range,
    };

    selects::aggregates(&s, &w).await?;
    selects::selectors_and_raw(&s, &w).await?;
    percentile::windows(&s, &w).await?;
    statements::show(&s).await?;
    statements::errors(&s).await?;
    statements::chunked(&s, &w).await?;
    let cut = statements::delete_and_drop(&s, &w).await?;
    statements::python_client(&s)?;
    dashboard::parts_with_and_without(&s).await?;
    dashboard::kill9_during_queries(&mut s, &w, cut).await
}
