//! Poll threads: each owns a set of shards' `RawNode`s and runs the batched
//! Ready loop (TiKV raftstore style): collect every shard's Ready, merge all
//! log entries and hard states into ONE RocksDB write batch synced once,
//! then send the messages that required persistence and advance each group.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType, Snapshot,
};
use raft::{RawNode, SnapshotStatus, StateRole};
use rocksdb::{WriteBatch, WriteOptions, DB};
use tokio::sync::oneshot;

use crate::apply::{ApplyItem, ApplyMsg, ApplyWaiter};
use crate::error::{Result, WalError};
use crate::keys::{self, LocalState};
use crate::storage::ShardStorage;
use crate::{metrics, policy, Committed, Inner, NodeId, Role, ShardHandle, ShardId, ShardStatus};

pub enum PollMsg {
    Step {
        shard: ShardId,
        msg: Message,
    },
    Propose {
        handle: Arc<ShardHandle>,
        data: Vec<u8>,
        started: Instant,
        tx: oneshot::Sender<Result<Committed>>,
    },
    ConfChange {
        shard: ShardId,
        cc: ConfChange,
        tx: oneshot::Sender<Result<()>>,
    },
    TransferLeader {
        shard: ShardId,
        to: NodeId,
        tx: oneshot::Sender<Result<()>>,
    },
    ReportUnreachable {
        shard: ShardId,
        node: NodeId,
    },
    /// A Raft read index: the commit index once leadership is confirmed.
    ReadIndex {
        shard: ShardId,
        tx: oneshot::Sender<Result<u64>>,
    },
    Create {
        shard: ShardId,
        voters: Vec<NodeId>,
        tx: Sender<Result<()>>,
    },
    Destroy {
        shard: ShardId,
        tx: Sender<Result<()>>,
    },
    Shutdown,
}

struct Proposal {
    index: u64,
    term: u64,
    size: usize,
    started: Instant,
    tx: oneshot::Sender<Result<Committed>>,
}

struct ConfWaiter {
    index: u64,
    term: u64,
    started: Instant,
    tx: oneshot::Sender<Result<()>>,
}

struct ReadWaiter {
    ctx: Vec<u8>,
    deadline: Instant,
    tx: oneshot::Sender<Result<u64>>,
}

struct TransferWaiter {
    to: NodeId,
    deadline: Instant,
    tx: oneshot::Sender<Result<()>>,
}

