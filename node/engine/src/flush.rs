//! The flusher: turns a shard's buffered rows into one insert per table,
//! makes them durable, then moves the shard's flushed index.
//!
//! Tables flush independently: one table that cannot be stored (a failing
//! disk, an engine error) keeps its rows buffered and is retried with
//! backoff, while the shard's other tables keep flushing and reads keep
//! working. The flushed index stops just below the oldest entry whose rows
//! are still only in memory, so the WAL keeps those entries.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{TimestampNanosecondType, UInt64Type};
use arrow_array::{RecordBatch, UInt64Array, UInt8Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use crossbeam_channel::Receiver;

use crate::buffer::{self, ShardBuf, TableBuf};
use crate::columns::{align_all, u64s};
use crate::engine::Inner;
use crate::error::{EngineError, Result};
use crate::layout::{FieldType, TableId, FLUSHED_TABLE, SERIES_TABLE};
use crate::pool::Conn;
use crate::rewrites::{TableRewrites, RELOAD_WINDOW_NS};
use crate::rewrites_ledger;
use crate::shard_state::ShardState;
use crate::{ipc, metrics};

impl Inner {
    pub(crate) fn flush_worker(&self, rx: Receiver<u32>) {
        while let Ok(shard) = rx.recv() {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if let Some(st) = self.shards.get(shard) {
                // Failures are logged (once per attempt, with backoff) and
                // reported by flush_shard itself.
                let _ = self.flush_shard(&st, false);
            }
        }
    }

    pub(crate) fn ticker(&self, stop: Receiver<()>) {
        let period = (self.cfg.flush_max_age / 4)
            .clamp(Duration::from_millis(5), Duration::from_millis(250));
        let mut last_parts = Instant::now();
        let mut last_retention = Instant::now();
        let retention_every = crate::engine::retention_period(self.cfg.retention_check_interval);
        loop {
            match stop.recv_timeout(period) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let now = Instant::now();
            for st in self.shards.all() {
                let max_age = crate::engine::flush_age_of(self.cfg.flush_max_age, st.shard());
                if st.flush_due(max_age, now) && st.queue_flush() {
                    let _ = self.flush_tx.send(st.shard());
                }
            }
            if last_retention.elapsed() >= retention_every {
                last_retention = Instant::now();
                if let Err(e) = self.enforce_retention() {
                    tracing::warn!(error = %e, "retention sweep failed; retried at the next one");
                }
            }
            if last_parts.elapsed() >= Duration::from_secs(10) {
                last_parts = Instant::now();
                self.update_gauges();
            }
        }
    }

    /// Active parts and the engine's tracked memory: what an operator
    /// watching a node's RSS needs to tell engine memory from the rest.
    fn update_gauges(&self) {
        let mut conn = self.pool.get();
        let mut first = |sql: &str| -> Option<u64> {
            let b = conn.query(sql).ok()?;
            b.first().and_then(|b| u64s(b, 0).first().copied())
        };
        if let Some(n) = first(
            "SELECT toUInt64(count()) FROM system.parts WHERE active AND database LIKE 'shard\\_%'",
        ) {
            metrics::PARTS.set(n as i64);
        }
        if let Some(n) = first(
            "SELECT toUInt64(greatest(value, 0)) FROM system.metrics WHERE metric = 'MemoryTracking'",
        ) {
            metrics::MEMORY_BYTES.set(n as i64);
        }
    }

    /// Flushes a shard's buffer, table by table. Tables that failed before
    /// are tried only when their backoff has passed, or when `retry_failing`
    /// (an explicit flush). Returns the first error of this attempt.
    pub(crate) fn flush_shard(&self, st: &Arc<ShardState>, retry_failing: bool) -> Result<()> {
        let _flushes = st.lock_flushes();
        st.flush_started();
        let skip = st.tables_to_skip(retry_failing);
        let mut taken = std::mem::take(&mut *st.lock_buf());
        if taken.is_empty() {
            return Ok(());
        }
        let mut kept = set_aside(&mut taken, &skip);
        let _timer = metrics::FLUSH_SECONDS.start_timer();
        let mut conn = self.pool.get();
        let (written, failed) = self.write_tables(&mut conn, st, &mut taken, &mut kept);
        let current = st.flushed();
        let target = buffer::flushed_after(current, taken.max_index, kept.first_pending_index());
        if target > current {
            let durable = self
                .sync_parts()
                .and_then(|()| write_flushed(&mut conn, st.db(), target));
            if let Err(e) = durable {
                drop(conn);
                keep_all_buffered(st, written, kept, taken.max_index, &e, &skip);
                return Err(e);
            }
            st.set_flushed(target);
        }
        drop(conn);
        if written.rows > 0 || target > current {
            metrics::FLUSHES_TOTAL.inc();
        }
        metrics::ROWS_FLUSHED_TOTAL.inc_by(written.rows as u64);
        metrics::PENDING_ROWS.sub(written.rows as i64);
        if kept.first_pending_index().is_some() {
            st.lock_buf().restore(kept);
        }
        tracing::debug!(
            shard = st.shard(),
            rows = written.rows,
            flushed_index = target,
            "flushed"
        );
        record_outcome(st, failed, &skip)
    }

    /// Writes every table of `taken` (series first: a point is never
    /// readable without its tags). Returns what was written and the tables
    /// that failed; their rows go to `kept`.
    fn write_tables(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        taken: &mut ShardBuf,
        kept: &mut ShardBuf,
    ) -> (ShardBuf, Vec<(TableId, EngineError)>) {
        let mut written = ShardBuf::default();
        let mut failed: Vec<(TableId, EngineError)> = Vec::new();
        let ready = self.ensure_shard(conn, st);
        let mut order: Vec<(TableId, TableBuf)> =
            std::mem::take(&mut taken.tables).into_iter().collect();
        order.sort_by_key(|(id, _)| id.table != SERIES_TABLE);
        for (id, tb) in order {
            let r = match &ready {
                Ok(()) => self.write_table(conn, st, &id, &tb).or_else(|_| {
                    // What we believed about the table may be stale (it
                    // was dropped or changed): read it again, try once more.
                    self.reload_table_columns(conn, st, &id);
                    self.write_table(conn, st, &id, &tb)
                }),
                Err(e) => Err(EngineError::Sql {
                    context: format!("create database {}", st.db()),
                    message: e.to_string(),
                }),
            };
            let dest = if r.is_ok() { &mut written } else { &mut *kept };
            if id.table != SERIES_TABLE {
                dest.rows += tb.rows;
            }
            dest.tables.insert(id.clone(), tb);
            if let Err(e) = r {
                self.reload_table_columns(conn, st, &id);
                failed.push((id, e));
            }
        }
        (written, failed)
    }

    fn write_table(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        id: &TableId,
        tb: &TableBuf,
    ) -> Result<()> {
        if id.table == SERIES_TABLE {
            let chdb = self.ensure_database(conn, st, &id.database)?;
            let schema = crate::tag_index::index_schema();
            return ingest_concat(conn, &chdb, SERIES_TABLE, &schema, &tb.batches);
        }
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
        let cols = self.ensure_table(conn, st, id, &fields)?;
        let chdb = crate::layout::data_db(st.shard(), &id.database);
        let schema = ipc::points_schema(&cols);
        let aligned = align_all(&tb.batches, &schema)?;
        self.note_rewrites(conn, st, id, &chdb, &aligned)?;
        ingest_concat(conn, &chdb, &id.table, &schema, &aligned)?;
        // After the insert: a read that took the old mark may cache
        // without these points, and sees the mark move next time.
        self.marks
            .note_flushed(st.shard(), &id.database, &id.table, &aligned);
        Ok(())
    }

    /// Records the rows a fact-table insert is about to write (before it:
    /// a retried insert is then a rewrite), starting the table's tracking
    /// at its first flush in this process (rewrites.rs). A day that became
    /// dirty is in the ledger before the insert. Under `flushes`.
    fn note_rewrites(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        id: &TableId,
        chdb: &str,
        batches: &[RecordBatch],
    ) -> Result<()> {
        self.start_tracking(conn, st, id, chdb)?;
        let ledger = {
            let mut rewrites = st.lock_rewrites();
            let Some(t) = rewrites.get_mut(id) else {
                return Ok(());
            };
            let mut grew = false;
            for b in batches {
                let times = b.column(0).as_primitive::<TimestampNanosecondType>();
                let series = b.column(1).as_primitive::<UInt64Type>();
                grew |= t.note(
                    series
                        .values()
                        .iter()
                        .copied()
                        .zip(times.values().iter().copied()),
                );
            }
            grew.then(|| t.final_partitions())
        };
        match ledger {
            Some(partitions) => rewrites_ledger::write(conn, st.db(), id, true, &partitions),
            None => Ok(()),
        }
    }

    /// A table's tracker before its first insert in this process: a new
    /// one (its existing partitions untracked, in the ledger first), or
    /// the ledger's, with each series' newest time read back.
    fn start_tracking(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        id: &TableId,
        chdb: &str,
    ) -> Result<()> {
        let state = st.lock_rewrites().get(id).map(TableRewrites::needs_reload);
        if state == Some(false) {
            return Ok(());
        }
        let table = crate::layout::qualified(chdb, &id.table);
        let existing: BTreeSet<String> = conn
            .query(&format!(
                "SELECT DISTINCT partition_id FROM system.parts WHERE active AND database = {} AND table = {}",
                crate::layout::literal(chdb),
                crate::layout::literal(&id.table)
            ))?
            .iter()
            .flat_map(|b| crate::columns::strings(b, 0))
            .collect();
        if state.is_none() {
            let t = TableRewrites::new(existing);
            rewrites_ledger::write(conn, st.db(), id, true, &t.final_partitions())?;
            st.lock_rewrites().insert(id.clone(), t);
            return Ok(());
        }
        let newest = conn
            .query(&format!(
                "SELECT toUnixTimestamp64Nano(max(time)), count() FROM {table}"
            ))?
            .first()
            .filter(|b| crate::columns::u64s(b, 1).first() != Some(&0))
            .and_then(|b| crate::columns::i64s(b, 0).first().copied());
        let from = newest.map_or(i64::MIN, |n| n.saturating_sub(RELOAD_WINDOW_NS));
        self.check_rollups(conn, st, chdb, id, newest.map(|_| from));
        let mut latest = Vec::new();
        if newest.is_some() {
            for b in conn.query(&format!(
                "SELECT series_id, toUnixTimestamp64Nano(max(time)) FROM {table} WHERE time >= fromUnixTimestamp64Nano({from}) GROUP BY series_id"
            ))? {
                let series = crate::columns::u64s(&b, 0);
                latest.extend(series.into_iter().zip(crate::columns::i64s(&b, 1)));
            }
        }
        if let Some(t) = st.lock_rewrites().get_mut(id) {
            t.reloaded(latest, from, &existing);
        }
        Ok(())
    }

    /// Re-reads a fact table's columns from chDB (forgets the table if it
    /// does not exist), so the next flush creates or alters what is missing.
    fn reload_table_columns(&self, conn: &mut Conn, st: &ShardState, id: &TableId) {
        if id.table == SERIES_TABLE {
            // The database itself may be gone: look again at the next flush.
            st.lock_databases().remove(&id.database);
            return;
        }
        let chdb = crate::layout::data_db(st.shard(), &id.database);
        let sql = format!(
            "SELECT name, type FROM system.columns WHERE database = {} AND table = {} ORDER BY position",
            crate::layout::literal(&chdb),
            crate::layout::literal(&id.table)
        );
        let Ok(batches) = conn.query(&sql) else {
            return;
        };
        let mut cols = Vec::new();
        let mut exists = false;
        for b in &batches {
            let names = crate::columns::strings(b, 0);
            let types = crate::columns::strings(b, 1);
            for (n, t) in names.into_iter().zip(types) {
                exists = true;
                if n == crate::layout::TIME || n == crate::layout::SERIES_ID {
                    continue;
                }
                if let Some(t) = FieldType::from_clickhouse(&t) {
                    cols.push((n, t));
                }
            }
        }
        let mut tables = st.lock_tables();
        if exists {
            tables.insert(id.clone(), cols);
        } else {
            tables.remove(id);
            st.lock_databases().remove(&id.database);
            st.lock_rollups().remove(id);
        }
    }

    /// Makes every part written so far durable: one `syncfs` of the data
    /// directory's filesystem (all dirty files and directories, then one
    /// device cache flush) instead of an fsync per part file. Since Linux
    /// 5.8 it also reports writeback errors, so a failed write is not
    /// mistaken for a durable one.
    pub(crate) fn sync_parts(&self) -> Result<()> {
        use std::os::fd::AsRawFd;
        let _timer = metrics::SYNC_SECONDS.start_timer();
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

/// Moves the tables a flush leaves alone (`skip`) out of `taken`: what
/// stays in memory after this flush, with the tables that fail. Their age
/// no longer drives the ticker (their retry time does), so the shard's
/// healthy tables keep their normal flush cadence.
fn set_aside(taken: &mut ShardBuf, skip: &HashSet<TableId>) -> ShardBuf {
    let mut kept = ShardBuf {
        max_index: taken.max_index,
        ..ShardBuf::default()
    };
    for name in skip {
        if let Some(tb) = taken.tables.remove(name) {
            if name.table != SERIES_TABLE {
                kept.rows += tb.rows;
            }
            kept.tables.insert(name.clone(), tb);
        }
    }
    kept
}

/// The parts just written may not be on disk: keeps every row buffered (a
/// retry re-inserts them and they collapse with these copies) and leaves
/// the flushed index where it is.
fn keep_all_buffered(
    st: &ShardState,
    written: ShardBuf,
    mut kept: ShardBuf,
    max_index: u64,
    error: &EngineError,
    skip: &HashSet<TableId>,
) {
    let mut names: Vec<TableId> = written.tables.keys().cloned().collect();
    names.extend(kept.tables.keys().cloned());
    kept.restore(written);
    kept.oldest = None;
    kept.max_index = max_index;
    st.lock_buf().restore(kept);
    st.record_flush_failure(names, error, skip);
}

/// Records how a flush went for the failing-tables report; the first
/// table's error is the flush's.
fn record_outcome(
    st: &ShardState,
    mut failed: Vec<(TableId, EngineError)>,
    skip: &HashSet<TableId>,
) -> Result<()> {
    if failed.is_empty() {
        if skip.is_empty() {
            st.record_flush_success();
        }
        return Ok(());
    }
    let names: Vec<TableId> = failed.iter().map(|(n, _)| n.clone()).collect();
    let (_, first) = failed.swap_remove(0);
    st.record_flush_failure(names, &first, skip);
    Err(first)
}

/// Records the shard's flushed index in its `_flushed` table.
pub(crate) fn write_flushed(conn: &mut Conn, db: &str, index: u64) -> Result<()> {
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
pub(crate) fn ingest_concat(
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
