//! The plain single-place evaluation the `/query` answers are compared
//! with: every InfluxQL function over a list of points, written from
//! InfluxDB 1.8's documented behaviour (and its reducers' tie rules),
//! without the router's code. Values are fed in time order, as InfluxDB
//! feeds a series' points.
#![allow(dead_code)]

use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A field value (or an expected output cell).
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    I(i64),
    F(f64),
    S(String),
    B(bool),
}

impl V {
    pub fn f64(&self) -> f64 {
        match self {
            V::I(i) => *i as f64,
            V::F(f) => *f,
            _ => f64::NAN,
        }
    }

    fn order(&self, other: &V) -> Ordering {
        match (self, other) {
            (V::I(a), V::I(b)) => a.cmp(b),
            (V::F(a), V::F(b)) => a.total_cmp(b),
            (V::S(a), V::S(b)) => a.cmp(b),
            (V::B(a), V::B(b)) => a.cmp(b),
            _ => panic!("mixed types {self:?} {other:?}"),
        }
    }
}

/// One written point.
#[derive(Debug, Clone)]
pub struct Pt {
    pub measurement: String,
    pub tags: BTreeMap<String, String>,
    pub time: i64,
    pub fields: BTreeMap<&'static str, V>,
}

impl Pt {
    pub fn tag(&self, k: &str) -> &str {
        self.tags.get(k).map_or("", String::as_str)
    }
}

/// `(time, value)` of one field, in time order.
pub type Vals = Vec<(i64, V)>;

pub fn values(points: &[&Pt], field: &str) -> Vals {
    let mut out: Vals = points
        .iter()
        .filter_map(|p| p.fields.get(field).map(|v| (p.time, v.clone())))
        .collect();
    out.sort_by_key(|(t, _)| *t);
    out
}

// ---- aggregates --------------------------------------------------------

/// No value without points: a bucket where only other fields have points
/// shows null (0 comes from `fill(null)`, see `cases::aggregate`).
pub fn count(v: &Vals) -> Option<V> {
    (!v.is_empty()).then_some(V::I(v.len() as i64))
}

pub fn sum(v: &Vals) -> Option<V> {
    match v.first()?.1 {
        V::I(_) => Some(V::I(v.iter().map(|(_, x)| x.f64() as i64).sum())),
        _ => Some(V::F(v.iter().map(|(_, x)| x.f64()).sum())),
    }
}

pub fn mean(v: &Vals) -> Option<V> {
    (!v.is_empty()).then(|| V::F(v.iter().map(|(_, x)| x.f64()).sum::<f64>() / v.len() as f64))
}

fn sorted_by_value(v: &Vals) -> Vals {
    let mut s = v.clone();
    // Stable: equal values stay in feeding (time) order.
    s.sort_by(|a, b| a.1.order(&b.1));
    s
}

pub fn median(v: &Vals) -> Option<V> {
    let s = sorted_by_value(v);
    let n = s.len();
    if n == 0 {
        return None;
    }
    if n % 2 == 1 {
        return Some(V::F(s[n / 2].1.f64()));
    }
    let (lo, hi) = (&s[n / 2 - 1].1, &s[n / 2].1);
    Some(V::F(match (lo, hi) {
        (V::I(a), V::I(b)) => *a as f64 + (b - a) as f64 / 2.0,
        _ => lo.f64() + (hi.f64() - lo.f64()) / 2.0,
    }))
}

/// InfluxDB's `mode()`: a scan over the values in ascending order; a run
/// of a value takes over when it is longer than the held one, or as long
/// and it started no later than the held run's latest point; a value
/// seen once never takes over from the smallest. Booleans: true on a tie.
pub fn mode(v: &Vals) -> Option<V> {
    if v.is_empty() {
        return None;
    }
    if let V::B(_) = v[0].1 {
        let trues = v.iter().filter(|(_, x)| *x == V::B(true)).count();
        return Some(V::B(trues * 2 >= v.len()));
    }
    if v.len() == 1 {
        return Some(v[0].1.clone());
    }
    let s = sorted_by_value(v);
    let (mut best, mut best_n, mut best_t) = (s[0].1.clone(), 0usize, s[0].0);
    let (mut run, mut run_n, mut run_t) = (s[0].1.clone(), 0usize, s[0].0);
    for (t, x) in &s {
        if *x != run {
            (run, run_n, run_t) = (x.clone(), 1, *t);
            continue;
        }
        run_n += 1;
        if best_n > run_n || (best_n == run_n && run_t > best_t) {
            continue;
        }
        (best, best_n, best_t) = (x.clone(), run_n, *t);
    }
    Some(best)
}

pub fn spread(v: &Vals) -> Option<V> {
    let (lo, hi) = (min(v)?.1, max(v)?.1);
    Some(match (lo, hi) {
        (V::I(a), V::I(b)) => V::I(b - a),
        (a, b) => V::F(b.f64() - a.f64()),
    })
}

