//! The engine: one process-global chDB database, a connection pool, per-shard
//! buffers and the flusher threads that drain them.
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
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch, UInt64Array, UInt8Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use crate::error::{EngineError, Result};
use crate::layout::{self, FieldType, FLUSHED_TABLE, SERIES_ID, SERIES_TABLE, TIME};
use crate::pool::{Conn, Pool};
use crate::stream::SchemaCache;
use crate::{ipc, loader, metrics, snapshot};

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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            data_dir: PathBuf::from(".data/chdb"),
            chdb_dir: None,
            pool_size: 0,
            flush_max_rows: 200_000,
            flush_max_age: Duration::from_secs(1),
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

/// The age bound of one shard's buffer: `max_age` stretched by up to 7/16
/// depending on the shard, so shards that started buffering together (all
/// of them, under steady load) do not all flush in the same instant.
pub fn flush_age_of(max_age: Duration, shard: u32) -> Duration {
    max_age + max_age * (shard % 8) / 16
}

/// One table's part of a committed entry, as the router encoded it.
#[derive(Debug, Clone, Copy)]
pub struct TableBatchRef<'a> {
    pub measurement: &'a str,
    /// Arrow IPC stream of points (time, series_id, fields...). Buffered
    /// columns share these bytes until the flush.
    pub points_ipc: &'a Bytes,
    /// Arrow IPC stream of the series in the batch (may be empty).
    pub series_ipc: &'a Bytes,
}

/// Rows of one measurement waiting for a flush.
#[derive(Default)]
struct TableBuf {
    batches: Vec<RecordBatch>,
    rows: usize,
}

/// A shard's applied-but-not-flushed data.
#[derive(Default)]
struct ShardBuf {
    tables: HashMap<String, TableBuf>,
    series: Vec<RecordBatch>,
    rows: usize,
    max_index: u64,
    oldest: Option<Instant>,
}

impl ShardBuf {
    fn is_empty(&self) -> bool {
        self.max_index == 0
    }

    /// Puts `older` (a failed flush) back in front of what arrived since.
    fn restore(&mut self, mut older: ShardBuf) {
        for (m, mut tb) in std::mem::take(&mut self.tables) {
            let e = older.tables.entry(m).or_default();
            e.batches.append(&mut tb.batches);
            e.rows += tb.rows;
        }
        older.series.append(&mut self.series);
        older.rows += self.rows;
        older.max_index = older.max_index.max(self.max_index);
        older.oldest = match (older.oldest, self.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        *self = older;
    }
}

struct ShardState {
    shard: u32,
    db: String,
    buf: Mutex<ShardBuf>,
    /// Serializes flushes, DDL, import and drop of this shard.
    flush_lock: Mutex<()>,
    /// Columns of this shard's fact tables as they exist in chDB.
    tables: Mutex<HashMap<String, Vec<(String, FieldType)>>>,
    created: AtomicBool,
    flushed: AtomicU64,
    applied: AtomicU64,
    queued: AtomicBool,
}

impl ShardState {
    fn new(shard: u32) -> ShardState {
        ShardState {
            shard,
            db: layout::shard_db(shard),
            buf: Mutex::new(ShardBuf::default()),
            flush_lock: Mutex::new(()),
            tables: Mutex::new(HashMap::new()),
            created: AtomicBool::new(false),
            flushed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            queued: AtomicBool::new(false),
        }
    }
}

struct Inner {
    cfg: EngineConfig,
    pool: Arc<Pool>,
    /// Field types per measurement across this node's shards, including
    /// fields reserved by `admit` that no flush has created yet.
    catalog: RwLock<HashMap<String, HashMap<String, FieldType>>>,
    /// Schemas of the IPC streams entries carry, parsed once each.
    streams: SchemaCache,
    shards: RwLock<HashMap<u32, Arc<ShardState>>>,
    flush_tx: Sender<u32>,
    shutdown: AtomicBool,
    /// The data directory, held open for `syncfs`.
    data_dir: std::fs::File,
}

/// The node's embedded engine. `Send + Sync`; share it as `Arc<Engine>`.
pub struct Engine {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    ticker_stop: Mutex<Option<Sender<()>>>,
}

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
        let pool = Pool::new(&db, size)?;
        let data_dir =
            std::fs::File::open(&cfg.data_dir).map_err(|source| EngineError::DataDir {
                path: cfg.data_dir.clone(),
                source,
            })?;
        let (flush_tx, flush_rx) = crossbeam_channel::unbounded();
        let inner = Arc::new(Inner {
            cfg,
            pool,
            catalog: RwLock::new(HashMap::new()),
            streams: SchemaCache::new(),
            shards: RwLock::new(HashMap::new()),
            flush_tx,
            shutdown: AtomicBool::new(false),
            data_dir,
        });
        inner.load_state()?;
        let mut threads = Vec::new();
        // Half the pool flushes; the rest stays free for queries, snapshots
        // and DDL, and on a small machine one flush at a time leaves the
        // other core to the WAL (a flush burst on every core is what shows
        // up as the write latency tail).
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

