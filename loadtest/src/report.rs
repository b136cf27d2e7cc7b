//! Tables (markdown) and JSON for every run kind, and the sustainable rate.

use crate::resources::ComponentUsage;
use crate::runner::StepOutcome;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// What a step must meet to count as sustainable: a delivery ratio and a
/// latency budget at one percentile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Budget {
    /// Minimum % of the offered points acknowledged.
    pub min_pct: f64,
    /// The latency percentile the budget applies to (95 or 99).
    pub percentile: u8,
    pub max_ms: f64,
}

/// The ingest ramp study's definition: >= 99% delivered at p95 <= 250 ms.
pub const RAMP_BUDGET: Budget = Budget {
    min_pct: 99.0,
    percentile: 95,
    max_ms: 250.0,
};

/// Small writes (issue 18): many writers each waiting on one small request
/// care about the tail, so p99 <= 100 ms, and >= 99% delivered.
pub const SMALL_WRITES_BUDGET: Budget = Budget {
    min_pct: 99.0,
    percentile: 99,
    max_ms: 100.0,
};

impl Budget {
    pub fn describe(&self) -> String {
        format!(
            ">= {}% of offered, p{} <= {} ms",
            self.min_pct, self.percentile, self.max_ms
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    /// `40 req/s`, `64 VUs`, `line b=1000`...
    pub label: String,
    pub offered_rps: Option<f64>,
    pub vus: Option<u64>,
    pub duration_s: f64,
    pub points_per_request: f64,
    pub offered_pps: Option<f64>,
    pub achieved_pps: f64,
    pub achieved_rps: f64,
    pub pct_of_offered: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub sent: u64,
    pub acked: u64,
    pub dropped: u64,
    pub errors: BTreeMap<String, u64>,
    pub resources: Vec<ComponentUsage>,
}

impl StepReport {
    pub fn from_outcome(
        label: String,
        offered_rps: Option<f64>,
        vus: Option<u64>,
        points_per_request: f64,
        mut o: StepOutcome,
    ) -> StepReport {
        let secs = o.elapsed.as_secs_f64().max(1e-9);
        let p = o.stats.percentiles_ms(&[50.0, 95.0, 99.0]);
        let achieved_pps = o.stats.acked_points as f64 / secs;
        let achieved_rps = o.stats.acked_requests as f64 / secs;
        let offered_pps = offered_rps.map(|r| r * points_per_request);
        StepReport {
            label,
            offered_rps,
            vus,
            duration_s: secs,
            points_per_request,
            offered_pps,
            achieved_pps,
            achieved_rps,
            // Of the offered requests: their sizes vary in the small-write
            // pool, so points would read over 100% on a step of large ones.
            pct_of_offered: offered_rps.map(|r| 100.0 * achieved_rps / r.max(1e-9)),
            p50_ms: p[0],
            p95_ms: p[1],
            p99_ms: p[2],
            sent: o.stats.sent,
            acked: o.stats.acked_requests,
            dropped: o.stats.dropped,
            errors: o.stats.errors,
            resources: o.resources,
        }
    }

    pub fn is_sustainable(&self, b: &Budget) -> bool {
        let lat = if b.percentile >= 99 {
            self.p99_ms
        } else {
            self.p95_ms
        };
        matches!((self.pct_of_offered, lat),
            (Some(pct), Some(ms)) if pct >= b.min_pct && ms <= b.max_ms)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub name: String,
    pub mode: String,
    pub target: String,
    pub protocol: String,
    pub dataset: String,
    pub seed: u64,
    pub budget: Budget,
    pub steps: Vec<StepReport>,
    /// Achieved points/s of the highest sustainable step (0 when none).
    pub sustainable_points_per_sec: f64,
    /// Achieved requests/s of that same step.
    pub sustainable_requests_per_sec: f64,
    pub peak_points_per_sec: f64,
    pub notes: Vec<String>,
}

impl RunReport {
    pub fn finish(mut self) -> RunReport {
        self.peak_points_per_sec = self
            .steps
            .iter()
            .map(|s| s.achieved_pps)
            .fold(0.0, f64::max);
        let best = sustainable(&self.steps, &self.budget);
        self.sustainable_points_per_sec = best.map_or(0.0, |s| s.achieved_pps);
        self.sustainable_requests_per_sec = best.map_or(0.0, |s| s.achieved_rps);
        self
    }
}

/// The highest offered step that is sustainable under `budget`.
pub fn sustainable<'a>(steps: &'a [StepReport], budget: &Budget) -> Option<&'a StepReport> {
    steps
        .iter()
        .filter(|s| s.is_sustainable(budget))
        .max_by(|a, b| {
            a.offered_pps
                .unwrap_or(0.0)
                .total_cmp(&b.offered_pps.unwrap_or(0.0))
        })
}

pub fn fmt_int(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn fmt_ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(ms) if ms >= 1000.0 => format!("{:.2} s", ms / 1000.0),
        Some(ms) if ms >= 10.0 => format!("{ms:.0} ms"),
        Some(ms) => format!("{ms:.1} ms"),
    }
}

