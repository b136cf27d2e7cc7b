//! Issue 14, `/query` end to end with real parts (etcd, three
//! `shardhouse-node` processes at RF=3 with 8 shards, the router binary):
//! random points written over line protocol, InfluxQL answers compared
//! with the same computed here in plain Rust over the points the test
//! wrote (the oracle), the SHOW and DELETE statements, errors, and a query
//! loop while a node is killed with kill -9.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
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
        let mut params = vec![("db", DB), ("q", q)];
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
        let (status, body) = self.query_raw(q, &[("epoch", "ns")]).await?;
        ensure!(status == 200, "{q} answered {status}: {body}");
        let v: Value = serde_json::from_str(&body)?;
        let r = v["results"][0].clone();
        ensure!(r.get("error").is_none(), "{q} failed: {body}");
        Ok(r)
    }
}

/// Series of a result keyed by `tag=value,...` (sorted) -> rows.
fn by_tags(result: &Value) -> BTreeMap<String, Vec<Vec<Value>>> {
    let mut out = BTreeMap::new();
    for s in result["series"].as_array().cloned().unwrap_or_default() {
        let tags = s["tags"]
            .as_object()
            .map(|t| {
                t.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let rows = s["values"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.as_array().cloned().unwrap_or_default())
            .collect();
        out.insert(tags, rows);
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// InfluxDB's nearest-rank percentile.
fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64) * p / 100.0 + 0.5).floor() as i64 - 1;
    (i >= 0 && (i as usize) < v.len()).then(|| v[i as usize])
}

fn stddev(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    Some(var.sqrt())
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

    // 1. Aggregates per host and 10-minute bucket.
    let q = format!(
        "SELECT count(usage), sum(usage), mean(usage), min(usage), max(usage), median(usage), \
         spread(usage), stddev(usage), percentile(usage, 90) FROM cpu WHERE {range} \
         GROUP BY time(10m), host fill(none)"
    );
    let got = by_tags(&s.query(&q).await?);
    let mut want: BTreeMap<String, BTreeMap<i64, Vec<f64>>> = BTreeMap::new();
    for p in &points {
        if let Some(u) = p.usage {
            want.entry(format!("host={}", p.host))
                .or_default()
                .entry(start + (p.time - start) / (10 * MINUTE) * (10 * MINUTE))
                .or_default()
                .push(u);
        }
    }
    ensure!(
        got.keys().collect::<Vec<_>>() == want.keys().collect::<Vec<_>>(),
        "series differ: {:?} vs {:?}",
        got.keys(),
        want.keys()
    );
    for (series, buckets) in &want {
        let rows = &got[series];
        ensure!(
            rows.len() == buckets.len(),
            "{series}: {} rows, want {}",
            rows.len(),
            buckets.len()
        );
        for (row, (bucket, values)) in rows.iter().zip(buckets) {
            let mut v = values.clone();
            let n = v.len() as f64;
            let sum: f64 = v.iter().sum();
            let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let expected: Vec<Option<f64>> = vec![
                Some(n),
                Some(sum),
                Some(sum / n),
                Some(min),
                Some(max),
                Some(median(&mut v)),
                Some(max - min),
                stddev(values),
                percentile(&mut v, 90.0),
            ];
            ensure!(
                row[0].as_i64() == Some(*bucket),
                "{series}: bucket {:?} want {bucket}",
                row[0]
            );
            for (i, e) in expected.iter().enumerate() {
                let cell = &row[i + 1];
                match e {
                    None => ensure!(
                        cell.is_null(),
                        "{series} {bucket} col {i}: {cell} want null"
                    ),
                    Some(e) => {
                        let g = cell
                            .as_f64()
                            .ok_or_else(|| anyhow!("{series} col {i}: {cell}"))?;
                        ensure!(close(g, *e), "{series} {bucket} col {i}: got {g}, want {e}");
                    }
                }
            }
        }
    }

    // 1b. The same aggregates the shards compute in chDB (pushed down):
    // equal to the plain evaluation (float sums within 1e-9).
    let q = format!(
        "SELECT count(usage), sum(usage), mean(usage), min(usage), max(usage), spread(usage) \
         FROM cpu WHERE {range} GROUP BY time(10m), host fill(none)"
    );
    let got = by_tags(&s.query(&q).await?);
    for (series, buckets) in &want {
        let rows = &got[series];
        ensure!(
            rows.len() == buckets.len(),
            "pushed {series}: {} rows",
            rows.len()
        );
        for (row, (bucket, values)) in rows.iter().zip(buckets) {
            let n = values.len() as f64;
            let sum: f64 = values.iter().sum();
            let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let expected = [n, sum, sum / n, min, max, max - min];
            ensure!(
                row[0].as_i64() == Some(*bucket),
                "pushed {series}: bucket {:?}",
                row[0]
            );
            for (i, e) in expected.iter().enumerate() {
                let g = row[i + 1]
                    .as_f64()
                    .ok_or_else(|| anyhow!("pushed {series} col {i}: {row:?}"))?;
                ensure!(
                    close(g, *e),
                    "pushed {series} {bucket} col {i}: got {g}, want {e}"
                );
            }
        }
    }

    // 2. Selectors per region over the whole range (integers stay integers).
    let q =
        format!("SELECT first(load), last(load), max(load) FROM cpu WHERE {range} GROUP BY region");
    let got = by_tags(&s.query(&q).await?);
    for region in ["r0", "r1"] {
        let mine: Vec<&Pt> = points.iter().filter(|p| p.region == region).collect();
        // Earliest time, then the larger value on a tie (InfluxDB's rule).
        let first = mine.iter().min_by_key(|p| (p.time, -p.load)).unwrap();
        let last = mine.iter().max_by_key(|p| (p.time, p.load)).unwrap();
        let max = mine.iter().map(|p| p.load).max().unwrap();
        let row = &got[&format!("region={region}")][0];
        ensure!(
            row[0].as_i64() == Some(start),
            "{region}: time {:?}",
            row[0]
        );
        ensure!(
            row[1].as_i64() == Some(first.load)
                && row[2].as_i64() == Some(last.load)
                && row[3].as_i64() == Some(max),
            "{region}: {row:?} want first {} last {} max {max}",
            first.load,
            last.load
        );
    }

    // 3. Raw points through a tag and a field condition, in time order.
    let q = format!("SELECT usage, region FROM cpu WHERE host = 'h3' AND usage > 50 AND {range}");
    let got = by_tags(&s.query(&q).await?);
    let mut want: Vec<(i64, f64)> = points
        .iter()
        .filter(|p| p.host == "h3" && p.usage.is_some_and(|u| u > 50.0))
        .map(|p| (p.time, p.usage.unwrap()))
        .collect();
    want.sort_by_key(|w| w.0);
    let rows = got.get("").cloned().unwrap_or_default();
    ensure!(
        rows.len() == want.len(),
        "raw: {} rows, want {}",
        rows.len(),
        want.len()
    );
    for (row, (t, u)) in rows.iter().zip(&want) {
        ensure!(
            row[0].as_i64() == Some(*t) && row[1].as_f64() == Some(*u) && row[2] == "r1",
            "raw row {row:?} want {t} {u}"
        );
    }

    // 4. Regex on a tag, count with fill(0) over 30-minute buckets, newest first.
    let q = format!(
        "SELECT count(load) FROM cpu WHERE host =~ /^h[12]$/ AND {range} GROUP BY time(30m) fill(0) ORDER BY time DESC"
    );
    let got = by_tags(&s.query(&q).await?);
    let rows = &got[""];
    ensure!(rows.len() == 4, "4 buckets, got {rows:?}");
    for (i, row) in rows.iter().enumerate() {
        let b = start + (3 - i as i64) * 30 * MINUTE;
        let n = points
            .iter()
            .filter(|p| {
                (p.host == "h1" || p.host == "h2") && p.time >= b && p.time < b + 30 * MINUTE
            })
            .count() as i64;
        ensure!(
            row[0].as_i64() == Some(b) && row[1].as_i64() == Some(n),
            "bucket {row:?} want {b} {n}"
        );
    }

    // 5. A measurement some shards never received.
    let q = format!("SELECT sum(free), count(free) FROM mem WHERE {range}");
    let r = s.query(&q).await?;
    let row = &r["series"][0]["values"][0];
    let want_sum: i64 = points
        .iter()
        .filter(|p| p.host.as_str() < "h3")
        .map(|p| p.load * 3)
        .sum();
    let want_n = points.iter().filter(|p| p.host.as_str() < "h3").count() as i64;
    ensure!(
        row[1].as_i64() == Some(want_sum) && row[2].as_i64() == Some(want_n),
        "mem: {row:?}"
    );

    // 5b. A subquery (what Grafana users write): the largest per-host mean.
    let q =
        format!("SELECT max(mean) FROM (SELECT mean(usage) FROM cpu WHERE {range} GROUP BY host)");
    let r = s.query(&q).await?;
    let mut best = f64::NEG_INFINITY;
    for h in 0..10 {
        let v: Vec<f64> = points
            .iter()
            .filter(|p| p.host == format!("h{h}"))
            .filter_map(|p| p.usage)
            .collect();
        best = best.max(v.iter().sum::<f64>() / v.len() as f64);
    }
    let got = r["series"][0]["values"][0][1]
        .as_f64()
        .ok_or_else(|| anyhow!("subquery: {r}"))?;
    ensure!(
        close(got, best),
        "subquery max of means: got {got}, want {best}"
    );

    // 6. The SHOW statements.
    let r = s.query("SHOW MEASUREMENTS").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["cpu"], ["mem"]]),
        "{r}"
    );
    let r = s.query("SHOW TAG KEYS FROM cpu").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["host"], ["region"]]),
        "{r}"
    );
    let r = s
        .query("SHOW TAG VALUES FROM cpu WITH KEY = region")
        .await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["region", "r0"], ["region", "r1"]]),
        "{r}"
    );
    let r = s.query("SHOW FIELD KEYS FROM cpu").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["load", "integer"], ["usage", "float"]]),
        "{r}"
    );
    let r = s.query("SHOW SERIES FROM mem").await?;
    ensure!(
        r["series"][0]["values"]
            == serde_json::json!([["mem,host=h0"], ["mem,host=h1"], ["mem,host=h2"]]),
        "{r}"
    );
    let r = s.query("SHOW DATABASES").await?;

    let dbs = r["series"][0]["values"].to_string();
    ensure!(
        dbs.contains("\"oracle\"") && dbs.contains("\"warmup\""),
        "{r}"
    );

    // 7. Errors: parse errors name the position; statement errors come in
    // the result; a missing q is a 400.
    let (status, body) = s.query_raw("SELECT FROM cpu", &[]).await?;
    ensure!(
        status == 400 && body.contains("error parsing query") && body.contains("char 8"),
        "{status} {body}"
    );
    let (status, body) = s.query_raw("SELECT foo(usage) FROM cpu", &[]).await?;
    ensure!(status == 400 && body.contains("foo"), "{status} {body}");
    let (status, body) = s
        .query_raw("SELECT mean(usage) FROM cpu GROUP BY time(1m)", &[])
        .await?;
    ensure!(
        status == 200 && body.contains("lower limit"),
        "{status} {body}"
    );
    let (status, body) = s
        .query_raw("SELECT mean(usage) / mean(load) FROM cpu", &[])
        .await?;
    ensure!(
        status == 400 && body.contains("arithmetic on aggregates") && body.contains("char 8"),
        "{status} {body}"
    );
    let r = s.http.get(format!("{}/query", s.base)).send().await?;
    ensure!(
        r.status().as_u16() == 400 && r.text().await?.contains("missing required parameter"),
        "no q"
    );
    // A database nobody holds: InfluxDB's words, which clients match on;
    // an existing database without the measurement answers no series.
    for q in [
        "SELECT usage FROM nodb..cpu",
        "SHOW MEASUREMENTS ON nodb",
        "SHOW TAG KEYS ON nodb",
        "SHOW FIELD KEYS ON nodb",
    ] {
        let (status, body) = s.query_raw(q, &[]).await?;
        ensure!(
            status == 200 && body.contains("database not found: nodb"),
            "{q}: {status} {body}"
        );
    }
    let r = s.query("SELECT usage FROM nosuchmeasurement").await?;
    ensure!(r.get("series").is_none(), "{r}");

    // 8. Chunked: one JSON document per line, all but the last partial.
    let (status, body) = s
        .query_raw(
            &format!("SELECT usage FROM cpu WHERE host = 'h5' AND {range}"),
            &[("chunked", "true"), ("chunk_size", "100")],
        )
        .await?;
    ensure!(status == 200, "{body}");
    let lines: Vec<&str> = body.lines().collect();
    let h5 = points
        .iter()
        .filter(|p| p.host == "h5" && p.usage.is_some())
        .count();
    ensure!(
        lines.len() == h5.div_ceil(100),
        "{} chunks for {h5} rows",
        lines.len()
    );
    for (i, l) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(l)?;
        ensure!(
            v["results"][0]["partial"].as_bool().unwrap_or(false) == (i + 1 < lines.len()),
            "chunk {i}: {l}"
        );
    }

    // 9. DELETE by tag and time, then DROP MEASUREMENT.
    let cut = start + 60 * MINUTE;
    s.query(&format!(
        "DELETE FROM cpu WHERE host = 'h0' AND time < {cut}"
    ))
    .await?;
    let r = s
        .query(&format!(
            "SELECT count(load) FROM cpu WHERE host = 'h0' AND {range}"
        ))
        .await?;
    let left = points
        .iter()
        .filter(|p| p.host == "h0" && p.time >= cut)
        .count() as i64;
    ensure!(
        r["series"][0]["values"][0][1].as_i64() == Some(left),
        "after DELETE: {r}"
    );
    s.query("DROP MEASUREMENT mem").await?;
    let r = s.query("SHOW MEASUREMENTS").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["cpu"]]),
        "after DROP MEASUREMENT: {r}"
    );

    // 10. The InfluxDB 1.x Python client, unchanged (scripts/deps.d/pyclients.sh
    // installs it; `make test` runs that first).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pyclients = std::env::var("SHARDHOUSE_PYCLIENTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join(".deps/pyclients"));
    ensure!(
        pyclients.join("influxdb").is_dir(),
        "the influxdb Python client is not installed at {}: run scripts/deps.d/pyclients.sh (make test does)",
        pyclients.display()
    );
    let addr = s.base.trim_start_matches("http://").to_owned();
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("base {addr}"))?;
    let out = std::process::Command::new("python3")
        .arg(root.join("router/tests/clients/influxdb_v1_query.py"))
        .args([host, port])
        .env("PYTHONPATH", &pyclients)
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success() && text.trim_end().ends_with("ok"),
        "influxdb client: {text}"
    );

    // 11. A dashboard refreshing every second for a minute makes no more
    // parts than writing alone: a minute of writes, then a minute of the
    // same writes with a query a second; active parts (every node's
    // `shardhouse_engine_parts`) compared at the end of each.
    let writes_alone = dashboard_minute(&s, false).await?;
    let with_dashboard = dashboard_minute(&s, true).await?;
    eprintln!(
        "active parts after a minute of writes: {writes_alone}; with a dashboard: {with_dashboard}"
    );
    ensure!(
        with_dashboard <= writes_alone + writes_alone / 4 + 4,
        "a dashboard grew the parts: {with_dashboard} active parts against {writes_alone} from writing alone"
    );

    // 12. kill -9 of a node while a dashboard-like query loops: every answer
    // is complete or an error, never a silently short count.
    let total = points
        .iter()
        .filter(|p| !(p.host == "h0" && p.time < cut))
        .count() as i64;
    let q = format!("SELECT count(load) FROM cpu WHERE {range}");
    let mut complete = 0;
    let mut errors = 0;
    let killed = std::time::Instant::now();
    s.cluster.nodes[0].kill9();
    while killed.elapsed() < Duration::from_secs(20) {
        let (status, body) = s.query_raw(&q, &[]).await?;
        let v: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        match v["results"][0]["series"][0]["values"][0][1].as_i64() {
            Some(n) => {
                ensure!(
                    status == 200 && n == total,
                    "incomplete answer {n} of {total}: {body}"
                );
                complete += 1;
            }
            None => {
                ensure!(
                    v["results"][0]["error"].is_string() || v["error"].is_string(),
                    "neither an answer nor an error: {status} {body}"
                );
                errors += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(
        complete > 0,
        "no complete answer in 20 s with one of three nodes down ({errors} errors)"
    );
    eprintln!("kill -9 during queries: {complete} complete answers, {errors} errors");
    Ok(())
}

/// A minute of writes into `dash` (a point per series every 100 ms), with a
/// dashboard query every second when `dashboard`; returns the active parts
/// of every node at the end (after the gauge's 10 s refresh).
async fn dashboard_minute(s: &Stack, dashboard: bool) -> Result<i64> {
    let started = std::time::Instant::now();
    let mut last_query = started;
    let mut i = 0i64;
    while started.elapsed() < Duration::from_secs(60) {
        let t = now_ns();
        let body: String = (0..20)
            .map(|h| format!("m,host=h{h} v={i} {t}\n"))
            .collect();
        let r = s
            .http
            .post(format!("{}/write?db=dash", s.base))
            .body(body)
            .send()
            .await?;
        ensure!(
            r.status().as_u16() == 204,
            "dashboard write: {}",
            r.text().await?
        );
        if dashboard && last_query.elapsed() >= Duration::from_secs(1) {
            last_query = std::time::Instant::now();
            let r = s
                .http
                .get(format!("{}/query", s.base))
                .query(&[
                    ("db", "dash"),
                    (
                        "q",
                        "SELECT mean(v) FROM m WHERE time > now() - 5m GROUP BY time(10s), host",
                    ),
                ])
                .send()
                .await?;
            let text = r.text().await?;
            ensure!(text.contains("\"series\""), "dashboard query: {text}");
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut parts = 0;
    for n in &s.cluster.nodes {
        let text = s
            .http
            .get(format!("http://{}/metrics", n.http))
            .send()
            .await?
            .text()
            .await?;
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix("shardhouse_engine_parts "))
            .ok_or_else(|| anyhow!("node {} has no shardhouse_engine_parts", n.id))?;
        parts += v.trim().parse::<f64>()? as i64;
    }
    Ok(parts)
}
