//! `first()` and `last()` without `GROUP BY time()` as InfluxDB 1.8
//! answers them when several series of a group share the earliest (latest)
//! time: not by the tie rule of [`Rule`], but by its storage engine's plan.
//!
//! For such a call the engine of every shard group reads each series'
//! points in time order (`last`: reverse time, series in reverse key
//! order), merges them through Go's `container/heap` by time, and a limit
//! iterator meant to pass one point lets two through (`n - offset >
//! limit` stops only at the third). Those two are then reduced by the tie
//! rule. Which two depends on the heap's layout, so this module replays
//! the heap over the series that have points in the shard group holding
//! the group's extreme point, in key order, each with its first point.
//! The series' later points do not matter: the one the first pop pushes
//! back is later than the tied points, so it never becomes the root the
//! second pop takes.

use std::cmp::Ordering;

use super::Rule;
use crate::value::{Point, Value};

/// One series' head within the range: its first point in the call's
/// order (the earliest for `first`, the latest for `last`).
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// The series' position in series key order.
    pub rank: u64,
    pub point: Point,
}

/// The nanosecond at which InfluxDB's shard group of `t` starts, for a
/// shard group duration of `duration` ns: Go's `Time.Truncate`, which
/// counts from 1 January of year 1, so week-long groups start on Mondays.
pub fn shard_group_start(t: i64, duration: i64) -> i128 {
    const YEAR_ONE_NS: i128 = -62_135_596_800 * 1_000_000_000;
    let d = i128::from(duration.max(1));
    let since = i128::from(t) - YEAR_ONE_NS;
    YEAR_ONE_NS + since.div_euclid(d) * d
}

/// The point InfluxDB 1.8 answers for `first()` (`rule` First) or
/// `last()` (Last) over one group's series `heads`, shard groups of
/// `shard_duration` ns; `None` without heads. `aux_order`: the points'
/// extra columns in the order InfluxDB compares them (sorted by name),
/// as indices into [`Point::aux`].
pub fn selected(
    rule: Rule,
    heads: Vec<Head>,
    shard_duration: i64,
    aux_order: &[usize],
) -> Option<Point> {
    let descending = match rule {
        Rule::First => false,
        Rule::Last => true,
        // Only the selectors that read in time order take this plan.
        Rule::Min | Rule::Max => return best_of(rule, heads.into_iter().map(|h| h.point)),
    };
    let extreme =
        heads
            .iter()
            .map(|h| h.point.time)
            .reduce(|a, b| if descending { a.max(b) } else { a.min(b) })?;
    if heads.iter().filter(|h| h.point.time == extreme).count() < 2 {
        // One series holds the extreme: the heap pops it first.
        return best_of(rule, heads.into_iter().map(|h| h.point));
    }
    let group = shard_group_start(extreme, shard_duration);
    let same_group = |p: &Point| shard_group_start(p.time, shard_duration) == group;
    let mut items: Vec<Head> = heads.into_iter().filter(|h| same_group(&h.point)).collect();
    items.sort_by_key(|h| h.rank);
    if descending {
        items.reverse();
    }
    let mut heap = Heap {
        items: items.into_iter().map(|h| h.point).collect(),
        descending,
        aux_order,
    };
    heap.init();
    let first = heap.pop()?;
    let second = heap.pop();
    best_of(rule, std::iter::once(first).chain(second))
}

/// The point `rule` keeps of `points`, fed in order as InfluxDB's reduce
/// is.
fn best_of(rule: Rule, points: impl Iterator<Item = Point>) -> Option<Point> {
    points.reduce(|held, p| if rule.prefers(&p, &held) { p } else { held })
}

/// Go's `container/heap` over the sorted merge iterator's items, with its
/// `Less`: by time (reversed when descending), then by the extra columns
/// when all are strings; otherwise equal.
struct Heap<'o> {
    items: Vec<Point>,
    descending: bool,
    aux_order: &'o [usize],
}

