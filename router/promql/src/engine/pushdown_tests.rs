//! The engine's answers must not depend on what a source leaves out as
//! `Needed` allows: every query here is evaluated over the same series
//! once with every sample and once thinned as the shards thin them, and
//! the two answers must be identical bit for bit. The data is built to
//! hit the edges: irregular sample times, samples exactly on step and
//! lookback boundaries, stale markers, gaps longer than the lookback and
//! counter resets.

use super::{Engine, EngineOptions, QueryValue, STALE_NAN_BITS};
use crate::labels::Labels;
use crate::source::MemorySource;

const S: i64 = 1000;
const M: i64 = 60 * S;

/// A deterministic generator, so that a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn series(seed: u64) -> Vec<(i64, f64)> {
    let mut r = Lcg(seed);
    let (mut t, mut v) = (0i64, 0.0f64);
    let mut out = Vec::new();
    while t < 90 * M {
        t += match r.next(10) {
            0 => 7 * M,                            // a gap past the lookback
            1 => M,                                // on a step boundary
            2 => 5 * M,                            // exactly the lookback
            _ => 1 + r.next(40 * S as u64) as i64, // irregular scrapes
        };
        match r.next(12) {
            0 => out.push((t, f64::from_bits(STALE_NAN_BITS))),
            1 => {
                v = r.next(5) as f64; // a counter reset
                out.push((t, v));
            }
            _ => {
                v += r.next(1000) as f64 / 7.0;
                out.push((t, v));
            }
        }
    }
    out
}

fn sources() -> (MemorySource, MemorySource) {
    let mut thin = MemorySource::default();
    for i in 0..12u64 {
        let labels = Labels::from_pairs([
            ("__name__", "m".to_string()),
            ("i", i.to_string()),
            ("g", (i % 3).to_string()),
        ]);
        thin.add(labels, series(i + 1));
    }
    let mut all = thin.clone();
    all.keep_all = true;
    (thin, all)
}

/// NaN-safe: answers compared through their exact Debug text (values
/// printed in full, NaN and stale NaN alike as NaN).
fn text(v: &QueryValue) -> String {
    format!("{v:?}")
}

const QUERIES: &[&str] = &[
    "m",
    "m offset 3m",
    "m offset -2m",
    "m @ 1800",
    "m @ 1800 offset 1m",
    "m @ start()",
    "m @ end() offset 90s",
    "timestamp(m)",
    "sum by (g) (m)",
    "m - m offset 1m",
    "rate(m[5m])",
    "rate(m[1m])",
    "increase(m[2m] offset 1m)",
    "max_over_time(m[30s])",
    "count_over_time(m[90s])",
    "last_over_time(m[1m] @ 2000)",
    "changes(m[45s])",
    "max_over_time(m[5m:1m])",
    "avg_over_time(m[10m:45s] offset 2m)",
    "rate(m[3m:20s])",
    "max_over_time(rate(m[1m])[7m:2m])",
    "min_over_time(m[20s:1m])",
    "absent_over_time(m[10s])",
    "absent(m{i=\"3\"})",
    "sum_over_time(timestamp(m)[4m:30s])",
];

async fn check(start: i64, end: i64, step: i64) {
    let (thin, all) = sources();
    let engine = Engine::new(EngineOptions::default());
    for q in QUERIES {
        if step > 0 {
            let a = engine.range(&thin, q, start, end, step).await;
            let b = engine.range(&all, q, start, end, step).await;
            assert_eq!(
                a.as_ref().map(text),
                b.as_ref().map(text),
                "{q} from {start} to {end} step {step}"
            );
        }
        for t in [start, end, start + 1] {
            let a = engine.instant(&thin, q, t).await;
            let b = engine.instant(&all, q, t).await;
            assert_eq!(a.map(|v| text(&v)), b.map(|v| text(&v)), "{q} at {t}");
        }
    }
}

#[tokio::test]
async fn thinned_answers_equal_full_ones_at_small_steps() {
    check(10 * M, 80 * M, 15 * S).await;
    check(10 * M + 7, 80 * M, 60 * S).await;
}

#[tokio::test]
async fn thinned_answers_equal_full_ones_at_large_steps() {
    // Steps longer than the lookback and than the ranges: windows and
    // lookbacks with gaps between them.
    check(3 * M, 88 * M, 7 * M).await;
    check(0, 90 * M, 20 * M + 1).await;
}

#[tokio::test]
async fn thinning_leaves_samples_out() {
    // Guards the test above against a source that thins nothing.
    let (thin, all) = sources();
    let engine = Engine::new(EngineOptions {
        max_samples: 400,
        ..EngineOptions::default()
    });
    let (a, b) = (
        engine.range(&thin, "m", 0, 90 * M, 5 * M).await,
        engine.range(&all, "m", 0, 90 * M, 5 * M).await,
    );
    assert!(a.is_ok(), "thinned: at most one sample per series and step");
    assert_eq!(b, Err(crate::Error::TooManySamples));
}
