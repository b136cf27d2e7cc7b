//! shardhouse-engine: the embedded chDB engine of a Shardhouse node.
//!
//! One process-global chDB engine, loaded in-process from the chdb-core
//! distribution; a pool of connections (one per core by default); one chDB
//! database per (shard, database) with a narrow fact table per measurement,
//! a tag index and one Prometheus samples table (docs/storage.md);
//! flusher threads that turn applied Raft entries into large inserts.
//!
//! Every call is synchronous and may block for the length of a chDB statement:
//! async callers use `tokio::task::spawn_blocking`. See docs/storage.md.

mod apply;
pub mod backup;
mod buffer;
pub mod catalog;
pub mod change_marks;
mod columns;
pub mod damage;
mod ddl;
mod empty_selection;
pub mod engine;
pub mod error;
pub mod exit;
mod flush;
pub mod ipc;
pub mod known_series;
pub mod layout;
mod lifecycle;
pub mod loader;
pub mod metrics;
pub mod ops;
pub mod pool;
mod read;
pub mod read_guard;
mod rewrites;
mod rewrites_ledger;
mod rollups;
mod series_cache;
mod shard_io;
mod shard_state;
pub mod snapshot;
pub mod stream;
mod tag_answers;
pub mod tag_index;

pub use apply::{Applied, TableBatchRef};
pub use engine::{Engine, EngineConfig};
pub use error::{EngineError, Result};
pub use ipc::{encode_points, encode_series, FieldValue, PointRow};
pub use lifecycle::pin_utc;
pub use ops::DatabaseReport;
pub use shard_state::{DamagedPart, FlushFailure, ShardDamage};

/// Test and benchmark helpers: building entries from simple rows.
pub mod testdata {
    pub use crate::ipc::{
        decode_stream, encode_batch, encode_points, encode_series, points_batch, FieldValue,
        PointRow,
    };
}
