//! The write path inside the engine: the leader's admission check before
//! proposing, and applying a committed entry (decode, decide its field
//! types against the shard's catalog, buffer its rows for the flusher).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, RecordBatch, UInt64Array};
use arrow_schema::Schema;
use arrow_select::filter::filter_record_batch;
use bytes::Bytes;

use crate::catalog;
use crate::columns::align;
use crate::engine::{Engine, Inner};
use crate::error::{EngineError, Result};
use crate::layout::{self, FieldType, TableId, SERIES_TABLE};
use crate::shard_state::ShardState;
use crate::{ipc, metrics};

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

impl Engine {
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
        match self.inner.shards.get(shard) {
            Some(st) => st
                .read_catalog()
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
        let st = self.inner.shards.get(shard)?;
        let t = st
            .read_catalog()
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
}

impl Inner {
    fn apply(&self, shard: u32, index: u64, tables: &[TableBatchRef<'_>]) -> Result<Applied> {
        let st = self.shard_state(shard);
        if index <= st.applied() {
            return Ok(Applied::Stored);
        }
        let decoded = match self.decode_entry(&st, index, tables) {
            Ok(d) => d,
            Err(e) => {
                st.set_applied(index);
                return Ok(Applied::Rejected(e));
            }
        };
        // Types: decided here, in log order, against this shard's catalog.
        let offered: Vec<catalog::Offered<'_>> = decoded
            .tables
            .iter()
            .map(|t| (&t.id, t.fields.as_slice()))
            .collect();
        let additions = match st.read_catalog().decide(&offered) {
            Ok(a) => a,
            Err(e) => {
                st.set_applied(index);
                return Ok(Applied::Rejected(e));
            }
        };
        let rows: usize = decoded.tables.iter().map(|t| t.rows).sum();
        let Some(largest) = buffer_entry(&st, index, decoded, additions, rows) else {
            return Ok(Applied::Stored);
        };
        metrics::PENDING_ROWS.add(rows as i64);
        self.schedule_flush(&st, largest);
        Ok(Applied::Stored)
    }

    /// Flushes or queues the shard once a table's buffer holds `largest`
    /// rows past the flush threshold.
    fn schedule_flush(&self, st: &Arc<ShardState>, largest: usize) {
        let failing = st.is_failing();
        if largest >= self.cfg.flush_max_rows.saturating_mul(4) && !failing {
            // The flusher is behind: flush on the applying thread so apply
            // slows down instead of buffering without bound. (Not while a
            // table is failing: its rows would trigger this on every apply.)
            // The rows are buffered either way: a failure here is retried
            // by the flusher, it does not fail the apply.
            if let Err(e) = self.flush_shard(st, false) {
                tracing::warn!(shard = st.shard(), error = %e, "inline flush failed; the flusher retries");
            }
        } else if largest >= self.cfg.flush_max_rows && st.queue_flush() {
            let _ = self.flush_tx.send(st.shard());
        }
    }

    /// Decodes an entry's tables. Failures are properties of the entry's
    /// bytes, identical on every replica (they make the entry rejected).
    /// Series rows this replica already holds are left out (see
    /// known_series.rs): only which rows are stored differs between
    /// replicas, never whether the entry is.
    fn decode_entry<'a>(
        &self,
        st: &ShardState,
        index: u64,
        tables: &[TableBatchRef<'a>],
    ) -> Result<DecodedEntry<'a>> {
        let shard = st.shard();
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
                let wire = align(b, &series_schema)?;
                let Some(new) = self.unknown_series(st, t.database, wire)? else {
                    continue;
                };
                rows.push(crate::tag_index::index_batch(&new)?);
            }
            if !rows.is_empty() {
                out.series.push((t.database, rows));
            }
            out.tables.push(decoded);
        }
        Ok(out)
    }

    /// The rows of a wire series batch whose series this replica does not
    /// hold yet (`None`: it holds them all).
    fn unknown_series(
        &self,
        st: &ShardState,
        database: &str,
        wire: RecordBatch,
    ) -> Result<Option<RecordBatch>> {
        let Some(ids) = wire.column(0).as_any().downcast_ref::<UInt64Array>() else {
            // Not ours to judge here: the tag index names the bad column.
            return Ok(Some(wire));
        };
        let mask = st.lock_known_series().unknown_rows(database, ids);
        let Some(mask) = mask else {
            return Ok(Some(wire));
        };
        metrics::SERIES_ROWS_SKIPPED.inc_by(mask.false_count() as u64);
        if mask.true_count() == 0 {
            return Ok(None);
        }
        filter_record_batch(&wire, &mask)
            .map(Some)
            .map_err(|e| EngineError::InvalidBatch {
                measurement: layout::SERIES_TABLE.into(),
                reason: format!("filtering series rows: {e}"),
            })
    }
}

/// Buffers a decoded entry's rows under the shard's buffer lock, records
/// its new fields and series, and moves the applied index. Returns the row
/// count of the largest table buffer it grew, or `None` when the entry was
/// applied meanwhile (a replayed duplicate raced this apply).
fn buffer_entry(
    st: &ShardState,
    index: u64,
    decoded: DecodedEntry<'_>,
    additions: catalog::Additions,
    rows: usize,
) -> Option<usize> {
    let mut buf = st.lock_buf();
    // Checked again under the lock: apply may race a replayed duplicate.
    if index <= st.applied() {
        return None;
    }
    st.write_catalog().record(additions);
    st.set_applied(index);
    buf.max_index = index;
    buf.oldest.get_or_insert_with(Instant::now);
    let mut known = st.lock_known_series();
    for (database, series) in decoded.series {
        for b in &series {
            if let Some(ids) = b.column(0).as_any().downcast_ref::<UInt64Array>() {
                known.remember(database, ids.iter().flatten());
            }
        }
        let n: usize = series.iter().map(|b| b.num_rows()).sum();
        if n > 0 {
            known.touch();
            let id = TableId::new(database, SERIES_TABLE);
            buf.tables.entry(id).or_default().push(index, series, n);
        }
    }
    drop(known);
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
    Some(largest)
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
