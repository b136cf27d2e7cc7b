//! Rebuilding a stuck replica from its leader's snapshot: a replica whose
//! apply keeps failing at one entry (past `rebuild_after_failed_applies`),
//! or one an operator asks to rebuild, requests a snapshot from its leader
//! (raft-rs `request_snapshot`); the snapshot replaces its state machine
//! and covers the stuck entry. A leader first hands leadership to the
//! most up-to-date other voter, since only a follower can ask.

use std::sync::atomic::Ordering;

use raft::StateRole;

use super::{Peer, Poller};
use crate::{metrics, NodeId, Rebuild};

/// A rebuild this replica wants, and whether its snapshot request is out.
#[derive(Debug, Clone, Copy)]
pub(super) struct RebuildState {
    pub(super) why: Rebuild,
    pub(super) requested: bool,
}

/// What a replica that wants a rebuild does next (pure, for tests).
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Nothing now (no leader known, or waiting for the snapshot).
    Wait,
    /// It leads: hand leadership to this voter first.
    Transfer(NodeId),
    /// Ask the leader for a snapshot.
    Request,
}

/// `voters_matched`: every other voter with the index it matched.
fn next_step(
    is_leader: bool,
    leader_known: bool,
    requested: bool,
    voters_matched: &[(NodeId, u64)],
) -> Step {
    if requested {
        return Step::Wait;
    }
    if is_leader {
        return voters_matched
            .iter()
            .max_by_key(|(id, matched)| (*matched, std::cmp::Reverse(*id)))
            .map_or(Step::Wait, |(id, _)| Step::Transfer(*id));
    }
    if leader_known {
        Step::Request
    } else {
        Step::Wait
    }
}

impl Peer {
    /// Marks this replica for a rebuild (idempotent).
    pub(super) fn want_rebuild(&mut self, why: Rebuild) {
        if self.rebuild.is_none() {
            tracing::warn!(
                shard = self.shard,
                why = why.as_str(),
                "rebuilding this replica from its leader's snapshot"
            );
            metrics::REPLICA_REBUILDS
                .with_label_values(&[why.as_str()])
                .inc();
            self.rebuild = Some(RebuildState {
                why,
                requested: false,
            });
        }
    }

    /// A snapshot was restored: a requested rebuild is done.
    pub(super) fn rebuild_done(&mut self, index: u64) {
        if let Some(r) = self.rebuild.take() {
            tracing::info!(
                shard = self.shard,
                index,
                why = r.why.as_str(),
                "replica rebuilt from its leader's snapshot"
            );
        }
    }

    fn drive_rebuild(&mut self, bound: u32) {
        if self.restore.is_some() {
            return;
        }
        let attempts = self
            .handle
            .apply_stall
            .lock()
            .as_ref()
            .map_or(0, |st| st.attempts);
        if bound > 0 && attempts >= bound {
            self.want_rebuild(Rebuild::Automatic);
        }
        let Some(mut r) = self.rebuild else {
            return;
        };
        let raft = &self.node.raft;
        if r.requested && raft.pending_request_snapshot == raft::INVALID_INDEX {
            // raft-rs dropped the request (a new term resets it) without a
            // snapshot arriving: ask again.
            r.requested = false;
        }
        let me = raft.id;
        let voters: Vec<(NodeId, u64)> = raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && raft.prs().conf().voters().contains(**id))
            .map(|(id, pr)| (*id, pr.matched))
            .collect();
        let step = next_step(
            raft.state == StateRole::Leader,
            raft.leader_id != raft::INVALID_ID,
            r.requested,
            &voters,
        );
        match step {
            Step::Wait => {}
            Step::Transfer(to) => {
                if raft.lead_transferee != Some(to) {
                    tracing::warn!(
                        shard = self.shard,
                        to,
                        "handing leadership over before rebuilding this replica"
                    );
                    self.node.transfer_leader(to);
                }
            }
            Step::Request => match self.node.request_snapshot() {
                Ok(()) => {
                    tracing::warn!(
                        shard = self.shard,
                        applied = self.handle.applied.load(Ordering::Acquire),
                        "asked the leader for a snapshot to rebuild this replica"
                    );
                    r.requested = true;
                }
                Err(e) => {
                    tracing::debug!(shard = self.shard, error = %e, "snapshot request not sent yet")
                }
            },
        }
        self.rebuild = Some(r);
    }
}

impl Poller {
    /// On each tick: start, drive and finish rebuilds.
    pub(super) fn drive_rebuilds(&mut self) {
        let bound = self.inner.cfg.rebuild_after_failed_applies;
        for p in self.peers.values_mut() {
            p.drive_rebuild(bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_hands_over_to_the_most_caught_up_voter_then_a_follower_asks() {
        assert_eq!(
            next_step(true, true, false, &[(2, 10), (3, 12), (4, 12)]),
            Step::Transfer(3)
        );
        assert_eq!(next_step(true, true, false, &[]), Step::Wait);
        assert_eq!(next_step(false, true, false, &[]), Step::Request);
        assert_eq!(next_step(false, false, false, &[]), Step::Wait);
        assert_eq!(next_step(false, true, true, &[]), Step::Wait);
    }
}
