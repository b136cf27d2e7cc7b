//! Loads series written the way Prometheus's promql/testdata files write
//! them (`load 5m` then `metric{a="b"} 0+10x10`), so cases from its
//! documented semantics can be re-expressed briefly.

#![allow(dead_code)]

use shardhouse_promql::engine::STALE_NAN_BITS;
use shardhouse_promql::{Engine, EngineOptions, Labels, MemorySource, QueryValue};

pub fn load(interval_ms: i64, text: &str) -> MemorySource {
    let mut src = MemorySource::default();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let split = line
            .rfind('}')
            .map(|i| i + 1)
            .unwrap_or_else(|| line.find(char::is_whitespace).unwrap());
        let (metric, values) = line.split_at(split);
        src.add(parse_metric(metric.trim()), expand(values, interval_ms));
    }
    src
}

pub fn parse_metric(s: &str) -> Labels {
    let (name, rest) = match s.find('{') {
        Some(i) => (&s[..i], &s[i + 1..s.len() - 1]),
        None => (s, ""),
    };
    let mut pairs = vec![("__name__".to_string(), name.to_string())];
    for kv in rest.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap();
        pairs.push((k.trim().to_string(), v.trim().trim_matches('"').to_string()));
    }
    Labels::from_pairs(pairs)
}

/// `0+10x3` is 0 10 20 30; `_` skips a step; `stale` is a stale marker.
fn expand(values: &str, interval_ms: i64) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    let mut i = 0i64;
    for tok in values.split_whitespace() {
        if tok == "_" {
            i += 1;
            continue;
        }
        if tok == "stale" {
            out.push((i * interval_ms, f64::from_bits(STALE_NAN_BITS)));
            i += 1;
            continue;
        }
        if let Some((head, n)) = tok.split_once('x') {
            let n: i64 = n.parse().unwrap();
            let (start, delta) = match head[1..].find(['+', '-']) {
                Some(p) => {
                    let (a, d) = head.split_at(p + 1);
                    (a.parse::<f64>().unwrap(), d.parse::<f64>().unwrap())
                }
                None => (head.parse::<f64>().unwrap(), 0.0),
            };
            for k in 0..=n {
                out.push((i * interval_ms, start + delta * k as f64));
                i += 1;
            }
            continue;
        }
        out.push((i * interval_ms, tok.parse().unwrap()));
        i += 1;
    }
    out
}

pub const M: i64 = 60_000;

pub fn engine() -> Engine {
    Engine::new(EngineOptions::default())
}

/// An instant query's vector as sorted `(labels, value)` pairs.
pub async fn instant(src: &MemorySource, q: &str, t: i64) -> Vec<(String, f64)> {
    match engine()
        .instant(src, q, t)
        .await
        .unwrap_or_else(|e| panic!("{q}: {e}"))
    {
        QueryValue::Vector(v) => {
            let mut out: Vec<(String, f64)> =
                v.into_iter().map(|(l, _, v)| (l.to_string(), v)).collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out
        }
        QueryValue::Scalar(_, v) => vec![("scalar".into(), v)],
        other => panic!("{q}: not a vector: {other:?}"),
    }
}

pub fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || ((a - b) / b).abs() < 1e-9
}

/// Checks an instant query against expected `(labels, value)` pairs,
/// labels written as `{a="1", b="2"}` in sorted order.
pub async fn expect(src: &MemorySource, q: &str, t: i64, want: &[(&str, f64)]) {
    let got = instant(src, q, t).await;
    let mut want: Vec<(String, f64)> = want.iter().map(|(l, v)| (l.to_string(), *v)).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let ok = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|(g, w)| g.0 == w.0 && close(g.1, w.1));
    assert!(ok, "{q} at {t}ms\n got: {got:?}\nwant: {want:?}");
}

pub async fn expect_err(src: &MemorySource, q: &str, t: i64, contains: &str) {
    match engine().instant(src, q, t).await {
        Ok(v) => panic!("{q}: expected an error containing {contains:?}, got {v:?}"),
        Err(e) => assert!(e.to_string().contains(contains), "{q}: {e}"),
    }
}
