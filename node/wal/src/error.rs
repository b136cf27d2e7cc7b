//! The one error type of the WAL crate.

use crate::{NodeId, ShardId};
use shardhouse_common::status::{ErrorExt, StatusCode};
use std::time::Duration;

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
    /// The WAL filesystem is full (the message names the node and sizes).
    #[error("{0}")]
    DiskFull(String),
    /// The shard's log not yet flushed to the engine is over its bound.
    #[error("{0}")]
    LogOverBound(String),
    #[error("WAL storage (RocksDB) failed: {}{source}; check the disk and the data directory", context_prefix(.context))]
    Storage {
        /// What the WAL was doing, when it is more than a read or write of
        /// the log (e.g. opening the database at a path).
        context: Option<String>,
        source: rocksdb::Error,
    },
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
    fn from(source: rocksdb::Error) -> Self {
        WalError::Storage {
            context: None,
            source,
        }
    }
}

/// `<context>: ` before the RocksDB error, when there is a context.
fn context_prefix(context: &Option<String>) -> String {
    context
        .as_ref()
        .map(|c| format!("{c}: "))
        .unwrap_or_default()
}

impl ErrorExt for WalError {
    fn status_code(&self) -> StatusCode {
        match self {
            WalError::NotLeader { .. } => StatusCode::NotLeader,
            WalError::Overloaded { .. } | WalError::LogOverBound(_) => StatusCode::Overloaded,
            WalError::DiskFull(_) => StatusCode::StorageFull,
            // Routing, not the request: another node hosts the shard.
            WalError::ShardNotFound(_) | WalError::Unavailable(_) | WalError::Shutdown => {
                StatusCode::Unavailable
            }
            // A disk or RocksDB failure on this replica; another may serve.
            WalError::Storage { .. } => StatusCode::Unavailable,
            WalError::Corrupt(_) => StatusCode::Internal,
            WalError::Rejected(_) | WalError::InvalidArgument(_) => StatusCode::InvalidArgument,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            WalError::Overloaded { retry_after_ms } => Some(Duration::from_millis(*retry_after_ms)),
            // The engine needs seconds to catch up, not milliseconds.
            WalError::LogOverBound(_) => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// A rejection crosses the wire as its bare reason (the router says
    /// "node rejected the batch for shard N: <reason>").
    fn output_msg(&self) -> String {
        match self {
            WalError::Rejected(reason) => reason.clone(),
            e => e.to_string(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = WalError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A real RocksDB error: opening a database where a plain file is.
    fn rocksdb_error() -> rocksdb::Error {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        match rocksdb::DB::open(&o, file.join("db")) {
            Ok(_) => panic!("opened a database below a plain file"),
            Err(e) => e,
        }
    }

    #[test]
    fn each_error_has_one_status() {
        use StatusCode as S;
        let table = [
            (
                WalError::NotLeader {
                    leader_hint: Some(2),
                },
                S::NotLeader,
            ),
            (WalError::Overloaded { retry_after_ms: 30 }, S::Overloaded),
            (WalError::ShardNotFound(3), S::Unavailable),
            (WalError::Unavailable("election".into()), S::Unavailable),
            (WalError::from(rocksdb_error()), S::Unavailable),
            (WalError::Corrupt("bad key".into()), S::Internal),
            (
                WalError::Rejected("type conflict".into()),
                S::InvalidArgument,
            ),
            (
                WalError::InvalidArgument("raft config".into()),
                S::InvalidArgument,
            ),
            (WalError::Shutdown, S::Unavailable),
            (WalError::DiskFull("WAL disk full".into()), S::StorageFull),
            (WalError::LogOverBound("log".into()), S::Overloaded),
        ];
        for (e, code) in table {
            assert_eq!(e.status_code(), code, "{e}");
            let hint = matches!(e, WalError::Overloaded { .. } | WalError::LogOverBound(_));
            assert_eq!(e.retry_after().is_some(), hint, "{e}");
        }
        assert_eq!(
            WalError::Overloaded { retry_after_ms: 30 }.retry_after(),
            Some(Duration::from_millis(30))
        );
        assert_eq!(
            WalError::Rejected("type conflict".into()).output_msg(),
            "type conflict"
        );
    }

    #[test]
    fn storage_error_keeps_its_source_and_its_text() {
        let source = rocksdb_error();
        let text = source.to_string();
        let e = WalError::from(source.clone());
        assert_eq!(
            e.to_string(),
            format!("WAL storage (RocksDB) failed: {text}; check the disk and the data directory")
        );
        let e = WalError::Storage {
            context: Some("cannot open the WAL RocksDB at /x".into()),
            source,
        };
        assert_eq!(
            e.to_string(),
            format!("WAL storage (RocksDB) failed: cannot open the WAL RocksDB at /x: {text}; check the disk and the data directory")
        );
        let inner = std::error::Error::source(&e).expect("a source");
        assert!(inner.downcast_ref::<rocksdb::Error>().is_some());
        assert_eq!(inner.to_string(), text);
    }
}
