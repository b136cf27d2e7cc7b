//! Issue 14 item 5: every query of the Grafana dashboard the chart ships
//! (charts/shardhouse/dashboards/hosts.json, read here so the queries tested
//! are the queries shipped), with the macros expanded as Grafana expands them,
//! against a live 3-node RF=3 cluster (etcd, node processes, the router
//! binary) after writing Telegraf-shaped `cpu` and `mem` points; each answer
//! is checked against the same computed here from the points written.
//!
//! Grafana's expansion (Grafana 10.0, InfluxQL raw queries, both the
//! frontend's classic path and the backend's `/api/ds/query`): dashboard
//! variables become their values, regex-escaped and joined as `(a|b)` for
//! multi-value / "All" variables; `$timeFilter` becomes `time >= <from>ms and
//! time <= <to>ms`; `$__interval` and `$interval` become the interval
//! (range / max data points, rounded to Grafana's steps, at least the
//! datasource's 10 s), formatted `10s`, `1m`, ...; `$__interval_ms` its ms.
//! scripts/tests.d/grafana.sh checks that a real Grafana sends exactly these
//! strings.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, ensure, Context, Result};
use serde_json::Value;
use support::{poll, start_etcd, start_router, Node};

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../charts/shardhouse/dashboards/hosts.json"
);
const DB: &str = "telegraf";
const HOSTS: [&str; 4] = ["api.example.com", "db-1", "web-1", "web-2"];
const CPUS: [&str; 3] = ["cpu-total", "cpu0", "cpu1"];
/// The provisioned datasource's minimum interval (`timeInterval`).
const MIN_INTERVAL_MS: i64 = 10_000;
const MS: i64 = 1_000_000;

#[derive(Debug, Clone)]
struct Cpu {
    host: &'static str,
    cpu: &'static str,
    t: i64,
    user: f64,
    system: f64,
    iowait: f64,
}

#[derive(Debug, Clone)]
struct Mem {
    host: &'static str,
    t: i64,
    used: i64,
    available: i64,
    used_percent: f64,
}

/// One dashboard refresh: the time range, the interval and the hosts picked.
#[derive(Debug, Clone)]
struct View {
    from_ms: i64,
    to_ms: i64,
    interval_ms: i64,
    hosts: Vec<&'static str>,
}

// ---- Grafana's macro expansion -------------------------------------------

