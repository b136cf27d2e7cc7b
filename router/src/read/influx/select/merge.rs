//! The merge step of a `SELECT`: the shards' answers (points, or partial
//! aggregates when pushed) become each plan's gathered values for the
//! evaluation pipeline: partials per group and bucket, merged across
//! shards (exact, see `shardhouse-eval`), or raw rows per series.

use std::collections::{BTreeMap, HashMap};

use arrow_array::RecordBatch;
use shardhouse_eval::aggregate::heads::{self, Head};
use shardhouse_eval::aggregate::Rule;
use shardhouse_eval::partials::{group_key, merge_groups, Groups};
use shardhouse_eval::{
    Aggregate, Emitted, Gathered, Partial, Point, SeriesKey, Transform, Value, Windowing,
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

    /// Each slot's column in batch `b` (`s{slot}`), looked up once per
    /// batch rather than once per row.
    fn columns(&self, b: &RecordBatch) -> Columns {
        let index = |name: String| b.schema().index_of(&name).ok();
        Columns {
            slot: (0..self.slots.len())
                .map(|i| index(format!("s{i}")))
                .collect(),
            any_field: (0..self.slots.len())
                .map(|i| index(format!("p{i}")))
                .collect(),
        }
    }

    /// Slot `slot`'s value in the row: its `s{slot}` column, or the
    /// series' tag.
    fn slot_value(
        &self,
        b: &RecordBatch,
        cols: &Columns,
        row: usize,
        slot: usize,
        sid: u64,
    ) -> Value {
        match &self.slots[slot] {
            Slot::Sql(_) => cols.slot[slot]
                .map(|c| value_at(b.column(c), row))
                .unwrap_or(Value::Null),
            Slot::Tag(k) => self
                .tags_of(sid)
                .get(k)
                .map_or(Value::Null, |v| Value::String(v.clone())),
        }
    }

    /// The name a slot's column has (a tag's key, a field's name).
    fn slot_name(&self, slot: usize) -> String {
        match &self.slots[slot] {
            Slot::Tag(k) => k.clone(),
            Slot::Sql(shardhouse_influxql::Expr::VarRef(v)) => v.name.clone(),
            Slot::Sql(e) => e.to_string(),
        }
    }

    /// Whether the row has a value in one of the field slots.
    fn has_field(&self, b: &RecordBatch, cols: &Columns, row: usize) -> bool {
        self.slots.iter().enumerate().any(|(i, s)| {
            matches!(s, Slot::Sql(_))
                && cols.slot[i].is_some_and(|c| !value_at(b.column(c), row).is_null())
        })
    }
}

/// The columns of one batch, by slot.
struct Columns {
    /// `s{slot}`: the slot's value.
    slot: Vec<Option<usize>>,
    /// `p{slot}`: whether the point has one of an arithmetic slot's fields.
    any_field: Vec<Option<usize>>,
}

/// Groups by index: each series' group key (and the values of a
/// `top`/`bottom` call's tag arguments) computed once per series, not once
/// per row; rows then index a vector.
struct GroupIndex<'r, 'a, T> {
    rows: &'r Rows<'a>,
    by_sid: HashMap<u64, (usize, Vec<String>)>,
    by_key: HashMap<SeriesKey, usize>,
    groups: Vec<(SeriesKey, T)>,
}

impl<'r, 'a, T: Default> GroupIndex<'r, 'a, T> {
    fn new(rows: &'r Rows<'a>) -> Self {
        GroupIndex {
            rows,
            by_sid: HashMap::new(),
            by_key: HashMap::new(),
            groups: Vec::new(),
        }
    }

