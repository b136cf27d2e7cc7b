//! State shared between the [`Wal`](crate::Wal) handle, the poll threads
//! and the apply threads.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::RwLock;

use crate::clock::Clock;
use crate::handle::ShardHandle;
use crate::messages::{ApplyMsg, PollMsg};
use crate::{ShardId, StateMachine, Transport, WalConfig};

#[derive(Default)]
pub(crate) struct StatsCounters {
    pub(crate) synced_batches: AtomicU64,
    pub(crate) synced_entries: AtomicU64,
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
