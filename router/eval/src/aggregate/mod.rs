//! Aggregates and selectors as per-shard partial states with exact merges.
//!
//! A shard turns the points of one group and time bucket into a
//! [`Partial`] ([`Partial::from_points`]); the router folds the partials of
//! every shard for that group and bucket with [`Partial::merge`] and turns
//! the result into output values with [`Partial::finish`]. For every
//! aggregate, merging the partials of any split of the points gives exactly
//! what one partial over all points gives (the oracle test checks this).
//!
//! | aggregate | partial | why it is exact |
//! |---|---|---|
//! | `count` | count | integer addition |
//! | `sum`, `mean` | float: [`ExactSum`] (+ count); integer: wrapping `i64`/`u64` sum | exact expansion; modular addition is associative (InfluxDB's int sums wrap too) |
//! | `min`, `max`, `first`, `last` | the best point so far | InfluxDB's tie rules form a total order on (time, value) |
//! | `spread` | min and max | |
//! | `stddev` | `n`, exact `Σx`, exact `Σx²` ([`Moments`]) | see [`crate::exact`] |
//! | `median`, `percentile`, `integral` | the points | nothing smaller is exact |
//! | `percentile` (pushed down) | per part, a sorted slice around its rank ([`RankWindow`]) | exact when the slices decide the rank, else the points are read ([`rank`]) |
//! | `mode` | value → (count, first time, last time) | counts add; times take min/max |
//! | `distinct`, `count(distinct)` | value → (first time, last time) | set union |
//! | `top`, `bottom` | the N best points (with tag arguments: the best point per tag combination) | the N best of a union are among the N best of each part |

mod call;
mod finish;
pub mod heads;
pub mod rank;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::exact::{ExactSum, Moments};
use crate::value::{Point, Value, ValueKey};

pub use call::Aggregate;
pub use finish::BucketOutput;
pub use rank::RankWindow;

/// Which point wins a comparison, with InfluxDB 1.8's tie rules:
/// `min`/`max` prefer the earlier point on equal values; `first`/`last`
/// prefer the larger value on equal times (for booleans `first` prefers
/// `false`, `last` prefers `true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rule {
    Min,
    Max,
    First,
    Last,
}

impl Rule {
    /// Whether `candidate` replaces `held`.
    pub fn prefers(self, candidate: &Point, held: &Point) -> bool {
        use std::cmp::Ordering::*;
        let by_value = candidate.value.partial_cmp_same_type(&held.value);
        let earlier = candidate.time < held.time;
        match self {
            Rule::Min => by_value == Some(Less) || (by_value == Some(Equal) && earlier),
            Rule::Max => by_value == Some(Greater) || (by_value == Some(Equal) && earlier),
            Rule::First => {
                let tie_wins = match candidate.value {
                    Value::Bool(_) => by_value == Some(Less),
                    _ => by_value == Some(Greater),
                };
                earlier || (candidate.time == held.time && tie_wins)
            }
            Rule::Last => {
                candidate.time > held.time
                    || (candidate.time == held.time && by_value == Some(Greater))
            }
        }
    }
}

/// A sum in the input's type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Sum {
    Empty,
    Float(ExactSum),
    /// Wraps on overflow, as InfluxDB's `int64` sum does.
    Int(i64),
    UInt(u64),
}

impl Sum {
    fn add(&mut self, function: &'static str, value: &Value) -> Result<()> {
        match (&mut *self, value) {
            (Sum::Empty, Value::Float(v)) => {
                let mut s = ExactSum::new();
                s.add(*v);
                *self = Sum::Float(s);
            }
            (Sum::Empty, Value::Int(v)) => *self = Sum::Int(*v),
            (Sum::Empty, Value::UInt(v)) => *self = Sum::UInt(*v),
            (Sum::Float(s), Value::Float(v)) => s.add(*v),
            (Sum::Int(s), Value::Int(v)) => *s = s.wrapping_add(*v),
            (Sum::UInt(s), Value::UInt(v)) => *s = s.wrapping_add(*v),
            (held, value) => return Err(conflict(function, held.type_name(), value)),
        }
        Ok(())
    }

