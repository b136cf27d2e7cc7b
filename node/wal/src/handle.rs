//! One shard's handle: the state its callers, its poll thread and its
//! apply thread share (in-flight bytes, the applied index, status, the
//! snapshot slot, an apply stall).

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::snapshot::SnapSlot;
use crate::{ApplyStall, ShardId, ShardStatus};

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
