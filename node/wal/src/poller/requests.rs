//! A poll thread handling what callers ask of it ([`PollMsg`], one named
//! step per request), and the deadlines of the requests it holds
//! (proposals, membership changes, reads, leader transfers).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use raft::eraftpb::{ConfChange, EntryType, Message};
use raft::StateRole;
use tokio::sync::oneshot;

use super::{ConfWaiter, Poller, Proposal, ReadWaiter, TransferWaiter};
use crate::error::{Result, WalError};
use crate::handle::ShardHandle;
use crate::messages::PollMsg;
use crate::{Committed, NodeId, ShardId};

impl Poller {
    pub(super) fn handle_msg(&mut self, m: PollMsg) {
        match m {
            PollMsg::Step { shard, msg } => self.step(shard, msg),
            PollMsg::Propose {
                handle,
                data,
                started,
                tx,
            } => self.propose(handle, data, started, tx),
            PollMsg::ConfChange { shard, cc, tx } => self.propose_conf_change(shard, cc, tx),
            PollMsg::TransferLeader { shard, to, tx } => self.transfer_leader(shard, to, tx),
            PollMsg::ReportUnreachable { shard, node } => {
                if let Some(p) = self.peers.get_mut(&shard) {
                    p.node.report_unreachable(node);
                }
            }
            PollMsg::ReportSnapshot {
                shard,
                node,
                delivered,
            } => {
                if let Some(p) = self.peers.get_mut(&shard) {
                    let status = if delivered {
                        raft::SnapshotStatus::Finish
                    } else {
                        raft::SnapshotStatus::Failure
                    };
                    p.node.report_snapshot(node, status);
                }
            }
            PollMsg::ReadIndex { shard, tx } => self.read_index(shard, tx),
            PollMsg::Create { shard, voters, tx } => {
                let r = if self.peers.contains_key(&shard) {
                    Ok(())
                } else {
                    self.create_peer(shard, voters)
                };
                let _ = tx.send(r);
            }
            PollMsg::Destroy { shard, tx } => {
                let _ = tx.send(self.destroy_peer(shard));
            }
            PollMsg::Restored { shard, index } => {
                if let Some(p) = self.peers.get_mut(&shard) {
                    p.restored(index);
                }
            }
            PollMsg::Rebuild { shard, why, tx } => {
                let r = match self.peers.get_mut(&shard) {
                    Some(p) => {
                        p.want_rebuild(why);
                        *p.handle.status.lock() = p.status();
                        Ok(())
                    }
                    None => Err(WalError::ShardNotFound(shard)),
                };
                let _ = tx.send(r);
            }
            PollMsg::Barrier(tx) => self.barriers.push(tx),
            PollMsg::Tick | PollMsg::Shutdown => {}
        }
    }

    /// A Raft message from a peer.
    fn step(&mut self, shard: ShardId, mut msg: Message) {
        // A shard restoring a snapshot holds its Ready, and raft-rs
        // must not queue new messages until that Ready advanced;
        // what is dropped here the leader sends again.
        if let Some(p) = self.peers.get_mut(&shard).filter(|p| p.restore.is_none()) {
            if msg.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeat {
                // A replica rebuilt after losing its log (disk.rs)
                // is behind what its leader last saw it match;
                // raft-rs aborts on a commit past the last entry.
                msg.commit = msg.commit.min(p.node.raft.raft_log.last_index());
            }
            if let Err(e) = p.node.step(msg) {
                tracing::debug!(shard, error = %e, "raft step rejected a message");
            }
        }
    }

    /// A caller's entry: appended to the leader's log, answered once
    /// applied (or failed at once when this replica cannot take it).
    fn propose(
        &mut self,
        handle: Arc<ShardHandle>,
        data: Vec<u8>,
        started: Instant,
        tx: oneshot::Sender<Result<Committed>>,
    ) {
        let size = data.len();
        let Some(p) = self.peers.get_mut(&handle.shard) else {
            handle.inflight_bytes.fetch_sub(size, Ordering::AcqRel);
            let _ = tx.send(Err(WalError::ShardNotFound(handle.shard)));
            return;
        };
        let proposal = |index, term| Proposal {
            index,
            term,
            size,
            started,
            tx,
        };
        if p.node.raft.state != StateRole::Leader {
            let err = p.not_leader();
            p.fail_proposal(proposal(0, 0), err);
            return;
        }
        let before = p.node.raft.raft_log.last_index();
        let r = p.node.propose(Vec::new(), data);
        let index = p.node.raft.raft_log.last_index();
        match r {
            Ok(()) if index > before => {
                let term = p.node.raft.term;
                p.proposals.push_back(proposal(index, term));
            }
            Ok(()) => p.fail_proposal(
                proposal(0, 0),
                WalError::Unavailable("proposal dropped by raft".into()),
            ),
            Err(e) => p.fail_proposal(
                proposal(0, 0),
                WalError::Unavailable(format!(
                    "proposal dropped ({e}); a leader transfer may be in progress"
                )),
            ),
        }
    }

