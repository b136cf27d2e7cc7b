//! Issue 14, item 3 for `/api/v1/sql`: answers across shards equal a
//! single-place evaluation. Real parts (etcd, three `shardhouse-node`
//! processes at RF=3 over 8 shards, the `shardhouse-router` binary);
//! pseudo-random points written over HTTP line protocol into two
//! measurements, one field (`temp`) only on the series of one host (so
//! most shards never see that column); every answer is compared with the
//! same computed here in plain Rust over the points the test wrote.

mod support;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use support::wait_writable;

const SHARDS: u32 = 8;
const DB: &str = "oracle";

/// xorshift64*: deterministic data from a printed seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
struct Cpu {
    host: String,
    region: String,
    time: i64,
    usage: f64,
    idle: Option<f64>,
    temp: Option<i64>,
}

#[derive(Debug, Clone)]
struct Mem {
    host: String,
    used: i64,
    free: f64,
}

struct Stack {
    http: reqwest::Client,
    base: String,
}

impl Stack {
    async fn get(&self, q: &str, extra: &[(&str, &str)]) -> Result<(u16, String)> {
        let mut params = vec![("db", DB), ("q", q)];
        params.extend_from_slice(extra);
        let r = self
            .http
            .get(format!("{}/api/v1/sql", self.base))
            .query(&params)
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    async fn rows(&self, q: &str) -> Result<Vec<serde_json::Map<String, Value>>> {
        let (status, text) = self.get(q, &[]).await?;
        ensure!(status == 200, "{q}: {status} {text}");
        let rows: Vec<Value> = serde_json::from_str(&text)?;
        Ok(rows
            .into_iter()
            .map(|r| r.as_object().cloned().unwrap_or_default())
            .collect())
    }
}

fn close(got: Option<f64>, want: f64, what: &str) -> Result<()> {
    let got = got.with_context(|| format!("{what}: no number"))?;
    let tol = 1e-9 * want.abs().max(1.0);
    ensure!((got - want).abs() <= tol, "{what}: got {got}, want {want}");
    Ok(())
}

fn f(r: &serde_json::Map<String, Value>, k: &str) -> Option<f64> {
    r.get(k).and_then(Value::as_f64)
}

/// ClickHouse's `quantile` (linear interpolation) over sorted values.
fn quantile(sorted: &[f64], level: f64) -> f64 {
    let n = sorted.len();
    let idx = (level * (n as f64 - 1.0)).clamp(0.0, n as f64 - 1.0);
    let i = idx as usize;
    if i + 1 >= n {
        return sorted[i];
    }
    sorted[i] + (idx - i as f64) * (sorted[i + 1] - sorted[i])
}

const SERIES_JOIN: &str = "INNER JOIN (SELECT series_id, tags FROM _series WHERE measurement = 'cpu') AS s USING series_id";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_answers_equal_one_place_evaluation() -> Result<()> {
    let cluster = support::cluster("sqloracle", 3, SHARDS, 3, &[])?;
    let s = Stack {
        http: reqwest::Client::new(),
        base: cluster.router_url(),
    };
    wait_writable(&s.http, &s.base).await?;

    // The data: 12 cpu series (6 hosts x 2 regions), 8 mem series.
    let seed = 0x5eed_1234_u64;
    eprintln!("seed {seed:#x}");
    let mut rng = Rng(seed);
    let base_ns = 1_700_000_000_000_000_000_i64;
    let mut cpu = Vec::new();
    let mut tick = 0i64;
    for h in 0..6 {
        for r in 0..2 {
            for _ in 0..40 {
                tick += 1;
                cpu.push(Cpu {
                    host: format!("h{h}"),
                    region: format!("r{r}"),
                    // Unique across the whole set: ORDER BY time is total.
                    time: base_ns + tick * 1_000_000,
                    usage: rng.below(10_000) as f64 / 100.0,
                    idle: (rng.below(3) != 0).then(|| rng.below(1000) as f64 / 10.0),
                    temp: (h == 0).then(|| rng.below(200) as i64 - 50),
                });
            }
        }
    }
    let mut mem = Vec::new();
    for h in 0..8 {
        for i in 0..25 {
            mem.push((
                base_ns + i * 1_000_000_000,
                Mem {
                    host: format!("m{h}"),
                    used: rng.below(1_000_000) as i64,
                    free: rng.below(1_000_000) as f64 / 7.0,
                },
            ));
        }
    }
    let mut lines = String::new();
    for p in &cpu {
        lines.push_str(&format!(
            "cpu,host={},region={} usage={}",
            p.host, p.region, p.usage
        ));
        if let Some(i) = p.idle {
            lines.push_str(&format!(",idle={i}"));
        }
        if let Some(t) = p.temp {
            lines.push_str(&format!(",temp={t}i"));
        }
        lines.push_str(&format!(" {}\n", p.time));
    }
    for (t, m) in &mem {
        lines.push_str(&format!(
            "mem,host={} used={}i,free={} {t}\n",
            m.host, m.used, m.free
        ));
    }
    for chunk in lines.lines().collect::<Vec<_>>().chunks(150) {
        let r = s
            .http
            .post(format!("{}/write?db={DB}", s.base))
            .body(chunk.join("\n"))
            .send()
            .await?;
        ensure!(r.status().as_u16() == 204, "write: {}", r.text().await?);
    }

    // 1. Global aggregates.
    let usage: Vec<f64> = cpu.iter().map(|p| p.usage).collect();
    let mut sorted = usage.clone();
    sorted.sort_by(f64::total_cmp);
    let n = usage.len() as f64;
    let sum: f64 = usage.iter().sum();
    let rows = s
        .rows("SELECT count() AS n, sum(usage) AS s, avg(usage) AS a, min(usage) AS mn, max(usage) AS mx, uniqExact(usage) AS u, median(usage) AS med, quantile(0.9)(usage) AS q90, quantileExact(0.25)(usage) AS qe, varSamp(usage) AS vs, sum(usage) / count() AS ratio FROM cpu FINAL")
        .await?;
    ensure!(rows.len() == 1, "one row: {rows:?}");
    let r = &rows[0];
    ensure!(r["n"] == cpu.len(), "count: {r:?}");
    close(f(r, "s"), sum, "sum")?;
    close(f(r, "a"), sum / n, "avg")?;
    close(f(r, "ratio"), sum / n, "sum/count")?;
    close(f(r, "mn"), sorted[0], "min")?;
    close(f(r, "mx"), sorted[sorted.len() - 1], "max")?;
    let uniq: BTreeSet<u64> = usage.iter().map(|u| u.to_bits()).collect();
    ensure!(r["u"] == uniq.len(), "uniqExact: {r:?} want {}", uniq.len());
    close(f(r, "med"), quantile(&sorted, 0.5), "median")?;
    close(f(r, "q90"), quantile(&sorted, 0.9), "quantile(0.9)")?;
    close(
        f(r, "qe"),
        sorted[(0.25 * n) as usize],
        "quantileExact(0.25)",
    )?;
    let mean = sum / n;
    let var = usage.iter().map(|u| (u - mean) * (u - mean)).sum::<f64>() / (n - 1.0);
    close(f(r, "vs"), var, "varSamp")?;

    // 2. GROUP BY a tag (through the tag index), ORDER BY the tag.
    let mut by_host: BTreeMap<&str, Vec<&Cpu>> = BTreeMap::new();
    for p in &cpu {
        by_host.entry(&p.host).or_default().push(p);
    }
    let rows = s
        .rows(&format!("SELECT s.tags['host'] AS host, count() AS n, avg(f.usage) AS a, max(f.idle) AS mi, count(f.idle) AS ni FROM cpu AS f FINAL {SERIES_JOIN} GROUP BY host ORDER BY host"))
        .await?;
    ensure!(rows.len() == by_host.len(), "{rows:?}");
    for (r, (host, ps)) in rows.iter().zip(&by_host) {
        ensure!(r["host"] == *host, "{r:?} vs {host}");
        ensure!(r["n"] == ps.len(), "{host} count {r:?}");
        close(
            f(r, "a"),
            ps.iter().map(|p| p.usage).sum::<f64>() / ps.len() as f64,
            "avg by host",
        )?;
        let idle: Vec<f64> = ps.iter().filter_map(|p| p.idle).collect();
        close(
            f(r, "mi"),
            idle.iter().cloned().fold(f64::MIN, f64::max),
            "max idle by host",
        )?;
        ensure!(r["ni"] == idle.len(), "{host} count(idle) {r:?}");
    }

    // 3. A field only some shards have: no error, NULL elsewhere.
    let temps: Vec<i64> = cpu.iter().filter_map(|p| p.temp).collect();
    let rows = s
        .rows("SELECT count(temp) AS n, sum(temp) AS s, min(temp) AS mn, avg(temp) AS a, uniqExact(temp) AS u, count() AS total FROM cpu FINAL")
        .await?;
    let r = &rows[0];
    ensure!(r["n"] == temps.len() && r["total"] == cpu.len(), "{r:?}");
    ensure!(r["s"] == temps.iter().sum::<i64>(), "sum(temp) {r:?}");
    ensure!(r["mn"] == *temps.iter().min().unwrap(), "min(temp) {r:?}");
    close(
        f(r, "a"),
        temps.iter().sum::<i64>() as f64 / temps.len() as f64,
        "avg(temp)",
    )?;
    ensure!(
        r["u"] == temps.iter().collect::<BTreeSet<_>>().len(),
        "uniqExact(temp) {r:?}"
    );
    let rows = s
        .rows(&format!("SELECT s.tags['host'] AS host, count(f.temp) AS n FROM cpu AS f FINAL {SERIES_JOIN} GROUP BY host HAVING n > 0"))
        .await?;
    ensure!(
        rows.len() == 1 && rows[0]["host"] == "h0" && rows[0]["n"] == temps.len(),
        "{rows:?}"
    );
    // A raw read of that field, sorted across shards.
    let rows = s
        .rows("SELECT time, temp, usage FROM cpu FINAL WHERE temp IS NOT NULL OR usage > 99 ORDER BY time DESC LIMIT 5")
        .await?;
    let mut want: Vec<&Cpu> = cpu
        .iter()
        .filter(|p| p.temp.is_some() || p.usage > 99.0)
        .collect();
    want.sort_by_key(|p| std::cmp::Reverse(p.time));
    ensure!(rows.len() == 5.min(want.len()), "{rows:?}");
    for (r, p) in rows.iter().zip(&want) {
        close(f(r, "usage"), p.usage, "usage of the raw read")?;
        ensure!(
            r.get("temp").and_then(Value::as_i64) == p.temp,
            "{r:?} vs {p:?}"
        );
    }

    // 4. ORDER BY + LIMIT/OFFSET over raw rows and over groups.
    let rows = s
        .rows("SELECT time, usage FROM cpu FINAL ORDER BY usage DESC, time LIMIT 7 OFFSET 3")
        .await?;
    let mut by_usage: Vec<&Cpu> = cpu.iter().collect();
    by_usage.sort_by(|a, b| b.usage.total_cmp(&a.usage).then(a.time.cmp(&b.time)));
    ensure!(rows.len() == 7, "{rows:?}");
    for (r, p) in rows.iter().zip(&by_usage[3..10]) {
        close(
            f(r, "usage"),
            p.usage,
            "ORDER BY usage DESC LIMIT 7 OFFSET 3",
        )?;
    }
    let rows = s
        .rows(&format!("SELECT s.tags['host'] AS host, sum(f.usage) AS su FROM cpu AS f FINAL {SERIES_JOIN} GROUP BY host HAVING count() > 10 ORDER BY su DESC LIMIT 3 OFFSET 1"))
        .await?;
    let mut sums: Vec<(&str, f64)> = by_host
        .iter()
        .map(|(h, ps)| (*h, ps.iter().map(|p| p.usage).sum::<f64>()))
        .collect();
    sums.sort_by(|a, b| b.1.total_cmp(&a.1));
    ensure!(rows.len() == 3, "{rows:?}");
    for (r, (h, su)) in rows.iter().zip(&sums[1..4]) {
        ensure!(r["host"] == *h, "{r:?} vs {h}");
        close(f(r, "su"), *su, "sum by host")?;
    }

    // 4b. Time buckets (Grafana's shape), and SELECT * over shards whose
    // columns differ (only h0's shards have `temp`).
    let bucket = 100_000_000i64;
    let mut buckets: BTreeMap<i64, (usize, f64)> = BTreeMap::new();
    for p in &cpu {
        let b = buckets
            .entry(p.time - p.time.rem_euclid(bucket))
            .or_insert((0, f64::MIN));
        b.0 += 1;
        b.1 = b.1.max(p.usage);
    }
    let rows = s
        .rows("SELECT toStartOfInterval(time, INTERVAL 100 MILLISECOND) AS t, count() AS n, max(usage) AS m FROM cpu FINAL GROUP BY t ORDER BY t DESC")
        .await?;
    ensure!(rows.len() == buckets.len(), "{rows:?}");
    for (r, (_, (n, m))) in rows.iter().zip(buckets.iter().rev()) {
        ensure!(r["n"] == *n, "{r:?} want {n}");
        close(f(r, "m"), *m, "max per bucket")?;
    }
    let rows = s
        .rows("SELECT * FROM cpu FINAL ORDER BY time LIMIT 10 OFFSET 75")
        .await?;
    let mut by_time: Vec<&Cpu> = cpu.iter().collect();
    by_time.sort_by_key(|p| p.time);
    // Ticks 76..85: the last five of h0 (with temp), the first of h1.
    ensure!(rows.len() == 10, "{rows:?}");
    for (r, p) in rows.iter().zip(&by_time[75..]) {
        ensure!(
            r.get("temp").and_then(Value::as_i64) == p.temp,
            "{r:?} vs {p:?}"
        );
        ensure!(r.contains_key("series_id"), "{r:?}");
        close(f(r, "usage"), p.usage, "usage of SELECT *")?;
    }
    let (status, csv) = s
        .get(
            "SELECT count() AS n, min(temp) AS t FROM cpu FINAL",
            &[("format", "csv")],
        )
        .await?;
    let want = format!("n,t\n{},{}\n", cpu.len(), temps.iter().min().unwrap());
    ensure!(
        status == 200 && csv == want,
        "{status} {csv:?} want {want:?}"
    );

    // 5. The second measurement: integers, stddev, quantiles, DISTINCT.
    let used: Vec<i64> = mem.iter().map(|(_, m)| m.used).collect();
    let free: Vec<f64> = mem.iter().map(|(_, m)| m.free).collect();
    let rows = s
        .rows("SELECT count() AS n, sum(used) AS s, uniqExact(used) AS u, stddevPop(free) AS sd, quantilesExact(0.1, 0.5)(used) AS qs, argMax(used, free) AS am FROM mem FINAL")
        .await?;
    let r = &rows[0];
    ensure!(
        r["n"] == mem.len() && r["s"] == used.iter().sum::<i64>(),
        "{r:?}"
    );
    ensure!(
        r["u"] == used.iter().collect::<BTreeSet<_>>().len(),
        "{r:?}"
    );
    let fm = free.iter().sum::<f64>() / free.len() as f64;
    let sd = (free.iter().map(|x| (x - fm) * (x - fm)).sum::<f64>() / free.len() as f64).sqrt();
    close(f(r, "sd"), sd, "stddevPop")?;
    let mut us = used.clone();
    us.sort();
    let qs: Vec<i64> = [0.1, 0.5]
        .iter()
        .map(|l| us[(l * us.len() as f64) as usize])
        .collect();
    ensure!(
        r["qs"] == serde_json::json!(qs),
        "quantilesExact {r:?} want {qs:?}"
    );
    let am = mem
        .iter()
        .max_by(|a, b| a.1.free.total_cmp(&b.1.free))
        .unwrap()
        .1
        .used;
    ensure!(r["am"] == am, "argMax {r:?} want {am}");
    let rows = s
        .rows(
            "SELECT DISTINCT tags['region'] AS r FROM _series WHERE measurement = 'cpu' ORDER BY r",
        )
        .await?;
    ensure!(
        rows == vec![
            serde_json::from_str(r#"{"r":"r0"}"#)?,
            serde_json::from_str(r#"{"r":"r1"}"#)?
        ],
        "{rows:?}"
    );
    let rows = s
        .rows("SELECT count(DISTINCT tags['host']) AS h, count() AS n FROM _series WHERE measurement = 'cpu'")
        .await?;
    ensure!(rows[0]["h"] == 6 && rows[0]["n"] == 12, "{rows:?}");

    // 6. Outside the subset: a 400 naming it; nothing runs.
    for (q, want) in [
        ("SELECT topK(3)(usage) FROM cpu", "topK"),
        (
            "SELECT usage FROM cpu AS a JOIN mem AS b ON a.time = b.time",
            "series_id",
        ),
        ("SELECT * FROM file('/etc/passwd')", "file"),
        ("SELECT count() OVER () FROM cpu", "OVER"),
        ("SELECT nosuchfield FROM cpu FINAL", "nosuchfield"),
    ] {
        let (status, text) = s.get(q, &[]).await?;
        ensure!(status == 400 && text.contains(want), "{q}: {status} {text}");
    }

    // 7. Bounded: past max_rows a clear error, not a partial answer.
    let (status, text) = s
        .get("SELECT time FROM cpu FINAL", &[("max_rows", "10")])
        .await?;
    ensure!(
        status == 400 && text.contains("max_rows=10"),
        "{status} {text}"
    );
    let (status, _) = s
        .get("SELECT time FROM cpu FINAL LIMIT 10", &[("max_rows", "10")])
        .await?;
    ensure!(status == 200, "LIMIT within max_rows");

    // 8. per_shard=true: the plain fan-out, one row per shard that has cpu.
    let (status, text) = s
        .get(
            "SELECT count() AS n FROM cpu FINAL",
            &[("per_shard", "true")],
        )
        .await?;
    ensure!(status == 200, "{text}");
    let rows: Vec<Value> = serde_json::from_str(&text)?;
    let total: u64 = rows.iter().map(|r| r["n"].as_u64().unwrap_or(0)).sum();
    ensure!(
        rows.len() > 1 && rows.iter().all(|r| r["shard"].is_u64()),
        "{rows:?}"
    );
    ensure!(total == cpu.len() as u64, "{rows:?}");
    Ok(())
}
