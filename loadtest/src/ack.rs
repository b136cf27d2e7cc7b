//! Recording acknowledged writes (`ack-load --ack-log`) and checking that
//! every one of them is stored exactly once (`verify`), for the chaos run.
//!
//! Every point carries a unique sequence number `seq` as its field `v` and
//! as its timestamp offset (`base_ns + seq`), spread over a few series. A
//! request carries a contiguous range of seqs, so the log stores one line per
//! acknowledged request: `<first_seq> <count> <ack_unix_ms> <latency_us>`
//! (readers need only the first two fields; the last two give the latency of
//! the requests sent in a time window, e.g. while shards move).

use crate::report::fmt_int;
use crate::sql;
use crate::target::{Outcome, Target};
use crate::{Error, Result};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

#[derive(Debug, Clone)]
pub struct AckLoadOptions {
    pub measurement: String,
    pub series: u64,
    /// Requests per second (open model).
    pub rate: f64,
    pub batch: u64,
    pub duration: Duration,
    /// Stop early when this file appears (how chaos.sh ends the load).
    pub stop_file: Option<PathBuf>,
    pub max_inflight: usize,
    pub ack_log: PathBuf,
    pub write_path: String,
    /// Times a request answered 429 or 503 (the server's "retry later") or
    /// whose connection failed is sent again, with backoff, before it counts
    /// as failed. 0: never.
    pub retries: u32,
}

#[derive(Debug, Default, Clone)]
pub struct AckLoadSummary {
    pub sent: u64,
    pub acked_requests: u64,
    pub acked_points: u64,
    pub dropped: u64,
    /// Requests that failed for good (after any retries), by last answer.
    pub errors: BTreeMap<String, u64>,
    /// Retries sent after a 429/503, by answer; not failures when a later
    /// attempt was acknowledged.
    pub retried: BTreeMap<String, u64>,
    /// Latency of every acknowledged request, first attempt to final ack
    /// (microseconds).
    pub latencies_us: Vec<u64>,
}

impl AckLoadSummary {
    /// Requests that were never acknowledged.
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Nearest-rank latency percentile of acknowledged requests, in ms.
    pub fn percentile_ms(&self, q: f64) -> Option<f64> {
        let mut v = self.latencies_us.clone();
        v.sort_unstable();
        crate::stats::percentile(&v, q).map(|us| us as f64 / 1000.0)
    }
}

/// Answers that mean "not now, send it again": overload and shards without a
/// leader for a moment (moves, elections, restarts), and a connection that
/// failed (a router pod going away under a pooled keep-alive connection).
/// Never a timeout. A resent write that had been applied after all shows up
/// as a duplicate in `verify`.
fn retryable(o: &Outcome) -> bool {
    matches!(o, Outcome::Rejected(s) if s == "429" || s == "503") || *o == Outcome::Transport
}

