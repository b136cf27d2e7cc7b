//! Opening and closing the engine: loading chDB once per process, checking
//! the data directory's layout, reading the shards' state back from chDB,
//! starting the flusher threads, and the last flush on shutdown.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use adbc_core::options::{OptionDatabase, OptionValue};
use adbc_core::Driver;
use adbc_driver_manager::ManagedDatabase;
use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use crate::columns::{strings, u64s};
use crate::engine::{reader_max_threads, reader_settings, Engine, EngineConfig, Inner};
use crate::error::{EngineError, Result};
use crate::layout::{self, FieldType, TableId, FLUSHED_TABLE, SERIES_ID, TIME};
use crate::pool::{Conn, Pool};
use crate::shard_state::{DatabaseState, ShardMap};
use crate::stream::SchemaCache;
use crate::{loader, metrics};

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
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let size = if cfg.pool_size == 0 {
            cores
        } else {
            cfg.pool_size
        };
        let pool = Pool::new(&db, size, layout::WRITER_SETTINGS)?;
        let reader_init = reader_settings(reader_max_threads(cores, size));
        let reader_init: Vec<&str> = reader_init.iter().map(String::as_str).collect();
        let readers = Pool::new(&db, size, &reader_init)?;
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
            shards: ShardMap::default(),
            flush_tx,
            shutdown: AtomicBool::new(false),
            data_dir,
            marks: crate::change_marks::ChangeMarks::new(),
            series_ids: crate::series_cache::SeriesCache::for_selections(),
            tag_answers: crate::tag_answers::TagAnswers::bounded(),
        });
        inner.check_layout()?;
        inner.load_state()?;
        if let Err(e) = inner.find_detached_damage() {
            tracing::warn!(error = %e, "cannot list detached parts; damaged parts are not looked for");
        }
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
        let chdb_names = self.load_databases(&mut conn)?;
        self.load_columns(&mut conn, &chdb_names)?;
        self.load_retentions(&mut conn, &chdb_names);
        self.load_flushed_indexes(&mut conn);
        self.load_rewrites(&mut conn);
        self.load_rollups(&mut conn, &chdb_names)?;
        Ok(())
    }

    /// The fact tables whose rollups are whole: every level's table and
    /// view exist and the tables count every field (rollups.rs). Views
    /// are only made with a table and dropped when they cannot follow it,
    /// so this finds the tables that had rollups from their first row.
    fn load_rollups(
        &self,
        conn: &mut Conn,
        chdb_names: &HashMap<String, (u32, String)>,
    ) -> Result<()> {
        let batches = conn.query(
            "SELECT database, table, name FROM system.columns \
             WHERE database LIKE 'shard\\_%' AND table LIKE '\\_sh\\_%' \
             UNION ALL SELECT database, name, '' FROM system.tables \
             WHERE database LIKE 'shard\\_%' AND engine = 'MaterializedView'",
        )?;
        let mut found: std::collections::HashSet<(String, String, String)> = Default::default();
        for b in &batches {
            let (db, table, name) = (strings(b, 0), strings(b, 1), strings(b, 2));
            for i in 0..b.num_rows() {
                found.insert((db[i].clone(), table[i].clone(), name[i].clone()));
            }
        }
        for (chdb, (shard, database)) in chdb_names {
            let st = self.shard_state(*shard);
            let tables: Vec<(TableId, Vec<String>)> = st
                .lock_tables()
                .iter()
                .filter(|(id, _)| id.database == *database && crate::rollups::applies_to(&id.table))
                .map(|(id, cols)| (id.clone(), cols.iter().map(|(f, _)| f.clone()).collect()))
                .collect();
            for (id, fields) in tables {
                let has = |table: &str, column: &str| {
                    found.contains(&(chdb.clone(), table.to_string(), column.to_string()))
                };
                let whole = shardhouse_common::rollup::LEVELS.iter().all(|l| {
                    let table = shardhouse_common::rollup::table(l, &id.table);
                    has(&shardhouse_common::rollup::view(l, &id.table), "")
                        && has(&table, SERIES_ID)
                        && fields.iter().all(|f| {
                            has(
                                &table,
                                &shardhouse_common::rollup::column(
                                    shardhouse_common::rollup::Part::Count,
                                    f,
                                ),
                            )
                        })
                });
                if whole {
                    st.lock_rollups().insert(id);
                }
            }
        }
        Ok(())
    }

    /// Each shard's tracking of rewrites as its ledger left it, so reads
    /// of clean tables skip `FINAL` from the start (rewrites.rs).
    fn load_rewrites(&self, conn: &mut Conn) {
        for st in self.shards.all() {
            let tables = crate::rewrites_ledger::load(conn, st.db());
            let mut rewrites = st.lock_rewrites();
            for (id, partitions) in tables {
                rewrites.insert(id, crate::rewrites::TableRewrites::from_ledger(partitions));
            }
        }
    }

    /// The shards' chDB databases: marks shards created, records their
    /// databases; returns chDB database -> (shard, database).
    fn load_databases(&self, conn: &mut Conn) -> Result<HashMap<String, (u32, String)>> {
        let batches = conn.query(
            "SELECT name, comment FROM system.databases WHERE name LIKE 'shard\\_%' ORDER BY name",
        )?;
        let mut chdb_names: HashMap<String, (u32, String)> = HashMap::new();
        for b in &batches {
            let names = strings(b, 0);
            let comments = strings(b, 1);
            for (db, comment) in names.into_iter().zip(comments) {
                if let Some(shard) = layout::parse_shard_db(&db) {
                    self.shard_state(shard).set_created(true);
                } else if let Some(shard) = layout::parse_data_db(&db) {
                    let st = self.shard_state(shard);
                    st.lock_databases().insert(
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
        Ok(chdb_names)
    }

    /// The fact tables' columns and the field types they decided.
    fn load_columns(
        &self,
        conn: &mut Conn,
        chdb_names: &HashMap<String, (u32, String)>,
    ) -> Result<()> {
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
                    st.lock_tables().entry(id).or_default();
                    continue;
                }
                let Some(t) = FieldType::from_clickhouse(&typ[i]) else {
                    tracing::warn!(db = %db[i], table = %table[i], column = %name[i], r#type = %typ[i],
                        "column of unknown type ignored");
                    continue;
                };
                st.lock_tables()
                    .entry(id.clone())
                    .or_default()
                    .push((name[i].clone(), t));
                st.write_catalog().insert(&id, &name[i], t);
            }
        }
        Ok(())
    }

    /// Each database's retention, from its `_database` table.
    fn load_retentions(&self, conn: &mut Conn, chdb_names: &HashMap<String, (u32, String)>) {
        for (chdb, (shard, database)) in chdb_names {
            let sql = format!(
                "SELECT argMax(retention_ns, `index`) FROM {}",
                layout::qualified(chdb, layout::DATABASE_TABLE)
            );
            if let Some(r) = conn.query(&sql).ok().and_then(|b| {
                b.first()
                    .and_then(|b| crate::columns::i64s(b, 0).first().copied())
            }) {
                if let Some(d) = self.shard_state(*shard).lock_databases().get_mut(database) {
                    d.retention_ns = r;
                }
            }
        }
    }

    /// Each shard's flushed index, from its `_flushed` table; the applied
    /// index starts there (the WAL replays the rest).
    fn load_flushed_indexes(&self, conn: &mut Conn) {
        for st in self.shards.all() {
            let sql = format!(
                "SELECT toUInt64(max(`index`)) AS i FROM {}",
                layout::qualified(st.db(), FLUSHED_TABLE)
            );
            let idx = match conn.query(&sql) {
                Ok(b) => b
                    .first()
                    .and_then(|b| u64s(b, 0).first().copied())
                    .unwrap_or(0),
                Err(e) => {
                    tracing::warn!(shard = st.shard(), error = %e, "no flushed index; starting from 0");
                    0
                }
            };
            st.set_flushed(idx);
            st.set_applied(idx);
            tracing::info!(shard = st.shard(), flushed_index = idx, "shard loaded");
        }
    }
}
