//! The engine: one process-global chDB database, a connection pool, per-shard
//! buffers and the flusher threads that drain them (flush.rs), and users'
//! read-only queries (read.rs).
//!
//! Every method blocks its calling thread (chDB calls are synchronous). Async
//! callers must wrap calls in `tokio::task::spawn_blocking`; the flusher runs
//! on its own threads.
//!
//! The engine's parts: each shard's state and its lock order
//! (shard_state/), opening and closing it (lifecycle.rs), the write path
//! (apply.rs), creating storage on first use (ddl.rs), flushing (flush.rs),
//! storage operations (ops.rs), snapshots (shard_io.rs), reads (read.rs),
//! damaged parts (damage.rs).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::error::Result;
use crate::pool::Pool;
use crate::shard_state::{FlushFailure, ShardMap, ShardState};
use crate::stream::SchemaCache;

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
    /// Read fact tables with `FINAL` always, also those that hold every
    /// point once (rewrites.rs): for comparing, or if in doubt.
    pub reads_always_final: bool,
    /// Keep 1-minute and 1-hour rollups of measurements created from now
    /// on, and read them where exact (rollups.rs). Off (the default until
    /// the read of a range's partial buckets is cheap, docs/storage.md):
    /// new measurements get none (tables that have them keep them, and
    /// reads use them).
    pub rollups: bool,
    /// The sort order of fact tables created from now on (tables keep the
    /// order they were created with; layout.rs `FactOrder`).
    pub fact_order: crate::layout::FactOrder,
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
            reads_always_final: false,
            rollups: false,
            fact_order: crate::layout::FactOrder::default(),
        }
    }
}

/// The age bound of one shard's buffer: `max_age` stretched by up to 7/16
/// depending on the shard, so shards that started buffering together (all
/// of them, under steady load) do not all flush in the same instant.
pub fn flush_age_of(max_age: Duration, shard: u32) -> Duration {
    max_age + max_age * (shard % 8) / 16
}

/// How often the ticker looks for expired partitions, at least.
pub(crate) fn retention_period(cfg: Duration) -> Duration {
    cfg.max(Duration::from_millis(100))
}

pub(crate) struct Inner {
    pub(crate) cfg: EngineConfig,
    pub(crate) pool: Arc<Pool>,
    /// Read-only connections (`readonly = 1`, UTC) for users' queries.
    pub(crate) readers: Arc<Pool>,
    /// Schemas of the IPC streams entries carry, parsed once each.
    pub(crate) streams: SchemaCache,
    pub(crate) shards: ShardMap,
    pub(crate) flush_tx: Sender<u32>,
    pub(crate) shutdown: AtomicBool,
    /// The data directory, held open for `syncfs`.
    pub(crate) data_dir: std::fs::File,
    /// What routers' caches of settled buckets check (change_marks.rs).
    pub(crate) marks: crate::change_marks::ChangeMarks,
    /// The series planned reads selected, while the tag index stays put
    /// (series_cache.rs).
    pub(crate) series_ids: crate::series_cache::SeriesCache,
    /// The answers of planned statements that read only the tag index,
    /// while it stays put (tag_answers.rs).
    pub(crate) tag_answers: crate::tag_answers::TagAnswers,
}

/// The node's embedded engine. `Send + Sync`; share it as `Arc<Engine>`.
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) ticker_stop: Mutex<Option<Sender<()>>>,
}

/// Settings of the connections that run users' queries, in this order:
/// times come back in UTC whatever the machine's zone, each statement runs
/// on `max_threads` threads ([`reader_max_threads`]), and `readonly = 1`
/// (which also freezes every setting, `readonly` included) comes last.
pub fn reader_settings(max_threads: usize) -> Vec<String> {
    vec![
        "SET session_timezone = 'UTC'".to_string(),
        format!("SET max_threads = {}", max_threads.max(1)),
        "SET readonly = 1".to_string(),
    ]
}

/// Threads one reader statement may use: the process's cores shared by
/// its reader connections, at least one. A shard's read is mostly fixed
/// cost (planning, on the calling thread); a pipeline per core on top of
/// it costs ~0.5-1 ms of engine CPU per statement (docs/benchmarks.md,
/// "Engine cost per read statement"), and a query's shards already run
/// side by side on separate connections.
pub fn reader_max_threads(cores: usize, readers: usize) -> usize {
    (cores / readers.max(1)).max(1)
}

impl Engine {
    /// The schema of an Arrow IPC stream from a write (None for no bytes),
    /// parsed once per distinct schema and cached.
    pub fn stream_schema(&self, stream: &[u8]) -> Result<Option<SchemaRef>> {
        self.inner.streams.schema(stream)
    }

    /// Highest Raft index whose rows are durably in chDB for this shard (0 if none).
    pub fn flushed_index(&self, shard: u32) -> u64 {
        self.inner.shards.get(shard).map_or(0, |s| s.flushed())
    }

    /// Flushes everything buffered now, on the calling thread; blocks.
    pub fn flush_all(&self) -> Result<()> {
        let mut first_err = None;
        for st in self.inner.shards.all() {
            if let Err(e) = self.inner.flush_shard(&st, true) {
                tracing::error!(shard = st.shard(), error = %e, "flush failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Flushes one shard now (also the tables that are failing); blocks.
    pub fn flush_shard(&self, shard: u32) -> Result<()> {
        match self.inner.shards.get(shard) {
            Some(st) => self.inner.flush_shard(&st, true),
            None => Ok(()),
        }
    }

    /// Shards with tables whose flush keeps failing, with the reason.
    pub fn flush_failures(&self) -> Vec<FlushFailure> {
        let mut out: Vec<FlushFailure> = self
            .inner
            .shards
            .all()
            .iter()
            .filter_map(|st| st.flush_failure())
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
        self.inner.shards.ids()
    }
}

impl Inner {
    /// The shard's state, created empty on first use.
    pub(crate) fn shard_state(&self, shard: u32) -> Arc<ShardState> {
        self.shards.get_or_create(shard)
    }
}

#[cfg(test)]
mod tests {
    use super::{reader_max_threads, reader_settings};

    #[test]
    fn readers_share_the_cores() {
        assert_eq!(reader_max_threads(2, 2), 1);
        assert_eq!(reader_max_threads(8, 2), 4);
        assert_eq!(reader_max_threads(2, 1), 2);
        assert_eq!(reader_max_threads(2, 4), 1);
        assert_eq!(reader_max_threads(4, 0), 4);
    }

    #[test]
    fn readonly_comes_last_and_threads_at_least_one() {
        let s = reader_settings(0);
        assert_eq!(s.last().map(String::as_str), Some("SET readonly = 1"));
        assert!(s.contains(&"SET max_threads = 1".to_string()));
        assert!(reader_settings(3).contains(&"SET max_threads = 3".to_string()));
    }
}
