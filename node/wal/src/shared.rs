//! State shared between the [`Wal`](crate::Wal) handle, the poll threads
//! and the apply threads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};

use crate::apply::ApplyMsg;
use crate::clock::Clock;
use crate::poller::PollMsg;
use crate::snapshot::SnapSlot;
use crate::{ApplyStall, ShardId, ShardStatus, StateMachine, Transport, WalConfig};

#[derive(Default)]
pub(crate) struct StatsCounters {
    pub(crate) synced_batches: AtomicU64,
    pub(crate) synced_entries: AtomicU64,
}

/// Per-shard state shared between callers, the poll thread and the apply
/// thread.
pub(crate) struct ShardHandle {
    pub(crate) shard: ShardId,
    pub(crate) poll_idx: usize,
    pub(crate) inflight_bytes: AtomicUsize,
    pub(crate) applied: AtomicU64,
    /// EWMA of propose-to-commit latency, for `retry_after_ms`.
    pub(crate) commit_micros: AtomicU64,
    pub(crate) status: Mutex<ShardStatus>,
    pub(crate) snap: Arc<Mutex<SnapSlot>>,
    /// Set by the apply thread while an entry keeps failing to apply.
    pub(crate) apply_stall: Mutex<Option<ApplyStall>>,
    /// Woken whenever `applied` moves (readers waiting for a read index).
    pub(crate) applied_notify: tokio::sync::Notify,
}

impl ShardHandle {
    pub(crate) fn new(shard: ShardId, poll_idx: usize) -> ShardHandle {
        ShardHandle {
            shard,
            poll_idx,
            inflight_bytes: AtomicUsize::new(0),
            applied: AtomicU64::new(0),
            commit_micros: AtomicU64::new(0),
            status: Mutex::new(ShardStatus {
                shard,
                ..Default::default()
            }),
            snap: Default::default(),
            apply_stall: Mutex::new(None),
            applied_notify: tokio::sync::Notify::new(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) cfg: WalConfig,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) sm: Arc<dyn StateMachine>,
    pub(crate) shards: RwLock<HashMap<ShardId, Arc<ShardHandle>>>,
    pub(crate) poll_txs: Vec<Sender<PollMsg>>,
    pub(crate) apply_txs: Vec<Sender<ApplyMsg>>,
    pub(crate) stats: StatsCounters,
    pub(crate) lag_slots: Vec<AtomicU64>,
    /// Wall clock, or the manual one [`Wal::tick`](crate::Wal::tick) moves.
    pub(crate) clock: Clock,
    pub(crate) disk: crate::disk::WalDisk,
}

impl Inner {
    pub(crate) fn apply_tx(&self, shard: ShardId) -> Sender<ApplyMsg> {
        self.apply_txs[shard as usize % self.apply_txs.len()].clone()
    }
    pub(crate) fn poll_idx(&self, shard: ShardId) -> usize {
        shard as usize % self.poll_txs.len()
    }
}
