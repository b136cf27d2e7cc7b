//! `raft::Storage` over the node's shared RocksDB. The poll thread that owns
//! the shard's `RawNode` is the only writer; it stages writes into the
//! round's shared `WriteBatch` and updates the in-memory view at once, so
//! raft-rs can read what it just handed over before the batch is synced.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};
use rocksdb::{Direction, IteratorMode, WriteBatch, DB};

use crate::error::{Result, WalError};
use crate::keys::{self, LocalState};
use crate::messages::ApplyMsg;
use crate::snapshot::SnapSlot;
use crate::ShardId;

mod read;
#[cfg(test)]
mod tests;

pub struct ShardStorage {
    shard: ShardId,
    db: Arc<DB>,
    state: LocalState,
    last_index: u64,
    last_term: u64,
    /// Recent entries, contiguous and ending at `last_index` when non-empty.
    cache: VecDeque<Entry>,
    cache_bytes: usize,
    /// Bytes of the entries in the log (exact for cached entries,
    /// estimated for the others once part of them is compacted).
    log_bytes: u64,
    snap: Arc<Mutex<SnapSlot>>,
    apply_tx: Sender<ApplyMsg>,
}

/// Log position every bootstrapped group starts from.
pub const BOOTSTRAP_INDEX: u64 = 1;
pub const BOOTSTRAP_TERM: u64 = 1;

fn entry_bytes(e: &Entry) -> usize {
    e.data.len() + e.context.len() + 32
}

impl ShardStorage {
    /// A new replica: `conf_state` is the bootstrap configuration (empty for a
    /// replica that waits to be added by a leader).
    pub fn create(
        db: Arc<DB>,
        shard: ShardId,
        conf_state: ConfState,
        snap: Arc<Mutex<SnapSlot>>,
        apply_tx: Sender<ApplyMsg>,
    ) -> ShardStorage {
        ShardStorage {
            shard,
            db,
            state: LocalState {
                conf_state,
                ..Default::default()
            },
            last_index: 0,
            last_term: 0,
            cache: VecDeque::new(),
            cache_bytes: 0,
            log_bytes: 0,
            snap,
            apply_tx,
        }
    }

    /// Positions a new group's initial replicas at `BOOTSTRAP_INDEX` (as if
    /// a snapshot with the initial voters had been applied), so the log
    /// never holds the initial configuration as entries: a replica added
    /// later always starts from a snapshot that carries the configuration.
    pub fn bootstrap(&mut self) {
        self.state.truncated_index = BOOTSTRAP_INDEX;
        self.state.truncated_term = BOOTSTRAP_TERM;
        self.state.conf_index = BOOTSTRAP_INDEX;
        self.state.hard_state.term = BOOTSTRAP_TERM;
        self.state.hard_state.commit = BOOTSTRAP_INDEX;
        self.last_index = BOOTSTRAP_INDEX;
        self.last_term = BOOTSTRAP_TERM;
    }

    /// Reloads a replica persisted in RocksDB.
    pub fn load(
        db: Arc<DB>,
        shard: ShardId,
        state: LocalState,
        snap: Arc<Mutex<SnapSlot>>,
        apply_tx: Sender<ApplyMsg>,
    ) -> Result<ShardStorage> {
        let mut state = state;
        // The log is only ever compacted behind the applied index, and only
        // committed entries are applied, so a stored commit below the
        // truncation point is stale (written before commit advances were
        // persisted); raft-rs refuses to start on it.
        state.hard_state.commit = state.hard_state.commit.max(state.truncated_index);
        let mut s = ShardStorage {
            shard,
            db,
            last_index: state.truncated_index,
            last_term: state.truncated_term,
            state,
            cache: VecDeque::new(),
            cache_bytes: 0,
            log_bytes: 0,
            snap,
            apply_tx,
        };
        // The last entry is the greatest key of the shard's log range.
        let upper = keys::log_key(shard, u64::MAX);
        let last = {
            let mut it =
                s.db.iterator(IteratorMode::From(&upper, Direction::Reverse));
            match it.next() {
                Some(kv) => {
                    let (k, v) = kv?;
                    match keys::parse_log_key(&k) {
                        Some((sh, idx)) if sh == shard && idx > s.state.truncated_index => {
                            Some(keys::decode_entry(idx, Bytes::from(v.into_vec()))?)
                        }
                        _ => None,
                    }
                }
                None => None,
            }
        };
        if let Some(e) = last {
            s.last_index = e.index;
            s.last_term = e.term;
        }
        s.log_bytes = s.verify_log()?;
        Ok(s)
    }

