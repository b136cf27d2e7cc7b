//! The merge step of a `SELECT`: the shards' answers (points, or partial
//! aggregates when pushed) become each plan's gathered values for the
//! evaluation pipeline: partials per group and bucket, merged across
//! shards (exact, see `shardhouse-eval`), or raw rows per series.

use std::collections::{BTreeMap, HashMap};

use arrow_array::RecordBatch;
use shardhouse_eval::partials::{group_key, merge_groups, Groups};
use shardhouse_eval::{
    Aggregate, Emitted, Gathered, Point, SeriesKey, Transform, Value, Windowing,
};

use super::super::fetch::{int_at, u64_at, value_at};
use super::super::fields::{Plan, Planned, Slot};
use super::super::pushdown;
use super::SeriesTags;
use crate::error::Result;

/// How the shards' rows are read: the series' tags and order, the value
/// slots, the dimensions a group is keyed by.
pub(super) struct Rows<'a> {
    measurement: &'a str,
    series: Option<&'a SeriesTags>,
    slots: &'a [Slot],
    dims: &'a [String],
    /// Series ranked by key (InfluxDB's order of raw rows at one time).
    ranks: HashMap<u64, u64>,
    no_tags: BTreeMap<String, String>,
}

impl<'a> Rows<'a> {
    pub fn new(
        measurement: &'a str,
        series: Option<&'a SeriesTags>,
        slots: &'a [Slot],
        dims: &'a [String],
    ) -> Self {
        let ranks = series
            .map(|s| {
                let mut keyed: Vec<(String, u64)> = s
                    .iter()
                    .map(|(sid, tags)| (super::super::meta::series_key(measurement, tags), *sid))
                    .collect();
                keyed.sort();
                keyed
                    .into_iter()
                    .enumerate()
                    .map(|(i, (_, sid))| (sid, i as u64))
                    .collect()
            })
            .unwrap_or_default();
        Rows {
            measurement,
            series,
            slots,
            dims,
            ranks,
            no_tags: BTreeMap::new(),
        }
    }

    fn tags_of(&self, sid: u64) -> &BTreeMap<String, String> {
        self.series
            .and_then(|s| s.get(&sid))
            .unwrap_or(&self.no_tags)
    }

    fn rank_of(&self, sid: u64) -> u64 {
        self.ranks.get(&sid).copied().unwrap_or(sid)
    }

    /// The group of series `sid`.
    fn group(&self, sid: u64) -> SeriesKey {
        group_key(self.measurement, self.tags_of(sid), self.dims)
    }

    /// Slot `slot`'s value in the row: its `s{slot}` column, or the
    /// series' tag.
    fn slot_value(&self, b: &RecordBatch, row: usize, slot: usize, sid: u64) -> Value {
        match &self.slots[slot] {
            Slot::Sql(_) => b
                .schema()
                .index_of(&format!("s{slot}"))
                .map(|c| value_at(b.column(c), row))
                .unwrap_or(Value::Null),
            Slot::Tag(k) => self
                .tags_of(sid)
                .get(k)
                .map_or(Value::Null, |v| Value::String(v.clone())),
        }
    }

    /// Whether the row has a value in one of the field slots.
    fn has_field(&self, b: &RecordBatch, row: usize) -> bool {
        self.slots.iter().enumerate().any(|(i, s)| {
            matches!(s, Slot::Sql(_))
                && b.schema()
                    .index_of(&format!("s{i}"))
                    .is_ok_and(|c| !value_at(b.column(c), row).is_null())
        })
    }
}

/// Each plan's values from the shards' answers, in plan order.
pub(super) fn gather(
    rows: &Rows<'_>,
    planned: &Planned,
    shards: &[Vec<RecordBatch>],
    windowing: &Windowing,
    pushed: bool,
) -> Result<Vec<Gathered>> {
    let mut gathered = Vec::with_capacity(planned.plans.len());
    for (j, plan) in planned.plans.iter().enumerate() {
        gathered.push(match plan {
            Plan::Aggregate {
                agg,
                slot,
                transform,
                aux_slots,
            } => {
                let groups = if pushed {
                    pushed_groups(rows, agg, j, shards, windowing)?
                } else {
                    point_groups(rows, agg, *slot, aux_slots, shards, windowing)?
                };
                Gathered::Aggregate {
                    agg: agg.clone(),
                    transform: *transform,
                    groups,
                }
            }
            Plan::Raw { slot, transform } => raw(rows, *slot, *transform, shards, windowing),
        });
    }
    Ok(gathered)
}