/// Line protocol for seqs `first..first+count`.
pub fn encode_range(
    measurement: &str,
    series: u64,
    base_ns: i64,
    first: u64,
    count: u64,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(count as usize * 48);
    for seq in first..first + count {
        let _ = writeln!(
            out,
            "{measurement},s=s{} v={seq}.0 {}",
            seq % series,
            base_ns + seq as i64
        );
    }
    out
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Runs the open-model load, appending one log line per acknowledged request.
/// `stop` ends it early (signal handlers set it).
pub async fn ack_load(
    target: &Target,
    opts: &AckLoadOptions,
    stop: Arc<AtomicBool>,
) -> Result<AckLoadSummary> {
    let path = opts.ack_log.display().to_string();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&opts.ack_log)
        .map_err(|e| Error::io(&path, e))?;
    // Whole milliseconds keep the base exact in every timestamp precision.
    let base_ns = (now_ns() / 1_000_000) * 1_000_000;
    writeln!(f, "# measurement={} base_ns={base_ns}", opts.measurement)
        .map_err(|e| Error::io(&path, e))?;
    let log = Arc::new(Mutex::new(std::io::BufWriter::new(f)));
    let summary = Arc::new(Mutex::new(AckLoadSummary::default()));
    let sem = Arc::new(Semaphore::new(opts.max_inflight));
    let interval = Duration::from_secs_f64(1.0 / opts.rate);
    let start = tokio::time::Instant::now();
    let mut next_seq = 0u64;
    let mut last_report = Instant::now();
    for i in 0u64.. {
        let due = start + interval.mul_f64(i as f64);
        if due.duration_since(start) >= opts.duration || stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(sf) = &opts.stop_file {
            if i % 16 == 0 && sf.exists() {
                break;
            }
        }
        tokio::time::sleep_until(due).await;
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            summary.lock().unwrap_or_else(|e| e.into_inner()).dropped += 1;
            continue;
        };
        let first = next_seq;
        next_seq += opts.batch;
        let body = encode_range(&opts.measurement, opts.series, base_ns, first, opts.batch);
        let req = crate::encode::Prepared {
            body: crate::encode::Body::Http {
                path: opts.write_path.clone(),
                content_type: "text/plain; charset=utf-8",
                content_encoding: None,
                body: Bytes::from(body),
            },
            points: opts.batch,
        };
        let (t, log, sum, count) = (target.clone(), log.clone(), summary.clone(), opts.batch);
        let retries = opts.retries;
        tokio::spawn(async move {
            let t0 = Instant::now();
            let mut o = t.send(&req).await;
            let mut attempt = 0;
            while attempt < retries && retryable(&o) {
                if let Some(label) = o.error_label() {
                    let mut s = sum.lock().unwrap_or_else(|e| e.into_inner());
                    *s.retried.entry(label).or_default() += 1;
                }
                tokio::time::sleep(Duration::from_millis((50u64 << attempt.min(5)).min(1000)))
                    .await;
                attempt += 1;
                o = t.send(&req).await;
            }
            let mut s = sum.lock().unwrap_or_else(|e| e.into_inner());
            s.sent += 1;
            if o == Outcome::Acked {
                s.acked_requests += 1;
                s.acked_points += count;
                s.latencies_us.push(t0.elapsed().as_micros() as u64);
                let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
                // Flushed per ack so a crash of the load generator itself
                // still leaves every ack it saw on disk.
                let (ack_ms, lat_us) = (now_ns() / 1_000_000, t0.elapsed().as_micros());
                let _ = writeln!(l, "{first} {count} {ack_ms} {lat_us}").and_then(|_| l.flush());
            } else if let Some(label) = o.error_label() {
                *s.errors.entry(label).or_default() += 1;
            }
            drop(permit);
        });
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let s = summary.lock().unwrap_or_else(|e| e.into_inner());
            tracing::info!(
                sent = s.sent,
                acked_points = s.acked_points,
                errors = ?s.errors,
                "ack-load progress"
            );
        }
    }
    let _all = sem.acquire_many(opts.max_inflight as u32).await;
    log.lock()
        .unwrap_or_else(|e| e.into_inner())
        .flush()
        .map_err(|e| Error::io(&path, e))?;
    let s = summary.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(s)
}

/// An ack log as read back: what was written where, and which seq ranges
/// were acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckLog {
    pub measurement: String,
    /// Timestamp of seq 0, ns (seq `s` is stored at `base_ns + s`).
    pub base_ns: i64,
    pub ranges: Vec<(u64, u64)>,
}

/// The acknowledged seq ranges and the measurement of an ack log.
pub fn read_ack_log(path: &Path) -> Result<(String, Vec<(u64, u64)>)> {
    let log = read_ack_log_full(path)?;
    Ok((log.measurement, log.ranges))
}