    /// Leader-side check before proposing: validates the batch's Arrow schema
    /// (time Timestamp(ns), series_id UInt64, nullable fields Float64 | Int64 |
    /// UInt64 | Utf8 | Boolean) against the measurement's stored field types and
    /// reserves new fields, so that a committed entry never fails on apply.
    /// In memory only (no engine call): cheap enough for an async worker.
    pub fn admit(&self, measurement: &str, schema: &Schema) -> Result<()> {
        layout::validate_measurement(measurement)?;
        let offered = layout::batch_fields(measurement, schema)?;
        // Nearly every write offers only fields already stored with the
        // same types: a shared lock answers that.
        if let Some(known) = self.inner.catalog.read().get(measurement) {
            if offered.iter().all(|(n, t)| known.get(n) == Some(t)) {
                return Ok(());
            }
        }
        let mut cat = self.inner.catalog.write();
        let known = cat.entry(measurement.to_string()).or_default();
        layout::check_conflicts(measurement, &offered, |n| known.get(n).copied())?;
        for (n, t) in offered {
            known.entry(n).or_insert(t);
        }
        Ok(())
    }

    /// Applies a committed Raft entry that carries one table's batch: decodes
    /// its Arrow IPC stream bytes and buffers the rows for the flusher.
    /// Entries at or below the shard's applied index are skipped (WAL replay
    /// after a restart).
    pub fn apply(
        &self,
        shard: u32,
        index: u64,
        measurement: &str,
        points_ipc: &[u8],
        series_ipc: &[u8],
    ) -> Result<()> {
        self.apply_tables(
            shard,
            index,
            &[TableBatchRef {
                measurement,
                points_ipc: &Bytes::copy_from_slice(points_ipc),
                series_ipc: &Bytes::copy_from_slice(series_ipc),
            }],
        )
    }

