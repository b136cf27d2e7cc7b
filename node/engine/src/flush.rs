//! The flusher: turns a shard's buffered rows into one insert per table,
//! makes them durable, then moves the shard's flushed index.
//!
//! Tables flush independently: one table that cannot be stored (a failing
//! disk, an engine error) keeps its rows buffered and is retried with
//! backoff, while the shard's other tables keep flushing and reads keep
//! working. The flushed index stops just below the oldest entry whose rows
//! are still only in memory, so the WAL keeps those entries.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{RecordBatch, UInt64Array, UInt8Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use crossbeam_channel::Receiver;

use crate::buffer::{self, ShardBuf, TableBuf};
use crate::columns::{align_all, u64s};
use crate::engine::{FlushFailure, Inner, ShardState};
use crate::error::{EngineError, Result};
use crate::layout::{FieldType, TableId, FLUSHED_TABLE, SERIES_TABLE};
use crate::pool::Conn;
use crate::{ipc, metrics};

/// Tables of a shard whose flush failed, and when to try them again.
pub(crate) struct Failing {
    tables: Vec<TableId>,
    error: String,
    attempts: u32,
    since: Instant,
    retry_at: Instant,
}

impl Failing {
    pub(crate) fn report(&self, shard: u32) -> FlushFailure {
        FlushFailure {
            shard,
            tables: self.tables.iter().map(|t| t.to_string()).collect(),
            error: self.error.clone(),
            attempts: self.attempts,
            failing_for: self.since.elapsed(),
        }
    }
}

/// Delay before the next attempt at a table that failed `attempts` times:
/// 200 ms doubling to 30 s.
pub fn retry_delay(attempts: u32) -> Duration {
    let ms = 200u64.saturating_mul(1u64 << attempts.saturating_sub(1).min(10));
    Duration::from_millis(ms.min(30_000))
}

impl ShardState {
    /// Tables whose rows could not be stored so far.
    pub(crate) fn failing_tables(&self) -> Vec<TableId> {
        self.failing
            .lock()
            .as_ref()
            .map_or_else(Vec::new, |f| f.tables.clone())
    }

    pub(crate) fn clear_failing(&self) {
        if self.failing.lock().take().is_some() {
            metrics::FLUSH_FAILING_SHARDS.dec();
        }
    }
}