    fn merge(&mut self, function: &'static str, other: &Sum) -> Result<()> {
        match (&mut *self, other) {
            (_, Sum::Empty) => {}
            (Sum::Empty, other) => *self = other.clone(),
            (Sum::Float(a), Sum::Float(b)) => a.merge(b),
            (Sum::Int(a), Sum::Int(b)) => *a = a.wrapping_add(*b),
            (Sum::UInt(a), Sum::UInt(b)) => *a = a.wrapping_add(*b),
            (a, b) => {
                return Err(Error::TypeConflict {
                    function,
                    first: a.type_name(),
                    second: b.type_name(),
                })
            }
        }
        Ok(())
    }

    fn type_name(&self) -> &'static str {
        match self {
            Sum::Empty => "null",
            Sum::Float(_) => "float",
            Sum::Int(_) => "integer",
            Sum::UInt(_) => "unsigned",
        }
    }
}

/// How often a value occurred in a bucket and when it was first and last
/// seen: enough to replay InfluxDB's `mode()` scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occurrences {
    pub count: u64,
    pub first: i64,
    pub last: i64,
}

/// When a distinct value was first and last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub first: i64,
    pub last: i64,
}

/// What a shard computes for one aggregate, group and time bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Partial {
    Count(u64),
    Sum(Sum),
    Mean {
        sum: Sum,
        count: u64,
    },
    /// `median`, `percentile`, `integral`: the points themselves.
    Points(Vec<Point>),
    /// `percentile` as shards compute it: per part of the group, a sorted
    /// slice around the rank ([`rank`]).
    Windows(Vec<RankWindow>),
    Mode(BTreeMap<ValueKey, Occurrences>),
    /// `distinct` and `count(distinct)`.
    Distinct(BTreeMap<ValueKey, Seen>),
    /// `min`, `max`, `first`, `last`.
    Selected(Rule, Option<Point>),
    /// `spread`: the smallest and largest value.
    Spread(Option<(Value, Value)>),
    Stddev(Moments),
    /// `top`/`bottom` without tag arguments: the `n` best points, best
    /// first (`Rule::Max` for `top`, `Rule::Min` for `bottom`).
    Ranked {
        rule: Rule,
        n: usize,
        best: Vec<Point>,
    },
    /// `top`/`bottom` with tag arguments: the best point per combination
    /// of those tags' values.
    RankedByTags {
        rule: Rule,
        best: BTreeMap<Vec<String>, Point>,
    },
}

impl Partial {
    /// The partial of `points` (one group, one bucket).
    pub fn from_points(agg: &Aggregate, points: &[Point]) -> Result<Partial> {
        let mut partial = agg.empty_partial();
        for point in points {
            partial.add(agg, point, &[])?;
        }
        Ok(partial)
    }

