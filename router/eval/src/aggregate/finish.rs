//! Turning a merged partial into output values, the way InfluxDB 1.8's
//! reducers compute them.

use std::cmp::Ordering;

use super::{rank, Aggregate, Occurrences, Partial, Sum};
use crate::error::{Error, Result};
use crate::value::{Point, Value, ValueKey};

/// One output value of one bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketOutput {
    /// The selected point's own time (selectors); `None` when the value
    /// belongs to the bucket as a whole.
    pub time: Option<i64>,
    pub value: Value,
    /// Extra columns: the tag values of `top(x, tag, N)` / `bottom(...)`.
    pub aux: Vec<Value>,
}

impl BucketOutput {
    fn of(value: Value) -> Self {
        BucketOutput {
            time: None,
            value,
            aux: Vec::new(),
        }
    }

    /// A selected point, with the row's other columns it carries.
    fn at(point: &Point) -> Self {
        BucketOutput {
            time: Some(point.time),
            value: point.value.clone(),
            aux: point.aux.clone(),
        }
    }
}

impl Partial {
    /// The bucket's output values. Most aggregates give one value, none for
    /// an empty partial (or a percentile beyond the points); `distinct`,
    /// `top` and `bottom` give several. `ascending` is the query's time
    /// order, which InfluxDB feeds points in (it decides `mode` ties and the
    /// order of `distinct` values). `integral` spans buckets: evaluate it
    /// with [`crate::evaluate`].
    pub fn finish(&self, agg: &Aggregate, ascending: bool) -> Result<Vec<BucketOutput>> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let one = |value| Ok(vec![BucketOutput::of(value)]);
        match (self, agg) {
            (Partial::Count(n), _) => one(Value::Int(*n as i64)),
            (Partial::Distinct(map), Aggregate::CountDistinct) => one(Value::Int(map.len() as i64)),
            (Partial::Distinct(map), _) => {
                let mut seen: Vec<_> = map.iter().collect();
                if ascending {
                    seen.sort_by(|a, b| a.1.first.cmp(&b.1.first).then(a.0.cmp(b.0)));
                } else {
                    seen.sort_by(|a, b| b.1.last.cmp(&a.1.last).then(a.0.cmp(b.0)));
                }
                Ok(seen
                    .into_iter()
                    .map(|(k, _)| BucketOutput::of(k.to_value()))
                    .collect())
            }
            (Partial::Sum(sum), _) => one(match sum {
                Sum::Float(s) => Value::Float(s.value()),
                Sum::Int(s) => Value::Int(*s),
                Sum::UInt(s) => Value::UInt(*s),
                Sum::Empty => unreachable!("checked by is_empty"),
            }),
            (Partial::Mean { sum, count }, _) => {
                let total = match sum {
                    Sum::Float(s) => s.value(),
                    Sum::Int(s) => *s as f64,
                    Sum::UInt(s) => *s as f64,
                    Sum::Empty => unreachable!("checked by is_empty"),
                };
                one(Value::Float(total / *count as f64))
            }
            (Partial::Points(points), Aggregate::Median) => one(median(points)),
            (Partial::Points(points), Aggregate::Percentile(p)) => Ok(percentile(points, *p)
                .map(BucketOutput::at)
                .into_iter()
                .collect()),
            (Partial::Windows(windows), Aggregate::Percentile(p)) => {
                match rank::select(windows, *p) {
                    Ok(point) => Ok(point.map(BucketOutput::at).into_iter().collect()),
                    Err(rank::Undecided) => Err(Error::RankUndecided),
                }
            }
            (Partial::Points(points), Aggregate::Sample(n)) => {
                Ok(sample(points, *n).map(BucketOutput::at).collect())
            }
            (Partial::Points(_), Aggregate::Integral { .. }) => Err(Error::InvalidArgument {
                function: "integral".into(),
                message: "integral spans buckets; evaluate it per series".into(),
            }),
            (Partial::Mode(map), _) => one(mode(map, ascending)),
            (Partial::Selected(_, Some(point)), _) => Ok(vec![BucketOutput::at(point)]),
            (Partial::Spread(Some((lo, hi))), _) => one(match (lo, hi) {
                (Value::Float(lo), Value::Float(hi)) => Value::Float(hi - lo),
                (Value::Int(lo), Value::Int(hi)) => Value::Int(hi.wrapping_sub(*lo)),
                (Value::UInt(lo), Value::UInt(hi)) => Value::UInt(hi.wrapping_sub(*lo)),
                (other, _) => {
                    return Err(Error::UnsupportedType {
                        function: "spread",
                        value_type: other.type_name(),
                    })
                }
            }),
            (Partial::Stddev(m), _) => one(Value::Float(m.sample_stddev())),
            (Partial::Ranked { best, .. }, _) => Ok(best.iter().map(BucketOutput::at).collect()),
            (Partial::RankedByTags { rule, best }, Aggregate::Top { n, .. })
            | (Partial::RankedByTags { rule, best }, Aggregate::Bottom { n, .. }) => {
                let mut ranked: Vec<(&Vec<String>, &Point)> = Vec::new();
                for (tags, point) in best {
                    let at = ranked
                        .iter()
                        .position(|(_, held)| rule.prefers(point, held))
                        .unwrap_or(ranked.len());
                    ranked.insert(at, (tags, point));
                }
                ranked.truncate(*n);
                Ok(ranked
                    .into_iter()
                    .map(|(tags, point)| BucketOutput {
                        // The tag arguments' columns, then the row's.
                        aux: tags
                            .iter()
                            .map(|t| Value::String(t.clone()))
                            .chain(point.aux.iter().cloned())
                            .collect(),
                        ..BucketOutput::at(point)
                    })
                    .collect())
            }
            (partial, agg) => Err(Error::PartialMismatch {
                left: partial.kind(),
                right: agg.name(),
            }),
        }
    }
}