    /// Series `sid`'s group and the tag values `aux_tags` name.
    fn of(&mut self, sid: u64, aux_tags: &[String]) -> (&mut T, &[String]) {
        if !self.by_sid.contains_key(&sid) {
            let key = self.rows.group(sid);
            let next = self.groups.len();
            let group = *self.by_key.entry(key.clone()).or_insert(next);
            if group == next {
                self.groups.push((key, T::default()));
            }
            let tags = self.rows.tags_of(sid);
            let aux = aux_tags
                .iter()
                .map(|k| tags.get(k).cloned().unwrap_or_default())
                .collect();
            self.by_sid.insert(sid, (group, aux));
        }
        let (group, aux) = &self.by_sid[&sid];
        (&mut self.groups[*group].1, aux.as_slice())
    }

    fn into_groups(self) -> impl Iterator<Item = (SeriesKey, T)> {
        self.groups.into_iter()
    }
}

/// Each plan's values from the shards' answers, in plan order.
/// `heads`: the shard group duration when `first`/`last` are answered
/// from the series' heads (no `GROUP BY time()`, see [`head_groups`]).
pub(super) fn gather(
    rows: &Rows<'_>,
    planned: &Planned,
    shards: &[Vec<RecordBatch>],
    windowing: &Windowing,
    pushed: bool,
    heads: Option<i64>,
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
                let rule = match agg {
                    Aggregate::First => Some(Rule::First),
                    Aggregate::Last => Some(Rule::Last),
                    _ => None,
                };
                let groups = if let (Some(rule), Some(duration)) = (rule, heads) {
                    let source = match pushed {
                        true => HeadSource::Pushed { plan: j, agg },
                        false => HeadSource::Points {
                            slot: *slot,
                            aux_slots,
                        },
                    };
                    head_groups(rows, rule, source, shards, windowing, duration)?
                } else if pushed {
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

/// Where a series' head comes from: a plan's pushed partials, or the
/// points of a value slot (with the extra columns beside the selector).
#[derive(Clone, Copy)]
enum HeadSource<'s> {
    Pushed { plan: usize, agg: &'s Aggregate },
    Points { slot: usize, aux_slots: &'s [usize] },
}

/// `first`/`last` without `GROUP BY time()`, per group: the point
/// InfluxDB 1.8 answers from each series' head (its first point in the
/// call's order, `shardhouse_eval::aggregate::heads`), which differs from
/// the plain tie rule when series tie at the extreme time. A series lives
/// on one shard, so its head is that shard's.
fn head_groups(
    rows: &Rows<'_>,
    rule: Rule,
    source: HeadSource<'_>,
    shards: &[Vec<RecordBatch>],
    windowing: &Windowing,
    shard_duration: i64,
) -> Result<Groups> {
    let mut by_sid: HashMap<u64, Point> = HashMap::new();
    for b in shards.iter().flatten() {
        let cols = rows.columns(b);
        for row in 0..b.num_rows() {
            match source {
                HeadSource::Pushed { plan, agg } => {
                    let (Some((_, sid)), Some(Partial::Selected(_, Some(p)))) =
                        (pushdown::keys(b, row), pushdown::partial(b, row, plan, agg))
                    else {
                        continue;
                    };
                    by_sid.insert(sid, p);
                }
                HeadSource::Points { slot, aux_slots } => {
                    let (Some(t), Some(sid)) = (int_at(b.column(0), row), u64_at(b.column(1), row))
                    else {
                        continue;
                    };
                    let value = rows.slot_value(b, &cols, row, slot, sid);
                    if !windowing.range.contains(t) || value.is_null() {
                        continue;
                    }
                    let aux = aux_slots
                        .iter()
                        .map(|s| rows.slot_value(b, &cols, row, *s, sid))
                        .collect();
                    let p = Point::with_aux(t, value, aux);
                    // A series holds one point per time: the rule picks
                    // by time alone here.
                    match by_sid.get_mut(&sid) {
                        Some(head) if rule.prefers(&p, head) => *head = p,
                        Some(_) => {}
                        None => {
                            by_sid.insert(sid, p);
                        }
                    }
                }
            }
        }
    }
    let mut grouped: HashMap<SeriesKey, Vec<Head>> = HashMap::new();
    for (sid, point) in by_sid {
        grouped.entry(rows.group(sid)).or_default().push(Head {
            rank: rows.rank_of(sid),
            point,
        });
    }
    // InfluxDB compares the extra columns sorted by name.
    let aux_order: Vec<usize> = match source {
        HeadSource::Points { aux_slots, .. } => {
            let mut order: Vec<usize> = (0..aux_slots.len()).collect();
            order.sort_by_key(|&i| rows.slot_name(aux_slots[i]));
            order
        }
        HeadSource::Pushed { .. } => Vec::new(),
    };
    let bucket = windowing.bucket_start(0);
    let mut merged = Groups::new();
    for (key, heads) in grouped {
        let point = heads::selected(rule, heads, shard_duration, &aux_order);
        merged
            .entry(key)
            .or_default()
            .insert(bucket, Partial::Selected(rule, point));
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
        let mut part: GroupIndex<'_, '_, BTreeMap<i64, Partial>> = GroupIndex::new(rows);
        for b in batches {
            let cols = rows.columns(b);
            for row in 0..b.num_rows() {
                let (Some(t), Some(sid)) = (int_at(b.column(0), row), u64_at(b.column(1), row))
                else {
                    continue;
                };
                if !windowing.range.contains(t) {
                    continue;
                }
                let value = rows.slot_value(b, &cols, row, slot, sid);
                if value.is_null() {
                    continue;
                }
                let aux_values: Vec<Value> = aux_slots
                    .iter()
                    .map(|s| rows.slot_value(b, &cols, row, *s, sid))
                    .collect();
                let (buckets, aux) = part.of(sid, agg.aux_columns());
                buckets
                    .entry(windowing.bucket_start(t))
                    .or_insert_with(|| agg.empty_partial())
                    .add(agg, &Point::with_aux(t, value, aux_values), aux)?;
            }
        }
        merge_groups(agg, &mut merged, part.into_groups().collect())?;
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
    let mut index: GroupIndex<'_, '_, Vec<Emitted>> = GroupIndex::new(rows);
    let tag_slot = matches!(rows.slots[slot], Slot::Tag(_));
    for b in shards.iter().flatten() {
        let cols = rows.columns(b);
        for row in 0..b.num_rows() {
            let (Some(t), Some(sid)) = (int_at(b.column(0), row), u64_at(b.column(1), row)) else {
                continue;
            };
            if !windowing.range.contains(t) {
                continue;
            }
            // A tag column shows on rows that have a field.
            if tag_slot && !rows.has_field(b, &cols, row) {
                continue;
            }
            let value = rows.slot_value(b, &cols, row, slot, sid);
            // Arithmetic is null on a point that lacks one of its fields,
            // and InfluxDB still shows that row.
            if value.is_null() && (transform.is_some() || !has_any_field(b, &cols, row, slot)) {
                continue;
            }
            let rank = rows.rank_of(sid);
            index
                .of(sid, &[])
                .0
                .push(Emitted::of_series(t, value, rank));
        }
    }
    let mut raw: BTreeMap<SeriesKey, Vec<Emitted>> = BTreeMap::new();
    for (key, mut emitted) in index.into_groups() {
        match raw.get_mut(&key) {
            Some(held) => held.append(&mut emitted),
            None => {
                raw.insert(key, emitted);
            }
        }
    }
    Gathered::Raw {
        transform,
        series: raw,
    }
}

/// Whether the point has one of the fields of arithmetic slot `slot`
/// (its `p{slot}` column, see `sqlgen::any_field_sql`).
fn has_any_field(b: &RecordBatch, cols: &Columns, row: usize, slot: usize) -> bool {
    cols.any_field[slot].is_some_and(|c| match value_at(b.column(c), row) {
        Value::Bool(v) => v,
        Value::Int(v) => v != 0,
        Value::UInt(v) => v != 0,
        _ => false,
    })
}