    /// Adds one point. `tag_values` are the values of a `top`/`bottom`
    /// call's tag arguments for this point's series (empty otherwise).
    pub fn add(&mut self, agg: &Aggregate, point: &Point, tag_values: &[String]) -> Result<()> {
        let function = agg.name();
        if !agg.accepts(&point.value) {
            return Err(Error::UnsupportedType {
                function,
                value_type: point.value.type_name(),
            });
        }
        let key = || ValueKey::from_value(&point.value).expect("accepted values have keys");
        match self {
            Partial::Count(n) => *n += 1,
            Partial::Sum(sum) => sum.add(function, &point.value)?,
            Partial::Mean { sum, count } => {
                sum.add(function, &point.value)?;
                *count += 1;
            }
            Partial::Points(points) => {
                same_type(function, points.first().map(|p| &p.value), &point.value)?;
                points.push(point.clone());
            }
            Partial::Windows(_) => {
                return Err(Error::PartialMismatch {
                    left: "rank windows",
                    right: "point",
                })
            }
            Partial::Mode(map) => {
                same_type_key(function, map.keys().next(), &point.value)?;
                map.entry(key())
                    .and_modify(|o| {
                        o.count += 1;
                        o.first = o.first.min(point.time);
                        o.last = o.last.max(point.time);
                    })
                    .or_insert(Occurrences {
                        count: 1,
                        first: point.time,
                        last: point.time,
                    });
            }
            Partial::Distinct(map) => {
                same_type_key(function, map.keys().next(), &point.value)?;
                map.entry(key())
                    .and_modify(|s| {
                        s.first = s.first.min(point.time);
                        s.last = s.last.max(point.time);
                    })
                    .or_insert(Seen {
                        first: point.time,
                        last: point.time,
                    });
            }
            Partial::Selected(rule, held) => {
                same_type(function, held.as_ref().map(|p| &p.value), &point.value)?;
                if held.as_ref().is_none_or(|h| rule.prefers(point, h)) {
                    *held = Some(point.clone());
                }
            }
            Partial::Spread(range) => {
                same_type(function, range.as_ref().map(|r| &r.0), &point.value)?;
                let v = &point.value;
                match range {
                    None => *range = Some((v.clone(), v.clone())),
                    Some((lo, hi)) => {
                        if is_less(v, lo) {
                            *lo = v.clone();
                        }
                        if is_less(hi, v) {
                            *hi = v.clone();
                        }
                    }
                }
            }
            Partial::Stddev(m) => {
                m.push(point.value.as_f64().expect("accepted values are numeric"))
            }
            Partial::Ranked { rule, n, best } => {
                same_type(function, best.first().map(|p| &p.value), &point.value)?;
                insert_ranked(*rule, *n, best, point.clone());
            }
            Partial::RankedByTags { rule, best } => {
                same_type(
                    function,
                    best.values().next().map(|p| &p.value),
                    &point.value,
                )?;
                offer(*rule, best, tag_values.to_vec(), point.clone());
            }
        }
        Ok(())
    }

    /// Folds `other` (the same aggregate's partial for the same group and
    /// bucket, from another shard) into `self`. Order does not matter.
    pub fn merge(&mut self, agg: &Aggregate, other: Partial) -> Result<()> {
        let function = agg.name();
        match (&mut *self, other) {
            (Partial::Count(a), Partial::Count(b)) => *a += b,
            (Partial::Sum(a), Partial::Sum(b)) => a.merge(function, &b)?,
            (Partial::Mean { sum, count }, Partial::Mean { sum: s, count: c }) => {
                sum.merge(function, &s)?;
                *count += c;
            }
            (Partial::Points(a), Partial::Points(b)) => {
                if let Some(p) = b.first() {
                    same_type(function, a.first().map(|p| &p.value), &p.value)?;
                }
                a.extend(b);
            }
            (Partial::Windows(a), Partial::Windows(b)) => rank::merge(function, a, b)?,
            (Partial::Points(a), b @ Partial::Windows(_)) if a.is_empty() => *self = b, // empty
            (Partial::Mode(a), Partial::Mode(b)) => {
                if let Some((k, _)) = b.iter().next() {
                    same_type_key(function, a.keys().next(), &k.to_value())?;
                }
                for (k, o) in b {
                    a.entry(k)
                        .and_modify(|held| {
                            held.count += o.count;
                            held.first = held.first.min(o.first);
                            held.last = held.last.max(o.last);
                        })
                        .or_insert(o);
                }
            }
            (Partial::Distinct(a), Partial::Distinct(b)) => {
                if let Some((k, _)) = b.iter().next() {
                    same_type_key(function, a.keys().next(), &k.to_value())?;
                }
                for (k, s) in b {
                    a.entry(k)
                        .and_modify(|held| {
                            held.first = held.first.min(s.first);
                            held.last = held.last.max(s.last);
                        })
                        .or_insert(s);
                }
            }
            (Partial::Selected(rule, held), Partial::Selected(r, b)) if *rule == r => {
                if let Some(b) = b {
                    same_type(function, held.as_ref().map(|p| &p.value), &b.value)?;
                    if held.as_ref().is_none_or(|h| rule.prefers(&b, h)) {
                        *held = Some(b);
                    }
                }
            }
            (Partial::Spread(a), Partial::Spread(b)) => match (a, b) {
                (_, None) => {}
                (a @ None, b) => *a = b,
                (Some((lo, hi)), Some((b_lo, b_hi))) => {
                    same_type(function, Some(lo), &b_lo)?;
                    if is_less(&b_lo, lo) {
                        *lo = b_lo;
                    }
                    if is_less(hi, &b_hi) {
                        *hi = b_hi;
                    }
                }
            },
            (Partial::Stddev(a), Partial::Stddev(b)) => a.merge(&b),
            (
                Partial::Ranked { rule, n, best },
                Partial::Ranked {
                    rule: r, best: b, ..
                },
            ) if *rule == r => {
                if let Some(p) = b.first() {
                    same_type(function, best.first().map(|p| &p.value), &p.value)?;
                }
                for point in b {
                    insert_ranked(*rule, *n, best, point);
                }
            }
            (Partial::RankedByTags { rule, best }, Partial::RankedByTags { rule: r, best: b })
                if *rule == r =>
            {
                for (tags, point) in b {
                    same_type(
                        function,
                        best.values().next().map(|p| &p.value),
                        &point.value,
                    )?;
                    offer(*rule, best, tags, point);
                }
            }
            (a, b) => {
                return Err(Error::PartialMismatch {
                    left: a.kind(),
                    right: b.kind(),
                })
            }
        }
        Ok(())
    }