/// `n` of the points, in time order. With more than `n`, which ones is
/// random in InfluxDB; here a fixed pseudo-random pick (a hash of each
/// point's time), so the same data gives the same answer on every replica
/// and every run.
fn sample(points: &[Point], n: usize) -> impl Iterator<Item = &Point> {
    // Time, then value: the order must not depend on which shard's
    // points were merged first.
    let order = |a: &&Point, b: &&Point| a.time.cmp(&b.time).then(by_value(&a.value, &b.value));
    let mut picked: Vec<&Point> = points.iter().collect();
    if picked.len() > n {
        let rank = |p: &Point| {
            (p.time as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(17)
        };
        picked.sort_by(|a, b| rank(a).cmp(&rank(b)).then(order(a, b)));
        picked.truncate(n);
    }
    picked.sort_by(order);
    picked.into_iter()
}

pub(super) fn by_value(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Float(a), Value::Float(b)) => a.total_cmp(b),
        _ => a.partial_cmp_same_type(b).unwrap_or(Ordering::Equal),
    }
}

/// The middle value, or for an even count `lo + (hi - lo) / 2` computed as
/// InfluxDB does (integers subtract before converting to float).
fn median(points: &[Point]) -> Value {
    let mut values: Vec<&Value> = points.iter().map(|p| &p.value).collect();
    values.sort_by(|a, b| by_value(a, b));
    let n = values.len();
    if n % 2 == 1 {
        return Value::Float(values[n / 2].as_f64().unwrap_or(f64::NAN));
    }
    Value::Float(match (values[n / 2 - 1], values[n / 2]) {
        (Value::Float(lo), Value::Float(hi)) => lo + (hi - lo) / 2.0,
        (Value::Int(lo), Value::Int(hi)) => *lo as f64 + hi.wrapping_sub(*lo) as f64 / 2.0,
        (Value::UInt(lo), Value::UInt(hi)) => *lo as f64 + hi.wrapping_sub(*lo) as f64 / 2.0,
        _ => f64::NAN,
    })
}

/// Nearest rank, as InfluxDB: index `floor(n·p/100 + 0.5) − 1` of the
/// points sorted by value (equal values by time); none outside `[0, n)`.
fn percentile(points: &[Point], p: f64) -> Option<&Point> {
    let k = rank::nearest_rank(points.len() as u64, p)?;
    let mut sorted: Vec<&Point> = points.iter().collect();
    sorted.sort_by(|a, b| rank::rank_order(a, b));
    Some(sorted[(k - 1) as usize])
}

