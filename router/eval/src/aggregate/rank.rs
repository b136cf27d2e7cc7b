//! `percentile` from windows instead of points.
//!
//! A shard that holds `total` points of a group sorts them by (value,
//! time) and sends only a slice around the rank the percentile would take
//! there, with that slice's first rank: a [`RankWindow`]. The windows of
//! disjoint parts of a group (shards, series) decide the group's
//! percentile exactly when the point at the group's rank falls where every
//! window says for sure how many of its points lie below it; otherwise
//! [`select`] says so and the caller reads the points.
//!
//! For each candidate point `x` (every point of every window) each window
//! bounds how many of its points are `<= x` and `< x`: exactly when `x`
//! is within its slice, `0..=start-1` before it (exact when the slice
//! starts at rank 1), `end..=total` after it (exact when it ends at the
//! last rank). `x` is the `k`-th smallest of the group for sure when the
//! smallest possible count `<= x` reaches `k` and the largest possible
//! count `< x` stays below `k`. The lower bound grows with `x`, so the
//! only candidate is the first that reaches `k` (a binary search).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::finish::by_value;
use crate::value::Point;

/// A sorted slice of one part's points around a rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankWindow {
    /// How many points of the group the part holds.
    pub total: u64,
    /// The rank (1-based, in the part) of `points[0]`.
    pub start: u64,
    /// Consecutive points of the part in (value, time) order.
    pub points: Vec<Point>,
}

/// Why the windows could not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Undecided;

/// Folds the windows of other parts of the group into `held`: the parts
/// are disjoint, so they only add up (their values of one type).
pub(crate) fn merge(
    function: &'static str,
    held: &mut Vec<RankWindow>,
    more: Vec<RankWindow>,
) -> crate::error::Result<()> {
    let first = held.iter().find_map(|w| w.points.first()).map(|p| &p.value);
    if let Some(p) = more.iter().find_map(|w| w.points.first()) {
        super::same_type(function, first, &p.value)?;
    }
    held.extend(more);
    Ok(())
}

/// The (value, time) order percentile ranks points by.
pub fn rank_order(a: &Point, b: &Point) -> Ordering {
    by_value(&a.value, &b.value).then(a.time.cmp(&b.time))
}

/// InfluxDB 1.8's nearest rank (1-based) of `p` percent of `n` points;
/// `None` when it falls outside them (no answer).
pub fn nearest_rank(n: u64, p: f64) -> Option<u64> {
    let k = (n as f64 * p / 100.0 + 0.5).floor();
    (k >= 1.0 && k <= n as f64).then_some(k as u64)
}

/// The point at the `p`-th percentile of the group the windows cover;
/// `Ok(None)` when the rank falls outside its points, `Err` when the
/// windows do not decide it.
pub fn select(windows: &[RankWindow], p: f64) -> Result<Option<&Point>, Undecided> {
    let n: u64 = windows.iter().map(|w| w.total).sum();
    let Some(k) = nearest_rank(n, p) else {
        return Ok(None);
    };
    let mut candidates: Vec<&Point> = windows.iter().flat_map(|w| &w.points).collect();
    candidates.sort_by(|a, b| rank_order(a, b));
    let first = candidates.partition_point(|x| at_most_lower(windows, x) < k);
    let x = candidates.get(first).ok_or(Undecided)?;
    if below_upper(windows, x) < k {
        Ok(Some(x))
    } else {
        Err(Undecided)
    }
}

/// The fewest points of the group that can be `<= x`.
fn at_most_lower(windows: &[RankWindow], x: &Point) -> u64 {
    windows
        .iter()
        .map(|w| match position(w, x) {
            Place::Before | Place::Unknown => 0,
            Place::Within => w.start - 1 + count(w, x, Ordering::is_le),
            Place::After => w.start - 1 + w.points.len() as u64,
        })
        .sum()
}

/// The most points of the group that can be `< x`.
fn below_upper(windows: &[RankWindow], x: &Point) -> u64 {
    windows
        .iter()
        .map(|w| match position(w, x) {
            Place::Before => w.start - 1,
            Place::Within => w.start - 1 + count(w, x, Ordering::is_lt),
            Place::After | Place::Unknown => w.total,
        })
        .sum()
}

enum Place {
    Before,
    Within,
    After,
    /// An empty slice says nothing: anywhere from none to all.
    Unknown,
}