/// Grafana's `escapeRegex` (packages/grafana-data/src/text/string.ts).
fn escape_regex(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\^$*+?.()|[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Grafana's `roundInterval`: the step a computed interval snaps to.
fn round_interval(ms: i64) -> i64 {
    const STEPS: [(i64, i64); 30] = [
        (10, 1),
        (15, 10),
        (35, 20),
        (75, 50),
        (150, 100),
        (350, 200),
        (750, 500),
        (1_500, 1_000),
        (3_500, 2_000),
        (7_500, 5_000),
        (12_500, 10_000),
        (17_500, 15_000),
        (25_000, 20_000),
        (45_000, 30_000),
        (90_000, 60_000),
        (210_000, 120_000),
        (450_000, 300_000),
        (750_000, 600_000),
        (1_050_000, 900_000),
        (1_500_000, 1_200_000),
        (2_700_000, 1_800_000),
        (5_400_000, 3_600_000),
        (9_000_000, 7_200_000),
        (16_200_000, 10_800_000),
        (32_400_000, 21_600_000),
        (86_400_000, 43_200_000),
        (604_800_000, 86_400_000),
        (1_814_400_000, 604_800_000),
        (3_628_800_000, 2_592_000_000),
        (i64::MAX, 31_536_000_000),
    ];
    STEPS
        .iter()
        .find(|(below, _)| ms < *below)
        .map_or(1, |s| s.1)
}

/// The interval a panel of `max_data_points` gets for a range.
fn grafana_interval(range_ms: i64, max_data_points: i64) -> i64 {
    round_interval(range_ms / max_data_points).max(MIN_INTERVAL_MS)
}

/// Grafana's `FormatDuration` (pkg/tsdb/intervalv2): the largest whole unit.
fn interval_text(ms: i64) -> String {
    const UNITS: [(i64, &str); 6] = [
        (31_536_000_000, "y"),
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let (size, unit) = UNITS
        .iter()
        .find(|(size, _)| ms >= *size)
        .unwrap_or(&UNITS[5]);
    format!("{}{unit}", (ms / size).max(1))
}

/// `query` as Grafana sends it for `view` (variables: `host`, multi + All).
fn expand(query: &str, view: &View) -> Result<String> {
    let mut out = String::new();
    let mut rest = query;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let n = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..n];
        let value = match name {
            "" => "$".to_string(),
            "host" => {
                let v: Vec<String> = view.hosts.iter().map(|h| escape_regex(h)).collect();
                format!("({})", v.join("|"))
            }
            "timeFilter" => format!("time >= {}ms and time <= {}ms", view.from_ms, view.to_ms),
            "__interval" | "interval" => interval_text(view.interval_ms),
            "__interval_ms" => view.interval_ms.to_string(),
            other => return Err(anyhow!("dashboard uses ${other}, unknown to this test")),
        };
        out.push_str(&value);
        rest = &after[n..];
    }
    out.push_str(rest);
    Ok(out)
}

#[test]
fn grafana_expansion_matches_grafana() {
    assert_eq!(escape_regex("api.example.com"), r"api\.example\.com");
    assert_eq!(grafana_interval(3_600_000, 1_000), 10_000);
    assert_eq!(grafana_interval(3 * 3_600_000, 300), 30_000);
    assert_eq!(grafana_interval(6 * 3_600_000, 200), 120_000);
    assert_eq!(interval_text(10_000), "10s");
    assert_eq!(interval_text(120_000), "2m");
    assert_eq!(interval_text(500), "500ms");
    let view = View {
        from_ms: 1_000,
        to_ms: 2_000,
        interval_ms: 60_000,
        hosts: vec!["a.b", "c"],
    };
    let got = expand(
        "SELECT mean(x) FROM m WHERE h =~ /^$host$/ AND $timeFilter GROUP BY time($__interval), time($interval) $__interval_ms",
        &view,
    )
    .unwrap();
    assert_eq!(
        got,
        r"SELECT mean(x) FROM m WHERE h =~ /^(a\.b|c)$/ AND time >= 1000ms and time <= 2000ms GROUP BY time(1m), time(1m) 60000"
    );
}

// ---- The answers InfluxDB 1.8 gives, computed from the points written -----

/// Rows of one series: time (ms) and the value columns.
type Rows = Vec<(i64, Vec<Option<f64>>)>;
/// Series keyed by `tag=value,...` ("" without tags).
type Answer = BTreeMap<String, Rows>;

fn bucket_ms(t_ns: i64, iv_ms: i64) -> i64 {
    t_ns.div_euclid(iv_ms * MS) * iv_ms
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    })
}

enum Fill {
    Null,
    Previous,
    None,
}

/// `GROUP BY time(iv)` over the query's range: every bucket from the one
/// holding `from` to the one holding `to`, filled as InfluxDB fills.
fn windows(
    view: &View,
    points: &[(i64, Vec<f64>)],
    agg: impl Fn(&[Vec<f64>]) -> Vec<Option<f64>>,
    fill: Fill,
) -> Rows {
    let mut by_bucket: BTreeMap<i64, Vec<Vec<f64>>> = BTreeMap::new();
    for (t, v) in points {
        by_bucket
            .entry(bucket_ms(*t, view.interval_ms))
            .or_default()
            .push(v.clone());
    }
    let first = bucket_ms(view.from_ms * MS, view.interval_ms);
    let last = bucket_ms(view.to_ms * MS, view.interval_ms);
    let mut rows = Rows::new();
    let mut prev: Option<Vec<Option<f64>>> = None;
    let mut b = first;
    while b <= last {
        match (by_bucket.get(&b), &fill) {
            (Some(vals), _) => {
                let cols: Vec<Vec<f64>> = (0..vals[0].len())
                    .map(|c| vals.iter().map(|v| v[c]).collect())
                    .collect();
                let r = agg(&cols);
                prev = Some(r.clone());
                rows.push((b, r));
            }
            (None, Fill::None) => {}
            (None, Fill::Null) => rows.push((b, vec![None; points[0].1.len()])),
            (None, Fill::Previous) => {
                let n = points[0].1.len();
                rows.push((b, prev.clone().unwrap_or_else(|| vec![None; n])));
            }
        }
        b += view.interval_ms;
    }
    rows
}

