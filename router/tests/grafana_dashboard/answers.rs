//! The answers InfluxDB 1.8 gives to the dashboard's queries, computed from
//! the points written, and the comparison with the router's answers.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use serde_json::Value;

use crate::data::{Cpu, Mem, MS};
use crate::grafana::View;

/// Rows of one series: time (ms) and the value columns.
pub type Rows = Vec<(i64, Vec<Option<f64>>)>;
/// Series keyed by `tag=value,...` ("" without tags).
pub type Answer = BTreeMap<String, Rows>;

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
pub fn expected(
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

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Differences between a statement's result and the expected answer; times
/// may differ by `slack_ms` (a relative range's start is the router's now).
pub fn compare(result: &Value, columns: &[&str], want: &Answer, slack_ms: i64) -> Vec<String> {
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
            let ok_time = row[0].as_i64().is_some_and(|g| (g - t).abs() <= slack_ms);
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