pub struct Peer {
    shard: ShardId,
    node: RawNode<ShardStorage>,
    handle: Arc<ShardHandle>,
    apply_tx: Sender<ApplyMsg>,
    proposals: VecDeque<Proposal>,
    conf_waiters: Vec<ConfWaiter>,
    transfer: Option<TransferWaiter>,
    reads: VecDeque<ReadWaiter>,
    next_read_ctx: u64,
    is_leader: bool,
    state_dirty: bool,
}

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
            handle,
            proposals: VecDeque::new(),
            conf_waiters: Vec::new(),
            transfer: None,
            reads: VecDeque::new(),
            next_read_ctx: 0,
            is_leader: false,
            state_dirty: false,
        })
    }

    fn leader_hint(&self) -> Option<NodeId> {
        match self.node.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    fn not_leader(&self) -> WalError {
        WalError::NotLeader {
            leader_hint: self.leader_hint(),
        }
    }

    fn fail_proposal(&self, p: Proposal, err: WalError) {
        self.handle
            .inflight_bytes
            .fetch_sub(p.size, Ordering::AcqRel);
        let _ = p.tx.send(Err(err));
    }

    /// Fails everything waiting on this replica's leadership.
    fn fail_waiters(&mut self, err: impl Fn() -> WalError) {
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

    /// Answers the read-index requests raft confirmed.
    fn handle_read_states(&mut self, states: Vec<raft::ReadState>) {
        for rs in states {
            if let Some(pos) = self.reads.iter().position(|r| r.ctx == rs.request_ctx) {
                let r = self.reads.remove(pos).expect("position is valid");
                let _ = r.tx.send(Ok(rs.index));
            }
        }
    }

    /// Resolves proposals, applies conf changes to raft and queues the
    /// entries for the apply thread.
    fn handle_committed(&mut self, entries: Vec<Entry>) {
        if entries.is_empty() {
            return;
        }
        let mut items = Vec::with_capacity(entries.len());
        for e in entries {
            let mut release = 0;
            let mut waiter = None;
            while self.proposals.front().is_some_and(|p| p.index <= e.index) {
                let p = self.proposals.pop_front().expect("front exists");
                if p.index == e.index && p.term == e.term {
                    let elapsed = p.started.elapsed();
                    metrics::COMMIT_SECONDS.observe(elapsed.as_secs_f64());
                    let prev = self.handle.commit_micros.load(Ordering::Relaxed);
                    self.handle.commit_micros.store(
                        policy::ewma(prev, elapsed.as_micros() as u64),
                        Ordering::Relaxed,
                    );
                    release = p.size;
                    // Answered by the apply thread: only the apply decides
                    // whether the entry is stored or rejected.
                    waiter = Some(ApplyWaiter {
                        committed: Committed {
                            index: e.index,
                            term: e.term,
                        },
                        tx: p.tx,
                    });
                } else {
                    // Another leader's entry took this index.
                    let err = self.not_leader();
                    self.fail_proposal(p, err);
                }
            }
            let mut item = ApplyItem {
                index: e.index,
                data: None,
                conf_state: None,
                release,
                waiter,
            };
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if !e.data.is_empty() {
                        item.data = Some(e.data);
                    }
                }
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    let applied = self.apply_conf_change(&e);
                    let mut result = Err(String::new());
                    match applied {
                        Ok(cs) => {
                            self.node.mut_store().set_conf_state(cs.clone(), e.index);
                            self.state_dirty = true;
                            item.conf_state = Some(cs);
                            result = Ok(());
                        }
                        Err(msg) => {
                            tracing::warn!(shard = self.shard, index = e.index, error = %msg, "membership change rejected");
                            result = Err(msg).or(result);
                        }
                    }
                    let mut i = 0;
                    while i < self.conf_waiters.len() {
                        let w = &self.conf_waiters[i];
                        if w.index <= e.index {
                            let w = self.conf_waiters.swap_remove(i);
                            let r = if w.index == e.index && w.term == e.term {
                                result.clone().map_err(|m| {
                                    WalError::InvalidArgument(format!("membership change: {m}"))
                                })
                            } else {
                                Err(self.not_leader())
                            };
                            let _ = w.tx.send(r);
                        } else {
                            i += 1;
                        }
                    }
                }
            }
            items.push(item);
        }
        let _ = self.apply_tx.send(ApplyMsg::Entries {
            shard: self.shard,
            items,
        });
    }

    fn apply_conf_change(&mut self, e: &Entry) -> std::result::Result<ConfState, String> {
        let r = if e.get_entry_type() == EntryType::EntryConfChange {
            let cc = ConfChange::parse_from_bytes(&e.data).map_err(|x| x.to_string())?;
            self.node.apply_conf_change(&cc)
        } else {
            let cc = ConfChangeV2::parse_from_bytes(&e.data).map_err(|x| x.to_string())?;
            self.node.apply_conf_change(&cc)
        };
        r.map_err(|x| x.to_string())
    }

    /// Installs a received snapshot: the state machine first (on the
    /// shard's apply thread, after every earlier entry), then the log.
    fn install_snapshot(&mut self, snap: &Snapshot, wb: &mut WriteBatch) {
        let meta = snap.get_metadata();
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let _ = self.apply_tx.send(ApplyMsg::Restore {
            shard: self.shard,
            index: meta.index,
            conf_state: meta.get_conf_state().clone(),
            data: snap.data.clone(),
            done: done_tx,
        });
        match done_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                // Raft already took the snapshot; continuing would leave the
                // state machine with a hole. Stop loudly instead.
                tracing::error!(shard = self.shard, error = %e, "state machine failed to restore a snapshot");
                panic!(
                    "shard {}: state machine failed to restore snapshot at {}: {e}",
                    self.shard, meta.index
                );
            }
            Err(_) => panic!("shard {}: apply thread gone during restore", self.shard),
        }
        self.node.mut_store().apply_snapshot(meta, wb);
        self.state_dirty = true;
        metrics::SNAPSHOTS.with_label_values(&["received"]).inc();
        tracing::info!(shard = self.shard, index = meta.index, "installed snapshot");
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
            apply_stalled: None,
        }
    }
}

