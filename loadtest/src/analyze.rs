//! `shardhouse-loadtest analyze`: figures the chaos and soak scripts print
//! after a run, from files the run left behind.
//!
//! - `latency`: percentiles of the acknowledged requests that were in
//!   flight during given time windows (e.g. while shards moved), from the
//!   `<ack_unix_ms> <latency_us>` fields of an ack log.
//! - `rss-slope`: how fast each process's resident memory grows, from
//!   samples `<unix_secs> <name> <pid> <rss_kb>` (one line per process per
//!   sample): a least-squares slope over every incarnation of the process
//!   (each restart is its own intercept), after a warm-up.

use crate::stats::percentile;
use crate::{Error, Result};
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(subcommand)]
    cmd: AnalyzeCmd,
}

#[derive(Subcommand, Debug)]
enum AnalyzeCmd {
    /// Latency percentiles of acked requests in flight during windows.
    Latency {
        #[arg(long)]
        ack_log: PathBuf,
        /// `FROM_MS-TO_MS` in Unix milliseconds; repeat for several.
        #[arg(long = "window", required = true)]
        windows: Vec<String>,
    },
    /// RSS growth per process in MB/hour.
    RssSlope {
        #[arg(long)]
        samples: PathBuf,
        /// Samples in the first seconds of each incarnation are skipped
        /// (start-up allocations, caches filling).
        #[arg(long, default_value_t = 120.0)]
        warmup_secs: f64,
    },
}

pub fn run(a: AnalyzeArgs) -> Result<()> {
    let text = match a.cmd {
        AnalyzeCmd::Latency { ack_log, windows } => {
            let windows = windows
                .iter()
                .map(|w| parse_window(w))
                .collect::<Result<Vec<_>>>()?;
            let acks = read_ack_timings(&ack_log)?;
            latency_line(&in_windows(&acks, &windows))
        }
        AnalyzeCmd::RssSlope {
            samples,
            warmup_secs,
        } => {
            let s = read_rss_samples(&samples)?;
            rss_lines(&rss_slopes(&s, warmup_secs))
        }
    };
    let mut o = std::io::stdout().lock();
    writeln!(o, "{text}").map_err(|e| Error::io("stdout", e))
}

fn parse_window(w: &str) -> Result<(u64, u64)> {
    let bad = || Error::InvalidArgument(format!("window {w:?}: want FROM_MS-TO_MS"));
    let (a, b) = w.split_once('-').ok_or_else(bad)?;
    let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if b < a {
        return Err(bad());
    }
    Ok((a, b))
}

/// `(ack_unix_ms, latency_us)` of every acknowledged request that has them.
pub fn read_ack_timings(path: &Path) -> Result<Vec<(u64, u64)>> {
    let p = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| Error::io(&p, e))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line.map_err(|e| Error::io(&p, e))?;
        if line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(Ok(ack)), Some(Ok(lat))) = (
            f.get(2).map(|s| s.parse::<u64>()),
            f.get(3).map(|s| s.parse::<u64>()),
        ) {
            out.push((ack, lat));
        }
    }
    Ok(out)
}

/// Latencies (µs, sorted) of requests in flight at some point of a window:
/// sent (ack minus latency) before its end and acknowledged after its start.
pub fn in_windows(acks: &[(u64, u64)], windows: &[(u64, u64)]) -> Vec<u64> {
    let mut v: Vec<u64> = acks
        .iter()
        .filter(|&&(ack, lat)| {
            let sent = ack.saturating_sub(lat / 1000);
            windows.iter().any(|&(a, b)| sent <= b && ack >= a)
        })
        .map(|&(_, lat)| lat)
        .collect();
    v.sort_unstable();
    v
}

pub fn latency_line(sorted_us: &[u64]) -> String {
    let ms =
        |q| percentile(sorted_us, q).map_or("-".into(), |us| format!("{:.1}", us as f64 / 1000.0));
    format!(
        "window_requests={} p50_ms={} p95_ms={} p99_ms={} max_ms={}",
        sorted_us.len(),
        ms(50.0),
        ms(95.0),
        ms(99.0),
        ms(100.0)
    )
}

