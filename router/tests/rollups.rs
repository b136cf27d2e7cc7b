//! Issue 28's rollups end to end, with real parts (etcd, a
//! `shardhouse-node` holding 4 shards, two router binaries): 30 hours of
//! random points of 12 hosts, some without a field, one field arriving
//! late; every pushed-down function asked through a router that offers
//! the nodes rollups and one that does not (`--query-rollups false`), over
//! ranges that cut buckets, with and without `GROUP BY time()`, tags and
//! conditions. The answers must be equal (floats within 1e-9), before and
//! after a delete that cuts buckets, a dropped series, a new field, a
//! kill -9 and restart, and a point written twice; the nodes' `reads_from_rollups` counter shows the
//! rollups answered where they should and not once a point was rewritten.

mod support;

use anyhow::{ensure, Result};
use serde_json::Value;
use support::{bin_dir, now_ns, wait_writable, LocalCluster, Rng};

const DB: &str = "rollups";
const S: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * S;
const HOUR: i64 = 60 * MINUTE;
const HOSTS: u64 = 12;

struct Stack {
    http: reqwest::Client,
    /// The router that offers rollups (the default).
    rolled: String,
    /// A router with `--query-rollups false`: raw points always.
    raw: String,
    cluster: LocalCluster,
    _raw_router: shardhouse_test_support::RouterProc,
}

impl Stack {
    async fn start() -> Result<Stack> {
        let cluster = LocalCluster::builder("rollups")
            .nodes(1)
            .shards(4)
            .rf(1)
            .routers(1)
            // Hour first: the order rollups are meant for, and whose rollup
            // tables are sorted like their fact table (series first is
            // the default, its rollup DDL a unit test's).
            .node_args(&[
                "--engine-rollups",
                "true",
                "--engine-fact-order",
                "hour-series-time",
            ])
            .bin_dir(bin_dir())
            .start()?;
        let raw_router = shardhouse_test_support::RouterProc::start(
            cluster.dir.path(),
            "router-raw.log",
            &cluster.etcd.endpoint,
            &cluster.name,
            &["--query-rollups".to_string(), "false".to_string()],
            Some(bin_dir()),
        )?;
        let http = reqwest::Client::new();
        let rolled = cluster.router_url();
        wait_writable(&http, &rolled).await?;
        Ok(Stack {
            http,
            rolled,
            raw: raw_router.url(),
            cluster,
            _raw_router: raw_router,
        })
    }

    async fn write(&self, lines: &str) -> Result<()> {
        let r = self
            .http
            .post(format!("{}/write?db={DB}", self.rolled))
            .body(lines.to_string())
            .send()
            .await?;
        let status = r.status().as_u16();
        ensure!(
            status == 204,
            "write answered {status}: {}",
            r.text().await?
        );
        Ok(())
    }

    async fn ask(&self, base: &str, q: &str) -> Result<Value> {
        let r = self
            .http
            .get(format!("{base}/query"))
            .query(&[("db", DB), ("q", q), ("epoch", "ns")])
            .send()
            .await?;
        let status = r.status().as_u16();
        let body = r.text().await?;
        ensure!(status == 200, "{q} answered {status}: {body}");
        Ok(serde_json::from_str(&body)?)
    }

    /// The node's count of reads answered from rollups.
    async fn rollup_reads(&self) -> Result<u64> {
        let mut total = 0;
        for n in &self.cluster.nodes {
            total += support::node_metric(
                &self.http,
                &n.http,
                "shardhouse_engine_reads_from_rollups_total",
            )
            .await?
            .unwrap_or(0.0) as u64;
        }
        Ok(total)
    }

    /// Asks every statement through both routers and checks the answers
    /// agree; returns how many statements the rollups answered (the
    /// counter's rise over the rollup router's asks alone).
    async fn compare(&self, statements: &[String]) -> Result<u64> {
        let mut rolled_reads = 0;
        for q in statements {
            let before = self.rollup_reads().await?;
            let rolled = self.ask(&self.rolled, q).await?;
            let between = self.rollup_reads().await?;
            let raw = self.ask(&self.raw, q).await?;
            let after = self.rollup_reads().await?;
            ensure!(after == between, "the raw router's {q} read rollups");
            ensure!(
                has_values(&raw),
                "{q}: no values, the comparison proves nothing: {raw}"
            );
            ensure!(
                same(&rolled, &raw),
                "{q}: rollups answered\n{rolled}\nraw points answered\n{raw}"
            );
            rolled_reads += u64::from(between > before);
        }
        Ok(rolled_reads)
    }
}

fn has_values(v: &Value) -> bool {
    v["results"][0]["series"].as_array().is_some_and(|s| {
        s.iter()
            .any(|s| s["values"].as_array().is_some_and(|v| !v.is_empty()))
    })
}

/// JSON equality, floats within 1e-9 (relative): a rollup sums per bucket
/// first, raw points in one compensated sum.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => {
                let (x, y) = (
                    x.as_f64().unwrap_or(f64::NAN),
                    y.as_f64().unwrap_or(f64::NAN),
                );
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
            }
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Points of `hosts` every 10 s over `[from, to)`, each series in time
/// order: `usage` (float) missing from about a tenth, `load` (integer),
/// a string `note` on about one in fifty, some points skipped.
fn points(rng: &mut Rng, from: i64, to: i64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut t = from;
    while t < to {
        for h in 0..HOSTS {
            if rng.below(20) == 0 {
                continue;
            }
            let mut fields = Vec::new();
            if rng.below(10) != 0 {
                fields.push(format!("usage={}.{}", rng.below(100), rng.below(1000)));
            }
            fields.push(format!("load={}i", rng.below(1_000) as i64 - 50));
            if rng.below(50) == 0 {
                fields.push(format!("note=\"n{}\"", rng.below(5)));
            }
            lines.push(format!(
                "cpu,host=h{h},region=r{} {} {t}",
                h % 2,
                fields.join(",")
            ));
        }
        t += 10 * S;
    }
    lines
}