fn position(w: &RankWindow, x: &Point) -> Place {
    match (w.points.first(), w.points.last()) {
        (Some(lo), _) if rank_order(x, lo).is_lt() => Place::Before,
        (_, Some(hi)) if rank_order(x, hi).is_gt() => Place::After,
        (Some(_), Some(_)) => Place::Within,
        _ => Place::Unknown,
    }
}

/// How many of the window's points stand in `keep` order to `x`.
fn count(w: &RankWindow, x: &Point, keep: fn(Ordering) -> bool) -> u64 {
    w.points.partition_point(|p| keep(rank_order(p, x))) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    /// A deterministic generator (no dependency for tests).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n.max(1)
        }
    }

    /// The window a shard would send: `half` points either side of its
    /// own nearest rank.
    fn window(mut part: Vec<Point>, p: f64, half: u64) -> RankWindow {
        part.sort_by(rank_order);
        let total = part.len() as u64;
        let own = (total as f64 * p / 100.0 + 0.5).floor() as u64;
        let start = own.saturating_sub(half).max(1);
        let end = (start + 2 * half + 1).min(total + 1);
        RankWindow {
            total,
            start,
            points: part[(start - 1) as usize..(end - 1) as usize].to_vec(),
        }
    }

    fn reference(points: &[Point], p: f64) -> Option<Point> {
        let mut all = points.to_vec();
        all.sort_by(rank_order);
        nearest_rank(all.len() as u64, p).map(|k| all[(k - 1) as usize].clone())
    }

    #[test]
    fn windows_decide_exactly_or_say_they_cannot() {
        let mut rng = Lcg(7);
        let (mut decided, mut undecided) = (0, 0);
        for round in 0..400 {
            let n = 1 + rng.next(300);
            let parts = 1 + rng.next(5) as usize;
            let skewed = round % 5 == 0;
            let points: Vec<Point> = (0..n)
                .map(|i| {
                    let part = i as usize % parts;
                    let spread = if skewed { part as u64 * 50 } else { 0 };
                    Point::new(i as i64, Value::Int((rng.next(40) + spread) as i64))
                })
                .collect();
            let p = [0.0, 1.0, 5.0, 50.0, 90.0, 95.0, 99.0, 100.0][rng.next(8) as usize];
            let half = rng.next(12);
            let windows: Vec<RankWindow> = (0..parts)
                .map(|s| {
                    let part = points.iter().skip(s).step_by(parts).cloned().collect();
                    window(part, p, half)
                })
                .collect();
            let want = reference(&points, p);
            match select(&windows, p) {
                Ok(got) => {
                    assert_eq!(got.cloned(), want, "n={n} parts={parts} p={p} half={half}");
                    decided += 1;
                }
                Err(Undecided) => undecided += 1,
            }
        }
        // Most random splits decide; the skewed ones may not.
        assert!(decided > 200, "decided {decided}, undecided {undecided}");
    }

    #[test]
    fn whole_parts_always_decide() {
        let pts: Vec<Point> = (0..50)
            .map(|i| Point::new(i, Value::Float(((i * 37) % 50) as f64)))
            .collect();
        for p in [1.0, 33.0, 50.0, 95.0, 100.0] {
            let windows = vec![
                window(pts[..20].to_vec(), p, 1000),
                window(pts[20..].to_vec(), p, 1000),
            ];
            assert_eq!(select(&windows, p).unwrap().cloned(), reference(&pts, p));
        }
    }

    #[test]
    fn a_rank_outside_the_points_has_no_answer() {
        let w = window(vec![Point::new(1, Value::Int(3))], 5.0, 2);
        assert_eq!(select(&[w], 5.0), Ok(None));
        assert_eq!(nearest_rank(0, 50.0), None);
        assert_eq!(nearest_rank(6, 90.0), Some(5));
    }

    #[test]
    fn windows_that_miss_the_rank_are_undecided() {
        // Part a holds 0..10, part b 100..110; p50 of the 20 is a's last
        // (rank 10), but a's window is its lowest two only.
        let a: Vec<Point> = (0..10).map(|i| Point::new(i, Value::Int(i))).collect();
        let b: Vec<Point> = (0..10)
            .map(|i| Point::new(i, Value::Int(100 + i)))
            .collect();
        let wa = RankWindow {
            total: 10,
            start: 1,
            points: a[..2].to_vec(),
        };
        let wb = window(b, 50.0, 1);
        assert_eq!(select(&[wa, wb], 50.0), Err(Undecided));
    }
}