fn in_range(view: &View, t: i64) -> bool {
    t >= view.from_ms * MS && t <= view.to_ms * MS
}

/// Groups `(key, time, values)` into series; a series exists only with points.
fn series<K: Into<String>>(
    items: impl Iterator<Item = (K, i64, Vec<f64>)>,
) -> BTreeMap<String, Vec<(i64, Vec<f64>)>> {
    let mut out: BTreeMap<String, Vec<(i64, Vec<f64>)>> = BTreeMap::new();
    for (k, t, v) in items {
        out.entry(k.into()).or_default().push((t, v));
    }
    out
}

fn means(cols: &[Vec<f64>]) -> Vec<Option<f64>> {
    cols.iter().map(|c| mean(c)).collect()
}

/// The expected answer of one dashboard query (by panel title and refId)
/// and its column names.
fn expected(
    panel: &str,
    ref_id: &str,
    view: &View,
    cpu: &[Cpu],
    mem: &[Mem],
) -> Result<(Vec<&'static str>, Answer)> {
    let picked = |h: &str| view.hosts.contains(&h);
    let total = || {
        cpu.iter()
            .filter(move |p| p.cpu == "cpu-total" && picked(p.host) && in_range(view, p.t))
    };
    let mems = || {
        mem.iter()
            .filter(move |p| picked(p.host) && in_range(view, p.t))
    };
    let by_host = |rows: BTreeMap<String, Vec<(i64, Vec<f64>)>>,
                   fill: fn() -> Fill,
                   agg: fn(&[Vec<f64>]) -> Vec<Option<f64>>| {
        rows.into_iter()
            .map(|(k, pts)| (k, windows(view, &pts, agg, fill())))
            .collect::<Answer>()
    };
    let start = view.from_ms;
    Ok(match (panel, ref_id) {
        ("CPU busy (user + system) per host", "A") => (
            vec!["time", "mean"],
            by_host(
                series(total().map(|p| (format!("host={}", p.host), p.t, vec![p.user + p.system]))),
                || Fill::Null,
                means,
            ),
        ),
        ("CPU by mode (selected hosts)", "A") => (
            vec!["time", "user", "system", "iowait"],
            by_host(
                series(total().map(|p| ("", p.t, vec![p.user, p.system, p.iowait]))),
                || Fill::Null,
                means,
            ),
        ),
        ("Busiest moment per core (max user %)", "A") => (
            vec!["time", "max"],
            by_host(
                series(
                    cpu.iter()
                        .filter(|p| p.cpu != "cpu-total" && picked(p.host) && in_range(view, p.t))
                        .map(|p| (format!("cpu={}", p.cpu), p.t, vec![p.user])),
                ),
                || Fill::None,
                |c| vec![c[0].iter().cloned().reduce(f64::max)],
            ),
        ),
        ("Memory used per host", "A") => (
            vec!["time", "mean"],
            by_host(
                series(mems().map(|p| (format!("host={}", p.host), p.t, vec![p.used_percent]))),
                || Fill::Previous,
                means,
            ),
        ),
        ("Memory growth per host", "A") => {
            // derivative() over GROUP BY time reads one interval before the
            // lower bound (InfluxDB's ExtraIntervals), so the first bucket
            // in range has a previous one.
            let lo = (view.from_ms - view.interval_ms) * MS;
            let pts = series(
                mem.iter()
                    .filter(|p| picked(p.host) && p.t >= lo && p.t <= view.to_ms * MS)
                    .map(|p| (format!("host={}", p.host), p.t, vec![p.used as f64])),
            );
            let mut out = Answer::new();
            for (k, pts) in pts {
                let wide = View {
                    from_ms: lo / MS,
                    ..view.clone()
                };
                let buckets = windows(&wide, &pts, means, Fill::None);
                let rows: Rows = buckets
                    .windows(2)
                    .map(|w| {
                        let (t0, v0) = (w[0].0, w[0].1[0].unwrap());
                        let (t1, v1) = (w[1].0, w[1].1[0].unwrap());
                        (t1, vec![Some((v1 - v0) / ((t1 - t0) as f64 / 1000.0))])
                    })
                    .collect();
                if !rows.is_empty() {
                    out.insert(k, rows);
                }
            }
            (vec!["time", "derivative"], out)
        }
        ("CPU user: p95 and median", "A") => {
            // A lone selector keeps its point's time (checked by the caller).
            let mut v: Vec<(f64, i64)> = total().map(|p| (p.user, p.t / MS)).collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let i = ((v.len() as f64) * 0.95 + 0.5).floor() as usize - 1;
            let (val, t) = v[i];
            (
                vec!["time", "p95"],
                [(String::new(), vec![(t, vec![Some(val)])])].into(),
            )
        }
        ("CPU user: p95 and median", "B") => {
            let m = median(total().map(|p| p.user).collect());
            (
                vec!["time", "median"],
                [(String::new(), vec![(start, vec![m])])].into(),
            )
        }
        ("CPU samples in range", "A") => {
            let n = total().count() as f64;
            (
                vec!["time", "count"],
                [(String::new(), vec![(start, vec![Some(n)])])].into(),
            )
        }
        ("Memory per host (last, peak)", "A") => {
            let mut out = Answer::new();
            for (k, pts) in series(mems().map(|p| {
                (
                    format!("host={}", p.host),
                    p.t,
                    vec![p.used_percent, p.available as f64, p.used as f64],
                )
            })) {
                let last = pts.iter().max_by_key(|p| p.0).unwrap();
                let peak = pts.iter().map(|p| p.1[2]).reduce(f64::max);
                out.insert(
                    k,
                    vec![(start, vec![Some(last.1[0]), Some(last.1[1]), peak])],
                );
            }
            (vec!["time", "used %", "available", "peak used"], out)
        }
        _ => {
            return Err(anyhow!(
                "no expected answer for panel {panel:?} query {ref_id}: add one to this test"
            ))
        }
    })
}

