//! The node server's one error type.

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
