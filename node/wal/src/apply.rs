//! Apply threads: hand committed entries to the state machine in index order
//! per shard (a shard always maps to the same thread), build snapshots and
//! restore received ones, off the poll threads.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use raft::eraftpb::ConfState;

use crate::clock::{self, Clock};
use crate::handle::ShardHandle;
use crate::messages::{ApplyItem, ApplyMsg, PendingRestore, PollMsg};
use crate::snapshot::GeneratedSnapshot;
use crate::{metrics, policy, ApplyOutcome, ApplyStall, ShardId, StateMachine};

struct ApplyShard {
    handle: Arc<ShardHandle>,
    applied: u64,
    /// Index of the last entry that carried data: entries after it up to
    /// `applied` did not change the state machine.
    last_data_index: u64,
    /// Recent configurations by the index they took effect at, so a
    /// snapshot at index i carries the configuration in force at i.
    conf_history: VecDeque<(u64, ConfState)>,
    /// Committed entries not applied yet, oldest first. Non-empty between
    /// calls only while `retry_at` is set: an entry failed to apply and
    /// everything after it waits, because skipping it would let the
    /// flushed index (and log compaction) pass an entry never stored.
    backlog: VecDeque<ApplyItem>,
    /// When to retry the failed entry at the front of `backlog` (or the
    /// failed restore).
    retry_at: Option<Instant>,
    /// A received snapshot the state machine failed to restore so far; it
    /// goes before the backlog.
    restore: Option<PendingRestore>,
}

const CONF_HISTORY: usize = 16;

impl ApplyShard {
    fn conf_at(&self, index: u64) -> Option<ConfState> {
        self.conf_history
            .iter()
            .rev()
            .find(|(i, _)| *i <= index)
            .map(|(_, cs)| cs.clone())
    }

    /// Applies the backlog in order until it is empty or an entry fails.
    fn drain(&mut self, sm: &dyn StateMachine, clock: &Clock) {
        let shard = self.handle.shard;
        while let Some(item) = self.backlog.pop_front() {
            if item.index <= self.applied {
                // Already applied (re-delivery after a restore); the state
                // machine must see each index once.
                self.release(item.release);
                if let Some(w) = item.waiter {
                    w.answer(&ApplyOutcome::Applied);
                }
                continue;
            }
            let mut outcome = ApplyOutcome::Applied;
            if let Some(data) = &item.data {
                match sm.apply(shard, item.index, data) {
                    Ok(o) => outcome = o,
                    Err(e) => {
                        self.stall(item.index, e.to_string(), clock);
                        self.backlog.push_front(item);
                        return;
                    }
                }
                self.last_data_index = item.index;
                if let ApplyOutcome::Rejected(reason) = &outcome {
                    tracing::info!(shard, index = item.index, %reason, "entry rejected on apply (every replica skips it)");
                    metrics::APPLY_REJECTED.inc();
                }
            }
            if let Some(cs) = item.conf_state {
                self.conf_history.push_back((item.index, cs));
                if self.conf_history.len() > CONF_HISTORY {
                    self.conf_history.pop_front();
                }
            }
            self.applied = item.index;
            self.handle.applied.store(item.index, Ordering::Release);
            self.release(item.release);
            if let Some(w) = item.waiter {
                w.answer(&outcome);
            }
        }
        if self.retry_at.is_some() {
            self.unstall();
        }
    }

    /// Retries what is stuck: the pending restore first, then the backlog.
    fn resume(&mut self, sm: &dyn StateMachine, clock: &Clock) {
        if self.restore.is_some() && !self.try_restore(sm, clock) {
            return;
        }
        self.drain(sm, clock);
    }

    /// Restores the pending snapshot. On failure the shard stalls at the
    /// snapshot's index and the restore is retried with backoff: the log
    /// is not replaced meanwhile, so nothing is lost and nothing panics.
    fn try_restore(&mut self, sm: &dyn StateMachine, clock: &Clock) -> bool {
        let Some(r) = self.restore.take() else {
            return true;
        };
        if let Err(e) = sm.restore(r.shard, r.index, &r.data) {
            metrics::RESTORE_FAILURES.inc();
            self.stall(
                r.index,
                format!("restoring the snapshot at index {}: {e}", r.index),
                clock,
            );
            self.restore = Some(r);
            return false;
        }
        self.applied = r.index;
        self.last_data_index = r.index;
        self.handle.applied.store(r.index, Ordering::Release);
        self.conf_history.clear();
        self.conf_history.push_back((r.index, r.conf_state));
        // The snapshot covers whatever was stuck at or below it.
        self.unstall();
        let _ = r.done.send(PollMsg::Restored {
            shard: r.shard,
            index: r.index,
        });
        true
    }

