//! The node server's one error type.

use shardhouse_common::status::{ErrorExt, StatusCode};
use thiserror::Error;

/// Errors of the node process. Messages say what the operator or caller
/// should do about them.
#[derive(Debug, Error)]
pub enum NodeError {
    #[error("invalid node options: {0}; fix the flag, env var or config file and restart")]
    InvalidOptions(String),

    #[error("cannot read config file {path}: {reason}")]
    ConfigFile { path: String, reason: String },

    #[error(
        "cannot open the chDB engine: {0}; check --chdb-dir / SHARDHOUSE_CHDB_DIR and --data-dir"
    )]
    Engine(#[from] shardhouse_engine::EngineError),

    #[error("cannot open the Raft WAL: {0}; check --data-dir (another process may hold its lock)")]
    Wal(#[from] shardhouse_wal::WalError),

    #[error("etcd request failed: {0}; check --etcd-endpoints and that etcd is reachable")]
    Etcd(#[from] etcd_client::Error),

    #[error("cannot bind {addr}: {reason}; pick a free address")]
    Bind { addr: String, reason: String },

    #[error("server failed: {0}")]
    Serve(String),

    #[error("shard map in etcd is not valid JSON: {0}; rewrite it with shardhouse-ctl")]
    ShardMapDecode(#[from] serde_json::Error),
}

/// Result alias of the node crate.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;

impl ErrorExt for NodeError {
    fn status_code(&self) -> StatusCode {
        match self {
            NodeError::InvalidOptions(_)
            | NodeError::ConfigFile { .. }
            | NodeError::ShardMapDecode(_) => StatusCode::InvalidArgument,
            NodeError::Engine(e) => e.status_code(),
            NodeError::Wal(e) => e.status_code(),
            NodeError::Etcd(_) => StatusCode::Unavailable,
            NodeError::Bind { .. } | NodeError::Serve(_) => StatusCode::Internal,
        }
    }

    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            NodeError::Wal(e) => e.retry_after(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_errors_keep_their_status_and_source() {
        let table = [
            (
                NodeError::InvalidOptions("x".into()),
                StatusCode::InvalidArgument,
            ),
            (
                NodeError::Wal(shardhouse_wal::WalError::Overloaded { retry_after_ms: 5 }),
                StatusCode::Overloaded,
            ),
            (
                NodeError::Engine(shardhouse_engine::EngineError::ShuttingDown),
                StatusCode::Unavailable,
            ),
            (NodeError::Serve("x".into()), StatusCode::Internal),
        ];
        for (e, code) in table {
            assert_eq!(e.status_code(), code, "{e}");
        }
        let e = NodeError::Wal(shardhouse_wal::WalError::Overloaded { retry_after_ms: 5 });
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_millis(5)));
        assert!(std::error::Error::source(&e).is_some());
    }
}
