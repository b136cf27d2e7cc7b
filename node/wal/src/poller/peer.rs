//! A replica's lifecycle on its poll thread: created (bootstrapped or
//! waiting to be added), reloaded at start, destroyed; and what it reports
//! about itself.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use raft::eraftpb::ConfState;
use raft::{RawNode, StateRole};
use rocksdb::{WriteBatch, WriteOptions, DB};

use super::{Peer, Poller, Proposal};
use crate::error::{Result, WalError};
use crate::handle::ShardHandle;
use crate::keys::{self, LocalState};
use crate::messages::ApplyMsg;
use crate::shared::Inner;
use crate::storage::ShardStorage;
use crate::{metrics, NodeId, Role, ShardId, ShardStatus};

/// Routes raft-rs's slog output into tracing. Raft's chatty info level
/// (elections, conf changes) becomes debug.
struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;
    fn log(&self, record: &slog::Record<'_>, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{}", record.msg())
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{}", record.msg()),
            slog::Level::Info => tracing::debug!(target: "raft", "{}", record.msg()),
            _ => tracing::trace!(target: "raft", "{}", record.msg()),
        }
        Ok(())
    }
}

pub fn raft_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}

impl Peer {
    pub fn new(
        inner: &Inner,
        storage: ShardStorage,
        handle: Arc<ShardHandle>,
        applied: u64,
        logger: &slog::Logger,
    ) -> Result<Peer> {
        let cfg = &inner.cfg;
        let rc = raft::Config {
            id: cfg.node_id,
            election_tick: cfg.election_ticks,
            heartbeat_tick: cfg.heartbeat_ticks,
            applied,
            max_size_per_msg: cfg.max_size_per_msg,
            max_inflight_msgs: cfg.max_inflight_msgs,
            // A leader cut off from its quorum steps down; pre-vote keeps a
            // rejoining partitioned replica from disrupting a healthy leader.
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        rc.validate()
            .map_err(|e| WalError::InvalidArgument(format!("raft config: {e}")))?;
        let node = RawNode::new(&rc, storage, logger)
            .map_err(|e| WalError::Corrupt(format!("shard {}: raft init: {e}", handle.shard)))?;
        Ok(Peer {
            shard: handle.shard,
            node,
            apply_tx: inner.apply_tx(handle.shard),
            poll_tx: inner.poll_txs[inner.poll_idx(handle.shard)].clone(),
            restore: None,
            rebuild: None,
            handle,
            proposals: VecDeque::new(),
            conf_waiters: Vec::new(),
            transfer: None,
            reads: VecDeque::new(),
            next_read_ctx: 0,
            is_leader: false,
            state_dirty: false,
            clock: inner.clock.clone(),
        })
    }

    pub(super) fn leader_hint(&self) -> Option<NodeId> {
        match self.node.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    pub(super) fn not_leader(&self) -> WalError {
        WalError::NotLeader {
            leader_hint: self.leader_hint(),
        }
    }

    pub(super) fn fail_proposal(&self, p: Proposal, err: WalError) {
        self.handle
            .inflight_bytes
            .fetch_sub(p.size, Ordering::AcqRel);
        let _ = p.tx.send(Err(err));
    }

    /// Fails everything waiting on this replica's leadership.
    pub(super) fn fail_waiters(&mut self, err: impl Fn() -> WalError) {
        while let Some(p) = self.proposals.pop_front() {
            self.fail_proposal(p, err());
        }
        for w in self.conf_waiters.drain(..) {
            let _ = w.tx.send(Err(err()));
        }
        if let Some(t) = self.transfer.take() {
            let _ = t.tx.send(Err(err()));
        }
        for r in self.reads.drain(..) {
            let _ = r.tx.send(Err(err()));
        }
    }

    fn role(&self) -> Role {
        match self.node.raft.state {
            StateRole::Leader => Role::Leader,
            StateRole::Candidate => Role::Candidate,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Follower => Role::Follower,
        }
    }

    pub(crate) fn status(&self) -> ShardStatus {
        let raft = &self.node.raft;
        let conf = raft.prs().conf();
        let mut voters: Vec<NodeId> = conf.voters().ids().iter().collect();
        voters.sort_unstable();
        let mut learners: Vec<NodeId> = conf.learners().iter().copied().collect();
        learners.sort_unstable();
        let last = raft.raft_log.last_index();
        let max_follower_lag = if raft.state == StateRole::Leader {
            raft.prs()
                .iter()
                .filter(|(id, _)| **id != raft.id)
                .map(|(_, pr)| last.saturating_sub(pr.matched))
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        ShardStatus {
            shard: self.shard,
            role: self.role(),
            term: raft.term,
            leader_id: self.leader_hint(),
            commit_index: raft.raft_log.committed,
            applied_index: self.handle.applied.load(Ordering::Acquire),
            flushed_index: 0,
            first_index: self.node.store().truncated_index() + 1,
            last_index: last,
            voters,
            learners,
            max_follower_lag,
            inflight_bytes: self.handle.inflight_bytes.load(Ordering::Relaxed),
            log_bytes: self.node.store().log_bytes(),
            apply_stalled: None,
            rebuilding: self.rebuild.map(|r| r.why),
        }
    }

    pub fn first_index(&self) -> u64 {
        self.node.store().truncated_index() + 1
    }
}

impl Poller {
    pub(super) fn create_peer(&mut self, shard: ShardId, voters: Vec<NodeId>) -> Result<()> {
        let mut cs = ConfState::default();
        let bootstrap = !voters.is_empty();
        cs.voters = voters;
        let handle = Arc::new(ShardHandle::new(shard, self.idx));
        let mut storage = ShardStorage::create(
            self.db.clone(),
            shard,
            cs.clone(),
            handle.snap.clone(),
            self.inner.apply_tx(shard),
        );
        if bootstrap {
            storage.bootstrap();
        }
        let start = storage.truncated_index();
        // Persist the replica's existence before anyone may rely on it.
        let mut wb = WriteBatch::default();
        storage.write_state(&mut wb);
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(wb, &wo)?;
        let _ = self.inner.apply_tx(shard).send(ApplyMsg::Register {
            handle: handle.clone(),
            applied: start,
            last_data_index: 0,
            conf_index: start,
            conf_state: cs,
        });
        let mut peer = Peer::new(&self.inner, storage, handle.clone(), start, &self.logger)?;
        if self.inner.disk.rebuild_created {
            // Its leader still counts the log this node lost (disk.rs).
            peer.want_rebuild(crate::Rebuild::Automatic);
        }
        *handle.status.lock() = peer.status();
        self.inner.shards.write().insert(shard, handle);
        self.peers.insert(shard, peer);
        metrics::SHARDS.inc();
        tracing::info!(shard, "created replica");
        Ok(())
    }

    pub(super) fn destroy_peer(&mut self, shard: ShardId) -> Result<()> {
        let Some(mut p) = self.peers.remove(&shard) else {
            return Ok(());
        };
        p.fail_waiters(|| WalError::ShardNotFound(shard));
        if p.is_leader {
            metrics::LEADERS.dec();
        }
        metrics::SHARDS.dec();
        self.inner.shards.write().remove(&shard);
        let _ = p.apply_tx.send(ApplyMsg::Unregister { shard });
        let mut wb = WriteBatch::default();
        wb.delete_range(keys::log_key(shard, 0), keys::log_key(shard, u64::MAX));
        wb.delete(keys::log_key(shard, u64::MAX));
        wb.delete(keys::state_key(shard));
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(wb, &wo)?;
        tracing::info!(shard, "destroyed replica");
        Ok(())
    }
}

/// Loads every replica persisted in `db`.
pub fn load_states(db: &DB) -> Result<Vec<(ShardId, LocalState)>> {
    let mut out = Vec::new();
    let start = [keys::STATE_PREFIX];
    for kv in db.iterator(rocksdb::IteratorMode::From(
        &start,
        rocksdb::Direction::Forward,
    )) {
        let (k, v) = kv?;
        let Some(shard) = keys::parse_state_key(&k) else {
            break;
        };
        out.push((shard, LocalState::decode(shard, &v)?));
    }
    Ok(out)
}
