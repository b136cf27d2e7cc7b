//! Oracle property test: random data (fixed seeds) split at random into
//! 3-8 "shards"; for every aggregate, grouping, window and fill mode, the
//! merge of per-shard partials (merged in random order) must equal the
//! evaluation over all points in one place, bit for bit. The one-place
//! answers are in turn checked against naive, independent implementations
//! of each aggregate: exactly, except float sums, means and standard
//! deviations, which the naive code rounds differently (tolerance: the
//! naive code's own error bound, `n·eps·Σ|x|` for sums, `n·eps·max|x|` for
//! the two-pass standard deviation).

use std::collections::BTreeMap;

use shardhouse_eval::partials::{group_key, group_partials, merge_groups, Groups, SeriesPoint};
use shardhouse_eval::{
    evaluate_field, Aggregate, EvalOptions, Fill, Interval, Transform, Value, Windowing, Zone,
};
use shardhouse_influxql::time::TimeRange;

const S: i64 = 1_000_000_000;

/// SplitMix64: small, seedable, good enough to spread test cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Float,
    Int,
    UInt,
    Bool,
    Str,
}

fn value(rng: &mut Rng, kind: Kind) -> Value {
    let small = rng.below(4) == 0;
    match kind {
        Kind::Float => Value::Float(match rng.below(10) {
            _ if small => *rng.pick(&[1.5, -2.25, 0.1, 7.0]),
            0 => (rng.below(2_000_001) as f64 - 1e6) * 1e6 + 0.3,
            1 => (rng.below(1000) as f64) * 1e-9,
            _ => (rng.below(2_000_001) as f64 - 1e6) / 1000.0,
        }),
        Kind::Int => Value::Int(match rng.below(10) {
            _ if small => *rng.pick(&[3, -4, 0, 9]),
            0 => i64::MAX - rng.below(1000) as i64,
            1 => i64::MIN + rng.below(1000) as i64,
            _ => rng.below(20_001) as i64 - 10_000,
        }),
        Kind::UInt => Value::UInt(match rng.below(10) {
            _ if small => *rng.pick(&[3, 4, 0, 9]),
            0 => u64::MAX - rng.below(1000),
            _ => rng.below(20_001),
        }),
        Kind::Bool => Value::Bool(rng.below(2) == 0),
        Kind::Str => Value::String(rng.pick(&["a", "b", "cc", "zz", ""]).to_string()),
    }
}

/// Points of up to six series, unique per series and time, in [0, 600s).
fn dataset(rng: &mut Rng, kind: Kind) -> Vec<SeriesPoint> {
    let hosts = ["a", "b", "c"];
    let regions = ["x", "y"];
    let mut points = Vec::new();
    let mut used = std::collections::HashSet::new();
    let n = 40 + rng.below(260);
    for _ in 0..n {
        let host = *rng.pick(&hosts);
        let region = *rng.pick(&regions);
        let time = rng.below(600) as i64 * S + if rng.below(5) == 0 { 7 } else { 0 };
        if !used.insert((host, region, time)) {
            continue;
        }
        let mut tags = BTreeMap::new();
        tags.insert("host".to_string(), host.to_string());
        if region != "y" || rng.below(3) > 0 {
            tags.insert("region".to_string(), region.to_string());
        }
        points.push(SeriesPoint {
            name: "cpu".into(),
            tags,
            time,
            value: value(rng, kind),
        });
    }
    points
}

fn aggregates(kind: Kind) -> Vec<Aggregate> {
    let numeric = matches!(kind, Kind::Float | Kind::Int | Kind::UInt);
    let mut all = vec![
        Aggregate::Count,
        Aggregate::CountDistinct,
        Aggregate::Distinct,
        Aggregate::Mode,
        Aggregate::First,
        Aggregate::Last,
        // More than any bucket holds: every point, in (time, value) order.
        Aggregate::Sample(1 << 20),
    ];
    if numeric || kind == Kind::Bool {
        all.extend([Aggregate::Min, Aggregate::Max]);
    }
    if numeric {
        all.extend([
            Aggregate::Sum,
            Aggregate::Mean,
            Aggregate::Median,
            Aggregate::Spread,
            Aggregate::Stddev,
            Aggregate::Integral { unit: S },
            Aggregate::Top { n: 3, tags: vec![] },
            Aggregate::Bottom { n: 1, tags: vec![] },
            Aggregate::Top {
                n: 2,
                tags: vec!["host".into()],
            },
            Aggregate::Bottom {
                n: 4,
                tags: vec!["region".into()],
            },
        ]);
        for p in [0.0, 1.0, 25.0, 50.0, 90.0, 99.9, 100.0] {
            all.push(Aggregate::Percentile(p));
        }
    }
    all
}

