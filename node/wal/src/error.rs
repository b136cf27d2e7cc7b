//! The one error type of the WAL crate.

use crate::{NodeId, ShardId};

/// Errors returned by [`crate::Wal`]. Messages say what the caller should do.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("this replica is not the shard's Raft leader; retry on the leader {leader_hint:?} (None = unknown, retry after an election)")]
    NotLeader { leader_hint: Option<NodeId> },
    #[error("shard is overloaded (in-flight proposal bytes over the limit); retry after {retry_after_ms} ms")]
    Overloaded { retry_after_ms: u64 },
    #[error("shard {0} has no replica on this node; check the shard map and route to a node that hosts it")]
    ShardNotFound(ShardId),
    #[error("shard temporarily unavailable: {0}; retry later")]
    Unavailable(String),
    #[error("WAL storage (RocksDB) failed: {0}; check the disk and the data directory")]
    Storage(String),
    #[error("WAL data is corrupt: {0}; the data directory must be repaired or the replica rebuilt from a snapshot")]
    Corrupt(String),
    /// The entry committed but its content can never be stored (for
    /// example a field type that conflicts, in log order, with what the
    /// shard already stores). Every replica decides the same and skips it.
    #[error("rejected when applied: {0}")]
    Rejected(String),
    #[error("invalid WAL request: {0}")]
    InvalidArgument(String),
    #[error("the WAL is shut down; reopen it")]
    Shutdown,
}

impl From<rocksdb::Error> for WalError {
    fn from(e: rocksdb::Error) -> Self {
        WalError::Storage(e.to_string())
    }
}

/// Result alias of this crate.
pub type Result<T, E = WalError> = std::result::Result<T, E>;