// ---- Comparing the router's answer ---------------------------------------

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Differences between a statement's result and the expected answer.
fn compare(result: &Value, columns: &[&str], want: &Answer) -> Vec<String> {
    let mut errs = Vec::new();
    if let Some(e) = result.get("error") {
        return vec![format!("error: {e}")];
    }
    let mut got = BTreeMap::new();
    for s in result["series"].as_array().cloned().unwrap_or_default() {
        let tags = s["tags"].as_object().map(|t| {
            t.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        });
        let cols: Vec<&str> = s["columns"]
            .as_array()
            .map_or(vec![], |c| c.iter().filter_map(Value::as_str).collect());
        if cols != columns {
            errs.push(format!("columns {cols:?}, want {columns:?}"));
        }
        got.insert(
            tags.unwrap_or_default(),
            s["values"].as_array().cloned().unwrap_or_default(),
        );
    }
    if got.keys().ne(want.keys()) {
        errs.push(format!(
            "series {:?}, want {:?}",
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        ));
        return errs;
    }
    for (key, rows) in want {
        let g = &got[key];
        if g.len() != rows.len() {
            let first = |r: &[Value]| r.first().cloned();
            errs.push(format!(
                "{key}: {} rows, want {} (first got {:?}, want {:?})",
                g.len(),
                rows.len(),
                first(g),
                rows.first()
            ));
            continue;
        }
        for (row, (t, vals)) in g.iter().zip(rows) {
            let ok_time = row[0].as_i64() == Some(*t);
            let ok_vals = vals.iter().enumerate().all(|(i, v)| {
                match (v, row.get(i + 1).and_then(Value::as_f64)) {
                    (None, None) => row.get(i + 1).is_some_and(Value::is_null),
                    (Some(w), Some(g)) => close(g, *w),
                    _ => false,
                }
            });
            if !(ok_time && ok_vals) {
                errs.push(format!("{key}: row {row}, want time {t} values {vals:?}"));
                break;
            }
        }
    }
    errs
}