    /// Reads the whole log once at start: RocksDB checks every block's
    /// checksum, and every entry must decode and follow the one before. A
    /// damaged log is found here, with the shard and index, before raft
    /// could serve from it. Returns the log's size in bytes.
    fn verify_log(&self) -> Result<u64> {
        let (low, high) = (self.state.truncated_index + 1, self.last_index + 1);
        if low >= high {
            return Ok(0);
        }
        let mut bytes = 0u64;
        let mut next = low;
        let start = keys::log_key(self.shard, low);
        for kv in self
            .db
            .iterator(IteratorMode::From(&start, Direction::Forward))
        {
            let (k, v) = kv.map_err(|e| {
                WalError::Corrupt(format!(
                    "shard {}: log unreadable after index {}: {e}",
                    self.shard,
                    next.saturating_sub(1)
                ))
            })?;
            let Some((sh, idx)) = keys::parse_log_key(&k) else {
                break;
            };
            if sh != self.shard || idx >= high {
                break;
            }
            if idx != next {
                return Err(WalError::Corrupt(format!(
                    "shard {}: log entry {next} missing (next is {idx})",
                    self.shard
                )));
            }
            let e = keys::decode_entry(idx, Bytes::from(v.into_vec())).map_err(|e| {
                WalError::Corrupt(format!("shard {}: log entry {idx}: {e}", self.shard))
            })?;
            bytes += entry_bytes(&e) as u64;
            next += 1;
        }
        if next != high {
            return Err(WalError::Corrupt(format!(
                "shard {}: log entries [{next}, {high}) missing",
                self.shard
            )));
        }
        Ok(bytes)
    }

    pub fn log_bytes(&self) -> u64 {
        self.log_bytes
    }

    pub fn truncated_index(&self) -> u64 {
        self.state.truncated_index
    }
    pub fn last_index_value(&self) -> u64 {
        self.last_index
    }
    #[cfg(test)]
    pub fn cache_bytes(&self) -> usize {
        self.cache_bytes
    }

    pub fn set_hard_state(&mut self, hs: HardState) {
        self.state.hard_state = hs;
    }

    /// Raises the stored commit index (never lowers it).
    pub fn set_commit(&mut self, commit: u64) {
        if commit > self.state.hard_state.commit {
            self.state.hard_state.commit = commit;
        }
    }

    pub fn set_conf_state(&mut self, cs: ConfState, index: u64) {
        self.state.conf_state = cs;
        self.state.conf_index = index;
    }

    pub fn write_state(&self, wb: &mut WriteBatch) {
        wb.put(keys::state_key(self.shard), self.state.encode());
    }