impl Inner {
    pub(crate) fn flush_worker(&self, rx: Receiver<u32>) {
        while let Ok(shard) = rx.recv() {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            let st = self.shards.read().get(&shard).cloned();
            if let Some(st) = st {
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
        let retention_every = crate::ops::retention_period(self.cfg.retention_check_interval);
        loop {
            match stop.recv_timeout(period) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let shards: Vec<Arc<ShardState>> = self.shards.read().values().cloned().collect();
            let now = Instant::now();
            for st in shards {
                let max_age = crate::engine::flush_age_of(self.cfg.flush_max_age, st.shard);
                let due = {
                    let buf = st.buf.lock();
                    let aged = buf.oldest.is_some_and(|t| t.elapsed() >= max_age);
                    match st.failing.lock().as_ref() {
                        None => aged,
                        Some(f) if f.retry_at <= now => true,
                        Some(f) => aged && has_rows_outside(&buf, &f.tables),
                    }
                };
                if due && !st.queued.swap(true, Ordering::AcqRel) {
                    let _ = self.flush_tx.send(st.shard);
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
        let _g = st.flush_lock.lock();
        st.queued.store(false, Ordering::Release);
        let skip: HashSet<TableId> = match st.failing.lock().as_ref() {
            Some(f) if !retry_failing && f.retry_at > Instant::now() => {
                f.tables.iter().cloned().collect()
            }
            _ => HashSet::new(),
        };
        let mut taken = std::mem::take(&mut *st.buf.lock());
        if taken.is_empty() {
            return Ok(());
        }
        // What stays in memory after this flush: skipped and failed tables.
        // Their age no longer drives the ticker (their retry time does), so
        // the shard's healthy tables keep their normal flush cadence.
        let mut kept = ShardBuf {
            max_index: taken.max_index,
            ..ShardBuf::default()
        };
        for name in &skip {
            if let Some(tb) = taken.tables.remove(name) {
                if name.table != SERIES_TABLE {
                    kept.rows += tb.rows;
                }
                kept.tables.insert(name.clone(), tb);
            }
        }
        let _timer = metrics::FLUSH_SECONDS.start_timer();
        let mut written = ShardBuf::default();
        let mut failed: Vec<(TableId, EngineError)> = Vec::new();
        let mut conn = self.pool.get();
        let ready = self.ensure_shard(&mut conn, st);
        // Series first: a point is never readable without its tags.
        let mut order: Vec<(TableId, TableBuf)> =
            std::mem::take(&mut taken.tables).into_iter().collect();
        order.sort_by_key(|(id, _)| id.table != SERIES_TABLE);
        for (id, tb) in order {
            let r = match &ready {
                Ok(()) => self.write_table(&mut conn, st, &id, &tb).or_else(|_| {
                    // What we believed about the table may be stale (it
                    // was dropped or changed): read it again, try once more.
                    self.reload_table_columns(&mut conn, st, &id);
                    self.write_table(&mut conn, st, &id, &tb)
                }),
                Err(e) => Err(EngineError::Sql {
                    context: format!("create database {}", st.db),
                    message: e.to_string(),
                }),
            };
            let dest = if r.is_ok() { &mut written } else { &mut kept };
            if id.table != SERIES_TABLE {
                dest.rows += tb.rows;
            }
            dest.tables.insert(id.clone(), tb);
            if let Err(e) = r {
                self.reload_table_columns(&mut conn, st, &id);
                failed.push((id, e));
            }
        }
        let current = st.flushed.load(Ordering::Acquire);
        let target = buffer::flushed_after(current, taken.max_index, kept.first_pending_index());
        if target > current {
            let durable = self
                .sync_parts()
                .and_then(|()| write_flushed(&mut conn, &st.db, target));
            if let Err(e) = durable {
                // The parts just written may not be on disk: keep every row
                // buffered (a retry re-inserts them and they collapse with
                // these copies) and leave the flushed index where it is.
                drop(conn);
                let mut names: Vec<TableId> = written.tables.keys().cloned().collect();
                names.extend(kept.tables.keys().cloned());
                kept.restore(written);
                kept.oldest = None;
                kept.max_index = taken.max_index;
                st.buf.lock().restore(kept);
                self.record_failure(st, names, &e, &skip);
                return Err(e);
            }
            st.flushed.store(target, Ordering::Release);
        }
        drop(conn);
        if written.rows > 0 || target > current {
            metrics::FLUSHES_TOTAL.inc();
        }
        metrics::ROWS_FLUSHED_TOTAL.inc_by(written.rows as u64);
        metrics::PENDING_ROWS.sub(written.rows as i64);
        if kept.first_pending_index().is_some() {
            st.buf.lock().restore(kept);
        }
        tracing::debug!(
            shard = st.shard,
            rows = written.rows,
            flushed_index = target,
            "flushed"
        );
        if failed.is_empty() {
            if skip.is_empty() {
                self.record_success(st);
            }
            return Ok(());
        }
        let names: Vec<TableId> = failed.iter().map(|(n, _)| n.clone()).collect();
        let (_, first) = failed.swap_remove(0);
        self.record_failure(st, names, &first, &skip);
        Err(first)
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
        let chdb = crate::layout::data_db(st.shard, &id.database);
        let schema = ipc::points_schema(&cols);
        let aligned = align_all(&tb.batches, &schema)?;
        ingest_concat(conn, &chdb, &id.table, &schema, &aligned)
    }

    /// Re-reads a fact table's columns from chDB (forgets the table if it
    /// does not exist), so the next flush creates or alters what is missing.
    fn reload_table_columns(&self, conn: &mut Conn, st: &ShardState, id: &TableId) {
        if id.table == SERIES_TABLE {
            // The database itself may be gone: look again at the next flush.
            st.databases.lock().remove(&id.database);
            return;
        }
        let chdb = crate::layout::data_db(st.shard, &id.database);
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
        let mut tables = st.tables.lock();
        if exists {
            tables.insert(id.clone(), cols);
        } else {
            tables.remove(id);
            st.databases.lock().remove(&id.database);
        }
    }

    fn record_failure(
        &self,
        st: &ShardState,
        mut tables: Vec<TableId>,
        error: &EngineError,
        skipped: &HashSet<TableId>,
    ) {
        tables.extend(skipped.iter().cloned());
        tables.sort();
        tables.dedup();
        let mut slot = st.failing.lock();
        let attempts = slot.as_ref().map_or(0, |f| f.attempts) + 1;
        let since = slot.as_ref().map_or_else(Instant::now, |f| f.since);
        if slot.is_none() {
            metrics::FLUSH_FAILING_SHARDS.inc();
        }
        metrics::FLUSH_FAILURES_TOTAL.inc();
        let delay = retry_delay(attempts);
        // Once per attempt; attempts back off to 30 s.
        tracing::error!(shard = st.shard, tables = ?tables, attempts, retry_in = ?delay, error = %error,
            "flush failed; these tables' rows stay buffered (and in the WAL) and are retried, the shard's other tables keep flushing");
        *slot = Some(Failing {
            tables,
            error: error.to_string(),
            attempts,
            since,
            retry_at: Instant::now() + delay,
        });
    }

    fn record_success(&self, st: &ShardState) {
        let mut slot = st.failing.lock();
        if let Some(f) = slot.take() {
            metrics::FLUSH_FAILING_SHARDS.dec();
            tracing::info!(shard = st.shard, tables = ?f.tables, attempts = f.attempts,
                "tables that were failing to flush are stored again");
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

/// Whether `buf` holds rows of tables other than `failing`.
fn has_rows_outside(buf: &ShardBuf, failing: &[TableId]) -> bool {
    buf.tables
        .iter()
        .any(|(n, t)| t.rows > 0 && !failing.contains(n))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_tables_back_off_to_thirty_seconds() {
        assert_eq!(retry_delay(1), Duration::from_millis(200));
        assert_eq!(retry_delay(3), Duration::from_millis(800));
        assert_eq!(retry_delay(9), Duration::from_secs(30));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(30));
    }
}
