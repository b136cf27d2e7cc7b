//! What a shard computes and how the router folds shards together, over
//! plain points: group points by series key and bucket into [`Partial`]s,
//! and merge the groups of several shards.
//!
//! A shard whose engine computes partials itself (pushed down into SQL)
//! must produce the same [`Partial`] values; this is the reference.

use std::collections::BTreeMap;

use crate::aggregate::{Aggregate, Partial};
use crate::error::Result;
use crate::value::{Point, SeriesKey, Value};
use crate::window::Windowing;

/// A stored point: its series (measurement and all tags) and one field
/// value.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoint {
    pub name: String,
    pub tags: BTreeMap<String, String>,
    pub time: i64,
    pub value: Value,
}

/// Partials per series key (name and `GROUP BY` tags) and bucket.
pub type Groups = BTreeMap<SeriesKey, BTreeMap<i64, Partial>>;

/// The series key of a stored series under `GROUP BY group_by` (a tag the
/// series lacks groups as `""`, as in InfluxDB).
pub fn group_key(name: &str, tags: &BTreeMap<String, String>, group_by: &[String]) -> SeriesKey {
    SeriesKey {
        name: name.to_string(),
        tags: group_by
            .iter()
            .map(|k| (k.clone(), tags.get(k).cloned().unwrap_or_default()))
            .collect(),
    }
}

/// A shard's partials for `agg` over its points in the query's range.
pub fn group_partials(
    agg: &Aggregate,
    points: &[SeriesPoint],
    group_by: &[String],
    windowing: &Windowing,
) -> Result<Groups> {
    let mut groups = Groups::new();
    for p in points.iter().filter(|p| windowing.range.contains(p.time)) {
        let key = group_key(&p.name, &p.tags, group_by);
        let bucket = windowing.bucket_start(p.time);
        let tag_values: Vec<String> = agg
            .aux_columns()
            .iter()
            .map(|k| p.tags.get(k).cloned().unwrap_or_default())
            .collect();
        groups
            .entry(key)
            .or_default()
            .entry(bucket)
            .or_insert_with(|| agg.empty_partial())
            .add(agg, &Point::new(p.time, p.value.clone()), &tag_values)?;
    }
    Ok(groups)
}

/// Folds another shard's partials into `into`.
pub fn merge_groups(agg: &Aggregate, into: &mut Groups, from: Groups) -> Result<()> {
    for (key, buckets) in from {
        let held = into.entry(key).or_default();
        for (bucket, partial) in buckets {
            match held.get_mut(&bucket) {
                Some(existing) => existing.merge(agg, partial)?,
                None => {
                    held.insert(bucket, partial);
                }
            }
        }
    }
    Ok(())
}
