//! The series step of a `SELECT`: whether and when the statement reads
//! the tag index rows of its measurement's series ([`SeriesNeed`]), and
//! reading them.

use arrow_array::RecordBatch;
use shardhouse_influxql::{Dimension, Expr, SelectStatement};

use super::super::fetch;
use super::super::fields::uses_tags;
use super::super::sqlgen;
use super::super::Ctx;
use super::{Schema, SeriesTags, Shape};
use crate::error::Result;

/// When a statement needs the tag index rows of its series, and whether
/// reading them can wait for, or run beside, the facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SeriesNeed {
    /// No tags are shown, grouped by or computed with.
    No,
    /// `*` or a regex among the fields or dimensions, or a field
    /// expression naming a tag: the tag keys decide the plan (what a name
    /// is, which columns show), so they come before the facts.
    First,
    /// Grouped by named tags, every name in the fields a field: the plan
    /// and the facts do not depend on the tags, so both are asked at once.
    Alongside,
    /// Raw rows only: at one time InfluxDB orders the rows of different
    /// series by series key, which needs the tags only when the facts hold
    /// more than one series (one host's raw points never do).
    ToOrderRows,
}

/// Which [`SeriesNeed`] `stmt` has (pure: the statement, its shape and the
/// measurement's fields).
pub(super) fn series_need(stmt: &SelectStatement, shape: &Shape, schema: &Schema) -> SeriesNeed {
    let is_field = |n: &str| schema.fields.contains_key(n);
    let wants_tag_keys = shape
        .dims_spec
        .iter()
        .any(|d| matches!(d, Dimension::Wildcard | Dimension::Regex(_)))
        || (!shape.has_call
            && stmt
                .fields
                .iter()
                .any(|f| matches!(f.expr, Expr::Wildcard(_))));
    if wants_tag_keys || stmt.fields.iter().any(|f| uses_tags(&f.expr, &is_field)) {
        SeriesNeed::First
    } else if !shape.dims_spec.is_empty() {
        SeriesNeed::Alongside
    } else if !shape.has_call {
        SeriesNeed::ToOrderRows
    } else {
        SeriesNeed::No
    }
}

/// Whether the shards' rows (series id in column 1, or `__gsid` of
/// `pushed` partials) come from more than one series.
pub(super) fn more_than_one_series(shards: &[Vec<RecordBatch>], pushed: bool) -> bool {
    let mut first = None;
    for b in shards.iter().flatten().filter(|b| b.num_columns() > 1) {
        for row in 0..b.num_rows() {
            let sid = match pushed {
                true => super::super::pushdown::keys(b, row).map(|(_, sid)| sid),
                false => fetch::u64_at(b.column(1), row),
            };
            let Some(sid) = sid else {
                continue;
            };
            match first {
                None => first = Some(sid),
                Some(f) if f != sid => return true,
                Some(_) => {}
            }
        }
    }
    false
}

/// Whether every series the shards' rows name is in `series`: rows of a
/// series written after the tag index was read (asked beside the facts)
/// name one it lacks. Grouped partials name their group by one of its
/// series (`__gsid`, pushdown.rs), raw rows their own (column 1).
pub(super) fn all_known(shards: &[Vec<RecordBatch>], series: &SeriesTags) -> bool {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    // Rows come series by series: each id is looked up once per run.
    let mut last = 0;
    let mut known = |sid: u64| {
        // 0: a partial of no series (not grouped by tags).
        if sid == 0 || sid == last {
            return true;
        }
        last = sid;
        series.contains_key(&sid)
    };
    shards.iter().flatten().all(|b| {
        let named = b
            .schema()
            .index_of("__gsid")
            .ok()
            .or((b.num_columns() > 1).then_some(1));
        let Some(ids) = named.map(|i| b.column(i)) else {
            return true;
        };
        match ids.as_primitive_opt::<UInt64Type>() {
            Some(a) => a.iter().flatten().all(&mut known),
            None => (0..b.num_rows()).all(|row| fetch::u64_at(ids, row).is_none_or(&mut known)),
        }
    })
}

