//! Checking a big ack log (rebalance under load, the soak: tens to hundreds
//! of millions of points) without reading every point back: the server
//! counts and sums the stored seqs per request, and each acknowledged
//! request must come back whole (`batch` points whose seqs, and the squares
//! of their offsets in the request, add up to what was sent).
//!
//! Two passes, because `FINAL` (one row per key) costs 5-7x a plain scan
//! and a 30-minute soak holds ~250M points:
//! 1. **Scan** the whole seq space without `FINAL`, in time slices whose
//!    size adapts to how long the router takes (it answers within its
//!    10 s request timeout or not at all). A request that comes back whole
//!    is done.
//! 2. **Drill down** into the rest (points not visible yet, or extra rows
//!    that may be one key stored in two unmerged parts) with `FINAL`, over
//!    just their time ranges, again and again until they are whole or the
//!    lag wait passes. What is still wrong then is lost or duplicated.
//!
//! Per request, a lost point lowers the count, a point stored twice under
//! another key raises it, and a wrong value changes the sums.

use crate::ack::{AckLog, Verdict};
use crate::sql;
use crate::target::Target;
use crate::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Above this many acknowledged points, verify by request.
pub const MIN_POINTS: u64 = 1_000_000;
/// Seqs of the first scan query; later ones grow or shrink with the answer
/// time, between one request and `MAX_SLICE_POINTS`.
pub const SLICE_POINTS: u64 = 5_000_000;
pub const MAX_SLICE_POINTS: u64 = 80_000_000;
/// A scan query should answer in about this long: well inside the router's
/// default 10 s request timeout on a loaded machine.
pub const SLICE_TARGET: Duration = Duration::from_secs(3);
/// Seqs per drill-down query (`FINAL`).
pub const DRILL_POINTS: u64 = 1_000_000;

/// Whether `ranges` is big and regular enough for the per-request check:
/// every request has the same size and starts on a multiple of it, as
/// `ack_load` sends them.
pub fn wanted(ranges: &[(u64, u64)]) -> bool {
    let Some(&(_, batch)) = ranges.first() else {
        return false;
    };
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    total > MIN_POINTS && batch > 0 && ranges.iter().all(|&(a, n)| n == batch && a % batch == 0)
}

/// One row of the per-request answer: request number (`seq / batch`),
/// points found, the sum of their seqs and of the squares of their offsets
/// in the request (`seq % batch`). The router may answer one row per shard
/// for the same request; they are added up.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Found {
    pub request: u64,
    pub points: u64,
    pub seq_sum: f64,
    pub offset_sq_sum: f64,
}

/// The acknowledged request numbers, sorted, each once (a request logged
/// twice counts once; ranges not of `batch` points are not requests).
pub fn acked_requests(ranges: &[(u64, u64)], batch: u64) -> Vec<u64> {
    let set: BTreeSet<u64> = ranges
        .iter()
        .filter(|&&(a, n)| n == batch && batch > 0 && a % batch == 0)
        .map(|&(a, _)| a / batch)
        .collect();
    set.into_iter().collect()
}

/// What request `req` holds when it is stored whole: seq sum and the sum of
/// the squares of the offsets `0..batch`.
pub fn whole_sums(req: u64, batch: u64) -> (u128, u128) {
    let (b, first) = (batch as u128, (req * batch) as u128);
    let seqs = b * first + b * (b - 1) / 2;
    let squares = (b - 1) * b * (2 * b - 1) / 6;
    (seqs, squares)
}

/// `found` added up per request (rows of several shards for one request).
pub fn per_request(found: &[Found]) -> BTreeMap<u64, Found> {
    let mut by_req: BTreeMap<u64, Found> = BTreeMap::new();
    for f in found {
        let e = by_req.entry(f.request).or_insert(Found {
            request: f.request,
            ..Found::default()
        });
        e.points += f.points;
        e.seq_sum += f.seq_sum;
        e.offset_sq_sum += f.offset_sq_sum;
    }
    by_req
}

/// Whether `f` is exactly request `req` stored once.
pub fn is_whole(req: u64, batch: u64, f: Option<&Found>) -> bool {
    let (seqs, squares) = whole_sums(req, batch);
    f.is_some_and(|f| {
        f.points == batch
            && f.seq_sum.round() as u128 == seqs
            && f.offset_sq_sum.round() as u128 == squares
    })
}

/// The acknowledged requests in `reqs` that `found` does not show whole.
pub fn suspects(reqs: &[u64], batch: u64, found: &BTreeMap<u64, Found>) -> Vec<u64> {
    reqs.iter()
        .copied()
        .filter(|r| !is_whole(*r, batch, found.get(r)))
        .collect()
}