    /// Applies a committed Raft entry carrying any number of table batches
    /// (a router coalesces concurrent requests for one shard into one entry).
    /// All of them are buffered under one index, or none if one is invalid.
    pub fn apply_tables(&self, shard: u32, index: u64, tables: &[TableBatchRef<'_>]) -> Result<()> {
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
            if let Err(e) = self.inner.flush_shard(&st) {
                tracing::error!(shard = st.shard, error = %e, "flush failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Flushes one shard now; blocks.
    pub fn flush_shard(&self, shard: u32) -> Result<()> {
        let st = self.inner.shards.read().get(&shard).cloned();
        match st {
            Some(st) => self.inner.flush_shard(&st),
            None => Ok(()),
        }
    }

    /// Runs a read-only statement against one shard's database: unqualified
    /// table names resolve to that shard's tables. Fact tables keep rewritten
    /// points until merges collapse them; use `FINAL` to read one row per point.
    /// Runs `sql` in the shard's database. Rows applied but not flushed yet
    /// are flushed first, so a query sees every acknowledged write
    /// (read-your-writes for tests and operators, whatever the flush age).
    pub fn query(&self, shard: u32, sql: &str) -> Result<Vec<RecordBatch>> {
        let st = self.inner.shards.read().get(&shard).cloned();
        if let Some(st) = st {
            if !st.buf.lock().is_empty() {
                self.inner.flush_shard(&st)?;
            }
        }
        let db = layout::shard_db(shard);
        let mut conn = self.inner.pool.get();
        conn.execute(&format!("USE {}", layout::ident(&db)))?;
        conn.query(sql)
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

    /// All of a shard's data after flushing it, as snapshot bytes, with its flushed index.
    pub fn export_shard(&self, shard: u32) -> Result<(u64, Vec<u8>)> {
        let st = self.inner.shard_state(shard);
        self.inner.flush_shard(&st)?;
        let _g = st.flush_lock.lock();
        let index = st.flushed.load(Ordering::Acquire);
        let mut tables = Vec::new();
        if st.created.load(Ordering::Acquire) {
            let mut conn = self.inner.pool.get();
            let cols: Vec<(String, Vec<(String, FieldType)>)> = {
                let t = st.tables.lock();
                let mut v: Vec<_> = t.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            for (m, fields) in cols {
                let sql = format!("SELECT * FROM {} FINAL", layout::qualified(&st.db, &m));
                let batches = conn.query(&sql)?;
                let schema = ipc::points_schema(&fields);
                let aligned = align_all(&batches, &schema)?;
                tables.push((m, schema, aligned));
            }
            let sql = format!(
                "SELECT series_id, measurement, tags FROM {} FINAL",
                layout::qualified(&st.db, SERIES_TABLE)
            );
            let batches = conn.query(&sql)?;
            let schema = ipc::series_schema();
            let aligned = align_all(&batches, &schema)?;
            tables.push((SERIES_TABLE.to_string(), schema, aligned));
        }
        Ok((index, snapshot::encode(&tables)?))
    }

    /// Replaces a shard's data with a snapshot and sets its flushed index.
    pub fn import_shard(&self, shard: u32, flushed_index: u64, data: &[u8]) -> Result<()> {
        let tables = snapshot::decode(shard, data)?;
        let st = self.inner.shard_state(shard);
        let _g = st.flush_lock.lock();
        let dropped = std::mem::take(&mut *st.buf.lock());
        metrics::PENDING_ROWS.sub(dropped.rows as i64);
        let mut conn = self.inner.pool.get();
        conn.execute(&format!(
            "DROP DATABASE IF EXISTS {} SYNC",
            layout::ident(&st.db)
        ))?;
        st.created.store(false, Ordering::Release);
        st.tables.lock().clear();
        self.inner.ensure_shard(&mut conn, &st)?;
        for (name, schema, batches) in tables {
            if name == SERIES_TABLE {
                ingest_concat(&mut conn, &st.db, SERIES_TABLE, &schema, &batches)?;
                continue;
            }
            layout::validate_measurement(&name)?;
            let fields = layout::batch_fields(&name, &schema)?;
            self.inner.register_fields(&name, &fields);
            let cols = self.inner.ensure_table(&mut conn, &st, &name, &fields)?;
            let tschema = ipc::points_schema(&cols);
            let aligned = align_all(&batches, &tschema)?;
            ingest_concat(&mut conn, &st.db, &name, &tschema, &aligned)?;
        }
        self.inner.sync_parts()?;
        write_flushed(&mut conn, &st.db, flushed_index)?;
        st.flushed.store(flushed_index, Ordering::Release);
        st.applied.store(flushed_index, Ordering::Release);
        Ok(())
    }

    /// Deletes a shard's data and buffers on this node.
    pub fn drop_shard(&self, shard: u32) -> Result<()> {
        let Some(st) = self.inner.shards.read().get(&shard).cloned() else {
            return Ok(());
        };
        let _g = st.flush_lock.lock();
        let dropped = std::mem::take(&mut *st.buf.lock());
        metrics::PENDING_ROWS.sub(dropped.rows as i64);
        self.inner.pool.get().execute(&format!(
            "DROP DATABASE IF EXISTS {} SYNC",
            layout::ident(&st.db)
        ))?;
        self.inner.shards.write().remove(&shard);
        Ok(())
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
    fn shard_state(&self, shard: u32) -> Arc<ShardState> {
        if let Some(s) = self.shards.read().get(&shard) {
            return s.clone();
        }
        self.shards
            .write()
            .entry(shard)
            .or_insert_with(|| Arc::new(ShardState::new(shard)))
            .clone()
    }

    /// Reads back which shards, tables, columns and flushed indexes exist.
    fn load_state(&self) -> Result<()> {
        let mut conn = self.pool.get();
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
                let Some(shard) = layout::parse_shard_db(&db[i]) else {
                    continue;
                };
                let st = self.shard_state(shard);
                st.created.store(true, Ordering::Release);
                if table[i].starts_with('_') || name[i] == TIME || name[i] == SERIES_ID {
                    if !table[i].starts_with('_') {
                        st.tables.lock().entry(table[i].clone()).or_default();
                    }
                    continue;
                }
                let Some(t) = FieldType::from_clickhouse(&typ[i]) else {
                    tracing::warn!(db = %db[i], table = %table[i], column = %name[i], r#type = %typ[i],
                        "column of unknown type ignored");
                    continue;
                };
                st.tables
                    .lock()
                    .entry(table[i].clone())
                    .or_default()
                    .push((name[i].clone(), t));
                self.catalog
                    .write()
                    .entry(table[i].clone())
                    .or_default()
                    .entry(name[i].clone())
                    .or_insert(t);
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

    fn register_fields(&self, measurement: &str, fields: &[(String, FieldType)]) {
        let mut cat = self.catalog.write();
        let known = cat.entry(measurement.to_string()).or_default();
        for (n, t) in fields {
            known.entry(n.clone()).or_insert(*t);
        }
    }

    fn apply(&self, shard: u32, index: u64, tables: &[TableBatchRef<'_>]) -> Result<()> {
        let st = self.shard_state(shard);
        if index <= st.applied.load(Ordering::Acquire) {
            return Ok(());
        }
        // Decode everything first: an entry is buffered whole or not at all.
        let series_schema = ipc::series_schema();
        let mut decoded: Vec<(&str, Vec<RecordBatch>, usize)> = Vec::with_capacity(tables.len());
        let mut series = Vec::new();
        for t in tables {
            let (schema, batches) = self.streams.decode(t.points_ipc)?;
            let mut normalized = Vec::with_capacity(batches.len());
            let mut rows = 0;
            if let Some(schema) = schema {
                layout::validate_measurement(t.measurement)?;
                let offered = layout::batch_fields(t.measurement, &schema)?;
                let fields = self.resolve_apply_types(t.measurement, &offered);
                let target = ipc::points_schema(&fields);
                for b in &batches {
                    if b.num_rows() > 0 {
                        rows += b.num_rows();
                        normalized.push(align(b, &target)?);
                    }
                }
            }
            let (_, s) = self.streams.decode(t.series_ipc)?;
            for b in s.iter().filter(|b| b.num_rows() > 0) {
                series.push(align(b, &series_schema)?);
            }
            decoded.push((t.measurement, normalized, rows));
        }
        let rows: usize = decoded.iter().map(|d| d.2).sum();

        let table_rows = {
            let mut buf = st.buf.lock();
            // Checked again under the lock: apply may race a replayed duplicate.
            if index <= st.applied.load(Ordering::Acquire) {
                return Ok(());
            }
            st.applied.store(index, Ordering::Release);
            buf.max_index = index;
            buf.oldest.get_or_insert_with(Instant::now);
            buf.series.extend(series);
            buf.rows += rows;
            let mut largest = 0;
            for (measurement, normalized, n) in decoded {
                if n == 0 {
                    continue;
                }
                let tb = buf.tables.entry(measurement.to_string()).or_default();
                tb.batches.extend(normalized);
                tb.rows += n;
                largest = largest.max(tb.rows);
            }
            largest
        };
        metrics::PENDING_ROWS.add(rows as i64);
        if table_rows >= self.cfg.flush_max_rows.saturating_mul(4) {
            // The flusher is behind: flush on the applying thread so apply
            // slows down instead of buffering without bound.
            self.flush_shard(&st)?;
        } else if table_rows >= self.cfg.flush_max_rows && !st.queued.swap(true, Ordering::AcqRel) {
            let _ = self.flush_tx.send(shard);
        }
        Ok(())
    }

    /// Types a committed entry's fields are stored with. `admit` normally
    /// guarantees they match; if this node's catalog disagrees (e.g. the
    /// entry was admitted by another leader), the stored type wins and the
    /// values are cast (NULL where impossible) rather than failing the apply.
    fn resolve_apply_types(
        &self,
        measurement: &str,
        offered: &[(String, FieldType)],
    ) -> Vec<(String, FieldType)> {
        let mut cat = self.catalog.write();
        let known = cat.entry(measurement.to_string()).or_default();
        offered
            .iter()
            .map(|(n, t)| {
                let stored = *known.entry(n.clone()).or_insert(*t);
                if stored != *t {
                    tracing::warn!(measurement, field = %n, stored = %stored, offered = %t,
                        "committed entry carries a conflicting field type; casting to the stored type");
                }
                (n.clone(), stored)
            })
            .collect()
    }

    fn flush_worker(&self, rx: Receiver<u32>) {
        while let Ok(shard) = rx.recv() {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            let st = self.shards.read().get(&shard).cloned();
            if let Some(st) = st {
                if let Err(e) = self.flush_shard(&st) {
                    // The rows stay buffered; the ticker retries when they age out.
                    tracing::error!(shard, error = %e, "flush failed; will retry");
                }
            }
        }
    }

    fn ticker(&self, stop: Receiver<()>) {
        let period = (self.cfg.flush_max_age / 4)
            .clamp(Duration::from_millis(5), Duration::from_millis(250));
        let mut last_parts = Instant::now();
        loop {
            match stop.recv_timeout(period) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let shards: Vec<Arc<ShardState>> = self.shards.read().values().cloned().collect();
            for st in shards {
                let max_age = flush_age_of(self.cfg.flush_max_age, st.shard);
                let due = st.buf.lock().oldest.is_some_and(|t| t.elapsed() >= max_age);
                if due && !st.queued.swap(true, Ordering::AcqRel) {
                    let _ = self.flush_tx.send(st.shard);
                }
            }
            if last_parts.elapsed() >= Duration::from_secs(10) {
                last_parts = Instant::now();
                self.update_parts_gauge();
            }
        }
    }

    fn update_parts_gauge(&self) {
        let r = self.pool.get().query(
            "SELECT toUInt64(count()) FROM system.parts WHERE active AND database LIKE 'shard\\_%'",
        );
        if let Ok(b) = r {
            if let Some(n) = b.first().and_then(|b| u64s(b, 0).first().copied()) {
                metrics::PARTS.set(n as i64);
            }
        }
    }

    fn ensure_shard(&self, conn: &mut Conn, st: &ShardState) -> Result<()> {
        if st.created.load(Ordering::Acquire) {
            return Ok(());
        }
        for sql in layout::create_shard(&st.db) {
            conn.execute(&sql)?;
        }
        st.created.store(true, Ordering::Release);
        Ok(())
    }

    /// Creates the fact table or adds missing columns; returns its columns.
    fn ensure_table(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        measurement: &str,
        fields: &[(String, FieldType)],
    ) -> Result<Vec<(String, FieldType)>> {
        let mut tables = st.tables.lock();
        match tables.get_mut(measurement) {
            None => {
                conn.execute(&layout::create_fact_table(&st.db, measurement, fields))?;
                tables.insert(measurement.to_string(), fields.to_vec());
            }
            Some(cols) => {
                let missing: Vec<(String, FieldType)> = fields
                    .iter()
                    .filter(|(n, _)| !cols.iter().any(|(c, _)| c == n))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    conn.execute(&layout::add_columns(&st.db, measurement, &missing))?;
                    cols.extend(missing);
                }
            }
        }
        Ok(tables[measurement].clone())
    }

    fn flush_shard(&self, st: &Arc<ShardState>) -> Result<()> {
        let _g = st.flush_lock.lock();
        st.queued.store(false, Ordering::Release);
        let taken = std::mem::take(&mut *st.buf.lock());
        if taken.is_empty() {
            return Ok(());
        }
        let _timer = metrics::Timer::start(&metrics::FLUSH_SECONDS);
        let rows = taken.rows;
        match self.write_shard(st, &taken) {
            Ok(()) => {
                st.flushed.store(taken.max_index, Ordering::Release);
                metrics::FLUSHES_TOTAL.inc();
                metrics::ROWS_FLUSHED_TOTAL.inc_by(rows as u64);
                metrics::PENDING_ROWS.sub(rows as i64);
                tracing::debug!(
                    shard = st.shard,
                    rows,
                    flushed_index = taken.max_index,
                    "flushed"
                );
                Ok(())
            }
            Err(e) => {
                st.buf.lock().restore(taken);
                Err(e)
            }
        }
    }

    /// Writes a shard's taken buffer: fact rows, then series, then the index.
    /// The index goes last so that a crash in between replays (and collapses)
    /// rows rather than losing them.
    fn write_shard(&self, st: &ShardState, taken: &ShardBuf) -> Result<()> {
        let mut conn = self.pool.get();
        self.ensure_shard(&mut conn, st)?;
        for (measurement, tb) in &taken.tables {
            let mut fields: Vec<(String, FieldType)> = Vec::new();
            for b in &tb.batches {
                for f in b.schema().fields().iter().skip(2) {
                    if !fields.iter().any(|(n, _)| n == f.name()) {
                        if let Some(t) = FieldType::from_arrow(f.data_type()) {
                            fields.push((f.name().clone(), t));
                        }
                    }
                }
            }
            let cols = self.ensure_table(&mut conn, st, measurement, &fields)?;
            let schema = ipc::points_schema(&cols);
            let aligned = align_all(&tb.batches, &schema)?;
            ingest_concat(&mut conn, &st.db, measurement, &schema, &aligned)?;
        }
        if !taken.series.is_empty() {
            let schema = ipc::series_schema();
            ingest_concat(&mut conn, &st.db, SERIES_TABLE, &schema, &taken.series)?;
        }
        self.sync_parts()?;
        write_flushed(&mut conn, &st.db, taken.max_index)
    }

    /// Makes every part written so far durable: one `syncfs` of the data
    /// directory's filesystem (all dirty files and directories, then one
    /// device cache flush) instead of an fsync per part file. Since Linux
    /// 5.8 it also reports writeback errors, so a failed write is not
    /// mistaken for a durable one.
    fn sync_parts(&self) -> Result<()> {
        use std::os::fd::AsRawFd;
        let _timer = metrics::Timer::start(&metrics::SYNC_SECONDS);
        // SAFETY: the fd belongs to `self.data_dir`, open for self's lifetime.
        if unsafe { libc::syncfs(self.data_dir.as_raw_fd()) } == 0 {
            return Ok(());
        }
        Err(EngineError::Sync {
            path: self.cfg.data_dir.clone(),
            source: std::io::Error::last_os_error(),
        })
    }
}

fn write_flushed(conn: &mut Conn, db: &str, index: u64) -> Result<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::UInt8, false),
        Field::new("index", DataType::UInt64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(UInt8Array::from(vec![0u8])),
            Arc::new(UInt64Array::from(vec![index])),
        ],
    )?;
    conn.ingest(db, FLUSHED_TABLE, schema, vec![batch])
}

/// One insert per table per flush: concatenated so the engine writes one part.
fn ingest_concat(
    conn: &mut Conn,
    db: &str,
    table: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<()> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(());
    }
    let one = arrow_select::concat::concat_batches(schema, batches)?;
    conn.ingest(db, table, schema.clone(), vec![one])
}

fn align_all(batches: &[RecordBatch], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    batches.iter().map(|b| align(b, schema)).collect()
}

/// Reshapes a batch to `schema`: columns by name, cast to the target type
/// (NULL where a value cannot be cast), missing columns as NULL.
fn align(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let bs = batch.schema();
    let cast_opts = arrow_cast::CastOptions {
        safe: true,
        ..Default::default()
    };
    let cols: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match bs.index_of(f.name()) {
            Ok(i) => {
                let c = batch.column(i);
                if c.data_type() == f.data_type() {
                    c.clone()
                } else if let (
                    DataType::Timestamp(TimeUnit::Nanosecond, _),
                    DataType::Timestamp(TimeUnit::Nanosecond, tz),
                ) = (c.data_type(), f.data_type())
                {
                    // chDB returns DateTime64 as Timestamp(ns, "Etc/UTC"); the
                    // instants are the same, only the label differs (a cast
                    // would need the tz database to "convert" them).
                    Arc::new(
                        c.as_primitive::<TimestampNanosecondType>()
                            .clone()
                            .with_timezone_opt(tz.clone()),
                    ) as ArrayRef
                } else {
                    arrow_cast::cast::cast_with_options(c, f.data_type(), &cast_opts)
                        .unwrap_or_else(|_| new_null_array(f.data_type(), n))
                }
            }
            Err(_) => new_null_array(f.data_type(), n),
        })
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// Column `i` of a query result as strings (whatever string type chDB returned).
pub(crate) fn strings(b: &RecordBatch, i: usize) -> Vec<String> {
    let c = arrow_cast::cast::cast(b.column(i), &DataType::Utf8)
        .unwrap_or_else(|_| new_null_array(&DataType::Utf8, b.num_rows()));
    let c = c
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .expect("cast to Utf8 gives a StringArray");
    (0..c.len())
        .map(|j| {
            if c.is_null(j) {
                String::new()
            } else {
                c.value(j).to_string()
            }
        })
        .collect()
}

/// Column `i` of a query result as u64s.
pub(crate) fn u64s(b: &RecordBatch, i: usize) -> Vec<u64> {
    let c = arrow_cast::cast::cast(b.column(i), &DataType::UInt64)
        .unwrap_or_else(|_| new_null_array(&DataType::UInt64, b.num_rows()));
    let c = c
        .as_any()
        .downcast_ref::<UInt64Array>()
        .expect("cast to UInt64 gives a UInt64Array");
    (0..c.len())
        .map(|j| if c.is_null(j) { 0 } else { c.value(j) })
        .collect()
}
