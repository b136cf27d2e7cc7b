//! The router -> node hop of a write as plain data: what the router does
//! after each answer of a node ([`LeaderRetry::after_answer`]) and how long
//! it pauses between attempts. `cluster.rs` runs it against real nodes until
//! the request deadline; the decisions are tested here without sockets.
//! docs/architecture.md ("Request path") lists every hop's budget and
//! retry policy.

use crate::error::Error;
use crate::write::node_mux::Answer;
use shardhouse_common::proto::write_response::Result as WriteResult;
use shardhouse_common::status::{self, StatusCode};
use std::time::Duration;

/// A node as the router addresses it: (node id, gRPC address).
pub type Target = (u64, String);

/// Where the next attempt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retarget {
    /// The same node again (it answered nothing usable).
    Same,
    /// The leader a node named; remembered for later writes to the shard.
    Leader(Target),
    /// The next replica of the shard map; the remembered leader is dropped.
    NextReplica,
}

/// What the router does after one attempt of a shard write.
#[derive(Debug)]
pub enum Next {
    Committed,
    Retry {
        to: Retarget,
        /// Pause ([`LeaderRetry::pause`]) before the attempt; a fresh
        /// leader hint is tried at once.
        backoff: bool,
        /// Said in the 503 when the deadline passes.
        reason: String,
    },
    /// Retrying cannot help before the deadline (overload: the client
    /// backs off; a rejection: the batch can never be stored).
    Fail(Error),
}

/// The router -> node retry policy: follow `NotLeader` hints, fail over to
/// the next replica on `Unavailable` and transport errors, back off
/// exponentially between attempts; the request deadline bounds it all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderRetry {
    /// Pause after the first failed attempt; doubles per attempt.
    pub first_pause: Duration,
    /// Longest pause between two attempts.
    pub max_pause: Duration,
    /// Leader hints followed at once before pausing (bouncing between stale
    /// hints during an election must not spin).
    pub hints_at_once: u32,
}

impl Default for LeaderRetry {
    fn default() -> Self {
        LeaderRetry {
            first_pause: Duration::from_millis(20),
            max_pause: Duration::from_millis(250),
            hints_at_once: 3,
        }
    }
}

impl LeaderRetry {
    /// The pause before attempt `attempt + 1` (`attempt` >= 1 finished).
    pub fn pause(&self, attempt: u32) -> Duration {
        let doubled = self
            .first_pause
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        doubled.min(self.max_pause)
    }

