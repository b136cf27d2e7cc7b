//! Checking a big ack log (rebalance under load, the soak: tens to hundreds
//! of millions of points) without reading every point back: the server
//! counts and sums the stored seqs per request, a time slice at a time, and
//! each acknowledged request must come back whole (`batch` points whose seqs
//! add up to what was sent).
//!
//! Why: `ack::verify` reads every `v` as JSON, which needs gigabytes for a
//! 30-minute soak. Per request, a lost point lowers the count, a point stored
//! twice under another key raises it, and a wrong value changes the sum.

use crate::ack::{AckLog, Verdict};
use crate::sql;
use crate::target::Target;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Above this many acknowledged points, verify by request.
pub const MIN_POINTS: u64 = 1_000_000;
/// Seqs per query: one time slice of the measurement (the time bounds
/// prune the scan to the slice's parts).
pub const SLICE_POINTS: u64 = 5_000_000;

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
/// points found and the sum of their seqs. The router may answer one row
/// per shard for the same request; they are added up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    pub request: u64,
    pub points: u64,
    pub seq_sum: f64,
}

/// Compares acknowledged requests (`ranges`, all of `batch` points) with
/// what was found. Requests that were never acknowledged are ignored (they
/// may or may not have been stored).
pub fn compare(ranges: &[(u64, u64)], batch: u64, found: &[Found]) -> Verdict {
    let mut by_req: BTreeMap<u64, (u64, f64)> = BTreeMap::new();
    let mut rows_read = 0;
    for f in found {
        let e = by_req.entry(f.request).or_default();
        e.0 += f.points;
        e.1 += f.seq_sum;
        rows_read += f.points;
    }
    let mut v = Verdict {
        acked: 0,
        lost: 0,
        duplicated: 0,
        checksum_expected: 0,
        checksum_found: 0,
        rows_read,
    };
    let mut seen = std::collections::BTreeSet::new();
    for &(first, n) in ranges {
        if n != batch || !seen.insert(first) {
            continue;
        }
        let req = first / batch;
        let expected = n as u128 * first as u128 + (n as u128 * (n as u128 - 1)) / 2;
        let (points, sum) = by_req.get(&req).copied().unwrap_or((0, 0.0));
        v.acked += n;
        v.lost += n.saturating_sub(points);
        v.duplicated += points.saturating_sub(n);
        v.checksum_expected += expected;
        v.checksum_found += sum.round().max(0.0) as u128;
    }
    v
}

fn add(total: &mut Verdict, part: &Verdict) {
    total.acked += part.acked;
    total.lost += part.lost;
    total.duplicated += part.duplicated;
    total.checksum_expected += part.checksum_expected;
    total.checksum_found += part.checksum_found;
    total.rows_read += part.rows_read;
}

/// The slices `[lo, hi)` of seq space that cover `ranges`, each a whole
/// number of requests.
pub fn slices(ranges: &[(u64, u64)], batch: u64) -> Vec<(u64, u64)> {
    let end = ranges.iter().map(|(a, n)| a + n).max().unwrap_or(0);
    let step = (SLICE_POINTS / batch).max(1) * batch;
    (0..end.div_ceil(step))
        .map(|i| (i * step, ((i + 1) * step).min(end)))
        .collect()
}

async fn query_slice(
    target: &Target,
    database: &str,
    log: &AckLog,
    batch: u64,
    (lo, hi): (u64, u64),
) -> Result<Vec<Found>> {
    let t = |s: u64| {
        format!(
            "fromUnixTimestamp64Nano(toInt64({}))",
            log.base_ns + s as i64
        )
    };
    let q = format!(
        "SELECT intDiv(toUInt64(v), {batch}) AS r, count() AS n, sum(v) AS s FROM {} FINAL \
         WHERE time >= {} AND time < {} GROUP BY r",
        log.measurement,
        t(lo),
        t(hi)
    );
    let rows = sql::query_rows(target, database, &q).await?;
    rows.iter()
        .map(|r| {
            let num = |k: &str| r.get(k).and_then(sql::as_f64);
            match (num("r"), num("n"), num("s")) {
                (Some(req), Some(n), Some(s)) => Ok(Found {
                    request: req as u64,
                    points: n as u64,
                    seq_sum: s,
                }),
                _ => Err(Error::QueryFormat(format!(
                    "a per-request row without r, n and s: {r:?}"
                ))),
            }
        })
        .collect()
}