    fn stall(&mut self, index: u64, error: String, clock: &Clock) {
        let mut slot = self.handle.apply_stall.lock();
        let attempts = match slot.as_ref() {
            Some(st) if st.index == index => st.attempts + 1,
            _ => 1,
        };
        if slot.is_none() {
            metrics::APPLY_STALLED_SHARDS.inc();
        }
        metrics::APPLY_FAILURES.inc();
        let delay = policy::apply_retry_delay(attempts);
        // Once per attempt, and attempts back off to 10 s: the log shows a
        // stuck shard without flooding.
        tracing::error!(shard = self.handle.shard, index, attempts, retry_in = ?delay, %error,
            "state machine failed to apply a committed entry; the shard's apply waits and retries it");
        *slot = Some(ApplyStall {
            index,
            error,
            attempts,
        });
        self.retry_at = Some(clock.now() + delay);
    }

    fn unstall(&mut self) {
        self.retry_at = None;
        if let Some(st) = self.handle.apply_stall.lock().take() {
            metrics::APPLY_STALLED_SHARDS.dec();
            tracing::info!(
                shard = self.handle.shard,
                index = st.index,
                attempts = st.attempts,
                "state machine applied the entry that was failing; the shard's apply resumed"
            );
        }
    }

    fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.handle
                .inflight_bytes
                .fetch_sub(bytes, Ordering::AcqRel);
        }
    }
}

pub fn run(rx: Receiver<ApplyMsg>, sm: Arc<dyn StateMachine>, clock: Clock) {
    let mut shards: HashMap<ShardId, ApplyShard> = HashMap::new();
    loop {
        let next_retry = shards.values().filter_map(|s| s.retry_at).min();
        let limit = next_retry.and_then(|at| clock.wait_limit(at));
        match clock::recv_until(&rx, limit) {
            Ok(ApplyMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
            Ok(msg) => handle_msg(&mut shards, &*sm, &clock, msg),
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = clock.now();
        for s in shards.values_mut() {
            if s.retry_at.is_some_and(|at| at <= now) {
                s.resume(&*sm, &clock);
                s.handle.applied_notify.notify_waiters();
            }
        }
    }
}

fn handle_msg(
    shards: &mut HashMap<ShardId, ApplyShard>,
    sm: &dyn StateMachine,
    clock: &Clock,
    msg: ApplyMsg,
) {
    match msg {
        ApplyMsg::Register {
            handle,
            applied,
            last_data_index,
            conf_index,
            conf_state,
        } => {
            handle.applied.store(applied, Ordering::Release);
            shards.insert(
                handle.shard,
                ApplyShard {
                    handle,
                    applied,
                    last_data_index,
                    conf_history: VecDeque::from([(conf_index, conf_state)]),
                    backlog: VecDeque::new(),
                    retry_at: None,
                    restore: None,
                },
            );
        }
        ApplyMsg::Unregister { shard } => {
            if let Some(mut s) = shards.remove(&shard) {
                s.backlog.clear();
                s.restore = None;
                s.unstall();
            }
        }
        ApplyMsg::Entries { shard, items } => {
            let Some(s) = shards.get_mut(&shard) else {
                return;
            };
            s.backlog.extend(items);
            if s.retry_at.is_none() {
                s.drain(sm, clock);
            }
            s.handle.applied_notify.notify_waiters();
        }
        ApplyMsg::GenSnapshot { shard } => {
            let Some(s) = shards.get(&shard) else {
                return;
            };
            let built = build_snapshot(sm, s);
            let mut slot = s.handle.snap.lock();
            slot.generating = false;
            match built {
                Ok(g) => slot.ready = Some(g),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "could not build a snapshot; raft will ask again")
                }
            }
        }
        ApplyMsg::Restore(r) => {
            let Some(s) = shards.get_mut(&r.shard) else {
                return;
            };
            // A newer snapshot replaces one still failing.
            s.restore = Some(r);
            s.resume(sm, clock);
            s.handle.applied_notify.notify_waiters();
        }
        ApplyMsg::Barrier(tx) => {
            let _ = tx.send(());
        }
        ApplyMsg::Tick | ApplyMsg::Shutdown => {}
    }
}

fn build_snapshot(
    sm: &dyn StateMachine,
    s: &ApplyShard,
) -> std::result::Result<GeneratedSnapshot, String> {
    // Runs on the shard's apply thread, so no apply races the export: the
    // data reflects every entry up to `s.applied`.
    let (sm_index, data) = sm.snapshot(s.handle.shard).map_err(|e| e.to_string())?;
    if sm_index > s.applied {
        return Err(format!(
            "state machine snapshot claims index {sm_index} beyond applied {}",
            s.applied
        ));
    }
    // If the export holds every data entry applied so far, it is the state
    // at `applied` (later entries were empty or conf changes), which keeps
    // the snapshot's configuration known even across restarts.
    let index = if sm_index >= s.last_data_index {
        s.applied
    } else {
        sm_index
    };
    let conf_state = s.conf_at(index).ok_or_else(|| {
        format!("configuration at index {index} unknown (restart since); waiting for a newer flush")
    })?;
    Ok(GeneratedSnapshot {
        index,
        conf_state,
        data: Bytes::from(data),
    })
}
