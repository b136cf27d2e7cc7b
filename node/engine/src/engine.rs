//! The engine: one process-global chDB database, a connection pool, per-shard
//! buffers and the flusher threads that drain them (flush.rs), and users'
//! read-only queries (read.rs).
//!
//! Every method blocks its calling thread (chDB calls are synchronous). Async
//! callers must wrap calls in `tokio::task::spawn_blocking`; the flusher runs
//! on its own threads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use adbc_core::options::{OptionDatabase, OptionValue};
use adbc_core::Driver;
use adbc_driver_manager::ManagedDatabase;
use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use crate::buffer::ShardBuf;
use crate::catalog::{self, ShardCatalog};
use crate::columns::{align, strings, u64s};
use crate::error::{EngineError, Result};
use crate::layout::{self, FieldType, TableId, FLUSHED_TABLE, SERIES_ID, SERIES_TABLE, TIME};
use crate::pool::{Conn, Pool};
use crate::stream::SchemaCache;
use crate::{ipc, loader, metrics};

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

/// The process's open database; chDB holds one data directory per process.
struct OpenDb {
    data_dir: PathBuf,
    db: ManagedDatabase,
}

static OPEN_DB: Mutex<Option<OpenDb>> = Mutex::new(None);

fn open_database(chdb_dir: &Path, data_dir: &Path) -> Result<ManagedDatabase> {
    std::fs::create_dir_all(data_dir).map_err(|source| EngineError::DataDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    let data_dir = data_dir
        .canonicalize()
        .map_err(|source| EngineError::DataDir {
            path: data_dir.to_path_buf(),
            source,
        })?;
    let mut open = OPEN_DB.lock();
    if let Some(o) = open.as_ref() {
        if o.data_dir == data_dir {
            return Ok(o.db.clone());
        }
        return Err(EngineError::SecondDataDir {
            open: o.data_dir.clone(),
            requested: data_dir,
        });
    }
    pin_utc();
    let mut driver = loader::load_driver(chdb_dir)?;
    let uri = data_dir.to_str().ok_or_else(|| EngineError::DataDir {
        path: data_dir.clone(),
        source: std::io::Error::other("path is not UTF-8"),
    })?;
    let db = driver
        .new_database_with_opts([(OptionDatabase::Uri, OptionValue::String(uri.to_string()))])
        .map_err(|e| EngineError::EngineBroken {
            path: chdb_dir.to_path_buf(),
            reason: format!(
                "opening data directory {}: {}",
                data_dir.display(),
                e.message
            ),
        })?;
    *open = Some(OpenDb {
        data_dir,
        db: db.clone(),
    });
    Ok(db)
}

/// Makes the engine's server time zone UTC. chDB takes it from `TZ` when
/// it loads, and displays and computes with it for `DateTime64` columns
/// that name no zone, whatever `session_timezone` says (on a machine in
/// New York, `toString(time)` gave New York time): results must not depend
/// on where the node runs. Call before other threads start (the node's
/// `main` does); the engine calls it again before loading chDB.
pub fn pin_utc() {
    if std::env::var("TZ").as_deref() != Ok("UTC") {
        std::env::set_var("TZ", "UTC");
    }
}

/// The age bound of one shard's buffer: `max_age` stretched by up to 7/16
/// depending on the shard, so shards that started buffering together (all
/// of them, under steady load) do not all flush in the same instant.
pub fn flush_age_of(max_age: Duration, shard: u32) -> Duration {
    max_age + max_age * (shard % 8) / 16
}

/// One table's part of a committed entry, as the router encoded it.
#[derive(Debug, Clone, Copy)]
pub struct TableBatchRef<'a> {
    /// The database (InfluxDB `db` / `bucket`) the rows belong to.
    pub database: &'a str,
    /// A measurement, or `_samples` (Prometheus samples).
    pub measurement: &'a str,
    /// Arrow IPC stream of points (time, series_id, fields...). Buffered
    /// columns share these bytes until the flush.
    pub points_ipc: &'a Bytes,
    /// Arrow IPC stream of the series in the batch (may be empty).
    pub series_ipc: &'a Bytes,
}