// ---- The cluster and the data --------------------------------------------

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// xorshift: deterministic data without an extra dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Two hours of Telegraf-shaped points every 10 s per host, ending a minute
/// ago: jittered times with sub-millisecond parts, 3% of samples missing,
/// and a 7-minute outage of web-2. `usage_user` values are distinct (a tiny
/// per-point offset) so the percentile's point, and its time, is unique.
fn telegraf_points(end_ms: i64) -> (Vec<Cpu>, Vec<Mem>) {
    let mut rng = Rng(0x6a7f_a11a_5eed);
    let (mut cpu, mut mem) = (Vec::new(), Vec::new());
    let start = end_ms - 2 * 3_600_000;
    let outage = (end_ms - 40 * 60_000)..(end_ms - 33 * 60_000);
    let mut k = 0u32;
    for host in HOSTS {
        let mut t_ms = start;
        while t_ms < end_ms {
            let t = (t_ms + rng.below(2_000) as i64) * MS + rng.below(1_000_000) as i64;
            t_ms += 10_000;
            if rng.below(100) < 3 || (host == "web-2" && outage.contains(&(t / MS))) {
                continue;
            }
            for c in CPUS {
                k += 1;
                cpu.push(Cpu {
                    host,
                    cpu: c,
                    t,
                    user: rng.below(60_000) as f64 / 1000.0 + f64::from(k) * 1e-9,
                    system: rng.below(20_000) as f64 / 1000.0,
                    iowait: rng.below(5_000) as f64 / 1000.0,
                });
            }
            let total: i64 = 16 << 30;
            let used = (1 << 30) + rng.below(7 << 30) as i64;
            mem.push(Mem {
                host,
                t,
                used,
                available: total - used,
                used_percent: used as f64 / total as f64 * 100.0,
            });
        }
    }
    (cpu, mem)
}

fn line_protocol(cpu: &[Cpu], mem: &[Mem], host: &str) -> String {
    let mut out = String::new();
    for p in cpu.iter().filter(|p| p.host == host) {
        let idle = 100.0 - p.user - p.system - p.iowait;
        out.push_str(&format!(
            "cpu,cpu={},host={} usage_user={},usage_system={},usage_iowait={},usage_idle={idle} {}\n",
            p.cpu, p.host, p.user, p.system, p.iowait, p.t
        ));
    }
    for p in mem.iter().filter(|p| p.host == host) {
        out.push_str(&format!(
            "mem,host={} used={}i,available={}i,total={}i,used_percent={} {}\n",
            p.host,
            p.used,
            p.available,
            p.used + p.available,
            p.used_percent,
            p.t
        ));
    }
    out
}

struct Target {
    panel: String,
    ref_id: String,
    query: String,
}

