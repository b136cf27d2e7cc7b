//! Per-step counters and latency percentiles.

use crate::target::Outcome;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Default, Clone)]
pub struct StepStats {
    /// Latency of every answered request (acked or rejected), microseconds.
    pub latencies_us: Vec<u64>,
    pub sent: u64,
    pub acked_requests: u64,
    pub acked_points: u64,
    /// Requests that could not start on time (open model only).
    pub dropped: u64,
    pub errors: BTreeMap<String, u64>,
}

impl StepStats {
    pub fn record(&mut self, outcome: &Outcome, points: u64, latency: Duration) {
        self.sent += 1;
        match outcome {
            Outcome::Acked => {
                self.acked_requests += 1;
                self.acked_points += points;
                self.latencies_us.push(latency.as_micros() as u64);
            }
            Outcome::Rejected(_) => self.latencies_us.push(latency.as_micros() as u64),
            Outcome::Timeout | Outcome::Transport => {}
        }
        if let Some(label) = outcome.error_label() {
            *self.errors.entry(label).or_default() += 1;
        }
    }

    pub fn merge(&mut self, other: StepStats) {
        self.latencies_us.extend(other.latencies_us);
        self.sent += other.sent;
        self.acked_requests += other.acked_requests;
        self.acked_points += other.acked_points;
        self.dropped += other.dropped;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
    }

    /// Percentiles in milliseconds (nearest rank); `None` when nothing answered.
    pub fn percentiles_ms(&mut self, qs: &[f64]) -> Vec<Option<f64>> {
        self.latencies_us.sort_unstable();
        qs.iter()
            .map(|q| percentile(&self.latencies_us, *q).map(|us| us as f64 / 1000.0))
            .collect()
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 95.0), Some(95));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 1.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn records_outcomes() {
        let mut s = StepStats::default();
        s.record(&Outcome::Acked, 10, Duration::from_millis(2));
        s.record(
            &Outcome::Rejected("429".into()),
            10,
            Duration::from_millis(1),
        );
        s.record(&Outcome::Timeout, 10, Duration::from_secs(5));
        assert_eq!(s.sent, 3);
        assert_eq!(s.acked_points, 10);
        assert_eq!(s.errors.get("429"), Some(&1));
        assert_eq!(s.errors.get("timeout"), Some(&1));
        assert_eq!(s.latencies_us.len(), 2);
    }
}
