//! Ready handling: one round of the batched Ready loop for all of a poll
//! thread's shards (one synced write batch), then what follows persistence
//! (messages that had to wait, committed entries, applied index).

use std::sync::atomic::Ordering;
use std::time::Instant;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType, Snapshot,
};
use raft::{ProgressState, Ready, SnapshotStatus, StateRole};
use rocksdb::WriteBatch;

use super::{HeldReady, Peer, Poller};
use crate::error::WalError;
use crate::messages::{ApplyItem, ApplyMsg, ApplyWaiter, PendingRestore};
use crate::{metrics, policy, Committed, ShardId};

impl Peer {
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
            let (release, waiter) = self.resolve_proposals(&e);
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
                    item.conf_state = self.commit_conf_change(&e);
                }
            }
            items.push(item);
        }
        let _ = self.apply_tx.send(ApplyMsg::Entries {
            shard: self.shard,
            items,
        });
    }

    /// Settles the proposals up to committed entry `e`: this leader's own
    /// proposal of `e` becomes a waiter for its apply outcome (with the
    /// in-flight bytes to release); proposals whose index another leader's
    /// entry took fail.
    fn resolve_proposals(&mut self, e: &Entry) -> (usize, Option<ApplyWaiter>) {
        let mut release = 0;
        let mut waiter = None;
        while self.proposals.front().is_some_and(|p| p.index <= e.index) {
            let p = self.proposals.pop_front().expect("front exists");
            if p.index == e.index && p.term == e.term {
                let elapsed = self.clock.since(p.started);
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
        (release, waiter)
    }

    /// Applies a committed membership change to raft and answers its
    /// waiters; returns the configuration now in force (None if rejected).
    fn commit_conf_change(&mut self, e: &Entry) -> Option<ConfState> {
        let mut conf_state = None;
        let mut result = Err(String::new());
        match self.apply_conf_change(e) {
            Ok(cs) => {
                self.node.mut_store().set_conf_state(cs.clone(), e.index);
                self.state_dirty = true;
                conf_state = Some(cs);
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
                    result
                        .clone()
                        .map_err(|m| WalError::InvalidArgument(format!("membership change: {m}")))
                } else {
                    Err(self.not_leader())
                };
                let _ = w.tx.send(r);
            } else {
                i += 1;
            }
        }
        conf_state
    }

    /// Counts leaderships; a replica that stopped leading fails the
    /// requests only a leader can answer.
    fn follow_role(&mut self) {
        let leader = self.node.raft.state == StateRole::Leader;
        if leader == self.is_leader {
            return;
        }
        self.is_leader = leader;
        if leader {
            metrics::LEADERS.inc();
        } else {
            metrics::LEADERS.dec();
            // A transfer waiter stays: losing leadership is how a
            // transfer succeeds; it resolves when `to` is seen
            // leading, or at its deadline.
            let hint = self.leader_hint();
            let transfer = self.transfer.take();
            self.fail_waiters(|| WalError::NotLeader { leader_hint: hint });
            self.transfer = transfer;
        }
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

    /// The Ready to handle this round, and whether its snapshot (if any)
    /// is already in the state machine. A Ready held for a restore comes
    /// back only once the restore is done; until then the shard takes no
    /// new Ready (it still ticks and steps), and the poll thread serves its
    /// other shards.
    fn next_ready(&mut self) -> Option<(Ready, bool)> {
        match self.restore.take() {
            Some(h) if h.restored => Some((h.ready, true)),
            Some(h) => {
                self.restore = Some(h);
                None
            }
            None => self.node.has_ready().then(|| (self.node.ready(), false)),
        }
    }

    /// Whether a round has something to do for this shard.
    pub(super) fn has_work(&self) -> bool {
        match &self.restore {
            Some(h) => h.restored,
            None => self.node.has_ready(),
        }
    }

    /// Hands a received snapshot to the shard's apply thread (after every
    /// earlier entry) and holds its Ready without waiting: the log is
    /// replaced only once the state machine has the snapshot, so a crash
    /// or a failing restore meanwhile leaves the old, consistent log.
    fn start_restore(&mut self, ready: Ready) {
        let snap = ready.snapshot();
        let meta = snap.get_metadata();
        let index = meta.index;
        tracing::info!(shard = self.shard, index, "restoring a received snapshot");
        let _ = self.apply_tx.send(ApplyMsg::Restore(PendingRestore {
            shard: self.shard,
            index,
            conf_state: meta.get_conf_state().clone(),
            data: snap.data.clone(),
            done: self.poll_tx.clone(),
        }));
        self.restore = Some(HeldReady {
            ready,
            index,
            restored: false,
        });
    }

    /// The state machine restored the snapshot at `index`.
    pub(super) fn restored(&mut self, index: u64) {
        if let Some(h) = self.restore.as_mut().filter(|h| h.index == index) {
            h.restored = true;
            self.rebuild_done(index);
        }
    }

    /// Replaces the log by a snapshot the state machine already restored.
    fn install_snapshot(&mut self, snap: &Snapshot, wb: &mut WriteBatch) {
        let meta = snap.get_metadata();
        self.node.mut_store().apply_snapshot(meta, wb);
        self.state_dirty = true;
        metrics::SNAPSHOTS.with_label_values(&["received"]).inc();
        tracing::info!(shard = self.shard, index = meta.index, "installed snapshot");
    }
}

impl Poller {
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
    pub(super) fn round(&mut self, compact: bool, ticked: bool) -> bool {
        let mut wb = WriteBatch::default();
        let staged = self.stage_readies(&mut wb);
        if compact {
            self.compact(&mut wb);
        }
        for p in self.peers.values_mut() {
            if p.state_dirty {
                p.node.store().write_state(&mut wb);
                p.state_dirty = false;
            }
        }
        self.persist(wb, staged.sync, staged.n_entries);
        let had_ready = !staged.readies.is_empty();
        self.after_persist(staged.readies);
        self.send_messages();
        self.update_peers(had_ready, ticked)
    }

    /// Takes every shard's Ready and stages its log entries, hard state
    /// and snapshot in `wb`; its messages that need not wait for the write
    /// are collected to go out.
    fn stage_readies(&mut self, wb: &mut WriteBatch) -> Staged {
        let mut staged = Staged {
            readies: Vec::new(),
            sync: false,
            n_entries: 0,
        };
        let shards: Vec<ShardId> = self.peers.keys().copied().collect();
        for shard in &shards {
            let p = self.peers.get_mut(shard).expect("listed");
            let Some((mut rd, restored)) = p.next_ready() else {
                continue;
            };
            // A leader's messages go out before its own fsync (raft thesis
            // 10.2.1), so followers persist in parallel.
            let msgs = rd.take_messages();
            if !rd.snapshot().is_empty() {
                if !restored {
                    p.start_restore(rd);
                    self.collect(*shard, msgs);
                    continue;
                }
                let snap = rd.snapshot().clone();
                p.install_snapshot(&snap, wb);
                staged.sync = true;
            }
            p.handle_committed(rd.take_committed_entries());
            p.handle_read_states(rd.take_read_states());
            let entries = rd.take_entries();
            staged.n_entries += entries.len();
            if let Err(e) = p.node.mut_store().append(&entries, wb) {
                panic!("shard {shard}: cannot stage log entries: {e}");
            }
            if let Some(hs) = rd.hs() {
                p.node.mut_store().set_hard_state(hs.clone());
                p.state_dirty = true;
            }
            staged.sync |= rd.must_sync();
            staged.readies.push((*shard, rd));
            self.collect(*shard, msgs);
        }
        staged
    }

    /// Writes the round's batch (synced when a Ready asks for it).
    fn persist(&mut self, wb: WriteBatch, sync: bool, n_entries: usize) {
        if wb.is_empty() {
            return;
        }
        let started = Instant::now();
        // Raft must never be told something is durable that is not:
        // returns once written; out of space it waits, otherwise the
        // node stops (disk.rs).
        self.inner.disk.write(&self.db, wb, sync);
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

    /// Advances each written Ready: the messages that had to wait for the
    /// write, and what committed meanwhile.
    fn after_persist(&mut self, readies: Vec<(ShardId, Ready)>) {
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
    }

    /// Hands the round's messages to the transport.
    fn send_messages(&mut self) {
        for (to, msgs) in self.out.drain() {
            self.inner.transport.send(to, msgs);
        }
        let reported_later = self.inner.transport.reports_snapshots();
        for (shard, to) in std::mem::take(&mut self.snapshots_sent) {
            if reported_later {
                continue;
            }
            // Delivery is best effort; report it done so the leader probes
            // the follower again and re-sends if the snapshot was lost.
            if let Some(p) = self.peers.get_mut(&shard) {
                p.node.report_snapshot(to, SnapshotStatus::Finish);
            }
        }
    }

    /// After a round: moves raft's applied index, follows role changes,
    /// settles leader transfers and refreshes each shard's status. Returns
    /// true if some shard has work pending.
    fn update_peers(&mut self, had_ready: bool, ticked: bool) -> bool {
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
            p.follow_role();
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
            busy |= p.state_dirty || p.has_work();
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
            if p.restore.is_some() {
                // The state machine is moving to a snapshot the log does
                // not reflect yet.
                continue;
            }
            let st = p.node.store();
            let applied = p.handle.applied.load(Ordering::Acquire);
            let flushed = self.inner.sm.flushed_index(p.shard);
            let mut local = flushed.min(applied);
            let raft = &p.node.raft;
            if raft.state == StateRole::Leader {
                let me = raft.id;
                let needs = raft
                    .prs()
                    .iter()
                    .filter(|(id, _)| **id != me)
                    .map(|(_, pr)| match pr.state {
                        ProgressState::Snapshot => pr.pending_snapshot,
                        _ => pr.matched,
                    });
                local = policy::retain_for_followers(
                    local.min(st.last_index_value()),
                    needs,
                    st.truncated_index(),
                    st.last_index_value(),
                    st.log_bytes(),
                    self.inner.cfg.effective_follower_retention(),
                );
            }
            let Some(target) = policy::compaction_target(
                st.truncated_index(),
                applied,
                local,
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

/// A round's Readies staged in its write batch.
struct Staged {
    readies: Vec<(ShardId, Ready)>,
    /// Whether the batch must be synced.
    sync: bool,
    n_entries: usize,
}