/// Every query of the dashboard: the panels' targets and the variables'.
fn dashboard() -> Result<(Vec<Target>, Vec<String>)> {
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("reading {DASHBOARD}"))?;
    let d: Value =
        serde_json::from_str(&text).with_context(|| format!("{DASHBOARD} is not JSON"))?;
    let mut targets = Vec::new();
    for p in d["panels"].as_array().ok_or_else(|| anyhow!("no panels"))? {
        for t in p["targets"]
            .as_array()
            .ok_or_else(|| anyhow!("panel without targets: {p}"))?
        {
            ensure!(
                t["rawQuery"] == true,
                "{}: only raw InfluxQL queries are tested",
                p["title"]
            );
            targets.push(Target {
                panel: p["title"].as_str().unwrap_or_default().to_string(),
                ref_id: t["refId"].as_str().unwrap_or_default().to_string(),
                query: t["query"]
                    .as_str()
                    .ok_or_else(|| anyhow!("target without query: {t}"))?
                    .to_string(),
            });
        }
    }
    let vars = d["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .filter_map(|v| v["query"].as_str().map(str::to_string))
        .collect();
    Ok((targets, vars))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_query_answers_as_influxdb() -> Result<()> {
    let (targets, var_queries) = dashboard()?;
    ensure!(targets.len() >= 8, "{DASHBOARD}: {} queries", targets.len());
    let dir = tempfile::tempdir()?;
    let (_etcd, etcd_url) = start_etcd(dir.path()).await?;
    let cluster = "grafana";
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Node::start(
            id,
            dir.path(),
            &etcd_url,
            cluster,
            "shards=8,rf=3,nodes=3",
            &[],
        )?);
    }
    let (_router, base) = start_router(dir.path(), &etcd_url, cluster)?;
    let http = reqwest::Client::new();
    let query = |q: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            // What Grafana sends: GET /query?db=&q=&epoch=ms.
            let r = http
                .get(format!("{base}/query"))
                .query(&[("db", DB), ("q", &q), ("epoch", "ms")])
                .send()
                .await?;
            let (status, body) = (r.status().as_u16(), r.text().await?);
            ensure!(status == 200, "HTTP {status}: {body}");
            let v: Value = serde_json::from_str(&body)?;
            Ok::<Value, anyhow::Error>(v["results"][0].clone())
        }
    };
    poll(
        "the cluster accepting writes",
        Duration::from_secs(90),
        || async {
            let r = http
                .post(format!("{base}/query"))
                .form(&[("q", "CREATE DATABASE \"telegraf\"")])
                .send()
                .await?;
            Ok((r.status().as_u16() == 200).then_some(()))
        },
    )
    .await?;

    let now = now_ms();
    let (cpu, mem) = telegraf_points(now - 60_000);
    for host in HOSTS {
        let r = http
            .post(format!("{base}/write?db={DB}"))
            .body(line_protocol(&cpu, &mem, host))
            .send()
            .await?;
        ensure!(
            r.status().as_u16() == 204,
            "write {host}: {}",
            r.text().await?
        );
    }

    // The host variable's query lists every host.
    for q in &var_queries {
        let r = query(q.clone()).await?;
        let want: Vec<Value> = HOSTS
            .iter()
            .map(|h| serde_json::json!(["host", h]))
            .collect();
        ensure!(
            r["series"][0]["values"] == Value::from(want),
            "variable query {q}: {r}"
        );
    }

    // Refreshes: the default last hour with all hosts on a wide panel; the
    // last 3 hours (an hour before the data) on a narrow panel with two
    // hosts; 6 hours at 2-minute buckets with web-2 (its outage inside).
    let views = [
        (3_600_000, 1_000, HOSTS.to_vec()),
        (3 * 3_600_000, 300, vec!["api.example.com", "web-1"]),
        (6 * 3_600_000, 200, vec!["web-2"]),
    ]
    .map(|(range, points, hosts)| View {
        from_ms: now - range,
        to_ms: now,
        interval_ms: grafana_interval(range, points),
        hosts,
    });
    let mut failures = Vec::new();
    let mut checked = 0;
    for view in &views {
        for t in &targets {
            let q = expand(&t.query, view)?;
            let (columns, want) = expected(&t.panel, &t.ref_id, view, &cpu, &mem)?;
            ensure!(
                !want.is_empty(),
                "{}/{}: the data gives no answer; fix the test data",
                t.panel,
                t.ref_id
            );
            let errs = match query(q.clone()).await {
                Ok(r) => compare(&r, &columns, &want),
                Err(e) => vec![e.to_string()],
            };
            checked += 1;
            if !errs.is_empty() {
                failures.push(format!(
                    "panel {:?} {} (interval {}):\n  query: {q}\n  {}",
                    t.panel,
                    t.ref_id,
                    interval_text(view.interval_ms),
                    errs.join("\n  ")
                ));
            }
        }
    }
    ensure!(
        failures.is_empty(),
        "{} of {checked} dashboard queries answered wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("grafana dashboard: {checked} queries ({} per refresh x {} refreshes) answered as InfluxDB 1.8", targets.len(), views.len());
    drop(nodes);
    Ok(())
}