/// What applying a committed entry decided. The decision depends only on
/// the shard's log (its catalog and the entry), so every replica takes the
/// same one.
#[derive(Debug)]
pub enum Applied {
    /// The entry's rows are buffered for the flusher.
    Stored,
    /// The entry can never be stored (a field type conflicting with an
    /// earlier entry, a malformed batch); nothing of it is kept.
    Rejected(EngineError),
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
    streams: SchemaCache,
    pub(crate) shards: RwLock<HashMap<u32, Arc<ShardState>>>,
    pub(crate) flush_tx: Sender<u32>,
    pub(crate) shutdown: AtomicBool,
    /// The data directory, held open for `syncfs`.
    pub(crate) data_dir: std::fs::File,
}

/// The node's embedded engine. `Send + Sync`; share it as `Arc<Engine>`.
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    ticker_stop: Mutex<Option<Sender<()>>>,
}

/// Settings of the connections that run users' queries, in this order:
/// times come back in UTC whatever the machine's zone, and `readonly = 1`
/// (which also freezes every setting, `readonly` included) comes last.
pub const READER_SETTINGS: &[&str] = &["SET session_timezone = 'UTC'", "SET readonly = 1"];

impl Engine {
    /// Loads chDB (once per process), opens the data directory, reads the
    /// shards' layout and flushed indexes back and starts the flusher threads.
    ///
    /// Opening the same data directory again in one process shares the
    /// engine's database; a different data directory is refused
    /// ([`EngineError::SecondDataDir`]).
    pub fn open(cfg: EngineConfig) -> Result<Engine> {
        metrics::register();
        let chdb_dir = loader::resolve_chdb_dir(cfg.chdb_dir.as_deref());
        // Checked before anything else so a bad path is reported even when
        // this process already runs an engine.
        if !loader::driver_path(&chdb_dir).is_file() {
            return Err(EngineError::EngineNotFound { path: chdb_dir });
        }
        let db = open_database(&chdb_dir, &cfg.data_dir)?;
        let size = if cfg.pool_size == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            cfg.pool_size
        };
        let pool = Pool::new(&db, size, layout::WRITER_SETTINGS)?;
        let readers = Pool::new(&db, size, READER_SETTINGS)?;
        let data_dir =
            std::fs::File::open(&cfg.data_dir).map_err(|source| EngineError::DataDir {
                path: cfg.data_dir.clone(),
                source,
            })?;
        let (flush_tx, flush_rx) = crossbeam_channel::unbounded();
        let inner = Arc::new(Inner {
            cfg,
            pool,
            readers,
            streams: SchemaCache::new(),
            shards: RwLock::new(HashMap::new()),
            flush_tx,
            shutdown: AtomicBool::new(false),
            data_dir,
        });
        inner.check_layout()?;
        inner.load_state()?;
        let mut threads = Vec::new();
        // Half the pool flushes; the rest stays free for snapshots and DDL,
        // and on a small machine one flush at a time leaves the other core
        // to the WAL (a flush burst on every core is what shows up as the
        // write latency tail).
        for i in 0..(size / 2).max(1) {
            let inner = inner.clone();
            let rx: Receiver<u32> = flush_rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("engine-flush-{i}"))
                    .spawn(move || inner.flush_worker(rx))
                    .expect("spawn flusher thread"),
            );
        }
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
        {
            let inner = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("engine-flush-tick".into())
                    .spawn(move || inner.ticker(stop_rx))
                    .expect("spawn ticker thread"),
            );
        }
        crate::exit::skip_engine_teardown_after(crate::exit::Stage::Open);
        tracing::info!(pool_size = size, data_dir = %inner.cfg.data_dir.display(), "engine open");
        Ok(Engine {
            inner,
            threads: Mutex::new(threads),
            ticker_stop: Mutex::new(Some(stop_tx)),
        })
    }

    /// The schema of an Arrow IPC stream from a write (None for no bytes),
    /// parsed once per distinct schema and cached.
    pub fn stream_schema(&self, stream: &[u8]) -> Result<Option<SchemaRef>> {
        self.inner.streams.schema(stream)
    }

    /// Leader-side check before proposing: validates the name and the
    /// batch's Arrow schema (time Timestamp(ns), series_id UInt64, nullable
    /// fields Float64 | Int64 | UInt64 | Utf8 | Boolean) and fails early on a
    /// field whose type the shard has already decided otherwise. Nothing is
    /// reserved: new fields are decided when the entry is applied, in log
    /// order (see [`Applied::Rejected`]). In memory only: cheap enough for an
    /// async worker.
    pub fn admit(
        &self,
        shard: u32,
        database: &str,
        measurement: &str,
        schema: &Schema,
    ) -> Result<()> {
        layout::validate_database(database)?;
        layout::validate_table(measurement)?;
        let offered = layout::batch_fields(measurement, schema)?;
        let st = self.inner.shards.read().get(&shard).cloned();
        match st {
            Some(st) => st
                .catalog
                .read()
                .check(&TableId::new(database, measurement), &offered),
            None => Ok(()),
        }
    }

    /// The type shard `shard` stores `database`.`measurement`.`field`
    /// with, if decided.
    pub fn field_type(
        &self,
        shard: u32,
        database: &str,
        measurement: &str,
        field: &str,
    ) -> Option<FieldType> {
        let st = self.inner.shards.read().get(&shard).cloned()?;
        let t = st
            .catalog
            .read()
            .field(&TableId::new(database, measurement), field);
        t
    }

    /// Applies a committed Raft entry that carries one table's batch (tests
    /// and tools; the node applies whole entries with `apply_tables`).
    pub fn apply(
        &self,
        shard: u32,
        index: u64,
        database: &str,
        measurement: &str,
        points_ipc: &[u8],
        series_ipc: &[u8],
    ) -> Result<Applied> {
        self.apply_tables(
            shard,
            index,
            &[TableBatchRef {
                database,
                measurement,
                points_ipc: &Bytes::copy_from_slice(points_ipc),
                series_ipc: &Bytes::copy_from_slice(series_ipc),
            }],
        )
    }

    /// Applies a committed Raft entry carrying any number of table batches
    /// (a router coalesces concurrent requests for one shard into one entry):
    /// all of them are buffered under one index, or the entry is rejected
    /// whole. Entries at or below the shard's applied index are skipped (WAL
    /// replay after a restart). `Err` only for failures that may pass.
    pub fn apply_tables(
        &self,
        shard: u32,
        index: u64,
        tables: &[TableBatchRef<'_>],
    ) -> Result<Applied> {
        self.inner.apply(shard, index, tables)
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

    /// Stops the flusher threads after a last flush. Also runs on drop.
    pub fn shutdown(&self) {
        if self.inner.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = self.flush_all() {
            tracing::error!(error = %e, "final flush failed; the WAL replays the rest on restart");
        }
        self.ticker_stop.lock().take();
        // Wake every worker so it sees the shutdown flag.
        for _ in 0..self.inner.pool.size() {
            let _ = self.inner.flush_tx.send(u32::MAX);
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
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

    /// Refuses a data directory of another layout (docs/storage.md,
    /// "Layout versions"); marks a new one with this layout.
    fn check_layout(&self) -> Result<()> {
        let path = self.cfg.data_dir.join(layout::LAYOUT_FILE);
        let found = match std::fs::read_to_string(&path) {
            Ok(text) => Some(layout::parse_layout_file(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(EngineError::DataDir { path, source }),
        };
        let has_shards = !self
            .pool
            .get()
            .query("SELECT name FROM system.databases WHERE name LIKE 'shard\\_%' LIMIT 1")?
            .iter()
            .all(|b| b.num_rows() == 0);
        match layout::layout_decision(found, has_shards) {
            Ok(true) => std::fs::write(&path, layout::layout_file_text()).map_err(|source| {
                EngineError::DataDir {
                    path: path.clone(),
                    source,
                }
            }),
            Ok(false) => Ok(()),
            Err(found) => Err(EngineError::LayoutMismatch {
                path: self.cfg.data_dir.clone(),
                found,
                expected: layout::LAYOUT_VERSION,
            }),
        }
    }

    /// Reads back which shards, databases, tables, columns, retentions and
    /// flushed indexes exist.
    fn load_state(&self) -> Result<()> {
        let mut conn = self.pool.get();
        let batches = conn.query(
            "SELECT name, comment FROM system.databases WHERE name LIKE 'shard\\_%' ORDER BY name",
        )?;
        let mut chdb_names: HashMap<String, (u32, String)> = HashMap::new();
        for b in &batches {
            let names = strings(b, 0);
            let comments = strings(b, 1);
            for (db, comment) in names.into_iter().zip(comments) {
                if let Some(shard) = layout::parse_shard_db(&db) {
                    self.shard_state(shard)
                        .created
                        .store(true, Ordering::Release);
                } else if let Some(shard) = layout::parse_data_db(&db) {
                    let st = self.shard_state(shard);
                    st.databases.lock().insert(
                        comment.clone(),
                        DatabaseState {
                            chdb: db.clone(),
                            retention_ns: -1,
                        },
                    );
                    chdb_names.insert(db, (shard, comment));
                }
            }
        }
        let batches = conn.query(
            "SELECT database, table, name, type FROM system.columns \
             WHERE database LIKE 'shard\\_%' ORDER BY database, table, position",
        )?;
        for b in &batches {
            let db = strings(b, 0);
            let table = strings(b, 1);
            let name = strings(b, 2);
            let typ = strings(b, 3);
            for i in 0..b.num_rows() {
                let Some((shard, database)) = chdb_names.get(&db[i]) else {
                    continue;
                };
                let st = self.shard_state(*shard);
                if layout::is_engine_table(&table[i]) && table[i] != layout::SAMPLES_TABLE {
                    continue;
                }
                let id = TableId::new(database, &table[i]);
                if name[i] == TIME || name[i] == SERIES_ID {
                    st.tables.lock().entry(id).or_default();
                    continue;
                }
                let Some(t) = FieldType::from_clickhouse(&typ[i]) else {
                    tracing::warn!(db = %db[i], table = %table[i], column = %name[i], r#type = %typ[i],
                        "column of unknown type ignored");
                    continue;
                };
                st.tables
                    .lock()
                    .entry(id.clone())
                    .or_default()
                    .push((name[i].clone(), t));
                st.catalog.write().insert(&id, &name[i], t);
            }
        }
        for (chdb, (shard, database)) in &chdb_names {
            let sql = format!(
                "SELECT argMax(retention_ns, `index`) FROM {}",
                layout::qualified(chdb, layout::DATABASE_TABLE)
            );
            if let Some(r) = conn.query(&sql).ok().and_then(|b| {
                b.first()
                    .and_then(|b| crate::columns::i64s(b, 0).first().copied())
            }) {
                if let Some(d) = self.shard_state(*shard).databases.lock().get_mut(database) {
                    d.retention_ns = r;
                }
            }
        }
        let shards: Vec<Arc<ShardState>> = self.shards.read().values().cloned().collect();
        for st in shards {
            let sql = format!(
                "SELECT toUInt64(max(`index`)) AS i FROM {}",
                layout::qualified(&st.db, FLUSHED_TABLE)
            );
            let idx = match conn.query(&sql) {
                Ok(b) => b
                    .first()
                    .and_then(|b| u64s(b, 0).first().copied())
                    .unwrap_or(0),
                Err(e) => {
                    tracing::warn!(shard = st.shard, error = %e, "no flushed index; starting from 0");
                    0
                }
            };
            st.flushed.store(idx, Ordering::Release);
            st.applied.store(idx, Ordering::Release);
            tracing::info!(shard = st.shard, flushed_index = idx, "shard loaded");
        }
        Ok(())
    }

    fn apply(&self, shard: u32, index: u64, tables: &[TableBatchRef<'_>]) -> Result<Applied> {
        let st = self.shard_state(shard);
        if index <= st.applied.load(Ordering::Acquire) {
            return Ok(Applied::Stored);
        }
        let decoded = match self.decode_entry(shard, index, tables) {
            Ok(d) => d,
            Err(e) => {
                st.applied.store(index, Ordering::Release);
                return Ok(Applied::Rejected(e));
            }
        };
        // Types: decided here, in log order, against this shard's catalog.
        let offered: Vec<catalog::Offered<'_>> = decoded
            .tables
            .iter()
            .map(|t| (&t.id, t.fields.as_slice()))
            .collect();
        let additions = match st.catalog.read().decide(&offered) {
            Ok(a) => a,
            Err(e) => {
                st.applied.store(index, Ordering::Release);
                return Ok(Applied::Rejected(e));
            }
        };
        let rows: usize = decoded.tables.iter().map(|t| t.rows).sum();
        let largest = {
            let mut buf = st.buf.lock();
            // Checked again under the lock: apply may race a replayed duplicate.
            if index <= st.applied.load(Ordering::Acquire) {
                return Ok(Applied::Stored);
            }
            st.catalog.write().record(additions);
            st.applied.store(index, Ordering::Release);
            buf.max_index = index;
            buf.oldest.get_or_insert_with(Instant::now);
            for (database, series) in decoded.series {
                let n: usize = series.iter().map(|b| b.num_rows()).sum();
                if n > 0 {
                    let id = TableId::new(database, SERIES_TABLE);
                    buf.tables.entry(id).or_default().push(index, series, n);
                }
            }
            buf.rows += rows;
            let mut largest = 0;
            for t in decoded.tables {
                if t.rows == 0 {
                    continue;
                }
                let tb = buf.tables.entry(t.id).or_default();
                tb.push(index, t.batches, t.rows);
                largest = largest.max(tb.rows);
            }
            largest
        };
        metrics::PENDING_ROWS.add(rows as i64);
        let failing = st.failing.lock().is_some();
        if largest >= self.cfg.flush_max_rows.saturating_mul(4) && !failing {
            // The flusher is behind: flush on the applying thread so apply
            // slows down instead of buffering without bound. (Not while a
            // table is failing: its rows would trigger this on every apply.)
            // The rows are buffered either way: a failure here is retried
            // by the flusher, it does not fail the apply.
            if let Err(e) = self.flush_shard(&st, false) {
                tracing::warn!(shard, error = %e, "inline flush failed; the flusher retries");
            }
        } else if largest >= self.cfg.flush_max_rows && !st.queued.swap(true, Ordering::AcqRel) {
            let _ = self.flush_tx.send(shard);
        }
        Ok(Applied::Stored)
    }

    /// Decodes an entry's tables. Failures are properties of the entry's
    /// bytes, identical on every replica (they make the entry rejected).
    fn decode_entry<'a>(
        &self,
        shard: u32,
        index: u64,
        tables: &[TableBatchRef<'a>],
    ) -> Result<DecodedEntry<'a>> {
        let series_schema = ipc::series_schema();
        let mut out = DecodedEntry {
            tables: Vec::with_capacity(tables.len()),
            series: Vec::new(),
        };
        for t in tables {
            layout::validate_database(t.database)?;
            // The engine's real limit, not the stricter admission rule: an
            // old entry whose name was storable is stored.
            if let Err(e) = shardhouse_common::names::validate_storable_table(
                t.measurement,
                &layout::data_db(shard, t.database),
            ) {
                // Only entries written before names were checked at
                // admission can get here: storing them would fail every
                // flush of the shard. Skip this table, keep the rest.
                tracing::error!(shard, index, error = %e,
                    "skipping a table of a committed entry whose name the engine cannot store");
                metrics::UNSTORABLE_TABLES_SKIPPED.inc();
                continue;
            }
            let (schema, batches) = self.streams.decode(t.points_ipc)?;
            if layout::is_engine_table(t.measurement) && t.measurement != layout::SAMPLES_TABLE {
                return Err(EngineError::InvalidMeasurement {
                    measurement: t.measurement.to_string(),
                    reason: "names starting with `_` are the engine's own tables".into(),
                });
            }
            let mut decoded = DecodedTable {
                id: TableId::new(t.database, t.measurement),
                fields: Vec::new(),
                batches: Vec::with_capacity(batches.len()),
                rows: 0,
            };
            if let Some(schema) = schema {
                decoded.fields = layout::batch_fields(t.measurement, &schema)?;
                let target = ipc::points_schema(&decoded.fields);
                for b in &batches {
                    if b.num_rows() > 0 {
                        decoded.rows += b.num_rows();
                        decoded.batches.push(align(b, &target)?);
                    }
                }
            }
            let (_, s) = self.streams.decode(t.series_ipc)?;
            let mut rows = Vec::new();
            for b in s.iter().filter(|b| b.num_rows() > 0) {
                rows.push(crate::tag_index::index_batch(&align(b, &series_schema)?)?);
            }
            if !rows.is_empty() {
                out.series.push((t.database, rows));
            }
            out.tables.push(decoded);
        }
        Ok(out)
    }

    pub(crate) fn ensure_shard(&self, conn: &mut Conn, st: &ShardState) -> Result<()> {
        if st.created.load(Ordering::Acquire) {
            return Ok(());
        }
        for sql in layout::create_shard(&st.db) {
            conn.execute(&sql)?;
        }
        st.created.store(true, Ordering::Release);
        Ok(())
    }

    /// Creates a database's storage in a shard if it does not exist yet
    /// (first write, or an explicit create) and returns its chDB database.
    pub(crate) fn ensure_database(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        database: &str,
    ) -> Result<String> {
        if let Some(d) = st.databases.lock().get(database) {
            return Ok(d.chdb.clone());
        }
        self.ensure_shard(conn, st)?;
        let chdb = layout::data_db(st.shard, database);
        for sql in layout::create_database(&chdb, database) {
            conn.execute(&sql)?;
        }
        st.tables.lock().insert(
            TableId::new(database, layout::SAMPLES_TABLE),
            vec![("value".to_string(), FieldType::Float64)],
        );
        st.databases.lock().insert(
            database.to_string(),
            DatabaseState {
                chdb: chdb.clone(),
                retention_ns: -1,
            },
        );
        Ok(chdb)
    }

    /// Creates the fact table or adds missing columns; returns its columns.
    pub(crate) fn ensure_table(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        id: &TableId,
        fields: &[(String, FieldType)],
    ) -> Result<Vec<(String, FieldType)>> {
        let chdb = self.ensure_database(conn, st, &id.database)?;
        let mut tables = st.tables.lock();
        match tables.get_mut(id) {
            None => {
                conn.execute(&layout::create_fact_table(&chdb, &id.table, fields))?;
                tables.insert(id.clone(), fields.to_vec());
            }
            Some(cols) => {
                let missing: Vec<(String, FieldType)> = fields
                    .iter()
                    .filter(|(n, _)| !cols.iter().any(|(c, _)| c == n))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    conn.execute(&layout::add_columns(&chdb, &id.table, &missing))?;
                    cols.extend(missing);
                }
            }
        }
        Ok(tables[id].clone())
    }
}

/// A committed entry's tables, decoded and checked, not yet buffered.
struct DecodedEntry<'a> {
    tables: Vec<DecodedTable>,
    /// `_series` rows per database.
    series: Vec<(&'a str, Vec<RecordBatch>)>,
}

struct DecodedTable {
    id: TableId,
    fields: Vec<(String, FieldType)>,
    batches: Vec<RecordBatch>,
    rows: usize,
}
