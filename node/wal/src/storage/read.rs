//! What raft-rs reads from a shard's log: `raft::Storage` over the entry
//! cache and RocksDB, and the snapshot hand-off to the apply thread.

use bytes::Bytes;
use raft::eraftpb::{Entry, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};
use rocksdb::{Direction, IteratorMode};

use super::ShardStorage;
use crate::error::{Result, WalError};
use crate::keys;
use crate::messages::ApplyMsg;

impl ShardStorage {
    fn cache_first(&self) -> u64 {
        self.cache.front().map_or(self.last_index + 1, |e| e.index)
    }

    pub(super) fn term_of(&self, idx: u64) -> Result<u64> {
        if idx == self.state.truncated_index {
            return Ok(self.state.truncated_term);
        }
        if idx == self.last_index {
            return Ok(self.last_term);
        }
        let first = self.cache_first();
        if idx >= first && idx <= self.last_index {
            return Ok(self.cache[(idx - first) as usize].term);
        }
        let ents = self.read_db(idx, idx + 1)?;
        ents.first().map(|e| e.term).ok_or_else(|| {
            WalError::Corrupt(format!("shard {}: log entry {idx} missing", self.shard))
        })
    }

    /// Reads `[low, high)` from RocksDB.
    fn read_db(&self, low: u64, high: u64) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity((high - low) as usize);
        let start = keys::log_key(self.shard, low);
        for kv in self
            .db
            .iterator(IteratorMode::From(&start, Direction::Forward))
        {
            let (k, v) = kv?;
            let Some((sh, idx)) = keys::parse_log_key(&k) else {
                break;
            };
            if sh != self.shard || idx >= high {
                break;
            }
            if idx != low + out.len() as u64 {
                return Err(WalError::Corrupt(format!(
                    "shard {}: log hole at {}",
                    self.shard,
                    low + out.len() as u64
                )));
            }
            out.push(keys::decode_entry(idx, Bytes::from(v.into_vec()))?);
        }
        if out.len() as u64 != high - low {
            return Err(WalError::Corrupt(format!(
                "shard {}: log entries [{low}, {high}) missing",
                self.shard
            )));
        }
        Ok(out)
    }

    fn storage_err(&self, e: WalError) -> raft::Error {
        // raft-rs treats most storage errors as fatal; say which shard.
        tracing::error!(shard = self.shard, error = %e, "WAL storage read failed");
        raft::Error::Store(StorageError::Other(Box::new(e)))
    }
}

impl raft::Storage for ShardStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.state.hard_state.clone(),
            self.state.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into();
        if low <= self.state.truncated_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let cache_first = self.cache_first();
        let mut out = if low < cache_first {
            self.read_db(low, high.min(cache_first))
                .map_err(|e| self.storage_err(e))?
        } else {
            Vec::new()
        };
        if high > cache_first {
            let from = low.max(cache_first);
            let a = (from - cache_first) as usize;
            let b = (high - cache_first) as usize;
            out.extend(self.cache.range(a..b).cloned());
        }
        raft::util::limit_size(&mut out, max_size);
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.state.truncated_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last_index {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        self.term_of(idx).map_err(|e| self.storage_err(e))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.state.truncated_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index)
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let mut slot = self.snap.lock();
        if let Some(g) = slot.ready.take() {
            let usable = g.index >= request_index
                && g.index >= self.state.truncated_index
                && g.index <= self.last_index;
            if usable {
                if let Ok(term) = self.term_of(g.index) {
                    let mut snap = Snapshot {
                        data: g.data,
                        ..Default::default()
                    };
                    let meta = snap.mut_metadata();
                    meta.index = g.index;
                    meta.term = term;
                    meta.set_conf_state(g.conf_state);
                    return Ok(snap);
                }
            }
            // Stale (the log moved past it): build a new one.
        }
        if !slot.generating {
            slot.generating = true;
            if self
                .apply_tx
                .send(ApplyMsg::GenSnapshot { shard: self.shard })
                .is_err()
            {
                slot.generating = false;
            }
        }
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}
