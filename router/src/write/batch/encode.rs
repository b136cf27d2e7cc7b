//! A request's tables in the wire format (`shardhouse_common::wire`): each
//! (shard, measurement) table becomes a points batch and a series batch,
//! and [`wire_tables`] turns the batches of one shard write (one request's
//! or many coalesced ones') into the Arrow IPC streams of `Node.Write`.

use super::columns::TableBuilder;
use super::state::BatchState;
use super::ShardBatch;
use crate::error::{Error, Result};
use arrow_array::{RecordBatch, StringArray, UInt64Array};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use bytes::Bytes;
use shardhouse_common::proto::TableBatch;
use shardhouse_common::wire;

impl BatchState<'_> {
    /// The batch of one table (its columns are moved out), or `None` when
    /// no point of the request reached it.
    pub(super) fn encode_table(&self, t: &mut TableBuilder) -> Result<Option<ShardBatch>> {
        let rows = t.time.len();
        if rows == 0 {
            return Ok(None);
        }
        for c in &mut t.columns {
            c.pad_to(rows);
        }
        let fields = t.columns.iter_mut().map(|c| c.finish()).collect();
        let points = wire::points_batch(
            std::mem::take(&mut t.time),
            std::mem::take(&mut t.series_id),
            fields,
        )
        .map_err(|e| Error::Internal(format!("building points batch: {e}")))?;

        // One raw spelling per slot: tag orders that differ in the text
        // but not in the series share an id; list each series once. Without
        // rebuilt keys every slot is a distinct series: keep the order the
        // slots were met in, which reads their keys from the arena in order
        // (sorting by id read them at random: ~50 ns/point at 1M series).
        let mut listed: Vec<(u64, u32)> = t
            .series
            .iter()
            .map(|&s| (self.slots[s as usize].series_id, s))
            .collect();
        if self.spellings_may_repeat {
            listed.sort_unstable();
            listed.dedup_by_key(|(id, _)| *id);
        }
        let mut ids = Vec::with_capacity(listed.len());
        let mut key_offsets = Vec::with_capacity(listed.len() + 1);
        let mut keys = Vec::with_capacity(
            listed
                .iter()
                .map(|&(_, s)| {
                    let k = self.slots[s as usize].key;
                    (k.1 - k.0) as usize
                })
                .sum(),
        );
        key_offsets.push(0i32);
        for &(_, s) in &listed {
            let slot = &self.slots[s as usize];
            ids.push(slot.series_id);
            keys.extend_from_slice(&self.arena[slot.key.0 as usize..slot.key.1 as usize]);
            key_offsets.push(keys.len() as i32);
        }
        let m = &self.measurements[t.measurement as usize].name;
        // Prometheus samples share one table; each series keeps its metric
        // name as its measurement.
        let measurements = if self.samples_table.is_some() {
            StringArray::from_iter_values(listed.iter().map(|&(_, s)| {
                self.measurements[self.slots[s as usize].measurement as usize]
                    .name
                    .as_str()
            }))
        } else {
            StringArray::from_iter_values(std::iter::repeat_n(m.as_str(), listed.len()))
        };
        let series = wire::series_batch(
            UInt64Array::from(ids),
            measurements,
            StringArray::new(
                OffsetBuffer::new(ScalarBuffer::from(key_offsets)),
                Buffer::from_vec(keys),
                None,
            ),
        )
        .map_err(|e| Error::Internal(format!("building series batch: {e}")))?;
        Ok(Some(ShardBatch {
            shard: t.shard,
            database: String::new(),
            measurement: m.clone(),
            rows,
            bytes: points.get_array_memory_size() + series.get_array_memory_size(),
            points,
            series,
        }))
    }
}

/// The tables of one `Node.Write` carrying `batches` (one shard's share of
/// one request, or of every request coalesced into the write): batches of
/// the same database, table and field set become ONE table, its points
/// and its series each one batch in one Arrow IPC stream, in the order the
/// batches came. With small requests a coalesced write held one table per
/// request, and every replica paid the per-batch costs (decode, align, tag
/// index, buffer, flush) for each; encoding per request was the router's
/// largest cost after HTTP.
pub fn wire_tables(batches: &[&ShardBatch]) -> Result<Vec<TableBatch>> {
    let mut groups: Vec<Vec<&ShardBatch>> = Vec::new();
    for &b in batches {
        let same = |g: &&mut Vec<&ShardBatch>| {
            let first = g[0];
            first.database == b.database
                && first.measurement == b.measurement
                && first.points.schema_ref() == b.points.schema_ref()
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.push(b),
            None => groups.push(vec![b]),
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let first = g[0];
            Ok(TableBatch {
                measurement: first.measurement.clone(),
                database: first.database.clone(),
                points_ipc: encode_ipc(g.iter().map(|b| &b.points))?,
                series_ipc: encode_ipc(g.iter().map(|b| &b.series))?,
            })
        })
        .collect()
}

/// One IPC stream of one batch: the batches (all of one schema) together.
fn encode_ipc<'a>(batches: impl Iterator<Item = &'a RecordBatch> + Clone) -> Result<Bytes> {
    let err = |e| Error::Internal(format!("arrow ipc: {e}"));
    let first = batches.clone().next().expect("a table has a batch");
    let one = if batches.clone().nth(1).is_none() {
        first.clone()
    } else {
        arrow_select::concat::concat_batches(first.schema_ref(), batches).map_err(err)?
    };
    wire::encode_batch(&one).map(Bytes::from).map_err(err)
}
