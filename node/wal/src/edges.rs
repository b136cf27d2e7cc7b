//! The WAL's two edges: the network its Raft messages leave through and
//! the state machine its committed entries are applied to.

use crate::{eraftpb, NodeId, ShardId};

/// Delivers raft messages to other nodes.
pub trait Transport: Send + Sync + 'static {
    /// Deliver raft messages to other nodes (best effort; may drop). `msgs`
    /// are (shard, message) pairs, all for `to`. Called from poll threads:
    /// must not block.
    fn send(&self, to: NodeId, msgs: Vec<(ShardId, eraftpb::Message)>);
}

/// What applying one committed entry decided. Both outcomes advance the
/// shard's applied index; the decision must be a pure function of the
/// shard's log so every replica takes the same one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The entry's effects are in the state machine.
    Applied,
    /// The entry can never be stored (e.g. a field type conflicting with
    /// an earlier entry): it is a no-op on every replica, and the proposer
    /// gets [`WalError::Rejected`](crate::WalError::Rejected) with this reason.
    Rejected(String),
}

/// What committed entries are applied to (the node's engine).
pub trait StateMachine: Send + Sync + 'static {
    /// Called in index order per shard, from WAL apply threads (blocking is
    /// OK there). Only entries carrying caller data are passed.
    ///
    /// `Err` is a failure that may pass (the engine is unavailable): the
    /// entry is NOT skipped. The shard's apply stops there and the same
    /// entry is retried with backoff; [`ShardStatus::apply_stalled`](crate::ShardStatus::apply_stalled) says why.
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &bytes::Bytes,
    ) -> std::result::Result<ApplyOutcome, String>;
    /// Highest index whose effects are durable in the state machine. The
    /// log is compacted up to it, and on restart entries above it are
    /// applied again.
    fn flushed_index(&self, shard: ShardId) -> u64;
    /// All of the shard's state, reflecting every entry applied so far, and
    /// the index it covers. Called on the shard's apply thread.
    fn snapshot(&self, shard: ShardId) -> std::result::Result<(u64, Vec<u8>), String>;
    /// Replace the shard's state by a snapshot covering `index`.
    fn restore(&self, shard: ShardId, index: u64, data: &[u8]) -> std::result::Result<(), String>;
}
