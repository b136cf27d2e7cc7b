//! The snapshot hand-off between a shard's poll thread, whose
//! `raft::Storage` serves snapshots, and its apply thread, which builds
//! them from the state machine. A module of its own so that the apply
//! thread, which fills the slot, does not depend on the storage that
//! drains it.

use bytes::Bytes;
use raft::eraftpb::ConfState;

/// A snapshot built by the apply thread, waiting for raft-rs to ask again.
pub struct GeneratedSnapshot {
    pub index: u64,
    pub conf_state: ConfState,
    pub data: Bytes,
}

/// Hand-off between `Storage::snapshot` (poll thread) and the apply thread
/// that builds snapshots, so a slow state machine export never blocks the
/// poll thread: raft-rs gets `SnapshotTemporarilyUnavailable` and retries.
#[derive(Default)]
pub struct SnapSlot {
    pub generating: bool,
    pub ready: Option<GeneratedSnapshot>,
}