/// The verdict over acknowledged requests `reqs` given what was found of
/// each. A request with the right count but wrong sums holds at least one
/// wrong point in place of an acknowledged one: counted as one lost point.
pub fn verdict(reqs: &[u64], batch: u64, found: &BTreeMap<u64, Found>) -> Verdict {
    let mut v = Verdict {
        acked: 0,
        lost: 0,
        duplicated: 0,
        checksum_expected: 0,
        checksum_found: 0,
        rows_read: 0,
    };
    for &r in reqs {
        let f = found.get(&r).copied().unwrap_or_default();
        v.acked += batch;
        v.lost += batch.saturating_sub(f.points);
        v.duplicated += f.points.saturating_sub(batch);
        if f.points == batch && !is_whole(r, batch, Some(&f)) {
            v.lost += 1;
        }
        v.checksum_expected += whole_sums(r, batch).0;
        v.checksum_found += f.seq_sum.round().max(0.0) as u128;
    }
    v
}

/// Compares acknowledged ranges (all of `batch` points) with what was
/// found. Requests that were never acknowledged are ignored (they may or
/// may not have been stored).
pub fn compare(ranges: &[(u64, u64)], batch: u64, found: &[Found]) -> Verdict {
    let mut v = verdict(&acked_requests(ranges, batch), batch, &per_request(found));
    v.rows_read = found.iter().map(|f| f.points).sum();
    v
}

/// Groups sorted request numbers into runs `[lo, hi)` of at most
/// `max_reqs` requests each, one drill-down query per run.
pub fn runs(reqs: &[u64], max_reqs: u64) -> Vec<(u64, u64)> {
    let max_reqs = max_reqs.max(1);
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &r in reqs {
        match out.last_mut() {
            Some((lo, hi)) if r + 1 - *lo <= max_reqs => *hi = r + 1,
            _ => out.push((r, r + 1)),
        }
    }
    out
}

/// The next scan slice size (seqs, a whole number of requests) after a
/// query over `size` seqs that took `took` (`None`: it failed, most likely
/// the router's timeout): halve on failure or when slow, double when fast.
pub fn next_slice(size: u64, batch: u64, took: Option<Duration>) -> u64 {
    let next = match took {
        None => size / 2,
        Some(t) if t > SLICE_TARGET => size / 2,
        Some(t) if t < SLICE_TARGET / 2 => size.saturating_mul(2),
        Some(_) => size,
    };
    let batch = batch.max(1);
    (next.clamp(batch, MAX_SLICE_POINTS.max(batch)) / batch) * batch
}

/// The stored points of seqs `[lo, hi)` per request; `final_` asks for one
/// row per key (drill-down), otherwise every stored row counts (scan).
async fn query_range(
    target: &Target,
    database: &str,
    log: &AckLog,
    batch: u64,
    (lo, hi): (u64, u64),
    final_: bool,
) -> Result<Vec<Found>> {
    let t = |s: u64| {
        format!(
            "fromUnixTimestamp64Nano(toInt64({}))",
            log.base_ns + s as i64
        )
    };
    let off = format!("(toUInt64(v) % {batch})");
    let q = format!(
        "SELECT intDiv(toUInt64(v), {batch}) AS r, count() AS n, sum(v) AS s, sum({off} * {off}) AS q \
         FROM {}{} WHERE time >= {} AND time < {} GROUP BY r",
        log.measurement,
        if final_ { " FINAL" } else { "" },
        t(lo),
        t(hi)
    );
    let rows = sql::query_rows(target, database, &q).await?;
    rows.iter()
        .map(|r| {
            let num = |k: &str| r.get(k).and_then(sql::as_f64);
            match (num("r"), num("n"), num("s"), num("q")) {
                (Some(req), Some(n), Some(s), Some(q)) => Ok(Found {
                    request: req as u64,
                    points: n as u64,
                    seq_sum: s,
                    offset_sq_sum: q,
                }),
                _ => Err(Error::QueryFormat(format!(
                    "a per-request row without r, n, s and q: {r:?}"
                ))),
            }
        })
        .collect()
}

/// Retries a failing query until one has succeeded in the last `wait`.
struct Patience {
    last_ok: Instant,
    wait: Duration,
}

impl Patience {
    /// Whether to try again after `e` (logged); the error when not.
    async fn after(&mut self, e: Error, what: &str) -> Result<()> {
        if self.last_ok.elapsed() >= self.wait {
            return Err(e);
        }
        tracing::info!(error = %e, "{what} failed; retrying");
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }
}