fn fmt_errors(e: &BTreeMap<String, u64>) -> String {
    if e.is_empty() {
        return "0".into();
    }
    e.iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn fmt_cpu(r: &[ComponentUsage]) -> String {
    r.iter()
        .filter_map(|c| c.cpu_cores.map(|v| format!("{} {v:.2}", c.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_rss(r: &[ComponentUsage]) -> String {
    r.iter()
        .filter_map(|c| c.peak_rss_mib.map(|v| format!("{} {v:.0}", c.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ramp table (open model).
pub fn ramp_table(r: &RunReport) -> String {
    let with_res = r.steps.iter().any(|s| s.resources.len() > 1);
    let mut out = String::new();
    let _ = write!(
        out,
        "| offered | offered pts/s | achieved pts/s | achieved req/s | % of offered | p50 | p95 | p99 | dropped | errors |"
    );
    if with_res {
        out.push_str(" CPU cores | peak RSS MiB |");
    }
    out.push('\n');
    out.push_str("|---|---|---|---|---|---|---|---|---|---|");
    if with_res {
        out.push_str("---|---|");
    }
    out.push('\n');
    for s in &r.steps {
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {:.1}% | {} | {} | {} | {} | {} |",
            s.label,
            fmt_int(s.offered_pps.unwrap_or(0.0)),
            fmt_int(s.achieved_pps),
            fmt_int(s.achieved_rps),
            s.pct_of_offered.unwrap_or(0.0),
            fmt_ms(s.p50_ms),
            fmt_ms(s.p95_ms),
            fmt_ms(s.p99_ms),
            s.dropped,
            fmt_errors(&s.errors)
        );
        if with_res {
            let _ = write!(
                out,
                " {} | {} |",
                fmt_cpu(&s.resources),
                fmt_rss(&s.resources)
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nsustainable ({}): {} points/s ({} requests/s); peak: {} points/s",
        r.budget.describe(),
        fmt_int(r.sustainable_points_per_sec),
        fmt_int(r.sustainable_requests_per_sec),
        fmt_int(r.peak_points_per_sec)
    );
    out
}

/// The closed-model table (and the small-write profile).
pub fn closed_table(r: &RunReport) -> String {
    let with_res = r.steps.iter().any(|s| s.resources.len() > 1);
    let mut out = String::from("| clients | requests/s | points/s | p50 | p95 | p99 | errors |");
    if with_res {
        out.push_str(" CPU cores | peak RSS MiB |");
    }
    out.push_str("\n|---|---|---|---|---|---|---|");
    if with_res {
        out.push_str("---|---|");
    }
    out.push('\n');
    for s in &r.steps {
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            s.label,
            fmt_int(s.achieved_rps),
            fmt_int(s.achieved_pps),
            fmt_ms(s.p50_ms),
            fmt_ms(s.p95_ms),
            fmt_ms(s.p99_ms),
            fmt_errors(&s.errors)
        );
        if with_res {
            let _ = write!(
                out,
                " {} | {} |",
                fmt_cpu(&s.resources),
                fmt_rss(&s.resources)
            );
        }
        out.push('\n');
    }
    out
}

/// The protocol table: one row per (protocol, series, batch).
pub fn protocol_table(steps: &[StepReport]) -> String {
    let mut out = String::from(
        "| protocol / series / batch | rows | rows/s | p50 | p99 | errors |\n|---|---|---|---|---|---|\n",
    );
    for s in steps {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            s.label,
            fmt_int((s.acked as f64) * s.points_per_request),
            fmt_int(s.achieved_pps),
            fmt_ms(s.p50_ms),
            fmt_ms(s.p99_ms),
            fmt_errors(&s.errors)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(offered: f64, achieved: f64, p95: f64) -> StepReport {
        StepReport {
            label: format!("{offered}"),
            offered_rps: Some(offered),
            vus: None,
            duration_s: 1.0,
            points_per_request: 1.0,
            offered_pps: Some(offered),
            achieved_pps: achieved,
            achieved_rps: achieved,
            pct_of_offered: Some(100.0 * achieved / offered),
            p50_ms: Some(p95 / 2.0),
            p95_ms: Some(p95),
            p99_ms: Some(p95),
            sent: 0,
            acked: 0,
            dropped: 0,
            errors: BTreeMap::new(),
            resources: vec![],
        }
    }

    #[test]
    fn sustainable_is_highest_step_within_budget() {
        let steps = vec![
            step(100.0, 100.0, 10.0),
            step(200.0, 199.0, 240.0),
            step(300.0, 298.0, 400.0), // too slow
            step(400.0, 350.0, 100.0), // falls behind
        ];
        let best = |s: &[StepReport]| sustainable(s, &RAMP_BUDGET).map(|s| s.achieved_pps);
        assert_eq!(best(&steps), Some(199.0));
        assert_eq!(best(&steps[2..]), None);
    }

    #[test]
    fn small_writes_budget_reads_p99() {
        let mut s = step(100.0, 100.0, 50.0);
        s.p99_ms = Some(150.0);
        assert!(s.is_sustainable(&RAMP_BUDGET));
        assert!(!s.is_sustainable(&SMALL_WRITES_BUDGET));
        s.p99_ms = Some(90.0);
        assert!(s.is_sustainable(&SMALL_WRITES_BUDGET));
        s.pct_of_offered = Some(98.0);
        assert!(!s.is_sustainable(&SMALL_WRITES_BUDGET));
    }

    #[test]
    fn formats_thousands() {
        assert_eq!(fmt_int(1_234_567.4), "1,234,567");
        assert_eq!(fmt_int(999.0), "999");
        assert_eq!(fmt_int(0.0), "0");
    }
}
