//! When a learner has caught up enough to be promoted. Under steady writes
//! the leader's commit index moves on while the learner applies, so an
//! applied index at least the commit index at one poll may never happen: a
//! soak at 140k points/s on a busy
//! machine timed out after 300 s at 5540/5564, the learner a steady ~2 s
//! behind. A learner that has applied everything committed a few seconds
//! ago keeps pace with the writes and can be promoted; one falling further
//! behind cannot.

use std::collections::VecDeque;
use std::time::Duration;

/// How far behind (in time) a learner may be when it is promoted.
pub const LAG_ALLOWED: Duration = Duration::from_secs(5);

/// The leader's commit index over time, as the executor polls it.
#[derive(Debug, Default)]
pub struct CommitHistory {
    /// `(seconds since the wait began, commit index)`, oldest first.
    seen: VecDeque<(f64, u64)>,
}

impl CommitHistory {
    pub fn record(&mut self, at_secs: f64, commit: u64) {
        self.seen.push_back((at_secs, commit));
    }

    /// Caught up: the learner applied everything committed now, or
    /// everything committed `lag` ago. Drops history older than needed.
    pub fn caught_up(&mut self, now_secs: f64, applied: u64, lag: Duration) -> bool {
        let lag = lag.as_secs_f64();
        // Keep only the newest entry at least `lag` old, and newer ones.
        while self.seen.len() >= 2 && self.seen[1].0 <= now_secs - lag {
            self.seen.pop_front();
        }
        let current = self.seen.back().is_some_and(|&(_, c)| applied >= c);
        let lag_ago = self
            .seen
            .front()
            .filter(|&&(t, _)| t <= now_secs - lag)
            .is_some_and(|&(_, c)| applied >= c);
        current || lag_ago
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: Duration = Duration::from_secs(5);

    #[test]
    fn a_learner_steadily_behind_is_promoted_after_the_window() {
        let mut h = CommitHistory::default();
        // Commit grows 10 per second; the learner is 20 entries (2 s) behind.
        for s in 0..5 {
            h.record(s as f64, 100 + 10 * s);
            assert!(!h.caught_up(s as f64, 80 + 10 * s, LAG), "at {s} s");
        }
        h.record(5.0, 150);
        assert!(
            h.caught_up(5.0, 130, LAG),
            "applied 130 >= 100 committed 5 s ago"
        );
    }

    #[test]
    fn a_learner_falling_behind_is_not() {
        let mut h = CommitHistory::default();
        for s in 0..20 {
            h.record(s as f64, 100 + 10 * s);
            // Applies 5 per second while 10 per second are committed.
            assert!(!h.caught_up(s as f64, 50 + 5 * s, LAG), "at {s} s");
        }
    }

    #[test]
    fn an_idle_shard_is_caught_up_at_once_and_history_stays_short() {
        let mut h = CommitHistory::default();
        h.record(0.0, 7);
        assert!(h.caught_up(0.0, 7, LAG));
        for s in 1..1000 {
            h.record(s as f64 * 0.2, 7);
            h.caught_up(s as f64 * 0.2, 0, LAG);
        }
        assert!(h.seen.len() <= 27, "{}", h.seen.len());
    }
}