/// Sample standard deviation (two passes); null for one point.
pub fn stddev(v: &Vals) -> Option<V> {
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let m = v.iter().map(|(_, x)| x.f64()).sum::<f64>() / n;
    let ss: f64 = v.iter().map(|(_, x)| (x.f64() - m) * (x.f64() - m)).sum();
    Some(V::F((ss / (n - 1.0)).sqrt()))
}

/// Largest value, the earliest on a tie.
pub fn max(v: &Vals) -> Option<(i64, V)> {
    let mut best: Option<&(i64, V)> = None;
    for p in v {
        if best.is_none_or(|b| p.1.order(&b.1) == Ordering::Greater) {
            best = Some(p);
        }
    }
    best.cloned()
}

/// Smallest value, the earliest on a tie.
pub fn min(v: &Vals) -> Option<(i64, V)> {
    let mut best: Option<&(i64, V)> = None;
    for p in v {
        if best.is_none_or(|b| p.1.order(&b.1) == Ordering::Less) {
            best = Some(p);
        }
    }
    best.cloned()
}

pub fn first(v: &Vals) -> Option<(i64, V)> {
    v.first().cloned()
}

pub fn last(v: &Vals) -> Option<(i64, V)> {
    v.last().cloned()
}

/// Nearest rank: the value at rank ceil-ish `floor(n*p/100 + 0.5)`.
pub fn percentile(v: &Vals, p: f64) -> Option<(i64, V)> {
    let s = sorted_by_value(v);
    let rank = (s.len() as f64 * p / 100.0 + 0.5).floor() as i64;
    (rank >= 1 && rank as usize <= s.len()).then(|| s[rank as usize - 1].clone())
}

/// Distinct values in order of first occurrence (equal times by value).
pub fn distinct(v: &Vals) -> Vec<V> {
    let mut firsts: Vec<(i64, V)> = Vec::new();
    for (t, x) in v {
        if !firsts.iter().any(|(_, y)| y == x) {
            firsts.push((*t, x.clone()));
        }
    }
    firsts.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.order(&b.1)));
    firsts.into_iter().map(|(_, x)| x).collect()
}

/// `top` (`largest`) or `bottom`: the N best points (ties: the earlier),
/// returned in time order.
pub fn top(v: &Vals, n: usize, largest: bool) -> Vals {
    let mut ranked = v.clone();
    ranked.sort_by(|a, b| {
        let by_value = b.1.order(&a.1);
        (if largest {
            by_value
        } else {
            by_value.reverse()
        })
        .then(a.0.cmp(&b.0))
    });
    ranked.truncate(n);
    ranked.sort_by_key(|(t, _)| *t);
    ranked
}

/// `top(x, tag, N)`: the best point of each tag value, then the N best of
/// those, in time order, each with its tag value.
pub fn top_by_tag(v: &[(i64, V, String)], n: usize, largest: bool) -> Vec<(i64, V, String)> {
    let better = |a: &(i64, V, String), b: &(i64, V, String)| {
        let o = a.1.order(&b.1);
        let o = if largest { o } else { o.reverse() };
        o == Ordering::Greater || (o == Ordering::Equal && a.0 < b.0)
    };
    let mut per_tag: BTreeMap<&str, &(i64, V, String)> = BTreeMap::new();
    for p in v {
        let held = per_tag.entry(&p.2).or_insert(p);
        if better(p, held) {
            *held = p;
        }
    }
    let mut ranked: Vec<(i64, V, String)> = per_tag.values().map(|p| (*p).clone()).collect();
    ranked.sort_by(|a, b| {
        if better(a, b) {
            Ordering::Less
        } else if better(b, a) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    });
    ranked.truncate(n);
    ranked.sort_by_key(|p| p.0);
    ranked
}

/// `GROUP BY time(every, offset)` buckets.
#[derive(Debug, Clone, Copy)]
pub struct Win {
    pub every: i64,
    pub offset: i64,
}

impl Win {
    pub fn start(&self, t: i64) -> i64 {
        t - (t - self.offset).rem_euclid(self.every)
    }

    /// Every bucket start from the one holding `from` to the one holding
    /// `to - 1`.
    pub fn all(&self, from: i64, to: i64) -> Vec<i64> {
        let mut out = Vec::new();
        let mut b = self.start(from);
        while b < to {
            out.push(b);
            b += self.every;
        }
        out
    }
}