pub struct Poller {
    idx: usize,
    inner: Arc<Inner>,
    db: Arc<DB>,
    rx: Receiver<PollMsg>,
    peers: BTreeMap<ShardId, Peer>,
    out: HashMap<NodeId, Vec<(ShardId, Message)>>,
    snapshots_sent: Vec<(ShardId, NodeId)>,
    logger: slog::Logger,
}

impl Poller {
    pub fn new(
        idx: usize,
        inner: Arc<Inner>,
        db: Arc<DB>,
        rx: Receiver<PollMsg>,
        peers: Vec<Peer>,
    ) -> Poller {
        Poller {
            idx,
            inner,
            db,
            rx,
            peers: peers.into_iter().map(|p| (p.shard, p)).collect(),
            out: HashMap::new(),
            snapshots_sent: Vec::new(),
            logger: raft_logger(),
        }
    }

    pub fn run(mut self) {
        let cfg = self.inner.cfg.clone();
        let mut next_tick = Instant::now() + cfg.tick_interval;
        let mut next_compact = Instant::now() + cfg.compact_interval;
        let mut busy = false;
        'outer: loop {
            // Wait for work, at most until the next tick.
            let timeout = if busy {
                Duration::ZERO
            } else {
                next_tick.saturating_duration_since(Instant::now())
            };
            let first = match self.rx.recv_timeout(timeout) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut pending = first;
            // Drain what queued up, bounded so ticks stay on time.
            for _ in 0..4096 {
                let Some(m) = pending.take() else { break };
                if matches!(m, PollMsg::Shutdown) {
                    break 'outer;
                }
                self.handle_msg(m);
                pending = self.rx.try_recv().ok();
            }
            if let Some(m) = pending {
                if matches!(m, PollMsg::Shutdown) {
                    break;
                }
                self.handle_msg(m);
            }
            let now = Instant::now();
            let ticked = now >= next_tick;
            if ticked {
                next_tick = now + cfg.tick_interval;
                for p in self.peers.values_mut() {
                    p.node.tick();
                }
                self.check_timeouts();
            }
            let compact = now >= next_compact;
            if compact {
                next_compact = now + cfg.compact_interval;
            }
            busy = self.round(compact, ticked);
        }
        for p in self.peers.values_mut() {
            p.fail_waiters(|| WalError::Shutdown);
        }
    }

    fn handle_msg(&mut self, m: PollMsg) {
        match m {
            PollMsg::Step { shard, msg } => {
                if let Some(p) = self.peers.get_mut(&shard) {
                    if let Err(e) = p.node.step(msg) {
                        tracing::debug!(shard, error = %e, "raft step rejected a message");
                    }
                }
            }
            PollMsg::Propose {
                handle,
                data,
                started,
                tx,
            } => {
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
            PollMsg::ConfChange { shard, cc, tx } => {
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
                    started: Instant::now(),
                    tx,
                });
            }
            PollMsg::TransferLeader { shard, to, tx } => {
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
                let deadline = Instant::now() + cfg.tick_interval * (cfg.election_ticks as u32 * 3);
                if let Some(old) = p.transfer.replace(TransferWaiter { to, deadline, tx }) {
                    let _ = old.tx.send(Err(WalError::Unavailable(
                        "superseded by a newer leader transfer".into(),
                    )));
                }
            }
            PollMsg::ReportUnreachable { shard, node } => {
                if let Some(p) = self.peers.get_mut(&shard) {
                    p.node.report_unreachable(node);
                }
            }
            PollMsg::ReadIndex { shard, tx } => {
                let Some(p) = self.peers.get_mut(&shard) else {
                    let _ = tx.send(Err(WalError::ShardNotFound(shard)));
                    return;
                };
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
                let deadline = Instant::now() + cfg.tick_interval * (cfg.election_ticks as u32 * 2);
                p.reads.push_back(ReadWaiter { ctx, deadline, tx });
            }
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
            PollMsg::Shutdown => {}
        }
    }

    fn create_peer(&mut self, shard: ShardId, voters: Vec<NodeId>) -> Result<()> {
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
        let peer = Peer::new(&self.inner, storage, handle.clone(), start, &self.logger)?;
        *handle.status.lock() = peer.status();
        self.inner.shards.write().insert(shard, handle);
        self.peers.insert(shard, peer);
        metrics::SHARDS.inc();
        tracing::info!(shard, "created replica");
        Ok(())
    }

    fn destroy_peer(&mut self, shard: ShardId) -> Result<()> {
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

    fn check_timeouts(&mut self) {
        let timeout = self.inner.cfg.propose_timeout;
        let now = Instant::now();
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

    fn collect(&mut self, shard: ShardId, msgs: Vec<Message>) {
        for m in msgs {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                metrics::SNAPSHOTS.with_label_values(&["sent"]).inc();
                self.snapshots_sent.push((shard, m.to));
            }
            self.out.entry(m.to).or_default().push((shard, m));
        }
    }

    /// One round of the batched Ready loop. Returns true if more work is
    /// already pending.
    fn round(&mut self, compact: bool, ticked: bool) -> bool {
        let mut wb = WriteBatch::default();
        let mut sync = false;
        let mut n_entries = 0usize;
        let mut readies = Vec::new();
        let shards: Vec<ShardId> = self.peers.keys().copied().collect();
        for shard in &shards {
            let p = self.peers.get_mut(shard).expect("listed");
            if !p.node.has_ready() {
                continue;
            }
            let mut rd = p.node.ready();
            // A leader's messages go out before its own fsync (raft thesis
            // 10.2.1), so followers persist in parallel.
            let msgs = rd.take_messages();
            if !rd.snapshot().is_empty() {
                let snap = rd.snapshot().clone();
                p.install_snapshot(&snap, &mut wb);
                sync = true;
            }
            p.handle_committed(rd.take_committed_entries());
            p.handle_read_states(rd.take_read_states());
            let entries = rd.take_entries();
            n_entries += entries.len();
            if let Err(e) = p.node.mut_store().append(&entries, &mut wb) {
                panic!("shard {shard}: cannot stage log entries: {e}");
            }
            if let Some(hs) = rd.hs() {
                p.node.mut_store().set_hard_state(hs.clone());
                p.state_dirty = true;
            }
            sync |= rd.must_sync();
            readies.push((*shard, rd));
            self.collect(*shard, msgs);
        }
        if compact {
            self.compact(&mut wb);
        }
        for p in self.peers.values_mut() {
            if p.state_dirty {
                p.node.store().write_state(&mut wb);
                p.state_dirty = false;
            }
        }
        if !wb.is_empty() {
            let mut wo = WriteOptions::default();
            wo.set_sync(sync);
            let started = Instant::now();
            if let Err(e) = self.db.write_opt(wb, &wo) {
                // Raft must never be told something is durable that is not.
                tracing::error!(error = %e, "WAL write failed");
                panic!("WAL RocksDB write failed: {e}");
            }
            if sync {
                metrics::APPEND_SECONDS.observe(started.elapsed().as_secs_f64());
                metrics::GROUP_COMMIT_ENTRIES.observe(n_entries as f64);
                self.inner
                    .stats
                    .synced_batches
                    .fetch_add(1, Ordering::Relaxed);
                self.inner
                    .stats
                    .synced_entries
                    .fetch_add(n_entries as u64, Ordering::Relaxed);
            }
        }
        let had_ready = !readies.is_empty();
        for (shard, mut rd) in readies {
            let p = self.peers.get_mut(&shard).expect("listed");
            // Follower/candidate messages (votes, append responses) may only
            // leave after the batch is durable.
            let persisted = rd.take_persisted_messages();
            let mut light = p.node.advance_append(rd);
            // raft-rs reports a commit advance that follows this persist
            // (a leader's, above all a single voter's) here and not in a
            // later Ready's hard state. Persist it with the next batch, or a
            // restart finds the log compacted past the stored commit.
            if let Some(commit) = light.commit_index() {
                p.node.mut_store().set_commit(commit);
                p.state_dirty = true;
            }
            let msgs = light.take_messages();
            p.handle_committed(light.take_committed_entries());
            self.collect(shard, persisted);
            self.collect(shard, msgs);
        }
        for (to, msgs) in self.out.drain() {
            self.inner.transport.send(to, msgs);
        }
        for (shard, to) in std::mem::take(&mut self.snapshots_sent) {
            // Delivery is best effort; report it done so the leader probes
            // the follower again and re-sends if the snapshot was lost.
            if let Some(p) = self.peers.get_mut(&shard) {
                p.node.report_snapshot(to, SnapshotStatus::Finish);
            }
        }
        let cache_limit = self.inner.cfg.entry_cache_bytes_per_shard;
        let mut busy = false;
        let mut max_lag = 0u64;
        for p in self.peers.values_mut() {
            let applied = p.handle.applied.load(Ordering::Acquire);
            let log = &p.node.raft.raft_log;
            let applied = applied.min(log.committed).min(log.persisted);
            if applied > log.applied {
                p.node.advance_apply_to(applied);
            }
            p.node.mut_store().evict_cache(applied, cache_limit);
            let leader = p.node.raft.state == StateRole::Leader;
            if leader != p.is_leader {
                p.is_leader = leader;
                if leader {
                    metrics::LEADERS.inc();
                } else {
                    metrics::LEADERS.dec();
                    // A transfer waiter stays: losing leadership is how a
                    // transfer succeeds; it resolves when `to` is seen
                    // leading, or at its deadline.
                    let hint = p.leader_hint();
                    let transfer = p.transfer.take();
                    p.fail_waiters(|| WalError::NotLeader { leader_hint: hint });
                    p.transfer = transfer;
                }
            }
            if let Some(t) = &p.transfer {
                if p.node.raft.leader_id == t.to {
                    let t = p.transfer.take().expect("checked");
                    let _ = t.tx.send(Ok(()));
                }
            }
            if had_ready || ticked {
                let st = p.status();
                max_lag = max_lag.max(st.max_follower_lag);
                *p.handle.status.lock() = st;
            }
            busy |= p.state_dirty || p.node.has_ready();
        }
        if ticked {
            self.inner.lag_slots[self.idx].store(max_lag, Ordering::Relaxed);
            let lag = self
                .inner
                .lag_slots
                .iter()
                .map(|s| s.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            metrics::FOLLOWER_LAG.set(lag as f64);
        }
        busy
    }

    fn compact(&mut self, wb: &mut WriteBatch) {
        let min_step = self.inner.cfg.compact_min_entries;
        for p in self.peers.values_mut() {
            let st = p.node.store();
            let applied = p.handle.applied.load(Ordering::Acquire);
            let flushed = self.inner.sm.flushed_index(p.shard);
            let Some(target) = policy::compaction_target(
                st.truncated_index(),
                applied,
                flushed,
                st.last_index_value(),
                min_step,
            ) else {
                continue;
            };
            match p.node.mut_store().compact_to(target, wb) {
                Ok(()) => {
                    p.state_dirty = true;
                    tracing::debug!(shard = p.shard, target, "compacted raft log");
                }
                Err(e) => tracing::warn!(shard = p.shard, error = %e, "log compaction failed"),
            }
        }
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

impl Peer {
    pub fn first_index(&self) -> u64 {
        self.node.store().truncated_index() + 1
    }
}
