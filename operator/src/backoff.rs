//! When to try a failed step of a shard move again: a pure, exponential
//! backoff policy (no clock, no randomness) that the executor sleeps by.
//!
//! Why: a `TransferLeader` to a replica promoted a moment ago fails while
//! that replica has not yet applied its own promotion (Raft ignores the
//! transfer on a node that still sees itself as a learner) or while the
//! leader is busy; it aborted 2 of 6 rebalance runs under load. The
//! same call succeeds a moment later, so it is retried within the run.

use std::time::Duration;

/// Exponential backoff: `first`, then multiplied by `factor` per failure,
/// capped at `max_delay`; at most `attempts` tries in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub factor: u32,
    pub max_delay: Duration,
    /// Tries in all, the first one included (1: never retry).
    pub attempts: u32,
}

impl Backoff {
    /// Steps of a move (leader transfers, membership changes): 10 tries over ~26 s of waiting (0.2, 0.4, 0.8,
    /// 1.6, 3.2, then 5 s). Under half the sustainable write rate a replica
    /// promoted a moment ago took up to 6 s to see itself as a voter.
    pub const MOVE_STEP: Backoff = Backoff {
        first: Duration::from_millis(200),
        factor: 2,
        max_delay: Duration::from_secs(5),
        attempts: 10,
    };

    /// The pause after `failures` failed tries (1 = after the first
    /// failure), or `None` when no try is left.
    pub fn delay(&self, failures: u32) -> Option<Duration> {
        if failures == 0 || failures >= self.attempts {
            return None;
        }
        let mut d = self.first;
        for _ in 1..failures {
            d = d.saturating_mul(self.factor.max(1));
            if d >= self.max_delay {
                return Some(self.max_delay);
            }
        }
        Some(d.min(self.max_delay))
    }

    /// Total pause over all retries (what a caller waits at most, besides
    /// the tries themselves).
    pub fn total_delay(&self) -> Duration {
        (1..self.attempts).filter_map(|f| self.delay(f)).sum()
    }
}

/// Whether a node's refusal of an Admin call means "not carried out, try
/// again later": its answer for a shard that is temporarily unavailable
/// (`...; retry later`), e.g. a membership change while the previous one is
/// still being applied, or one Raft dropped.
pub fn refused_for_now(message: &str) -> bool {
    message.trim_end().ends_with("retry later")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn doubles_then_caps_then_stops() {
        let b = Backoff::MOVE_STEP;
        let delays: Vec<_> = (1..=10).map(|f| b.delay(f)).collect();
        assert_eq!(
            delays,
            vec![
                Some(ms(200)),
                Some(ms(400)),
                Some(ms(800)),
                Some(ms(1600)),
                Some(ms(3200)),
                Some(ms(5000)),
                Some(ms(5000)),
                Some(ms(5000)),
                Some(ms(5000)),
                None
            ]
        );
        assert_eq!(b.total_delay(), ms(26_200));
        assert_eq!(b.delay(0), None, "no failure, no pause");
    }

    #[test]
    fn tells_refusals_for_now_from_final_ones() {
        // The node's answers (node/server services.rs + WalError).
        assert!(refused_for_now(
            "remove replica 4 of shard 2: shard temporarily unavailable: another membership change of this shard is in progress; retry later"
        ));
        assert!(refused_for_now(
            "add learner 4 to shard 1: shard temporarily unavailable: membership change dropped: x; retry later"
        ));
        assert!(!refused_for_now(
            "promote learner 4 of shard 1: this node is not the leader; retry at the leader"
        ));
        assert!(!refused_for_now(
            "remove replica 9 of shard 1: node 9 is not a member"
        ));
    }

    #[test]
    fn one_attempt_never_retries_and_huge_counts_do_not_overflow() {
        let once = Backoff {
            attempts: 1,
            ..Backoff::MOVE_STEP
        };
        assert_eq!(once.delay(1), None);
        let many = Backoff {
            first: Duration::from_secs(1),
            factor: 1000,
            max_delay: Duration::from_secs(60),
            attempts: u32::MAX,
        };
        assert_eq!(many.delay(1_000_000), Some(Duration::from_secs(60)));
        let flat = Backoff {
            factor: 0,
            ..Backoff::MOVE_STEP
        };
        assert_eq!(flat.delay(5), Some(ms(200)), "factor 0 acts as 1");
    }
}