/// Every pushed-down function over `[start, end)`: with each interval a
/// rollup tiles (and one none does), without one, by tags, under a tag
/// condition.
fn statements(start: i64, end: i64, fields: &[&str]) -> Vec<String> {
    let range = format!("time >= {start} AND time < {end}");
    let mut out = Vec::new();
    for f in fields {
        let all = format!(
            "count({f}), sum({f}), mean({f}), min({f}), max({f}), first({f}), last({f}), spread({f})"
        );
        for group in [
            "time(1m)",
            "time(5m)",
            "time(1h)",
            "time(1h, 30m)",
            "time(1d)",
            "time(90s)",
        ] {
            for by in ["", ", host", ", region"] {
                out.push(format!(
                    "SELECT {all} FROM cpu WHERE {range} GROUP BY {group}{by}"
                ));
            }
            out.push(format!(
                "SELECT mean({f}), last({f}) FROM cpu WHERE host =~ /h[1-4]/ AND {range} GROUP BY {group}, host"
            ));
        }
        for by in ["", " GROUP BY host", " GROUP BY region"] {
            out.push(format!(
                "SELECT count({f}), sum({f}), mean({f}), spread({f}) FROM cpu WHERE {range}{by}"
            ));
        }
    }
    if fields.contains(&"usage") {
        out.push(format!(
            "SELECT count(note), mean(usage), max(load) FROM cpu WHERE {range} GROUP BY time(1h), region"
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollups_answer_as_raw_points_do() -> Result<()> {
    let mut s = Stack::start().await?;
    let seed = now_ns() as u64 | 1;
    eprintln!("seed {seed}");
    let mut rng = Rng(seed);
    let now = now_ns();
    let t0 = now - 30 * HOUR;
    let t1 = now - 10 * MINUTE;
    for chunk in points(&mut rng, t0, t1).chunks(20_000) {
        s.write(&chunk.join("\n")).await?;
    }
    let (start, end) = (t0 + 37 * MINUTE + 13 * S, t1 - 11 * MINUTE - 7 * S);
    let asked = statements(start, end, &["usage", "load"]);
    let rolled = s.compare(&asked).await?;
    eprintln!("{} statements, {rolled} read rollups", asked.len());
    // Every statement but those of 90 s windows (no level tiles them).
    let odd = asked.iter().filter(|q| q.contains("time(90s)")).count() as u64;
    ensure!(
        rolled == asked.len() as u64 - odd,
        "{rolled} of {} statements read rollups, {odd} could not",
        asked.len()
    );

    // A delete that cuts buckets, and a dropped series.
    let (cut_lo, cut_hi) = (t0 + 5 * HOUR + 90 * S, t0 + 9 * HOUR + 17 * S);
    for q in [
        format!("DELETE FROM cpu WHERE host = 'h3' AND time >= {cut_lo} AND time < {cut_hi}"),
        "DROP SERIES FROM cpu WHERE host = 'h5'".to_string(),
    ] {
        s.ask(&s.rolled, &q).await?;
    }
    let after_delete = statements(start, end, &["usage"]);
    let rolled = s.compare(&after_delete).await?;
    ensure!(rolled > 0, "after the delete no statement read rollups");

    // A field new to the measurement (after every point h1 has: an older
    // time would count as a possible rewrite): its columns join the
    // rollups.
    let late: Vec<String> = (0..360)
        .map(|i| {
            format!(
                "cpu,host=h1,region=r1 temp={}.5 {}",
                i % 7,
                t1 + MINUTE + i * 10 * S
            )
        })
        .collect();
    s.write(&late.join("\n")).await?;
    let temp = statements(t1, t1 + 61 * MINUTE, &["temp"]);
    let rolled = s.compare(&temp).await?;
    ensure!(rolled > 0, "no statement of the new field read rollups");

    // kill -9 and a restart: the node finds its rollups whole again (and
    // its first flush checks them against the raw rows).
    s.cluster.nodes[0].restart()?;
    wait_writable(&s.http, &s.rolled).await?;
    s.write(&format!(
        "cpu,host=h2,region=r0 load=5i {}",
        t1 + 5 * MINUTE
    ))
    .await?;
    let restarted = statements(start, end, &["load"]);
    let rolled = s.compare(&restarted).await?;
    ensure!(rolled > 0, "after a restart no statement read rollups");

    // Points written twice: the rollups could count them twice, so the
    // shards read raw points from now on, and the answers still agree.
    // One per host, so that every shard holds one.
    let again: Vec<String> = (0..HOSTS)
        .map(|h| {
            format!(
                "cpu,host=h{h},region=r{} usage=7.5 {}",
                h % 2,
                t0 + 3 * HOUR
            )
        })
        .collect();
    s.write(&again.join("\n")).await?;
    let rewritten = statements(start, end, &["usage"]);
    let rolled = s.compare(&rewritten).await?;
    ensure!(
        rolled == 0,
        "{rolled} statements read rollups after a rewrite"
    );
    Ok(())
}
