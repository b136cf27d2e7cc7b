//! An in-memory state machine that records every applied entry per shard
//! and flags any applied twice, out of order, or at or below the flushed
//! index.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::bail;
use parking_lot::Mutex;
use shardhouse_wal::{ApplyOutcome, ShardId, StateMachine, StateMachineError};

#[derive(Default)]
struct ShardData {
    entries: Vec<(u64, Vec<u8>)>,
    flushed: u64,
    restores: u64,
}

/// Records applied entries per shard. "Durable" state is what was flushed:
/// `durable_copy` simulates a restart that loses unflushed entries.
#[derive(Default)]
pub struct MemSm {
    shards: Mutex<HashMap<ShardId, ShardData>>,
    violations: Mutex<Vec<String>>,
    /// While set, applying this (shard, index) fails (an engine outage).
    pub fail_at: Mutex<Option<(ShardId, u64)>>,
    /// Failed apply attempts so far.
    pub failures: AtomicU64,
    /// While set, restoring a snapshot of this shard fails.
    pub fail_restore: Mutex<Option<ShardId>>,
    /// Failed restore attempts so far.
    pub restore_failures: AtomicU64,
}

/// Payloads starting with this are rejected on apply (a decision every
/// replica takes alike, as the engine does for a field type conflict).
pub const REJECT: &[u8] = b"reject:";

fn encode(entries: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, d) in entries {
        v.extend_from_slice(&i.to_le_bytes());
        v.extend_from_slice(&(d.len() as u32).to_le_bytes());
        v.extend_from_slice(d);
    }
    v
}

fn decode(mut b: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let i = u64::from_le_bytes(b[..8].try_into().unwrap());
        let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        out.push((i, b[12..12 + n].to_vec()));
        b = &b[12 + n..];
    }
    out
}

impl MemSm {
    pub fn entries(&self, shard: ShardId) -> Vec<(u64, Vec<u8>)> {
        self.shards
            .lock()
            .get(&shard)
            .map(|s| s.entries.clone())
            .unwrap_or_default()
    }
    pub fn payloads(&self, shard: ShardId) -> Vec<Vec<u8>> {
        self.entries(shard).into_iter().map(|(_, d)| d).collect()
    }
    /// Marks everything applied so far as durable.
    pub fn flush(&self, shard: ShardId) {
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        s.flushed = s.entries.last().map_or(s.flushed, |e| e.0);
    }
    pub fn flush_to(&self, shard: ShardId, index: u64) {
        self.shards.lock().entry(shard).or_default().flushed = index;
    }
    pub fn restores(&self, shard: ShardId) -> u64 {
        self.shards.lock().get(&shard).map_or(0, |s| s.restores)
    }
    pub fn durable_copy(&self) -> MemSm {
        let g = self.shards.lock();
        let shards = g
            .iter()
            .map(|(k, s)| {
                (
                    *k,
                    ShardData {
                        entries: s
                            .entries
                            .iter()
                            .filter(|e| e.0 <= s.flushed)
                            .cloned()
                            .collect(),
                        flushed: s.flushed,
                        restores: 0,
                    },
                )
            })
            .collect();
        MemSm {
            shards: Mutex::new(shards),
            ..MemSm::default()
        }
    }
    pub fn check(&self) -> anyhow::Result<()> {
        let v = self.violations.lock();
        if !v.is_empty() {
            bail!("state machine violations: {:?}", *v);
        }
        Ok(())
    }
}

impl StateMachine for MemSm {
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &bytes::Bytes,
    ) -> Result<ApplyOutcome, StateMachineError> {
        if *self.fail_at.lock() == Some((shard, index)) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            return Err(StateMachineError::other(
                format!("shard {shard}"),
                format!("injected failure at {index}"),
            ));
        }
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        if let Some(last) = s.entries.last() {
            if index <= last.0 {
                self.violations.lock().push(format!(
                    "shard {shard}: index {index} applied after {}",
                    last.0
                ));
            }
        }
        if index <= s.flushed {
            self.violations.lock().push(format!(
                "shard {shard}: index {index} applied at or below flushed {}",
                s.flushed
            ));
        }
        if data.starts_with(REJECT) {
            return Ok(ApplyOutcome::Rejected("payload asks for it".into()));
        }
        s.entries.push((index, data.to_vec()));
        Ok(ApplyOutcome::Applied)
    }
    fn flushed_index(&self, shard: ShardId) -> u64 {
        self.shards.lock().get(&shard).map_or(0, |s| s.flushed)
    }
    fn snapshot(&self, shard: ShardId) -> Result<(u64, Vec<u8>), StateMachineError> {
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        // Like the engine: flush, then export everything.
        s.flushed = s.entries.last().map_or(s.flushed, |e| e.0);
        Ok((s.flushed, encode(&s.entries)))
    }
    fn restore(&self, shard: ShardId, index: u64, data: &[u8]) -> Result<(), StateMachineError> {
        if *self.fail_restore.lock() == Some(shard) {
            self.restore_failures.fetch_add(1, Ordering::Relaxed);
            return Err(StateMachineError::other(
                format!("shard {shard}"),
                format!("injected restore failure at {index}"),
            ));
        }
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        s.entries = decode(data);
        s.flushed = index;
        s.restores += 1;
        Ok(())
    }
}