    /// A membership change, answered once committed.
    fn propose_conf_change(
        &mut self,
        shard: ShardId,
        cc: ConfChange,
        tx: oneshot::Sender<Result<()>>,
    ) {
        let Some(p) = self.peers.get_mut(&shard) else {
            let _ = tx.send(Err(WalError::ShardNotFound(shard)));
            return;
        };
        if p.node.raft.state != StateRole::Leader {
            let _ = tx.send(Err(p.not_leader()));
            return;
        }
        let before = p.node.raft.raft_log.last_index();
        if let Err(e) = p.node.propose_conf_change(Vec::new(), cc) {
            let _ = tx.send(Err(WalError::Unavailable(format!(
                "membership change dropped: {e}"
            ))));
            return;
        }
        let index = p.node.raft.raft_log.last_index();
        let accepted = index > before
            && p.node
                .raft
                .raft_log
                .entries(index, 1, raft::GetEntriesContext::empty(false))
                .ok()
                .and_then(|v| v.first().map(|e| e.get_entry_type()))
                == Some(EntryType::EntryConfChange);
        if !accepted {
            // raft-rs turns a conf change into an empty entry while
            // an earlier one is not applied yet.
            let _ = tx.send(Err(WalError::Unavailable(
                "another membership change of this shard is in progress".into(),
            )));
            return;
        }
        let term = p.node.raft.term;
        p.conf_waiters.push(ConfWaiter {
            index,
            term,
            started: self.inner.clock.now(),
            tx,
        });
    }

    /// Moves leadership to `to`, answered once it moved (or timed out).
    fn transfer_leader(&mut self, shard: ShardId, to: NodeId, tx: oneshot::Sender<Result<()>>) {
        let Some(p) = self.peers.get_mut(&shard) else {
            let _ = tx.send(Err(WalError::ShardNotFound(shard)));
            return;
        };
        if p.node.raft.leader_id == to && to != 0 {
            let _ = tx.send(Ok(()));
            return;
        }
        if p.node.raft.state != StateRole::Leader {
            let _ = tx.send(Err(p.not_leader()));
            return;
        }
        p.node.transfer_leader(to);
        let cfg = &self.inner.cfg;
        let deadline = self.inner.clock.now() + cfg.tick_interval * (cfg.election_ticks as u32 * 3);
        if let Some(old) = p.transfer.replace(TransferWaiter { to, deadline, tx }) {
            let _ = old.tx.send(Err(WalError::Unavailable(
                "superseded by a newer leader transfer".into(),
            )));
        }
    }

    /// A Raft read index, answered once leadership is confirmed.
    fn read_index(&mut self, shard: ShardId, tx: oneshot::Sender<Result<u64>>) {
        let Some(p) = self.peers.get_mut(&shard) else {
            let _ = tx.send(Err(WalError::ShardNotFound(shard)));
            return;
        };
        if p.restore.is_some() {
            let _ = tx.send(Err(WalError::Unavailable(format!(
                "shard {shard} is restoring a snapshot here; read from another replica"
            ))));
            return;
        }
        if p.node.raft.leader_id == 0 {
            let _ = tx.send(Err(WalError::Unavailable(format!(
                "shard {shard} has no known leader (election in progress); retry"
            ))));
            return;
        }
        p.next_read_ctx += 1;
        let ctx = p.next_read_ctx.to_be_bytes().to_vec();
        p.node.read_index(ctx.clone());
        let cfg = &self.inner.cfg;
        let deadline = self.inner.clock.now() + cfg.tick_interval * (cfg.election_ticks as u32 * 2);
        p.reads.push_back(ReadWaiter { ctx, deadline, tx });
    }

    pub(super) fn check_timeouts(&mut self) {
        let timeout = self.inner.cfg.propose_timeout;
        let now = self.inner.clock.now();
        for p in self.peers.values_mut() {
            while p
                .proposals
                .front()
                .is_some_and(|x| x.started + timeout <= now)
            {
                let x = p.proposals.pop_front().expect("front exists");
                p.fail_proposal(
                    x,
                    WalError::Unavailable(format!(
                        "not committed within {timeout:?}; the shard may have lost its quorum"
                    )),
                );
            }
            let mut i = 0;
            while i < p.conf_waiters.len() {
                if p.conf_waiters[i].started + timeout <= now {
                    let w = p.conf_waiters.swap_remove(i);
                    let _ = w.tx.send(Err(WalError::Unavailable(
                        "membership change not committed in time".into(),
                    )));
                } else {
                    i += 1;
                }
            }
            while p.reads.front().is_some_and(|r| r.deadline <= now) {
                let r = p.reads.pop_front().expect("front exists");
                let _ = r.tx.send(Err(WalError::Unavailable(format!(
                    "shard {}: leadership was not confirmed in time for a read; retry on another replica",
                    p.shard
                ))));
            }
            if p.transfer.as_ref().is_some_and(|t| t.deadline <= now) {
                let t = p.transfer.take().expect("checked");
                let _ = t.tx.send(Err(WalError::Unavailable(format!(
                    "leadership did not move to {} in time",
                    t.to
                ))));
            }
        }
    }
}