/// Verifies `log`: the scan, then drill-downs into the requests it did not
/// find whole until they are or `wait` has passed since the scan ended (a
/// wait for apply and flush lag that does not shrink with the log's size).
/// A query keeps being retried while another succeeded within `wait`.
pub async fn verify(
    target: &Target,
    database: &str,
    log: &AckLog,
    wait: Duration,
) -> Result<Verdict> {
    let batch = log.ranges.first().map_or(1, |r| r.1);
    let reqs = acked_requests(&log.ranges, batch);
    let end = reqs.last().map_or(0, |r| (r + 1) * batch);
    let t0 = Instant::now();
    let mut patience = Patience { last_ok: t0, wait };
    let mut found: BTreeMap<u64, Found> = BTreeMap::new();
    let mut rows_read = 0u64;
    let (mut lo, mut last_log) = (0u64, t0);
    let mut size = (SLICE_POINTS / batch.max(1)).max(1) * batch.max(1);
    while lo < end {
        let hi = (lo + size).min(end);
        let q0 = Instant::now();
        match query_range(target, database, log, batch, (lo, hi), false).await {
            Ok(rows) => {
                patience.last_ok = Instant::now();
                rows_read += rows.iter().map(|f| f.points).sum::<u64>();
                found.extend(per_request(&rows));
                lo = hi;
                size = next_slice(size, batch, Some(q0.elapsed()));
            }
            Err(e) => {
                size = next_slice(size, batch, None);
                patience.after(e, "scan query").await?;
            }
        }
        if last_log.elapsed() >= Duration::from_secs(5) || lo >= end {
            last_log = Instant::now();
            let secs = t0.elapsed().as_secs_f64().max(1e-3);
            tracing::info!(
                "verify scan: {lo} of {end} seqs ({:.0}%), {rows_read} rows read, {:.0} rows/s, next slice {size} seqs",
                100.0 * lo as f64 / end.max(1) as f64,
                rows_read as f64 / secs
            );
        }
    }
    let scan_secs = t0.elapsed().as_secs_f64();
    let mut open = suspects(&reqs, batch, &found);
    tracing::info!(
        "verify scan done: {rows_read} rows in {scan_secs:.1} s ({:.0} rows/s); {} of {} acknowledged requests to check again with FINAL",
        rows_read as f64 / scan_secs.max(1e-3),
        open.len(),
        reqs.len()
    );
    let lag_deadline = Instant::now() + wait;
    let mut round = 0;
    while !open.is_empty() {
        round += 1;
        for run in runs(&open, (DRILL_POINTS / batch).max(1)) {
            loop {
                let range = (run.0 * batch, run.1 * batch);
                match query_range(target, database, log, batch, range, true).await {
                    Ok(rows) => {
                        patience.last_ok = Instant::now();
                        let got = per_request(&rows);
                        // Requests of the run absent from the answer have
                        // nothing stored (yet).
                        for r in run.0..run.1 {
                            found.insert(r, got.get(&r).copied().unwrap_or_default());
                        }
                        break;
                    }
                    Err(e) => patience.after(e, "drill-down query").await?,
                }
            }
        }
        open = suspects(&open, batch, &found);
        if open.is_empty() || Instant::now() >= lag_deadline {
            break;
        }
        tracing::info!(
            "verify drill-down round {round}: {} requests still not whole (e.g. request {}); retrying",
            open.len(),
            open[0]
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let mut v = verdict(&reqs, batch, &found);
    v.rows_read = rows_read;
    let secs = t0.elapsed().as_secs_f64().max(1e-3);
    tracing::info!(
        "verify done in {secs:.1} s: {} acknowledged points ({:.0} points/s), {} requests not whole after {round} drill-down rounds",
        v.acked,
        v.acked as f64 / secs,
        open.len()
    );
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(req: u64, batch: u64) -> Found {
        let first = req * batch;
        Found {
            request: req,
            points: batch,
            seq_sum: (first..first + batch).sum::<u64>() as f64,
            offset_sq_sum: (0..batch).map(|i| i * i).sum::<u64>() as f64,
        }
    }

    /// A request as stored: the given seqs, in one row.
    fn stored(req: u64, batch: u64, seqs: &[u64]) -> Found {
        Found {
            request: req,
            points: seqs.len() as u64,
            seq_sum: seqs.iter().sum::<u64>() as f64,
            offset_sq_sum: seqs.iter().map(|s| (s % batch) * (s % batch)).sum::<u64>() as f64,
        }
    }

    #[test]
    fn whole_requests_pass_and_split_rows_add_up() {
        let ranges = [(0, 10), (20, 10)];
        let mut f = vec![whole(0, 10), whole(1, 10)];
        // Request 2 answered as two rows (two shards).
        f.push(stored(2, 10, &[20, 21, 22, 23]));
        f.push(stored(2, 10, &[24, 25, 26, 27, 28, 29]));
        let v = compare(&ranges, 10, &f);
        assert!(v.ok(), "{v:?}");
        assert_eq!((v.acked, v.rows_read), (20, 30));
        // The same request logged twice (a retried ack) counts once.
        let v = compare(&[(0, 10), (0, 10)], 10, &f);
        assert_eq!(v.acked, 10);
        assert!(v.ok());
    }

    #[test]
    fn catches_lost_extra_and_wrong_points() {
        let ranges = [(0, 10), (10, 10)];
        let v = compare(
            &ranges,
            10,
            &[whole(0, 10), stored(1, 10, &[10, 11, 12, 13, 14, 15, 16])],
        );
        assert_eq!(v.lost, 3);
        assert!(!v.ok());
        let v = compare(&ranges, 10, &[whole(0, 10)]);
        assert_eq!(v.lost, 10, "a request not found at all");
        let extra = stored(0, 10, &[0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9]);
        let v = compare(&ranges, 10, &[extra, whole(1, 10)]);
        assert_eq!((v.lost, v.duplicated), (0, 1));
        assert!(!v.ok());
        let mut wrong = whole(1, 10);
        wrong.seq_sum += 1.0;
        let v = compare(&ranges, 10, &[whole(0, 10), wrong]);
        assert_eq!(
            (v.lost, v.duplicated),
            (1, 0),
            "a wrong value is a lost point"
        );
        assert!(!v.ok());
    }

    #[test]
    fn two_duplicates_hiding_two_losses_are_caught_by_the_squares() {
        // Seqs 1 and 4 stored twice, 2 and 3 missing: count and seq sum as
        // sent (1+1+4+4 = 1+2+3+4), the squares not (1+1+16+16 != 1+4+9+16).
        let f = stored(0, 10, &[0, 1, 1, 4, 4, 5, 6, 7, 8, 9]);
        assert_eq!(f.points, 10);
        assert_eq!(f.seq_sum, whole(0, 10).seq_sum);
        let by = per_request(&[f]);
        assert_eq!(suspects(&[0], 10, &by), vec![0]);
        let v = verdict(&[0], 10, &by);
        assert!(v.lost > 0 && !v.ok(), "{v:?}");
    }

    #[test]
    fn suspects_are_the_requests_not_whole() {
        let found = per_request(&[
            whole(0, 10),
            stored(1, 10, &[10, 11]),
            whole(3, 10),
            stored(3, 10, &[35]),
        ]);
        // 2 is missing, 1 short, 3 has an extra row (maybe unmerged parts).
        assert_eq!(suspects(&[0, 1, 2, 3], 10, &found), vec![1, 2, 3]);
        // After FINAL the extra row of 3 is one key: whole.
        let mut after = found.clone();
        after.insert(3, whole(3, 10));
        assert_eq!(suspects(&[1, 2, 3], 10, &after), vec![1, 2]);
    }

    #[test]
    fn drill_down_runs_are_bounded_and_cover_every_suspect() {
        assert_eq!(runs(&[], 4), vec![]);
        assert_eq!(
            runs(&[3, 4, 5, 9, 10, 40], 4),
            vec![(3, 6), (9, 11), (40, 41)]
        );
        assert_eq!(runs(&[0, 1, 2, 3, 4, 5], 4), vec![(0, 4), (4, 6)]);
        let reqs: Vec<u64> = (0..1000).filter(|r| r % 7 == 0 || r % 11 == 0).collect();
        let rs = runs(&reqs, 50);
        assert!(rs.iter().all(|(lo, hi)| hi - lo <= 50));
        assert!(reqs
            .iter()
            .all(|r| rs.iter().any(|(lo, hi)| lo <= r && r < hi)));
    }

    #[test]
    fn slices_adapt_to_answer_time_on_request_bounds() {
        let s = Duration::from_secs;
        assert_eq!(next_slice(5_000_000, 10_000, Some(s(1))), 10_000_000);
        assert_eq!(next_slice(5_000_000, 10_000, Some(s(2))), 5_000_000);
        assert_eq!(next_slice(5_000_000, 10_000, Some(s(9))), 2_500_000);
        assert_eq!(next_slice(5_000_000, 10_000, None), 2_500_000);
        assert_eq!(
            next_slice(10_000, 10_000, None),
            10_000,
            "never below a request"
        );
        assert_eq!(
            next_slice(MAX_SLICE_POINTS, 10_000, Some(s(0))),
            MAX_SLICE_POINTS
        );
        assert_eq!(next_slice(4_998_000, 3_000, Some(s(5))) % 3_000, 0);
    }

    #[test]
    fn picks_regular_big_logs() {
        let big: Vec<(u64, u64)> = (0..200).map(|i| (i * 10_000, 10_000)).collect();
        assert!(wanted(&big));
        assert!(!wanted(&big[..50]), "500k points: read them all");
        let mut odd = big.clone();
        odd[3] = (30_001, 10_000);
        assert!(!wanted(&odd));
        assert_eq!(
            acked_requests(&[(20, 10), (0, 10), (20, 10), (5, 10)], 10),
            vec![0, 2]
        );
    }
}