const FILLS: [Fill; 6] = [
    Fill::Null,
    Fill::None,
    Fill::Previous,
    Fill::Linear,
    Fill::Integer(0),
    Fill::Float(1.5),
];

fn windowing(rng: &mut Rng) -> Windowing {
    let interval = match rng.below(4) {
        0 => None,
        1 => Some(Interval {
            duration: 10 * S,
            offset: 0,
        }),
        2 => Some(Interval {
            duration: 60 * S,
            offset: 7 * S,
        }),
        _ => Some(Interval {
            duration: 45 * S,
            offset: -20 * S,
        }),
    };
    let start = if rng.below(3) == 0 {
        i64::MIN
    } else {
        rng.below(200) as i64 * S
    };
    let end = 400 * S + rng.below(300) as i64 * S;
    let zone = (rng.below(3) == 0).then_some(Zone::Fixed(1800));
    Windowing::new(interval, TimeRange { start, end }, zone)
}

fn shard_split(rng: &mut Rng, points: &[SeriesPoint]) -> Vec<Vec<SeriesPoint>> {
    let k = 3 + rng.below(6) as usize;
    let mut shards = vec![Vec::new(); k];
    for p in points {
        shards[rng.below(k as u64) as usize].push(p.clone());
    }
    shards
}

#[test]
fn merged_partials_equal_one_place_evaluation() {
    let mut checked = 0;
    for seed in 0..40u64 {
        let mut rng = Rng(seed);
        for kind in [Kind::Float, Kind::Int, Kind::UInt, Kind::Bool, Kind::Str] {
            let points = dataset(&mut rng, kind);
            let windowing = windowing(&mut rng);
            let dims: Vec<String> = match rng.below(3) {
                0 => vec![],
                1 => vec!["host".into()],
                _ => vec!["host".into(), "region".into()],
            };
            for agg in aggregates(kind) {
                let whole = group_partials(&agg, &points, &dims, &windowing).unwrap();
                let mut shards: Vec<Groups> = shard_split(&mut rng, &points)
                    .iter()
                    .map(|shard| group_partials(&agg, shard, &dims, &windowing).unwrap())
                    .collect();
                // Merge in a random order.
                let mut merged = Groups::new();
                while !shards.is_empty() {
                    let next = shards.swap_remove(rng.below(shards.len() as u64) as usize);
                    merge_groups(&agg, &mut merged, next).unwrap();
                }
                assert_eq!(whole.len(), merged.len(), "seed {seed} {agg:?}");
                let numeric = matches!(kind, Kind::Float | Kind::Int | Kind::UInt);
                let transform = (numeric && agg.fills()).then_some(Transform::Difference {
                    non_negative: false,
                });
                for ((key, a), (_, b)) in whole.iter().zip(&merged) {
                    for fill in FILLS {
                        for ascending in [true, false] {
                            let opts = EvalOptions {
                                ascending,
                                point_times: agg.is_selector(),
                            };
                            let run = |buckets, t: Option<&Transform>| {
                                let out =
                                    evaluate_field(&agg, t, buckets, &windowing, Some(&fill), opts);
                                format!("{:?}", out.unwrap())
                            };
                            assert_eq!(
                                run(a, None),
                                run(b, None),
                                "seed {seed} {agg:?} {key:?} {fill:?}"
                            );
                            if let Some(t) = &transform {
                                assert_eq!(run(a, Some(t)), run(b, Some(t)), "seed {seed} {agg:?}");
                            }
                            checked += 1;
                        }
                    }
                    check_reference(&agg, key, a, &points, &dims, &windowing);
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} cases");
}

/// The one-place answer against a naive implementation.
fn check_reference(
    agg: &Aggregate,
    key: &shardhouse_eval::SeriesKey,
    buckets: &BTreeMap<i64, shardhouse_eval::Partial>,
    points: &[SeriesPoint],
    dims: &[String],
    windowing: &Windowing,
) {
    let opts = EvalOptions {
        ascending: true,
        point_times: false,
    };
    let got = evaluate_field(agg, None, buckets, windowing, Some(&Fill::None), opts).unwrap();
    let mine: Vec<&SeriesPoint> = points
        .iter()
        .filter(|p| windowing.range.contains(p.time) && &group_key(&p.name, &p.tags, dims) == key)
        .collect();
    if let Aggregate::Integral { unit } = agg {
        let mut all: Vec<(i64, f64)> = mine
            .iter()
            .map(|p| (p.time, p.value.as_f64().unwrap()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let want = naive::integral(&all, *unit, windowing);
        let got: Vec<(i64, f64)> = got
            .iter()
            .map(|e| (e.time, e.value.as_f64().unwrap()))
            .collect();
        assert_eq!(got, want, "integral {key:?}");
        return;
    }
    let mut by_bucket: BTreeMap<i64, Vec<(i64, Value, String)>> = BTreeMap::new();
    for p in &mine {
        let tag = agg
            .aux_columns()
            .first()
            .map(|k| p.tags.get(k).cloned().unwrap_or_default())
            .unwrap_or_default();
        by_bucket
            .entry(windowing.bucket_start(p.time))
            .or_default()
            .push((p.time, p.value.clone(), tag));
    }
    let mut want = Vec::new();
    for (bucket, mut pts) in by_bucket {
        pts.sort_by_key(|p| p.0);
        for (time, value, aux) in naive::bucket(agg, &pts) {
            want.push((time.unwrap_or(bucket), value, aux));
        }
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{agg:?} {key:?}: {got:?} vs {want:?}"
    );
    for (g, (time, value, aux)) in got.iter().zip(&want) {
        assert_eq!(g.time, *time, "{agg:?} {key:?}");
        assert_eq!(g.aux, *aux, "{agg:?} {key:?}");
        let n = mine.len() as f64;
        let abs_sum: f64 = mine
            .iter()
            .filter_map(|p| p.value.as_f64())
            .map(f64::abs)
            .sum();
        match (agg, &g.value, value) {
            (Aggregate::Sum | Aggregate::Mean, Value::Float(a), Value::Float(b)) => {
                let bound = 2.0 * n * f64::EPSILON * abs_sum.max(1.0);
                assert!((a - b).abs() <= bound, "{agg:?}: {a} vs naive {b}");
            }
            (Aggregate::Stddev, Value::Float(a), Value::Float(b)) => {
                // The naive two-pass mean is off by up to n·eps·max|x|
                // (InfluxDB's too: on integers near 2^63 it is off by whole
                // ulps, where the exact moments are not).
                let max_abs = mine
                    .iter()
                    .filter_map(|p| p.value.as_f64())
                    .fold(0.0, |m: f64, x| m.max(x.abs()));
                let bound = 1e-9 * b.abs() + 4.0 * n * f64::EPSILON * max_abs;
                assert!(
                    (a.is_nan() && b.is_nan()) || (a - b).abs() <= bound,
                    "stddev {a} vs naive {b}"
                );
            }
            (_, a, b) => assert_eq!(a, b, "{agg:?} {key:?}"),
        }
    }
}

/// Straightforward implementations, written from InfluxDB 1.8's reducers
/// (iterate the points, sort the slice) rather than from partial states.
mod naive {
    use super::*;
    use std::cmp::Ordering;

    type Out = Vec<(Option<i64>, Value, Vec<Value>)>;

    fn cmp(a: &Value, b: &Value) -> Ordering {
        match (a, b) {
            (Value::Float(x), Value::Float(y)) => x.total_cmp(y),
            _ => a.partial_cmp_same_type(b).unwrap(),
        }
    }

    fn one(v: Value) -> Out {
        vec![(None, v, vec![])]
    }

    /// One bucket's points, in time order: (time, value, tag for top/bottom).
    pub fn bucket(agg: &Aggregate, pts: &[(i64, Value, String)]) -> Out {
        let values: Vec<&Value> = pts.iter().map(|p| &p.1).collect();
        let floats: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
        let n = pts.len();
        match agg {
            Aggregate::Count => one(Value::Int(n as i64)),
            Aggregate::Sum | Aggregate::Mean => {
                let total = match values[0] {
                    Value::Int(_) => values.iter().fold(Value::Int(0), |acc, v| match (acc, v) {
                        (Value::Int(a), Value::Int(b)) => Value::Int(a.wrapping_add(*b)),
                        _ => unreachable!(),
                    }),
                    Value::UInt(_) => values.iter().fold(Value::UInt(0), |acc, v| match (acc, v) {
                        (Value::UInt(a), Value::UInt(b)) => Value::UInt(a.wrapping_add(*b)),
                        _ => unreachable!(),
                    }),
                    _ => Value::Float(floats.iter().sum()),
                };
                if matches!(agg, Aggregate::Sum) {
                    one(total)
                } else {
                    one(Value::Float(total.as_f64().unwrap() / n as f64))
                }
            }
            Aggregate::Stddev => {
                if n < 2 {
                    return one(Value::Float(f64::NAN));
                }
                let mut mean = 0.0;
                for (i, x) in floats.iter().enumerate() {
                    mean += (x - mean) / (i + 1) as f64;
                }
                let var: f64 = floats.iter().map(|x| (x - mean).powi(2)).sum();
                one(Value::Float((var / (n - 1) as f64).sqrt()))
            }
            Aggregate::Median => {
                let mut sorted = values.clone();
                sorted.sort_by(|a, b| cmp(a, b));
                if n % 2 == 1 {
                    return one(Value::Float(sorted[n / 2].as_f64().unwrap()));
                }
                let (lo, hi) = (sorted[n / 2 - 1], sorted[n / 2]);
                one(Value::Float(match (lo, hi) {
                    (Value::Int(a), Value::Int(b)) => *a as f64 + b.wrapping_sub(*a) as f64 / 2.0,
                    (Value::UInt(a), Value::UInt(b)) => *a as f64 + (b - a) as f64 / 2.0,
                    (a, b) => {
                        a.as_f64().unwrap() + (b.as_f64().unwrap() - a.as_f64().unwrap()) / 2.0
                    }
                }))
            }
            Aggregate::Spread => {
                let mut sorted = values.clone();
                sorted.sort_by(|a, b| cmp(a, b));
                one(match (sorted[0], sorted[n - 1]) {
                    (Value::Float(a), Value::Float(b)) => Value::Float(b - a),
                    (Value::Int(a), Value::Int(b)) => Value::Int(b.wrapping_sub(*a)),
                    (Value::UInt(a), Value::UInt(b)) => Value::UInt(b - a),
                    _ => unreachable!(),
                })
            }
            Aggregate::Percentile(p) => {
                let i = (n as f64 * p / 100.0 + 0.5).floor() as i64 - 1;
                if i < 0 || i >= n as i64 {
                    return vec![];
                }
                let mut sorted = pts.to_vec();
                sorted.sort_by(|a, b| cmp(&a.1, &b.1).then(a.0.cmp(&b.0)));
                // Without point_times the row time is the bucket's.
                one(sorted[i as usize].1.clone())
            }
            Aggregate::Min | Aggregate::Max | Aggregate::First | Aggregate::Last => {
                let mut best = &pts[0];
                for p in &pts[1..] {
                    let by_value = cmp(&p.1, &best.1);
                    let take = match agg {
                        Aggregate::Min => by_value.is_lt() || (by_value.is_eq() && p.0 < best.0),
                        Aggregate::Max => by_value.is_gt() || (by_value.is_eq() && p.0 < best.0),
                        Aggregate::First => {
                            let tie = if matches!(p.1, Value::Bool(_)) {
                                by_value.is_lt()
                            } else {
                                by_value.is_gt()
                            };
                            p.0 < best.0 || (p.0 == best.0 && tie)
                        }
                        _ => p.0 > best.0 || (p.0 == best.0 && by_value.is_gt()),
                    };
                    if take {
                        best = p;
                    }
                }
                one(best.1.clone())
            }
            Aggregate::Mode => {
                if let Value::Bool(_) = values[0] {
                    let t = values.iter().filter(|v| **v == &Value::Bool(true)).count();
                    return one(Value::Bool(2 * t >= n));
                }
                // Go's scan over the points sorted by value, stably.
                let mut sorted = pts.to_vec();
                sorted.sort_by(|a, b| cmp(&a.1, &b.1));
                let (mut most_freq, mut curr_freq) = (0, 0);
                let (mut curr, mut mode) = (sorted[0].1.clone(), sorted[0].1.clone());
                let (mut most_time, mut curr_time) = (sorted[0].0, sorted[0].0);
                for p in &sorted {
                    if cmp(&p.1, &curr).is_ne() {
                        curr_freq = 1;
                        curr = p.1.clone();
                        curr_time = p.0;
                        continue;
                    }
                    curr_freq += 1;
                    if most_freq > curr_freq || (most_freq == curr_freq && curr_time > most_time) {
                        continue;
                    }
                    most_freq = curr_freq;
                    mode = p.1.clone();
                    most_time = p.0;
                }
                one(mode)
            }
            Aggregate::Distinct | Aggregate::CountDistinct => {
                let mut first: Vec<(i64, Value)> = Vec::new();
                for (t, v, _) in pts {
                    if !first.iter().any(|(_, seen)| cmp(seen, v).is_eq()) {
                        first.push((*t, v.clone()));
                    }
                }
                if matches!(agg, Aggregate::CountDistinct) {
                    return one(Value::Int(first.len() as i64));
                }
                first.sort_by(|a, b| a.0.cmp(&b.0).then(cmp(&a.1, &b.1)));
                first.into_iter().map(|(_, v)| (None, v, vec![])).collect()
            }
            Aggregate::Top { n: k, tags } | Aggregate::Bottom { n: k, tags } => {
                let top = matches!(agg, Aggregate::Top { .. });
                let better = |a: &(i64, Value, String), b: &(i64, Value, String)| {
                    let by_value = if top {
                        cmp(&b.1, &a.1)
                    } else {
                        cmp(&a.1, &b.1)
                    };
                    by_value.then(a.0.cmp(&b.0))
                };
                let mut candidates = pts.to_vec();
                if !tags.is_empty() {
                    let mut per_tag: BTreeMap<String, (i64, Value, String)> = BTreeMap::new();
                    for p in pts {
                        let held = per_tag.entry(p.2.clone()).or_insert_with(|| p.clone());
                        if better(p, held).is_lt() {
                            *held = p.clone();
                        }
                    }
                    candidates = per_tag.into_values().collect();
                }
                candidates.sort_by(better);
                candidates.truncate(*k);
                candidates.sort_by_key(|p| p.0);
                candidates
                    .into_iter()
                    .map(|(t, v, tag)| {
                        let aux = if tags.is_empty() {
                            vec![]
                        } else {
                            vec![Value::String(tag)]
                        };
                        (Some(t), v, aux)
                    })
                    .collect()
            }
            Aggregate::Sample(_) => {
                let mut all = pts.to_vec();
                all.sort_by(|a, b| a.0.cmp(&b.0).then(cmp(&a.1, &b.1)));
                all.into_iter()
                    .map(|(t, v, _)| (Some(t), v, vec![]))
                    .collect()
            }
            Aggregate::Integral { .. } => unreachable!("checked per series"),
        }
    }

    /// InfluxDB's float integral reducer, point by point.
    pub fn integral(points: &[(i64, f64)], unit: i64, w: &Windowing) -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        let Some(&(t0, v0)) = points.first() else {
            return out;
        };
        let (mut prev_t, mut prev_v) = (t0, v0);
        let (mut start, mut end) = if w.interval.is_some() {
            w.window(t0)
        } else {
            (0, 0)
        };
        let mut sum = 0.0;
        for &(t, v) in &points[1..] {
            if t == prev_t {
                prev_v = v;
                continue;
            }
            if w.interval.is_some() && t >= end {
                if prev_t != end {
                    let at = (v - prev_v) / (t - prev_t) as f64 * (end - prev_t) as f64 + prev_v;
                    sum += 0.5 * (at + prev_v) * ((end - prev_t) as f64 / unit as f64);
                    prev_v = at;
                    prev_t = end;
                }
                out.push((start, sum));
                (start, end) = w.window(t);
                sum = 0.0;
            }
            sum += 0.5 * (v + prev_v) * ((t - prev_t) as f64 / unit as f64);
            prev_t = t;
            prev_v = v;
        }
        if prev_t != start {
            out.push((start, sum));
        }
        out
    }
}