impl Heap<'_> {
    fn less(&self, i: usize, j: usize) -> bool {
        let (x, y) = (&self.items[i], &self.items[j]);
        let want = if self.descending {
            Ordering::Greater
        } else {
            Ordering::Less
        };
        if x.time != y.time {
            return x.time.cmp(&y.time) == want;
        }
        if !x.aux.is_empty() && x.aux.len() == y.aux.len() {
            for &k in self.aux_order {
                let (Some(Value::String(a)), Some(Value::String(b))) = (x.aux.get(k), y.aux.get(k))
                else {
                    return false;
                };
                if a != b {
                    return a.cmp(b) == want;
                }
            }
        }
        false
    }

    fn init(&mut self) {
        let n = self.items.len();
        for i in (0..n / 2).rev() {
            self.down(i, n);
        }
    }

    fn down(&mut self, mut i: usize, n: usize) {
        loop {
            let j1 = 2 * i + 1;
            if j1 >= n {
                break;
            }
            let mut j = j1;
            if j1 + 1 < n && self.less(j1 + 1, j1) {
                j = j1 + 1;
            }
            if !self.less(j, i) {
                break;
            }
            self.items.swap(i, j);
            i = j;
        }
    }

    fn pop(&mut self) -> Option<Point> {
        let n = self.items.len().checked_sub(1)?;
        self.items.swap(0, n);
        self.down(0, n);
        self.items.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEEK: i64 = 7 * 24 * 3_600_000_000_000;

    fn head(rank: u64, time: i64, value: f64) -> Head {
        Head {
            rank,
            point: Point::new(time, Value::Float(value)),
        }
    }

    fn value(rule: Rule, heads: Vec<Head>) -> f64 {
        match selected(rule, heads, WEEK, &[0]).unwrap().value {
            Value::Float(v) => v,
            other => panic!("not a float: {other:?}"),
        }
    }

    /// One head per series, ranked in the order given, as (time, value).
    fn in_key_order(points: &[(i64, f64)]) -> Vec<Head> {
        (0..)
            .zip(points)
            .map(|(rank, &(t, v))| head(rank, t, v))
            .collect()
    }

    /// Five series a..e, one point each at the same time, values as
    /// given: the answers a real influxd 1.8.10 gave.
    fn five_at_one_time(values: [f64; 5]) -> Vec<Head> {
        in_key_order(&values.map(|v| (200, v)))
    }

    #[test]
    fn ties_at_one_time_pick_between_the_first_and_last_series() {
        // influxd: a=2 b=9 c=4 d=1 e=3 answers 3 for first() and last().
        for rule in [Rule::First, Rule::Last] {
            assert_eq!(
                value(rule, five_at_one_time([2.0, 9.0, 4.0, 1.0, 3.0])),
                3.0
            );
            assert_eq!(
                value(rule, five_at_one_time([3.0, 4.0, 5.0, 1.0, 2.0])),
                3.0
            );
            assert_eq!(
                value(rule, five_at_one_time([1.0, 3.0, 2.0, 5.0, 4.0])),
                4.0
            );
        }
    }

    #[test]
    fn series_of_several_points_as_influxd_answers_them() {
        // influxd: a@100=1 b@100=5 c@100=3 (a, b, c also at 200: a=2, b=9,
        // c=4), d@200=7: first() is 5 (b), last() is 7 (d).
        let firsts = in_key_order(&[(100, 1.0), (100, 5.0), (100, 3.0), (200, 7.0)]);
        assert_eq!(value(Rule::First, firsts), 5.0);
        let lasts = in_key_order(&[(200, 2.0), (200, 9.0), (200, 4.0), (200, 7.0)]);
        assert_eq!(value(Rule::Last, lasts), 7.0);
    }

    #[test]
    fn one_series_at_the_extreme_wins_alone() {
        let heads = vec![head(0, 100, 1.0), head(1, 50, 0.5)];
        assert_eq!(value(Rule::First, heads.clone()), 0.5);
        assert_eq!(value(Rule::Last, heads), 1.0);
    }

    #[test]
    fn series_of_a_later_shard_group_are_not_in_the_heap() {
        // a and e tie at 200; c's first point is a week later, so c is not
        // among the items, and the heap of [a, e] pops a then e.
        let heads = vec![
            head(0, 200, 1.0),
            head(2, 200 + WEEK, 9.0),
            head(4, 200, 3.0),
        ];
        assert_eq!(value(Rule::First, heads), 3.0);
    }

    #[test]
    fn shard_groups_of_a_week_start_on_mondays() {
        // 1970-01-01 was a Thursday; its group starts on 1969-12-29.
        assert_eq!(shard_group_start(200, WEEK), -3 * 24 * 3_600_000_000_000);
        let hour = 3_600_000_000_000;
        assert_eq!(shard_group_start(hour + 5, hour), i128::from(hour));
        assert_eq!(shard_group_start(-1, hour), -i128::from(hour));
    }

    #[test]
    fn string_extra_columns_order_tied_items() {
        // With a string column beside the selector (`SELECT first(v),
        // host`), ties are ordered by it: the two smallest hosts pop.
        let with_host = |rank, host: &str, v| Head {
            rank,
            point: Point::with_aux(200, Value::Float(v), vec![Value::String(host.into())]),
        };
        let heads = vec![
            with_host(0, "c", 5.0),
            with_host(1, "a", 1.0),
            with_host(2, "b", 2.0),
            with_host(3, "d", 9.0),
        ];
        assert_eq!(value(Rule::First, heads), 2.0);
    }

    #[test]
    fn extra_columns_compare_in_the_order_given() {
        // `SELECT first(v), region, host`: InfluxDB compares host, then
        // region (sorted by name), so host decides here.
        let at = |rank, region: &str, host: &str, v| Head {
            rank,
            point: Point::with_aux(
                200,
                Value::Float(v),
                vec![Value::String(region.into()), Value::String(host.into())],
            ),
        };
        let heads = || {
            vec![
                at(0, "r1", "h2", 5.0),
                at(1, "r0", "h1", 1.0),
                at(2, "r2", "h0", 2.0),
            ]
        };
        let pick = |order: &[usize]| selected(Rule::First, heads(), WEEK, order).unwrap().aux;
        // By host: h0 and h1 pop, h0's 2.0 is larger.
        assert_eq!(pick(&[1, 0])[1], Value::String("h0".into()));
        // By region: r0 and r1 pop, r1's 5.0 is larger.
        assert_eq!(pick(&[0, 1])[1], Value::String("h2".into()));
    }
}