    /// Stages `entries` (from a Ready) and makes them visible; entries at or
    /// below the current last index replace the conflicting suffix.
    pub fn append(&mut self, entries: &[Entry], wb: &mut WriteBatch) -> Result<()> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let last = entries.last().expect("non-empty");
        if first.index <= self.state.truncated_index {
            return Err(WalError::Corrupt(format!(
                "shard {}: append at {} overwrites compacted log (truncated {})",
                self.shard, first.index, self.state.truncated_index
            )));
        }
        if first.index > self.last_index + 1 {
            return Err(WalError::Corrupt(format!(
                "shard {}: append at {} leaves a gap after {}",
                self.shard, first.index, self.last_index
            )));
        }
        // Drop the conflicting suffix from the cache and from RocksDB.
        while let Some(back) = self.cache.back() {
            if back.index >= first.index {
                self.cache_bytes -= entry_bytes(back);
                self.log_bytes = self.log_bytes.saturating_sub(entry_bytes(back) as u64);
                self.cache.pop_back();
            } else {
                break;
            }
        }
        if last.index < self.last_index {
            wb.delete_range(
                keys::log_key(self.shard, last.index + 1),
                keys::log_key(self.shard, self.last_index + 1),
            );
        }
        // A cache that no longer ends right before `first` is useless.
        if self
            .cache
            .back()
            .is_some_and(|b| b.index + 1 != first.index)
        {
            self.cache.clear();
            self.cache_bytes = 0;
        }
        for e in entries {
            wb.put(keys::log_key(self.shard, e.index), keys::encode_entry(e));
            self.cache_bytes += entry_bytes(e);
            self.log_bytes += entry_bytes(e) as u64;
            self.cache.push_back(e.clone());
        }
        self.last_index = last.index;
        self.last_term = last.term;
        Ok(())
    }

    /// Replaces the whole log by a received snapshot's position.
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata, wb: &mut WriteBatch) {
        wb.delete_range(
            keys::log_key(self.shard, 0),
            keys::log_key(self.shard, u64::MAX),
        );
        wb.delete(keys::log_key(self.shard, u64::MAX));
        self.cache.clear();
        self.cache_bytes = 0;
        self.log_bytes = 0;
        self.state.truncated_index = meta.index;
        self.state.truncated_term = meta.term;
        self.state.conf_state = meta.get_conf_state().clone();
        self.state.conf_index = meta.index;
        if self.state.hard_state.commit < meta.index {
            self.state.hard_state.commit = meta.index;
        }
        if self.state.hard_state.term < meta.term {
            self.state.hard_state.term = meta.term;
        }
        self.last_index = meta.index;
        self.last_term = meta.term;
    }

    /// Removes entries up to and including `index` (which must be at most
    /// the last index); the caller persists the state afterwards.
    pub fn compact_to(&mut self, index: u64, wb: &mut WriteBatch) -> Result<()> {
        if index <= self.state.truncated_index {
            return Ok(());
        }
        let index = index.min(self.last_index);
        let term = self.term_of(index)?;
        wb.delete_range(
            keys::log_key(self.shard, self.state.truncated_index),
            keys::log_key(self.shard, index + 1),
        );
        // Entries no longer cached count at their average size.
        let uncached = (self.last_index - self.state.truncated_index) as usize - self.cache.len();
        let uncached_bytes = self.log_bytes.saturating_sub(self.cache_bytes as u64);
        let removed = (index - self.state.truncated_index) as usize;
        self.state.truncated_index = index;
        self.state.truncated_term = term;
        let mut cached_removed = 0;
        while let Some(front) = self.cache.front() {
            if front.index <= index {
                self.cache_bytes -= entry_bytes(front);
                self.log_bytes = self.log_bytes.saturating_sub(entry_bytes(front) as u64);
                cached_removed += 1;
                self.cache.pop_front();
            } else {
                break;
            }
        }
        let uncached_removed = removed.saturating_sub(cached_removed).min(uncached);
        if uncached > 0 {
            let estimate = uncached_bytes * uncached_removed as u64 / uncached as u64;
            self.log_bytes = self.log_bytes.saturating_sub(estimate);
        }
        Ok(())
    }

    /// Drops cached entries that are applied while the cache is over
    /// `limit` bytes; they stay readable from RocksDB.
    pub fn evict_cache(&mut self, applied: u64, limit: usize) {
        while self.cache_bytes > limit {
            match self.cache.front() {
                Some(front) if front.index <= applied => {
                    self.cache_bytes -= entry_bytes(front);
                    self.cache.pop_front();
                }
                _ => break,
            }
        }
    }
}