/// The whole ack log: header and acknowledged ranges.
pub fn read_ack_log_full(path: &Path) -> Result<AckLog> {
    let p = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| Error::io(&p, e))?;
    let mut measurement = None;
    let mut base_ns = 0i64;
    let mut ranges = Vec::new();
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| Error::io(&p, e))?;
        if let Some(h) = line.strip_prefix("# ") {
            for kv in h.split_whitespace() {
                if let Some(m) = kv.strip_prefix("measurement=") {
                    measurement = Some(m.to_string());
                }
                if let Some(b) = kv.strip_prefix("base_ns=") {
                    base_ns = b.parse().unwrap_or(0);
                }
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_whitespace().map(str::parse::<u64>);
        match (it.next(), it.next()) {
            (Some(Ok(a)), Some(Ok(b))) => ranges.push((a, b)),
            _ => {
                return Err(Error::AckLog {
                    path: p,
                    reason: format!("line {} is not `<first_seq> <count>`: {line:?}", n + 1),
                })
            }
        }
    }
    let measurement = measurement.ok_or_else(|| Error::AckLog {
        path: p.clone(),
        reason: "no `# measurement=` header; was it written by ack-load?".into(),
    })?;
    Ok(AckLog {
        measurement,
        base_ns,
        ranges,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub acked: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Sum of acked seqs (what should be there) and of the acked seqs found,
    /// counted with multiplicity.
    pub checksum_expected: u128,
    pub checksum_found: u128,
    pub rows_read: u64,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.checksum_expected == self.checksum_found
    }
}

/// Compares the acknowledged seqs with the stored `v` values.
pub fn compare(ranges: &[(u64, u64)], stored: &[f64]) -> Verdict {
    let max = ranges.iter().map(|(a, n)| a + n).max().unwrap_or(0) as usize;
    let mut acked = vec![false; max];
    let mut expected = 0u128;
    let mut n_acked = 0u64;
    for &(a, n) in ranges {
        for s in a..a + n {
            if !acked[s as usize] {
                acked[s as usize] = true;
                expected += s as u128;
                n_acked += 1;
            }
        }
    }
    let mut seen = vec![0u32; max];
    let mut found = 0u128;
    for &v in stored {
        if v < 0.0 || v.fract() != 0.0 {
            continue;
        }
        let s = v as usize;
        if s < max && acked[s] {
            seen[s] += 1;
            found += s as u128;
        }
    }
    let (mut lost, mut dup) = (0, 0);
    for (_, n) in acked.iter().zip(&seen).filter(|(a, _)| **a) {
        match n {
            0 => lost += 1,
            1 => {}
            _ => dup += 1,
        }
    }
    Verdict {
        acked: n_acked,
        lost,
        duplicated: dup,
        checksum_expected: expected,
        checksum_found: found,
        rows_read: stored.len() as u64,
    }
}

/// Reads the stored points back and compares, retrying until `wait` passes
/// because nodes may still be applying or flushing committed entries.
pub async fn verify(
    target: &Target,
    database: &str,
    ack_log: &Path,
    wait: Duration,
) -> Result<Verdict> {
    let log = read_ack_log_full(ack_log)?;
    if crate::ack_bulk::wanted(&log.ranges) {
        return crate::ack_bulk::verify(target, database, &log, wait).await;
    }
    let (m, ranges) = (log.measurement, log.ranges);
    let q = format!("SELECT v FROM {m} FINAL");
    let deadline = Instant::now() + wait;
    loop {
        let attempt = async {
            let rows = sql::query_rows(target, database, &q).await?;
            let vals: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.get("v").and_then(sql::as_f64))
                .collect();
            Ok::<_, Error>(compare(&ranges, &vals))
        }
        .await;
        match attempt {
            Ok(v) if v.ok() || Instant::now() >= deadline => return Ok(v),
            Ok(v) => tracing::info!(
                lost = v.lost,
                duplicated = v.duplicated,
                "not all acknowledged points visible yet; retrying"
            ),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(e) => tracing::info!(error = %e, "read-back failed; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

pub fn verdict_line(v: &Verdict) -> String {
    format!(
        "verify acked_points={} rows_read={} duplicated={} checksum_expected={} checksum_found={}",
        fmt_int(v.acked as f64),
        v.rows_read,
        v.duplicated,
        v.checksum_expected,
        v.checksum_found
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::{serve, SinkState};
    use crate::target::TargetOptions;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn compare_counts_lost_and_duplicates() {
        let ranges = [(0, 3), (5, 2)]; // 0,1,2,5,6
        let v = compare(&ranges, &[0.0, 1.0, 2.0, 5.0, 6.0, 3.0]);
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.acked, 5);
        let v = compare(&ranges, &[0.0, 1.0, 2.0, 2.0, 6.0]);
        assert_eq!((v.lost, v.duplicated), (1, 1));
        assert!(!v.ok());
    }

    #[test]
    fn encodes_unique_points() {
        let t = encode_range("chaos", 4, 1_000, 10, 2);
        assert_eq!(t, "chaos,s=s2 v=10.0 1010\nchaos,s=s3 v=11.0 1011\n");
    }

    async fn run_against_sink(lose_every: u64, fail_every: u64) -> (AckLoadSummary, Verdict) {
        let st = Arc::new(SinkState {
            lose_every: AtomicU64::new(lose_every),
            fail_every: AtomicU64::new(fail_every),
            ..Default::default()
        });
        let (addr, _h) = serve("127.0.0.1:0", st).await.unwrap();
        let target = Target::connect(&TargetOptions {
            url: format!("http://{addr}"),
            grpc_url: None,
            timeout: Duration::from_secs(5),
            auth_token: None,
            max_connections: 8,
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("acks.log");
        let opts = AckLoadOptions {
            measurement: "chaos_test".into(),
            series: 4,
            rate: 200.0,
            batch: 10,
            duration: Duration::from_millis(500),
            stop_file: None,
            max_inflight: 8,
            ack_log: log.clone(),
            write_path: "/write?db=x".into(),
            retries: 0,
        };
        let s = ack_load(&target, &opts, Arc::new(AtomicBool::new(false)))
            .await
            .unwrap();
        let v = verify(&target, "x", &log, Duration::from_millis(0))
            .await
            .unwrap();
        (s, v)
    }

    #[tokio::test]
    async fn verify_passes_when_sink_keeps_everything() {
        let (s, v) = run_against_sink(0, 5).await;
        assert!(s.acked_points > 0);
        assert!(s.errors.get("503").copied().unwrap_or(0) > 0, "{s:?}");
        assert_eq!(v.acked, s.acked_points);
        assert!(v.ok(), "{v:?}");
    }

    #[tokio::test]
    async fn retried_503s_are_not_failures() {
        let st = Arc::new(SinkState {
            fail_every: AtomicU64::new(3),
            ..Default::default()
        });
        let (addr, _h) = serve("127.0.0.1:0", st).await.unwrap();
        let target = Target::connect(&TargetOptions {
            url: format!("http://{addr}"),
            grpc_url: None,
            timeout: Duration::from_secs(5),
            auth_token: None,
            max_connections: 8,
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("acks.log");
        let opts = AckLoadOptions {
            measurement: "retry_test".into(),
            series: 4,
            rate: 200.0,
            batch: 10,
            duration: Duration::from_millis(500),
            stop_file: None,
            max_inflight: 8,
            ack_log: log.clone(),
            write_path: "/write?db=x".into(),
            retries: 5,
        };
        let s = ack_load(&target, &opts, Arc::new(AtomicBool::new(false)))
            .await
            .unwrap();
        assert!(s.retried.get("503").copied().unwrap_or(0) > 0, "{s:?}");
        assert_eq!(s.failed(), 0, "{s:?}");
        assert_eq!(s.latencies_us.len() as u64, s.acked_requests);
        assert!(s.percentile_ms(95.0).is_some());
        let v = verify(&target, "x", &log, Duration::from_millis(0))
            .await
            .unwrap();
        assert!(v.ok(), "{v:?}");
    }

    #[tokio::test]
    async fn verify_catches_lost_points() {
        let (s, v) = run_against_sink(7, 0).await;
        assert!(s.acked_points > 0);
        assert!(v.lost > 0, "{v:?}");
        assert!(!v.ok());
    }
}