/// `integral(x, unit)`: trapezoids between consecutive points; with
/// buckets, the trapezoid across a bucket's end is cut at the end (value
/// interpolated) and the bucket reports at its start; a bucket whose last
/// point lies on its start reports nothing. Without buckets one value at
/// time 0.
pub fn integral(v: &Vals, unit: i64, win: Option<Win>) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    let Some((t0, x0)) = v.first() else {
        return out;
    };
    let (mut pt, mut pv) = (*t0, x0.f64());
    let mut bucket = win.map_or(0, |w| w.start(pt));
    let mut area = 0.0;
    for (t, x) in &v[1..] {
        let x = x.f64();
        if let Some(w) = win {
            let end = bucket + w.every;
            if *t >= end {
                if pt != end {
                    let at_end = pv + (x - pv) / (*t - pt) as f64 * (end - pt) as f64;
                    area += (at_end + pv) / 2.0 * ((end - pt) as f64 / unit as f64);
                    (pt, pv) = (end, at_end);
                }
                out.push((bucket, area));
                bucket = w.start(*t);
                area = 0.0;
            }
        }
        area += (x + pv) / 2.0 * ((*t - pt) as f64 / unit as f64);
        (pt, pv) = (*t, x);
    }
    if pt != bucket {
        out.push((bucket, area));
    }
    out
}

// ---- transformations ---------------------------------------------------

pub fn derivative(v: &Vals, unit: i64, non_negative: bool, ascending: bool) -> Vals {
    let mut out = Vec::new();
    for w in v.windows(2) {
        let ((t0, a), (t1, b)) = (&w[0], &w[1]);
        let diff = match (a, b) {
            (V::I(a), V::I(b)) => (b - a) as f64,
            _ => b.f64() - a.f64(),
        };
        let elapsed = if ascending { t1 - t0 } else { t0 - t1 };
        if !(non_negative && diff < 0.0) {
            out.push((*t1, V::F(diff / (elapsed as f64 / unit as f64))));
        }
    }
    out
}

pub fn difference(v: &Vals, non_negative: bool) -> Vals {
    let mut out = Vec::new();
    for w in v.windows(2) {
        let d = match (&w[0].1, &w[1].1) {
            (V::I(a), V::I(b)) => V::I(b - a),
            (a, b) => V::F(b.f64() - a.f64()),
        };
        if !(non_negative && d.f64() < 0.0) {
            out.push((w[1].0, d));
        }
    }
    out
}

/// InfluxDB keeps a running sum (add the newest, subtract the oldest), so
/// an average of values that cancel can be a few ulps off zero; the same
/// arithmetic here keeps the comparison tight.
pub fn moving_average(v: &Vals, n: usize) -> Vals {
    let mut out = Vec::new();
    let mut total = 0.0;
    for (k, (t, x)) in v.iter().enumerate() {
        if k >= n {
            total -= v[k - n].1.f64();
        }
        total += x.f64();
        if k + 1 >= n {
            out.push((*t, V::F(total / n as f64)));
        }
    }
    out
}

pub fn cumulative_sum(v: &Vals) -> Vals {
    let mut out: Vals = Vec::new();
    for (t, x) in v {
        let next = match (out.last().map(|p| &p.1), x) {
            (None, x) => x.clone(),
            (Some(V::I(a)), V::I(b)) => V::I(a + b),
            (Some(a), b) => V::F(a.f64() + b.f64()),
        };
        out.push((*t, next));
    }
    out
}

pub fn elapsed(v: &Vals, unit: i64) -> Vals {
    v.windows(2)
        .map(|w| (w[1].0, V::I((w[1].0 - w[0].0) / unit)))
        .collect()
}

// ---- fill ----------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
pub enum Fill {
    Null,
    None,
    Previous,
    Linear,
    Number(f64),
}

/// One column of one series over `buckets` (every bucket of the range, in
/// ascending order): the aggregated values where there are any, filled
/// elsewhere. `None` cells are nulls; `fill(none)` keeps only real values.
pub fn fill(buckets: &[i64], real: &BTreeMap<i64, V>, mode: Fill) -> Vec<(i64, Option<V>)> {
    let mut out = Vec::new();
    for (i, b) in buckets.iter().enumerate() {
        if let Some(v) = real.get(b) {
            out.push((*b, Some(v.clone())));
            continue;
        }
        let before = real.range(..*b).next_back();
        let after = real.range(*b..).next();
        let cell = match mode {
            Fill::None => continue,
            Fill::Null => None,
            Fill::Number(n) => Some(match real.values().next() {
                Some(V::I(_)) => V::I(n as i64),
                _ => V::F(n),
            }),
            Fill::Previous => before.map(|(_, v)| v.clone()),
            Fill::Linear => match (before, after) {
                (Some((t0, v0)), Some((t1, v1))) => {
                    let every = buckets.get(1).map_or(1, |b1| b1 - buckets[0]);
                    let (x, x0, x1) = (b / every, t0 / every, t1 / every);
                    Some(match (v0, v1) {
                        (V::I(a), V::I(c)) => V::I(
                            ((c - a) as f64 / (x1 - x0) as f64 * (x - x0) as f64 + *a as f64)
                                as i64,
                        ),
                        (a, c) => {
                            V::F((c.f64() - a.f64()) / (x1 - x0) as f64 * (x - x0) as f64 + a.f64())
                        }
                    })
                }
                _ => None,
            },
        };
        let _ = i;
        out.push((*b, cell));
    }
    out
}