    /// Whether no point was added.
    pub fn is_empty(&self) -> bool {
        match self {
            Partial::Count(n) => *n == 0,
            Partial::Sum(s) => matches!(s, Sum::Empty),
            Partial::Mean { count, .. } => *count == 0,
            Partial::Points(p) => p.is_empty(),
            Partial::Windows(w) => w.iter().all(|w| w.total == 0),
            Partial::Mode(m) => m.is_empty(),
            Partial::Distinct(m) => m.is_empty(),
            Partial::Selected(_, p) => p.is_none(),
            Partial::Spread(r) => r.is_none(),
            Partial::Stddev(m) => m.n == 0,
            Partial::Ranked { best, .. } => best.is_empty(),
            Partial::RankedByTags { best, .. } => best.is_empty(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Partial::Count(_) => "count",
            Partial::Sum(_) => "sum",
            Partial::Mean { .. } => "mean",
            Partial::Points(_) => "points",
            Partial::Windows(_) => "rank windows",
            Partial::Mode(_) => "mode",
            Partial::Distinct(_) => "distinct",
            Partial::Selected(..) => "selector",
            Partial::Spread(_) => "spread",
            Partial::Stddev(_) => "stddev",
            Partial::Ranked { .. } | Partial::RankedByTags { .. } => "top/bottom",
        }
    }
}

fn conflict(function: &'static str, held: &'static str, value: &Value) -> Error {
    Error::TypeConflict {
        function,
        first: held,
        second: value.type_name(),
    }
}

pub(crate) fn same_type(function: &'static str, held: Option<&Value>, value: &Value) -> Result<()> {
    match held {
        Some(h) if std::mem::discriminant(h) != std::mem::discriminant(value) => {
            Err(conflict(function, h.type_name(), value))
        }
        _ => Ok(()),
    }
}

fn same_type_key(function: &'static str, held: Option<&ValueKey>, value: &Value) -> Result<()> {
    same_type(function, held.map(ValueKey::to_value).as_ref(), value)
}

fn is_less(a: &Value, b: &Value) -> bool {
    a.partial_cmp_same_type(b) == Some(std::cmp::Ordering::Less)
}

/// Keeps `best` as the `n` best points, best first.
fn insert_ranked(rule: Rule, n: usize, best: &mut Vec<Point>, point: Point) {
    let at = best
        .iter()
        .position(|held| rule.prefers(&point, held))
        .unwrap_or(best.len());
    if at < n {
        best.insert(at, point);
        best.truncate(n);
    }
}

fn offer(rule: Rule, best: &mut BTreeMap<Vec<String>, Point>, tags: Vec<String>, point: Point) {
    match best.get(&tags) {
        Some(held) if !rule.prefers(&point, held) => {}
        _ => {
            best.insert(tags, point);
        }
    }
}
