//! The engine: one process-global chDB database, a connection pool, per-shard
//! buffers and the flusher threads that drain them (flush.rs), and users'
//! read-only queries (read.rs).
//!
//! Every method blocks its calling thread (chDB calls are synchronous). Async
//! callers must wrap calls in `tokio::task::spawn_blocking`; the flusher runs
//! on its own threads.

//!
//! The engine's parts: opening and closing it (lifecycle.rs), the write
//! path (apply.rs), creating storage on first use (ddl.rs), flushing
//! (flush.rs), storage operations (ops.rs), snapshots (shard_io.rs).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};

use crate::buffer::ShardBuf;
use crate::catalog::ShardCatalog;
use crate::error::Result;
use crate::layout::{self, FieldType, TableId};
use crate::pool::Pool;
use crate::stream::SchemaCache;

pub use crate::apply::{Applied, TableBatchRef};
pub use crate::lifecycle::pin_utc;

/// Engine settings. `pool_size` 0 means one connection per core.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// chDB data directory (one per process).
    pub data_dir: PathBuf,
    /// chdb-core install; `None` = env `SHARDHOUSE_CHDB_DIR`, then `.deps/chdb`.
    pub chdb_dir: Option<PathBuf>,
    /// Connections in the pool; 0 = available cores.
    pub pool_size: usize,
    /// A table's buffer is flushed once it holds this many rows.
    pub flush_max_rows: usize,
    /// A shard's buffer is flushed once its oldest row is this old.
    pub flush_max_age: Duration,
    /// Retention of databases that set none (`None`: keep forever).
    pub default_retention: Option<Duration>,
    /// How often expired partitions are looked for.
    pub retention_check_interval: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            data_dir: PathBuf::from(".data/chdb"),
            chdb_dir: None,
            pool_size: 0,
            flush_max_rows: 200_000,
            flush_max_age: Duration::from_secs(1),
            default_retention: None,
            retention_check_interval: Duration::from_secs(60),
        }
    }
}

/// The age bound of one shard's buffer: `max_age` stretched by up to 7/16
/// depending on the shard, so shards that started buffering together (all
/// of them, under steady load) do not all flush in the same instant.
pub fn flush_age_of(max_age: Duration, shard: u32) -> Duration {
    max_age + max_age * (shard % 8) / 16
}

/// A shard whose flush keeps failing for some of its tables; see
/// [`Engine::flush_failures`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushFailure {
    pub shard: u32,
    /// Tables whose rows could not be stored (`db/_series` for the series).
    pub tables: Vec<String>,
    pub error: String,
    pub attempts: u32,
    /// How long the tables have been failing.
    pub failing_for: Duration,
}

pub(crate) struct ShardState {
    pub(crate) shard: u32,
    pub(crate) db: String,
    pub(crate) buf: Mutex<ShardBuf>,
    /// Serializes flushes, DDL, import and drop of this shard.
    pub(crate) flush_lock: Mutex<()>,
    /// Columns of this shard's fact tables as they exist in chDB.
    pub(crate) tables: Mutex<HashMap<TableId, Vec<(String, FieldType)>>>,
    /// The databases this shard stores, as they exist in chDB.
    pub(crate) databases: Mutex<HashMap<String, DatabaseState>>,
    /// Field types decided by the shard's applied log (see catalog.rs).
    pub(crate) catalog: RwLock<ShardCatalog>,
    pub(crate) created: AtomicBool,
    pub(crate) flushed: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) queued: AtomicBool,
    /// Tables of this shard that failed to flush, and when to retry them.
    pub(crate) failing: Mutex<Option<crate::flush::Failing>>,
    /// Parts of this shard's copy found damaged (damage.rs); reads are
    /// refused until a snapshot replaces the copy.
    pub(crate) damage: Mutex<Vec<crate::damage::DamagedPart>>,
    /// Series whose `_series` rows this replica holds (known_series.rs).
    pub(crate) known_series: Mutex<crate::known_series::KnownSeries>,
}