/// Verifies `log` slice by slice, re-reading a slice that is not complete
/// yet (apply or flush lag) until `wait` has passed.
pub async fn verify(
    target: &Target,
    database: &str,
    log: &AckLog,
    wait: Duration,
) -> Result<Verdict> {
    let batch = log.ranges.first().map_or(1, |r| r.1);
    let deadline = Instant::now() + wait;
    let mut total = compare(&[], batch, &[]);
    for (lo, hi) in slices(&log.ranges, batch) {
        let acked: Vec<(u64, u64)> = log
            .ranges
            .iter()
            .copied()
            .filter(|&(a, _)| a >= lo && a < hi)
            .collect();
        loop {
            match query_slice(target, database, log, batch, (lo, hi)).await {
                Ok(found) => {
                    let v = compare(&acked, batch, &found);
                    if v.ok() || Instant::now() >= deadline {
                        add(&mut total, &v);
                        break;
                    }
                    tracing::info!(
                        lo,
                        hi,
                        lost = v.lost,
                        "not all acknowledged points of the slice visible yet; retrying"
                    );
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(e) => tracing::info!(error = %e, lo, hi, "read-back failed; retrying"),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    Ok(total)
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
        }
    }

    #[test]
    fn whole_requests_pass_and_split_rows_add_up() {
        let ranges = [(0, 10), (20, 10)];
        let mut f = vec![whole(0, 10), whole(1, 10)];
        // Request 2 answered as two rows (two shards).
        f.push(Found {
            request: 2,
            points: 4,
            seq_sum: (20..24).sum::<u64>() as f64,
        });
        f.push(Found {
            request: 2,
            points: 6,
            seq_sum: (24..30).sum::<u64>() as f64,
        });
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
        let mut short = whole(1, 10);
        short.points = 7;
        let v = compare(&ranges, 10, &[whole(0, 10), short]);
        assert_eq!(v.lost, 3);
        assert!(!v.ok());
        let v = compare(&ranges, 10, &[whole(0, 10)]);
        assert_eq!(v.lost, 10, "a request not found at all");
        let mut extra = whole(0, 10);
        extra.points = 11;
        extra.seq_sum += 5.0;
        let v = compare(&ranges, 10, &[extra, whole(1, 10)]);
        assert_eq!((v.lost, v.duplicated), (0, 1));
        assert!(!v.ok());
        let mut wrong = whole(1, 10);
        wrong.seq_sum += 1.0;
        let v = compare(&ranges, 10, &[whole(0, 10), wrong]);
        assert_eq!((v.lost, v.duplicated), (0, 0));
        assert!(!v.ok(), "a wrong value changes the sum");
    }

    #[test]
    fn picks_regular_big_logs_and_slices_on_request_bounds() {
        let big: Vec<(u64, u64)> = (0..200).map(|i| (i * 10_000, 10_000)).collect();
        assert!(wanted(&big));
        assert!(!wanted(&big[..50]), "500k points: read them all");
        let mut odd = big.clone();
        odd[3] = (30_001, 10_000);
        assert!(!wanted(&odd));
        let s = slices(&[(0, 3_000), (12_000_000, 3_000)], 3_000);
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|(lo, _)| lo % 3_000 == 0));
        assert_eq!(s[0], (0, 4_998_000), "1,666 whole requests of 3,000");
        assert_eq!(s.last().unwrap().1, 12_003_000);
        assert!(s.windows(2).all(|w| w[0].1 == w[1].0));
    }
}