/// One RSS sample.
#[derive(Debug, Clone, PartialEq)]
pub struct RssSample {
    pub t: f64,
    pub name: String,
    pub pid: u32,
    pub rss_kb: f64,
}

pub fn read_rss_samples(path: &Path) -> Result<Vec<RssSample>> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(&p, e))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(RssSample {
                t: f.first()?.parse().ok()?,
                name: (*f.get(1)?).to_string(),
                pid: f.get(2)?.parse().ok()?,
                rss_kb: f.get(3)?.parse().ok()?,
            })
        })
        .collect())
}

/// A process's memory trend.
#[derive(Debug, Clone, PartialEq)]
pub struct RssTrend {
    pub mb_per_hour: f64,
    /// Standard error of the slope (0 when there are too few samples).
    pub stderr_mb_per_hour: f64,
    pub mean_mb: f64,
    pub samples: usize,
    pub hours: f64,
}

impl RssTrend {
    /// Flat: the slope cannot be told from zero (within two standard
    /// errors), or all it adds over the measured span is under 2% of the
    /// process's memory (allocator and cache noise).
    pub fn flat(&self) -> bool {
        self.mb_per_hour.abs() <= 2.0 * self.stderr_mb_per_hour
            || self.mb_per_hour.abs() * self.hours < 0.02 * self.mean_mb
    }
}

/// Samples of one process name by incarnation (pid): `(t, MB)`.
type Incarnations = BTreeMap<u32, Vec<(f64, f64)>>;

/// Least-squares slope per process name, one intercept per incarnation
/// (pid): restarts reset memory, which is not a trend. Samples in the first
/// `warmup_secs` of each incarnation are left out.
pub fn rss_slopes(samples: &[RssSample], warmup_secs: f64) -> BTreeMap<String, RssTrend> {
    let mut groups: BTreeMap<&str, Incarnations> = BTreeMap::new();
    for s in samples {
        groups
            .entry(&s.name)
            .or_default()
            .entry(s.pid)
            .or_default()
            .push((s.t, s.rss_kb / 1024.0));
    }
    let mut out = BTreeMap::new();
    for (name, incarnations) in groups {
        let (mut sxy, mut sxx, mut n, mut k, mut sum_y) = (0.0, 0.0, 0usize, 0usize, 0.0);
        let (mut t_min, mut t_max) = (f64::MAX, f64::MIN);
        let mut kept: Vec<Vec<(f64, f64)>> = Vec::new();
        for pts in incarnations.values() {
            let start = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min);
            let pts: Vec<(f64, f64)> = pts
                .iter()
                .copied()
                .filter(|p| p.0 >= start + warmup_secs)
                .collect();
            if pts.len() < 2 {
                continue;
            }
            let m = pts.len() as f64;
            let (tx, ty) = (
                pts.iter().map(|p| p.0).sum::<f64>() / m,
                pts.iter().map(|p| p.1).sum::<f64>() / m,
            );
            for &(t, y) in &pts {
                sxy += (t - tx) * (y - ty);
                sxx += (t - tx) * (t - tx);
                sum_y += y;
                t_min = t_min.min(t);
                t_max = t_max.max(t);
            }
            n += pts.len();
            k += 1;
            kept.push(pts.into_iter().map(|(t, y)| (t - tx, y - ty)).collect());
        }
        if n == 0 || sxx <= 0.0 {
            continue;
        }
        let slope = sxy / sxx; // MB per second
        let rss: f64 = kept
            .iter()
            .flatten()
            .map(|&(dt, dy)| (dy - slope * dt).powi(2))
            .sum();
        let dof = n.saturating_sub(k + 1);
        let stderr = if dof > 0 {
            (rss / dof as f64 / sxx).sqrt()
        } else {
            0.0
        };
        out.insert(
            name.to_string(),
            RssTrend {
                mb_per_hour: slope * 3600.0,
                stderr_mb_per_hour: stderr * 3600.0,
                mean_mb: sum_y / n as f64,
                samples: n,
                hours: (t_max - t_min) / 3600.0,
            },
        );
    }
    out
}

