//! The engine's one error type.

use shardhouse_common::status::{ErrorExt, Missing, StatusCode};
use std::path::PathBuf;

/// Everything the engine can report. Messages say what the caller should do.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("chDB engine not found at {path}: run `make deps` or set SHARDHOUSE_CHDB_DIR (or --chdb-dir) to a directory holding chdb/_chdb.abi3.so from chdb-core==26.9.0")]
    EngineNotFound { path: PathBuf },

    #[error("chDB engine at {path} could not be loaded ({reason}): reinstall it with `make deps` (chdb-core==26.9.0) or point SHARDHOUSE_CHDB_DIR at a working copy")]
    EngineBroken { path: PathBuf, reason: String },

    #[error("libpython not found ({reason}): the chDB engine needs libpython's symbols; set SHARDHOUSE_LIBPYTHON to the path of libpython3.x.so or put a python3 with a shared libpython on PATH")]
    LibPythonNotFound { reason: String },

    #[error("this process already runs a chDB engine on {open}; chDB allows one data directory per process, so {requested} cannot be opened too: run one node process per data directory")]
    SecondDataDir { open: PathBuf, requested: PathBuf },

    #[error("cannot prepare data directory {path}: {source}; check that the path is writable")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("cannot sync flushed parts under {path} to disk: {source}; the rows stay buffered and the flush is retried, check the disk (dmesg) and free space")]
    Sync {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("field `{field}` of measurement `{measurement}` is stored as {stored} but this write offers {offered}: write the field with its stored type or use a new field name")]
    FieldTypeConflict {
        measurement: String,
        field: String,
        stored: String,
        offered: String,
    },

    #[error("invalid batch for measurement `{measurement}`: {reason}")]
    InvalidBatch { measurement: String, reason: String },

    #[error("invalid measurement name `{measurement}`: {reason}")]
    InvalidMeasurement { measurement: String, reason: String },

    #[error("cannot decode Arrow IPC bytes: {0}; the log entry is corrupt or was written by an incompatible version")]
    Ipc(#[from] arrow_schema::ArrowError),

    #[error("chDB statement failed ({context}): {message}")]
    Sql { context: String, message: String },

    #[error("query refused: {0}")]
    QueryRefused(String),

    #[error("invalid query: {0}")]
    InvalidQuery(String),

    /// A read of a shard that holds no such database yet (nothing was
    /// written there): the router counts it as no rows from this shard.
    #[error("shard {shard} holds no database {database} yet: nothing was written there")]
    NoDatabase { shard: u32, database: String },

    #[error("shard {shard}: table `{table}` has rows that cannot be stored yet ({reason}); a query reading it would miss them, so it fails until the flush succeeds (see docs/operations.md, \"A table that cannot flush\")")]
    TableUnavailable {
        shard: u32,
        table: String,
        reason: String,
    },

    #[error("shard {shard} snapshot data is malformed: {reason}; re-request the snapshot from another replica")]
    BadSnapshot { shard: u32, reason: String },

    #[error("data directory {path} holds storage layout {found}, this release stores layout {expected} and does not convert it: start this node on an empty data directory (its replicas are re-filled from the other nodes by Raft snapshots) or run the release that wrote it; see docs/storage.md, \"Layout versions\"")]
    LayoutMismatch {
        path: PathBuf,
        found: String,
        expected: u32,
    },

    #[error("invalid database name: {0}")]
    InvalidDatabase(String),

    #[error("restore into shard {shard} refused: {reason}; restore into an empty cluster (docs/operations.md, \"Backups\")")]
    RestoreRefused { shard: u32, reason: String },

    #[error("backup files at {path}: {reason}")]
    BackupFiles { path: PathBuf, reason: String },

    #[error("the engine is shutting down; retry on another replica")]
    ShuttingDown,

    #[error("shard {shard}'s data on this node is damaged ({parts}); it is refused here until the replica is rebuilt from a peer's snapshot: read from another replica (see docs/operations.md, \"A damaged engine part\")")]
    ShardDamaged { shard: u32, parts: String },
}

/// `Result` with [`EngineError`].
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// ClickHouse's codes for what a read can find missing (its
/// `ErrorCodes.cpp`): an identifier (a column), a table, a database.
const UNKNOWN_IDENTIFIER: u32 = 47;
const UNKNOWN_TABLE: u32 = 60;
const UNKNOWN_DATABASE: u32 = 81;

impl EngineError {
    pub(crate) fn sql(context: impl Into<String>, err: adbc_core::error::Error) -> Self {
        EngineError::Sql {
            context: context.into(),
            message: err.message,
        }
    }
}

impl EngineError {
    /// The ClickHouse error code of a chDB statement error: the number of
    /// its `Code: N.` (chDB's error carries no other form of it).
    pub fn chdb_code(&self) -> Option<u32> {
        let EngineError::Sql { message, .. } = self else {
            return None;
        };
        let (_, after) = message.split_once("Code: ")?;
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        after[..digits].parse().ok()
    }