/// InfluxDB 1.8's `mode()` scan over the values in ascending order, with
/// points of one value in the order they were fed (time order): the first
/// value starts as the mode; a later value replaces it when it occurs more
/// often, or equally often (at least twice) and its first occurrence is not
/// after the held mode's last one. So values that all occur once give the
/// smallest. Booleans: `true` unless `false` occurs more often.
fn mode(map: &std::collections::BTreeMap<ValueKey, Occurrences>, ascending: bool) -> Value {
    if let Some(ValueKey::Bool(_)) = map.keys().next() {
        let count = |b| map.get(&ValueKey::Bool(b)).map_or(0, |o| o.count);
        return Value::Bool(count(true) >= count(false));
    }
    // In feeding order a value's first point is its earliest when ascending
    // and its latest when descending.
    let seen_first = |o: &Occurrences| if ascending { o.first } else { o.last };
    let seen_last = |o: &Occurrences| if ascending { o.last } else { o.first };
    let mut entries = map.iter();
    let (first_key, first) = entries.next().expect("mode of an empty partial");
    let (mut mode, mut most, mut most_time) = (first_key, first.count, seen_last(first));
    for (key, o) in entries {
        if o.count < 2 {
            continue;
        }
        if o.count > most || (o.count == most && seen_first(o) <= most_time) {
            mode = key;
            most = o.count;
            most_time = seen_last(o);
        }
    }
    mode.to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(values: &[(i64, f64)]) -> Vec<Point> {
        values
            .iter()
            .map(|&(t, v)| Point::new(t, Value::Float(v)))
            .collect()
    }

    fn finish(agg: &Aggregate, pts: &[Point], ascending: bool) -> Vec<BucketOutput> {
        Partial::from_points(agg, pts)
            .unwrap()
            .finish(agg, ascending)
            .unwrap()
    }

    #[test]
    fn mode_ties() {
        // All distinct: the smallest value.
        let out = finish(&Aggregate::Mode, &points(&[(0, 5.0), (1, 3.0)]), true);
        assert_eq!(out[0].value, Value::Float(3.0));
        // 2,2,1,1 in time order: 2 occurs first (before 1's last) and wins.
        let pts = points(&[(0, 2.0), (1, 2.0), (2, 1.0), (3, 1.0)]);
        assert_eq!(
            finish(&Aggregate::Mode, &pts, true)[0].value,
            Value::Float(2.0)
        );
        // 1,1,2,2: 2's first occurrence is after 1's last: 1 stays.
        let pts = points(&[(0, 1.0), (1, 1.0), (2, 2.0), (3, 2.0)]);
        assert_eq!(
            finish(&Aggregate::Mode, &pts, true)[0].value,
            Value::Float(1.0)
        );
        // More occurrences win regardless of time.
        let pts = points(&[(0, 1.0), (1, 9.0), (2, 9.0)]);
        assert_eq!(
            finish(&Aggregate::Mode, &pts, true)[0].value,
            Value::Float(9.0)
        );
        let bools: Vec<Point> = [(0, true), (1, false)]
            .iter()
            .map(|&(t, b)| Point::new(t, Value::Bool(b)))
            .collect();
        assert_eq!(
            finish(&Aggregate::Mode, &bools, true)[0].value,
            Value::Bool(true)
        );
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let pts = points(&[(0, 10.0), (1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0), (5, 5.0)]);
        let p = |n: f64| finish(&Aggregate::Percentile(n), &pts, true);
        assert_eq!(p(90.0)[0].value, Value::Float(9.0));
        assert_eq!(p(90.0)[0].time, Some(1));
        assert_eq!(p(50.0)[0].value, Value::Float(7.0));
        assert_eq!(p(100.0)[0].value, Value::Float(10.0));
        assert!(p(0.0).is_empty());
        assert!(p(5.0).is_empty());
    }

    #[test]
    fn median_of_even_count_is_lo_plus_half_the_gap() {
        let pts = points(&[(0, 1.0), (1, 4.0), (2, 2.0), (3, 3.0)]);
        assert_eq!(
            finish(&Aggregate::Median, &pts, true)[0].value,
            Value::Float(2.5)
        );
        let ints: Vec<Point> = [i64::MAX, i64::MAX - 2]
            .iter()
            .map(|&v| Point::new(0, Value::Int(v)))
            .collect();
        let out = finish(&Aggregate::Median, &ints, true);
        assert_eq!(out[0].value, Value::Float(i64::MAX as f64));
    }

    #[test]
    fn distinct_orders_by_first_occurrence() {
        let pts = points(&[(0, 20.0), (1, 19.0), (9, 19.0), (9, 2.0), (5, 30.0)]);
        let values: Vec<Value> = finish(&Aggregate::Distinct, &pts, true)
            .into_iter()
            .map(|o| o.value)
            .collect();
        let f = Value::Float;
        assert_eq!(values, [f(20.0), f(19.0), f(30.0), f(2.0)]);
        let values: Vec<Value> = finish(&Aggregate::Distinct, &pts, false)
            .into_iter()
            .map(|o| o.value)
            .collect();
        assert_eq!(values, [f(2.0), f(19.0), f(30.0), f(20.0)]);
    }
}