/// The tags of the measurement's series matching the tag condition, from
/// the tag index (when the statement needs them: [`series_need`]).
pub(super) async fn series_tags(
    ctx: &Ctx<'_>,
    shape: &Shape,
    schema: &Schema,
    database: &str,
    measurement: &str,
) -> Result<SeriesTags> {
    let answers = fetch::on_every_shard(
        ctx.router,
        database,
        &sqlgen::series_sql(measurement, shape.tag_sql.as_deref()),
        ctx.deadline,
    )
    .await?;
    let mut tags = fetch::series_tags(&answers);
    if schema.samples {
        // InfluxDB 1.x keeps a remote-written sample's metric name as the
        // tag `__name__` beside its labels; Shardhouse stores it as the
        // series' measurement, and shows it as InfluxDB does.
        for t in tags.values_mut() {
            t.insert("__name__".into(), measurement.to_string());
        }
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn tags_are_read_first_alongside_later_or_never_as_the_statement_needs() {
        let schema = Schema {
            per_shard: BTreeMap::new(),
            fields: [("usage".to_string(), "float")].into_iter().collect(),
            samples: false,
        };
        let need = |q: &str| {
            let shardhouse_influxql::Statement::Select(stmt) =
                shardhouse_influxql::parse_statement(q).unwrap()
            else {
                panic!("not a SELECT: {q}");
            };
            let mut shape = Shape::of_where(&stmt, &schema, 0).unwrap();
            shape.group_by(&stmt, 0).unwrap();
            series_need(&stmt, &shape, &schema)
        };
        assert_eq!(need("SELECT * FROM cpu"), SeriesNeed::First);
        assert_eq!(
            need("SELECT mean(usage) FROM cpu GROUP BY *"),
            SeriesNeed::First
        );
        assert_eq!(
            need("SELECT mean(usage) FROM cpu GROUP BY /h/"),
            SeriesNeed::First
        );
        assert_eq!(
            need("SELECT mean(usage) FROM cpu GROUP BY host"),
            SeriesNeed::Alongside
        );
        // A name that is not a field is planned as a tag only if the
        // series have that key (else: no field selected, an error).
        assert_eq!(need("SELECT usage, host FROM cpu"), SeriesNeed::First);
        assert_eq!(need("SELECT host FROM cpu"), SeriesNeed::First);
        assert_eq!(
            need("SELECT mean(usage) FROM cpu GROUP BY host, region"),
            SeriesNeed::Alongside
        );
        assert_eq!(
            need("SELECT usage FROM cpu WHERE host = 'a'"),
            SeriesNeed::ToOrderRows
        );
        assert_eq!(
            need("SELECT mean(usage) FROM cpu WHERE host = 'a'"),
            SeriesNeed::No
        );
    }

    /// A batch of a zero first column (`first`) and the ids as `ids`.
    fn ids_batch(first: &str, ids: &str, values: &[u64]) -> RecordBatch {
        use arrow_array::{ArrayRef, Int64Array, UInt64Array};
        let z: ArrayRef = std::sync::Arc::new(Int64Array::from(vec![0; values.len()]));
        let v: ArrayRef = std::sync::Arc::new(UInt64Array::from(values.to_vec()));
        RecordBatch::try_from_iter([(first, z), (ids, v)]).unwrap()
    }

    #[test]
    fn rows_of_a_series_the_tags_lack_are_found() {
        let grouped = |gsids: &[u64]| ids_batch("__b", "__gsid", gsids);
        let raw = |sids: &[u64]| ids_batch("__t", "__sid", sids);
        let tags: SeriesTags = [7, 8].into_iter().map(|s| (s, BTreeMap::new())).collect();
        assert!(all_known(&[vec![grouped(&[7, 7, 8])], vec![]], &tags));
        // 0: partials of no series.
        assert!(all_known(&[vec![grouped(&[0, 0])]], &tags));
        assert!(!all_known(
            &[vec![grouped(&[7])], vec![grouped(&[9])]],
            &tags
        ));
        assert!(all_known(&[vec![raw(&[8, 8, 7])]], &tags));
        assert!(!all_known(&[vec![raw(&[8, 8, 9, 7])]], &tags));
    }

    #[test]
    fn rows_of_one_series_need_no_series_order() {
        let batch = |sids: &[u64]| ids_batch("__t", "__sid", sids);
        assert!(!more_than_one_series(
            &[vec![batch(&[7, 7])], vec![batch(&[7])]],
            false
        ));
        assert!(!more_than_one_series(&[vec![], vec![batch(&[])]], false));
        assert!(more_than_one_series(
            &[vec![batch(&[7])], vec![batch(&[8])]],
            false
        ));
        assert!(more_than_one_series(&[vec![batch(&[7, 9])]], false));
    }
}