    /// What a read found missing, if that is why it failed: a database or
    /// table the shard does not hold yet, or a column its table lacks.
    pub fn missing(&self) -> Option<Missing> {
        if let EngineError::NoDatabase { .. } = self {
            return Some(Missing::Table);
        }
        match self.chdb_code()? {
            UNKNOWN_TABLE | UNKNOWN_DATABASE => Some(Missing::Table),
            UNKNOWN_IDENTIFIER => Some(Missing::Column),
            _ => None,
        }
    }
}

impl ErrorExt for EngineError {
    fn status_code(&self) -> StatusCode {
        use EngineError as E;
        match self {
            // The installation or the data directory: an operator must act.
            E::EngineNotFound { .. }
            | E::EngineBroken { .. }
            | E::LibPythonNotFound { .. }
            | E::SecondDataDir { .. }
            | E::DataDir { .. }
            | E::LayoutMismatch { .. } => StatusCode::Internal,
            // The request (a write's batch or a query) can never succeed as
            // sent; chDB statement errors are the query's (they name it).
            E::FieldTypeConflict { .. }
            | E::InvalidBatch { .. }
            | E::InvalidMeasurement { .. }
            | E::Ipc(_)
            | E::Sql { .. }
            | E::QueryRefused(_)
            | E::InvalidQuery(_)
            | E::InvalidDatabase(_)
            | E::BadSnapshot { .. }
            | E::BackupFiles { .. } => StatusCode::InvalidArgument,
            E::NoDatabase { .. } => StatusCode::NotFound,
            // The target already holds data: nothing was changed.
            E::RestoreRefused { .. } => StatusCode::AlreadyExists,
            // May pass, or another replica serves it.
            E::Sync { .. }
            | E::TableUnavailable { .. }
            | E::ShuttingDown
            | E::ShardDamaged { .. } => StatusCode::Unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_of_what_a_shard_lacks_say_what_is_missing() {
        let sql = |m: &str| EngineError::Sql {
            context: "q".into(),
            message: m.into(),
        };
        let cases = [
            (
                "[chdb] Code: 81. DB::Exception: Database shard_0000 does not exist. (UNKNOWN_DATABASE)",
                Some(Missing::Table),
            ),
            (
                "Code: 60. DB::Exception: Unknown table expression identifier 'cpu'. (UNKNOWN_TABLE)",
                Some(Missing::Table),
            ),
            (
                "Code: 47. DB::Exception: Unknown expression identifier `v` in scope SELECT v FROM cpu. (UNKNOWN_IDENTIFIER)",
                Some(Missing::Column),
            ),
            // A syntax error, and a code that only starts like one.
            ("Code: 62. DB::Exception: Syntax error. (SYNTAX_ERROR)", None),
            ("Code: 600. DB::Exception: something else", None),
            ("no code at all", None),
        ];
        for (message, missing) in cases {
            assert_eq!(sql(message).missing(), missing, "{message}");
        }
        assert_eq!(sql("Code: 60. x").chdb_code(), Some(60));
        let none = EngineError::NoDatabase {
            shard: 0,
            database: "db".into(),
        };
        assert_eq!(none.missing(), Some(Missing::Table));
        assert_eq!(
            EngineError::InvalidQuery("Code: 60.".into()).missing(),
            None
        );
    }

    #[test]
    fn each_error_has_one_status() {
        use StatusCode as S;
        let io = || std::io::Error::other("disk");
        let s = |t: &str| t.to_string();
        let table = [
            (
                EngineError::EngineNotFound { path: "/x".into() },
                S::Internal,
            ),
            (
                EngineError::DataDir {
                    path: "/x".into(),
                    source: io(),
                },
                S::Internal,
            ),
            (
                EngineError::Sync {
                    path: "/x".into(),
                    source: io(),
                },
                S::Unavailable,
            ),
            (
                EngineError::FieldTypeConflict {
                    measurement: s("cpu"),
                    field: s("v"),
                    stored: s("Float"),
                    offered: s("String"),
                },
                S::InvalidArgument,
            ),
            (
                EngineError::Sql {
                    context: s("q"),
                    message: s("syntax"),
                },
                S::InvalidArgument,
            ),
            (EngineError::InvalidQuery(s("q")), S::InvalidArgument),
            (
                EngineError::TableUnavailable {
                    shard: 1,
                    table: s("cpu"),
                    reason: s("flush"),
                },
                S::Unavailable,
            ),
            (EngineError::ShuttingDown, S::Unavailable),
            (
                EngineError::ShardDamaged {
                    shard: 1,
                    parts: s("cpu part 1 (broken-on-start)"),
                },
                S::Unavailable,
            ),
        ];
        for (e, code) in table {
            assert_eq!(e.status_code(), code, "{e}");
        }
        let e = EngineError::NoDatabase {
            shard: 1,
            database: s("db"),
        };
        assert_eq!(e.status_code(), S::NotFound);
        let e = EngineError::Sync {
            path: "/x".into(),
            source: io(),
        };
        assert!(std::error::Error::source(&e).is_some(), "sources are kept");
    }
}