impl ShardState {
    fn new(shard: u32) -> ShardState {
        ShardState {
            shard,
            db: layout::shard_db(shard),
            buf: Mutex::new(ShardBuf::default()),
            flush_lock: Mutex::new(()),
            tables: Mutex::new(HashMap::new()),
            databases: Mutex::new(HashMap::new()),
            catalog: RwLock::new(ShardCatalog::default()),
            created: AtomicBool::new(false),
            flushed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            queued: AtomicBool::new(false),
            failing: Mutex::new(None),
            damage: Mutex::new(Vec::new()),
            known_series: Mutex::new(Default::default()),
        }
    }
}

/// One database of a shard, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DatabaseState {
    /// Its chDB database (`layout::data_db`).
    pub(crate) chdb: String,
    /// Retention in ns; 0 = keep forever, -1 = the node's default.
    pub(crate) retention_ns: i64,
}

pub(crate) struct Inner {
    pub(crate) cfg: EngineConfig,
    pub(crate) pool: Arc<Pool>,
    /// Read-only connections (`readonly = 1`, UTC) for users' queries.
    pub(crate) readers: Arc<Pool>,
    /// Schemas of the IPC streams entries carry, parsed once each.
    pub(crate) streams: SchemaCache,
    pub(crate) shards: RwLock<HashMap<u32, Arc<ShardState>>>,
    pub(crate) flush_tx: Sender<u32>,
    pub(crate) shutdown: AtomicBool,
    /// The data directory, held open for `syncfs`.
    pub(crate) data_dir: std::fs::File,
}

/// The node's embedded engine. `Send + Sync`; share it as `Arc<Engine>`.
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) ticker_stop: Mutex<Option<Sender<()>>>,
}

/// Settings of the connections that run users' queries, in this order:
/// times come back in UTC whatever the machine's zone, and `readonly = 1`
/// (which also freezes every setting, `readonly` included) comes last.
pub const READER_SETTINGS: &[&str] = &["SET session_timezone = 'UTC'", "SET readonly = 1"];

impl Engine {
    /// The schema of an Arrow IPC stream from a write (None for no bytes),
    /// parsed once per distinct schema and cached.
    pub fn stream_schema(&self, stream: &[u8]) -> Result<Option<SchemaRef>> {
        self.inner.streams.schema(stream)
    }

    /// Highest Raft index whose rows are durably in chDB for this shard (0 if none).
    pub fn flushed_index(&self, shard: u32) -> u64 {
        self.inner
            .shards
            .read()
            .get(&shard)
            .map_or(0, |s| s.flushed.load(Ordering::Acquire))
    }

    /// Flushes everything buffered now, on the calling thread; blocks.
    pub fn flush_all(&self) -> Result<()> {
        let shards: Vec<Arc<ShardState>> = self.inner.shards.read().values().cloned().collect();
        let mut first_err = None;
        for st in shards {
            if let Err(e) = self.inner.flush_shard(&st, true) {
                tracing::error!(shard = st.shard, error = %e, "flush failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Flushes one shard now (also the tables that are failing); blocks.
    pub fn flush_shard(&self, shard: u32) -> Result<()> {
        let st = self.inner.shards.read().get(&shard).cloned();
        match st {
            Some(st) => self.inner.flush_shard(&st, true),
            None => Ok(()),
        }
    }

    /// Shards with tables whose flush keeps failing, with the reason.
    pub fn flush_failures(&self) -> Vec<FlushFailure> {
        let shards: Vec<Arc<ShardState>> = self.inner.shards.read().values().cloned().collect();
        let mut out: Vec<FlushFailure> = shards
            .iter()
            .filter_map(|st| st.failing.lock().as_ref().map(|f| f.report(st.shard)))
            .collect();
        out.sort_by_key(|f| f.shard);
        out
    }

    /// Runs a statement outside any shard (benchmarks, diagnostics).
    pub fn query_global(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        self.inner.pool.get().query(sql)
    }

    /// The connection pool (benchmarks and tools; the write path goes through `apply`).
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Shards that have state on this node (in chDB or buffered).
    pub fn shards(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.inner.shards.read().keys().copied().collect();
        v.sort_unstable();
        v
    }
}

impl Inner {
    pub(crate) fn shard_state(&self, shard: u32) -> Arc<ShardState> {
        if let Some(s) = self.shards.read().get(&shard) {
            return s.clone();
        }
        self.shards
            .write()
            .entry(shard)
            .or_insert_with(|| Arc::new(ShardState::new(shard)))
            .clone()
    }
}