/// Plan `j`'s partials as the shards computed them (per bucket and
/// series), merged per group and bucket.
fn pushed_groups(
    rows: &Rows<'_>,
    agg: &Aggregate,
    j: usize,
    shards: &[Vec<RecordBatch>],
    windowing: &Windowing,
) -> Result<Groups> {
    let mut merged = Groups::new();
    for b in shards.iter().flatten() {
        for row in 0..b.num_rows() {
            let Some((bucket, sid)) = pushdown::keys(b, row) else {
                continue;
            };
            let Some(p) = pushdown::partial(b, row, j, agg) else {
                continue;
            };
            let bucket = if windowing.interval.is_some() {
                bucket
            } else {
                windowing.bucket_start(0)
            };
            let held = merged.entry(rows.group(sid)).or_default();
            match held.get_mut(&bucket) {
                Some(existing) => existing.merge(agg, p)?,
                None => {
                    held.insert(bucket, p);
                }
            }
        }
    }
    Ok(merged)
}

/// The aggregate's partials over the shards' points, per group and
/// bucket: each shard's, then merged (as the shards would).
fn point_groups(
    rows: &Rows<'_>,
    agg: &Aggregate,
    slot: usize,
    aux_slots: &[usize],
    shards: &[Vec<RecordBatch>],
    windowing: &Windowing,
) -> Result<Groups> {
    let mut merged = Groups::new();
    for batches in shards {
        let mut part = Groups::new();
        for b in batches {
            for row in 0..b.num_rows() {
                let (Some(t), Some(sid)) = (int_at(b.column(0), row), u64_at(b.column(1), row))
                else {
                    continue;
                };
                if !windowing.range.contains(t) {
                    continue;
                }
                let value = rows.slot_value(b, row, slot, sid);
                if value.is_null() {
                    continue;
                }
                let aux_values: Vec<Value> = aux_slots
                    .iter()
                    .map(|s| rows.slot_value(b, row, *s, sid))
                    .collect();
                let tags = rows.tags_of(sid);
                let aux: Vec<String> = agg
                    .aux_columns()
                    .iter()
                    .map(|k| tags.get(k).cloned().unwrap_or_default())
                    .collect();
                part.entry(rows.group(sid))
                    .or_default()
                    .entry(windowing.bucket_start(t))
                    .or_insert_with(|| agg.empty_partial())
                    .add(agg, &Point::with_aux(t, value, aux_values), &aux)?;
            }
        }
        merge_groups(agg, &mut merged, part)?;
    }
    Ok(merged)
}

/// A raw slot's rows per series group, each with its series' rank.
fn raw(
    rows: &Rows<'_>,
    slot: usize,
    transform: Option<Transform>,
    shards: &[Vec<RecordBatch>],
    windowing: &Windowing,
) -> Gathered {
    let mut raw: BTreeMap<SeriesKey, Vec<Emitted>> = BTreeMap::new();
    for b in shards.iter().flatten() {
        for row in 0..b.num_rows() {
            let (Some(t), Some(sid)) = (int_at(b.column(0), row), u64_at(b.column(1), row)) else {
                continue;
            };
            if !windowing.range.contains(t) {
                continue;
            }
            // A tag column shows on rows that have a field.
            if matches!(rows.slots[slot], Slot::Tag(_)) && !rows.has_field(b, row) {
                continue;
            }
            let value = rows.slot_value(b, row, slot, sid);
            // Arithmetic is null on a point that lacks one of its fields,
            // and InfluxDB still shows that row.
            if value.is_null() && (transform.is_some() || !has_any_field(b, row, slot)) {
                continue;
            }
            raw.entry(rows.group(sid))
                .or_default()
                .push(Emitted::of_series(t, value, rows.rank_of(sid)));
        }
    }
    Gathered::Raw {
        transform,
        series: raw,
    }
}

/// Whether the point has one of the fields of arithmetic slot `slot`
/// (its `p{slot}` column, see `sqlgen::any_field_sql`).
fn has_any_field(b: &RecordBatch, row: usize, slot: usize) -> bool {
    b.schema()
        .index_of(&format!("p{slot}"))
        .is_ok_and(|c| match value_at(b.column(c), row) {
            Value::Bool(v) => v,
            Value::Int(v) => v != 0,
            Value::UInt(v) => v != 0,
            _ => false,
        })
}