    /// The decision after attempt number `attempt` to `target` answered.
    pub fn after_answer(&self, shard: u32, attempt: u32, target: &Target, answer: Answer) -> Next {
        let r = match answer {
            Err(status) => {
                return Next::Retry {
                    to: Retarget::NextReplica,
                    backoff: true,
                    reason: format!("node {} at {}: {}", target.0, target.1, status.message()),
                }
            }
            Ok(resp) => match resp.result {
                Some(r) => r,
                None => {
                    return Next::Retry {
                        to: Retarget::Same,
                        backoff: true,
                        reason: format!("node {} sent an empty answer", target.0),
                    }
                }
            },
        };
        if let WriteResult::NotLeader(nl) = &r {
            let reason = format!("node {} is not the leader", target.0);
            if !nl.leader_addr.is_empty() && nl.leader_hint != target.0 {
                return Next::Retry {
                    to: Retarget::Leader((nl.leader_hint, nl.leader_addr.clone())),
                    backoff: attempt > self.hints_at_once,
                    reason,
                };
            }
            // Election in progress: try the next replica soon.
            return Next::Retry {
                to: Retarget::NextReplica,
                backoff: true,
                reason,
            };
        }
        match status::write_status(&r) {
            None => Next::Committed,
            Some((StatusCode::Overloaded, reason, after)) => Next::Fail(Error::Overloaded(
                format!(
                    "shard {shard} leader node {} overloaded: {reason}",
                    target.0
                ),
                after.unwrap_or(self.first_pause),
            )),
            Some((code, reason, _)) if code.is_retryable() => Next::Retry {
                to: Retarget::NextReplica,
                backoff: true,
                reason: format!("node {}: {reason}", target.0),
            },
            Some((_, reason, _)) => Next::Fail(Error::Rejected {
                shard,
                reason: reason.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::proto::{
        Committed, NotLeader, Overloaded, Rejected, ShardUnavailable, WriteResponse,
    };

    fn answer(r: WriteResult) -> Answer {
        Ok(WriteResponse { result: Some(r) })
    }

    fn not_leader(hint: u64, addr: &str) -> Answer {
        answer(WriteResult::NotLeader(NotLeader {
            leader_hint: hint,
            leader_addr: addr.into(),
        }))
    }

    #[test]
    fn each_node_answer_leads_to_one_next_step() {
        let p = LeaderRetry::default();
        let at = (1, "n1:7".to_string());
        let retry = |next: Next| match next {
            Next::Retry { to, backoff, .. } => (to, backoff),
            other => panic!("expected a retry, got {other:?}"),
        };
        let committed = answer(WriteResult::Committed(Committed { index: 3, term: 1 }));
        assert!(matches!(
            p.after_answer(4, 1, &at, committed),
            Next::Committed
        ));
        // A fresh hint is followed at once, then with pauses.
        let to_two = Retarget::Leader((2, "n2:7".into()));
        assert_eq!(
            retry(p.after_answer(4, 1, &at, not_leader(2, "n2:7"))),
            (to_two.clone(), false)
        );
        assert_eq!(
            retry(p.after_answer(4, 4, &at, not_leader(2, "n2:7"))),
            (to_two, true)
        );
        // No usable hint (election) or a hint naming the asked node.
        for nl in [not_leader(0, ""), not_leader(1, "n1:7")] {
            assert_eq!(
                retry(p.after_answer(4, 1, &at, nl)),
                (Retarget::NextReplica, true)
            );
        }
        let unavailable = answer(WriteResult::Unavailable(ShardUnavailable {
            reason: "applying".into(),
        }));
        assert_eq!(
            retry(p.after_answer(4, 1, &at, unavailable)),
            (Retarget::NextReplica, true)
        );
        let refused = Err(tonic::Status::unavailable("connection refused"));
        assert_eq!(
            retry(p.after_answer(4, 1, &at, refused)),
            (Retarget::NextReplica, true)
        );
        let empty = Ok(WriteResponse { result: None });
        assert_eq!(
            retry(p.after_answer(4, 1, &at, empty)),
            (Retarget::Same, true)
        );
    }

    #[test]
    fn overload_and_rejection_end_the_write_with_what_clients_see() {
        let p = LeaderRetry::default();
        let at = (1, "n1:7".to_string());
        let over = answer(WriteResult::Overloaded(Overloaded {
            retry_after_ms: 1500,
            reason: "busy".into(),
        }));
        let Next::Fail(e) = p.after_answer(4, 1, &at, over) else {
            panic!("overload must fail the write");
        };
        assert_eq!(e.status(), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after(), Some(Duration::from_millis(1500)));
        assert!(
            e.to_string()
                .contains("shard 4 leader node 1 overloaded: busy"),
            "{e}"
        );
        let rejected = answer(WriteResult::Rejected(Rejected {
            reason: "field type conflict".into(),
        }));
        let Next::Fail(e) = p.after_answer(4, 1, &at, rejected) else {
            panic!("a rejection must fail the write");
        };
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST);
        assert!(
            e.to_string().ends_with("shard 4: field type conflict"),
            "{e}"
        );
    }

    #[test]
    fn pauses_double_up_to_the_cap() {
        let p = LeaderRetry::default();
        let ms: Vec<u128> = (1..=7).map(|a| p.pause(a).as_millis()).collect();
        assert_eq!(ms, [20, 40, 80, 160, 250, 250, 250]);
        assert_eq!(p.pause(u32::MAX), p.max_pause);
    }
}