pub fn rss_lines(t: &BTreeMap<String, RssTrend>) -> String {
    let row = |label: &str, f: &dyn Fn(&RssTrend) -> String| {
        let cells: Vec<String> = t.iter().map(|(n, r)| format!("{n}={}", f(r))).collect();
        format!("{label} {}", cells.join(" "))
    };
    [
        row("rss_slope_mb_per_hour", &|r| {
            format!("{:.1}", r.mb_per_hour)
        }),
        row("rss_slope_stderr_mb_per_hour", &|r| {
            format!("{:.1}", r.stderr_mb_per_hour)
        }),
        row("rss_mean_mb", &|r| format!("{:.0}", r.mean_mb)),
        row("rss_flat", &|r| {
            (if r.flat() { "yes" } else { "no" }).into()
        }),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, name: &str, pid: u32, mb: f64) -> RssSample {
        RssSample {
            t,
            name: name.into(),
            pid,
            rss_kb: mb * 1024.0,
        }
    }

    #[test]
    fn window_keeps_requests_in_flight_during_it() {
        // (ack ms, latency us): sent at 900, 1950, 3000 and 5000.
        let acks = [
            (1_000, 100_000),
            (2_050, 100_000),
            (3_500, 500_000),
            (5_010, 10_000),
        ];
        assert_eq!(in_windows(&acks, &[(2_000, 4_000)]), vec![100_000, 500_000]);
        assert_eq!(in_windows(&acks, &[(0, 950), (4_990, 6_000)]).len(), 2);
        assert!(in_windows(&acks, &[(6_000, 7_000)]).is_empty());
        let line = latency_line(&in_windows(&acks, &[(0, 10_000)]));
        assert_eq!(
            line,
            "window_requests=4 p50_ms=100.0 p95_ms=500.0 p99_ms=500.0 max_ms=500.0"
        );
        assert_eq!(parse_window("10-20").unwrap(), (10, 20));
        assert!(parse_window("20-10").is_err() && parse_window("x").is_err());
    }

    #[test]
    fn slope_ignores_restarts_and_warm_up() {
        let mut v = Vec::new();
        // node-1 grows 10 MB per hour; restarted at t=3600 (memory drops
        // back to 100 MB): still 10 MB/h. A warm-up spike is ignored.
        for i in 0..360 {
            let t = i as f64 * 10.0;
            let mb = if t < 60.0 { 400.0 } else { 100.0 + t / 360.0 };
            v.push(s(t, "node-1", 11, mb));
            v.push(s(3600.0 + t, "node-1", 12, mb));
            // router: flat with alternating noise.
            v.push(s(
                t,
                "router",
                5,
                50.0 + if i % 2 == 0 { 1.0 } else { -1.0 },
            ));
        }
        let r = rss_slopes(&v, 60.0);
        let n1 = &r["node-1"];
        assert!((n1.mb_per_hour - 10.0).abs() < 1e-6, "{n1:?}");
        assert!(n1.stderr_mb_per_hour < 1e-6);
        assert!(!n1.flat(), "10 MB/h over 2 h is a leak: {n1:?}");
        let ro = &r["router"];
        assert!(ro.mb_per_hour.abs() < 0.5, "{ro:?}");
        assert!(ro.flat(), "{ro:?}");
        let text = rss_lines(&r);
        assert!(
            text.starts_with("rss_slope_mb_per_hour node-1=10.0 router="),
            "{text}"
        );
        assert!(text.ends_with("rss_flat node-1=no router=yes"), "{text}");
    }

    #[test]
    fn too_few_samples_give_no_slope() {
        let v = vec![s(0.0, "etcd", 1, 10.0), s(500.0, "etcd", 1, 11.0)];
        assert!(rss_slopes(&v, 120.0).is_empty());
    }
}
