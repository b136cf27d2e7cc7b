//! Partial aggregates computed by the shards: for `count`, `sum`, `mean`,
//! `min`, `max`, `first`, `last`, `spread` and `percentile` (as a sorted
//! window around its rank) of numeric fields, each shard
//! groups its points by time bucket (and series, when the statement groups
//! by tags) in chDB and returns one row per group instead of its points;
//! the router turns each row into the same [`Partial`] the points would
//! have made and merges as before.
//!
//! Exactness: counts, integer sums, and the selectors (which keep InfluxDB's
//! tie rules through tuple ordering: `min` takes the smallest value, then
//! the earliest time) equal the point path. A float sum is the shard's
//! compensated sum (`sumKahan`), whose error is within about two units in
//! the last place of the sum of the magnitudes, merged exactly across
//! shards (docs/api.md). A percentile is the point the points path would
//! pick: each shard sends its points around its own rank, sorted, and the
//! router answers only when those windows decide the group's rank; when
//! they do not (parts of very different data), the statement is read
//! again as points.

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use shardhouse_eval::aggregate::rank::rank_order;
use shardhouse_eval::aggregate::{RankWindow, Rule, Sum};
use shardhouse_eval::exact::ExactSum;
use shardhouse_eval::{Aggregate, Interval, Partial, Point, Value};

use super::fetch::{int_at, list_at, u64_at, value_at};
use super::sqlgen::{SERIES_COLUMN, TIME_COLUMN};

/// Whether shards can compute `agg` of a field of this InfluxDB type.
pub fn pushable(agg: &Aggregate, field_type: Option<&str>) -> bool {
    let numeric = matches!(field_type, Some("float" | "integer"));
    match agg {
        Aggregate::Count => field_type.is_some(),
        Aggregate::Sum | Aggregate::Mean | Aggregate::Spread => {
            numeric || field_type == Some("unsigned")
        }
        Aggregate::Min | Aggregate::Max | Aggregate::First | Aggregate::Last => numeric,
        // As rank windows (`shardhouse_eval::aggregate::rank`).
        Aggregate::Percentile(_) => numeric,
        _ => false,
    }
}

/// A shard's percentile window reaches this many points either side of
/// its own rank, plus [`WINDOW_SQRT`] times the square root of its count:
/// the ranks of one quantile in parts of similar data differ by a few
/// square roots of their sizes, so the windows of a shard split nearly
/// always decide the group's rank (a region's p95 over 3 h: ~3,000 of
/// 540,000 points per shard), and small groups are sent whole.
const WINDOW_MIN_HALF: u64 = 64;
const WINDOW_SQRT: u64 = 4;

/// The columns of `percentile(p)` over slot column `col`: the window's
/// first rank (`agg_r{j}`, 1-based) and the window itself (`agg_w{j}`,
/// `(value, time)` tuples in rank order).
fn window_columns(j: usize, p: f64, col: &str) -> [String; 2] {
    let t = TIME_COLUMN;
    let n = format!("count(`{col}`)");
    let rank = format!("toInt64(floor({n} * {p:?} / 100 + 0.5))");
    let half = format!("toInt64({WINDOW_MIN_HALF} + {WINDOW_SQRT} * sqrt({n}))");
    [
        format!("greatest(toInt64(1), {rank} - {half}) AS `agg_r{j}`"),
        format!(
            "arraySlice(arraySort(groupArrayIf((`{col}`, `{t}`), `{col}` IS NOT NULL)), `agg_r{j}`, 2 * {half} + 1) AS `agg_w{j}`"
        ),
    ]
}

/// The bucket of `__t` in SQL: the window start for `GROUP BY time()`
/// without `tz()`, else one bucket (the router names it).
pub fn bucket_sql(interval: Option<Interval>) -> String {
    let t = TIME_COLUMN;
    match interval {
        Some(iv) => {
            let (d, off) = (iv.duration, iv.offset);
            format!("`{t}` - ((((`{t}` - ({off})) % {d}) + {d}) % {d})")
        }
        None => "toInt64(0)".into(),
    }
}

/// The aggregate columns of plan `j` over slot column `col` (a field the
/// shard has; `float` selects the compensated sum). `bucket_times`: the
/// statement groups by `time()`, so a selector's answer shows its bucket's
/// time, not its point's: `min` and `max` need no point time to break
/// ties (equal values are one answer), and a plain `max` costs a fifth of
/// the `(value, time)` tuple's (docs/benchmarks.md, session 27).
/// `by_series`: each group is one series, which holds one point per time,
/// so `first`/`last` are the value at the earliest/latest time with no tie
/// to break (a ninth of the tuple's cost over a day).
pub fn columns(
    j: usize,
    agg: &Aggregate,
    col: &str,
    float: bool,
    bucket_times: bool,
    by_series: bool,
) -> Vec<String> {
    let t = TIME_COLUMN;
    let has = format!("`{col}` IS NOT NULL");
    let mut out = vec![format!("count(`{col}`) AS `agg_c{j}`")];
    match agg {
        Aggregate::Min if bucket_times => out.push(format!("(min(`{col}`), `__b`) AS `agg_p{j}`")),
        Aggregate::Max if bucket_times => out.push(format!("(max(`{col}`), -`__b`) AS `agg_p{j}`")),
        Aggregate::Count => {}
        Aggregate::Sum | Aggregate::Mean => out.push(if float {
            format!("sumKahan(`{col}`) AS `agg_s{j}`")
        } else {
            format!("sum(`{col}`) AS `agg_s{j}`")
        }),
        Aggregate::Min => out.push(format!("minIf((`{col}`, `{t}`), {has}) AS `agg_p{j}`")),
        Aggregate::Max => out.push(format!("maxIf((`{col}`, -`{t}`), {has}) AS `agg_p{j}`")),
        Aggregate::First if by_series => out.push(format!(
            "(minIf(`{t}`, {has}), -argMinIf(`{col}`, `{t}`, {has})) AS `agg_p{j}`"
        )),
        Aggregate::Last if by_series => out.push(format!(
            "(maxIf(`{t}`, {has}), argMaxIf(`{col}`, `{t}`, {has})) AS `agg_p{j}`"
        )),
        Aggregate::First => out.push(format!("minIf((`{t}`, -`{col}`), {has}) AS `agg_p{j}`")),
        Aggregate::Last => out.push(format!("maxIf((`{t}`, `{col}`), {has}) AS `agg_p{j}`")),
        Aggregate::Percentile(p) => out.extend(window_columns(j, *p, col)),
        Aggregate::Spread => {
            out.push(format!("min(`{col}`) AS `agg_lo{j}`"));
            out.push(format!("max(`{col}`) AS `agg_hi{j}`"));
        }
        _ => {}
    }
    out
}

/// The series id column of a grouped row (0 when not grouped by series).
const GROUP_SERIES: &str = "__gsid";

/// How a shard groups its rows besides the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping<'a> {
    /// One group per bucket (`__gsid` 0).
    None,
    /// By series (`__gsid` the series id): the router groups them.
    BySeries,
    /// By the tags `GROUP BY` names: `__gsid` is one series of the group
    /// on this shard (the smallest id), from the tag index subquery
    /// [`crate::read::influx::sqlgen::series_groups_sql`] gives. The
    /// router maps it to its group by that series' tags, as it would map
    /// every series of the group, so a region panel sends one row per
    /// region and bucket instead of one per series and bucket.
    ByTags(&'a str),
}

/// A shard's fact rows (unlimited), as `sqlgen::fact_parts` makes them:
/// the select list and the rest from ` FROM` on.
#[derive(Debug, Clone, Copy)]
pub struct FactsSql<'a> {
    pub columns: &'a str,
    pub from: &'a str,
    /// The facts join the series' tags: read them from a subquery.
    pub joined: bool,
}

/// The statement a shard runs: its fact rows grouped by bucket and as
/// `grouping` says. Without the tag join the facts' columns are named in
/// a `WITH` over the table itself rather than read from a subquery: the
/// engine then counts a field from its null map alone, not its values
/// (`count` over three hours, one thread: 28 -> 12 ms per shard,
/// docs/benchmarks.md, session 28).
pub fn grouped_sql(
    facts: FactsSql<'_>,
    interval: Option<Interval>,
    grouping: Grouping<'_>,
    aggs: &[String],
    limit: u64,
) -> String {
    let keys = match grouping {
        Grouping::None => "`__b`".to_string(),
        _ => format!("`__b`, `{GROUP_SERIES}`"),
    };
    let FactsSql {
        columns,
        from,
        joined,
    } = facts;
    let subquery = || format!(" FROM (SELECT {columns}{from})");
    let (with, sid, from) = match grouping {
        Grouping::None if joined => ("", "toUInt64(0)".to_string(), subquery()),
        Grouping::BySeries if joined => ("", format!("`{SERIES_COLUMN}`"), subquery()),
        Grouping::None => (columns, "toUInt64(0)".to_string(), from.to_string()),
        Grouping::BySeries => (columns, format!("`{SERIES_COLUMN}`"), from.to_string()),
        // ANY LEFT: each point once, with its series' group; a series the
        // index subquery did not see (written meanwhile) keeps its own id
        // (the router then reads the tags again, see `all_known`).
        Grouping::ByTags(groups) => (
            "",
            format!("if(`{GROUP_REP}` = 0, `{SERIES_COLUMN}`, `{GROUP_REP}`)"),
            format!(
                "{} AS `__facts` ANY LEFT JOIN ({groups}) AS `__groups` USING (`{SERIES_COLUMN}`)",
                subquery()
            ),
        ),
    };
    let with = if with.is_empty() {
        String::new()
    } else {
        format!("WITH {with} ")
    };
    format!(
        "{with}SELECT {} AS `__b`, {sid} AS `{GROUP_SERIES}`, {}{from} GROUP BY {keys} LIMIT {limit}",
        bucket_sql(interval),
        aggs.join(", ")
    )
}

/// The column of [`Grouping::ByTags`]' subquery naming each series'
/// group representative.
pub const GROUP_REP: &str = "__rep";

fn col<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a ArrayRef> {
    b.schema().index_of(name).ok().map(|i| b.column(i))
}

/// One row's partial of plan `j`, or `None` when the group had no value
/// of the field (or the shard lacks it).
pub fn partial(b: &RecordBatch, row: usize, j: usize, agg: &Aggregate) -> Option<Partial> {
    let count = u64_at(col(b, &format!("agg_c{j}"))?, row)?;
    if count == 0 {
        return None;
    }
    let pair = |name: &str| -> Option<(Value, Value)> {
        let s = col(b, name)?.as_struct_opt()?;
        if s.is_null(row) || s.num_columns() < 2 {
            return None;
        }
        Some((value_at(s.column(0), row), value_at(s.column(1), row)))
    };
    Some(match agg {
        Aggregate::Count => Partial::Count(count),
        Aggregate::Sum | Aggregate::Mean => {
            let sum = match value_at(col(b, &format!("agg_s{j}"))?, row) {
                Value::Float(v) => {
                    let mut s = ExactSum::new();
                    s.add(v);
                    Sum::Float(s)
                }
                Value::Int(v) => Sum::Int(v),
                Value::UInt(v) => Sum::UInt(v),
                _ => return None,
            };
            if matches!(agg, Aggregate::Sum) {
                Partial::Sum(sum)
            } else {
                Partial::Mean { sum, count }
            }
        }
        Aggregate::Min => {
            let (v, t) = pair(&format!("agg_p{j}"))?;
            Partial::Selected(Rule::Min, Some(Point::new(time(&t)?, v)))
        }
        Aggregate::Max => {
            let (v, t) = pair(&format!("agg_p{j}"))?;
            Partial::Selected(Rule::Max, Some(Point::new(time(&t)?.checked_neg()?, v)))
        }
        Aggregate::First => {
            let (t, v) = pair(&format!("agg_p{j}"))?;
            Partial::Selected(Rule::First, Some(Point::new(time(&t)?, negate(v)?)))
        }
        Aggregate::Last => {
            let (t, v) = pair(&format!("agg_p{j}"))?;
            Partial::Selected(Rule::Last, Some(Point::new(time(&t)?, v)))
        }
        Aggregate::Percentile(_) => Partial::Windows(vec![RankWindow {
            total: count,
            start: u64_at(col(b, &format!("agg_r{j}"))?, row)?,
            points: window_points(col(b, &format!("agg_w{j}"))?, row)?,
        }]),
        Aggregate::Spread => {
            let lo = value_at(col(b, &format!("agg_lo{j}"))?, row);
            let hi = value_at(col(b, &format!("agg_hi{j}"))?, row);
            Partial::Spread(Some((lo, hi)))
        }
        _ => return None,
    })
}

/// The `(value, time)` tuples of a window cell as points in rank order
/// (sorted again: the engine and the router order `-0.0` and `0.0`
/// differently).
fn window_points(c: &ArrayRef, row: usize) -> Option<Vec<Point>> {
    let inner = list_at(c, row)?;
    let tuples = inner.as_struct_opt()?;
    if tuples.num_columns() < 2 {
        return None;
    }
    let mut points = (0..tuples.len())
        .map(|i| {
            let t = time(&value_at(tuples.column(1), i))?;
            Some(Point::new(t, value_at(tuples.column(0), i)))
        })
        .collect::<Option<Vec<_>>>()?;
    points.sort_by(rank_order);
    Some(points)
}

/// The bucket and series id of a grouped row.
pub fn keys(b: &RecordBatch, row: usize) -> Option<(i64, u64)> {
    Some((
        int_at(col(b, "__b")?, row)?,
        u64_at(col(b, GROUP_SERIES)?, row)?,
    ))
}

fn time(v: &Value) -> Option<i64> {
    match v {
        Value::Int(t) => Some(*t),
        _ => None,
    }
}

fn negate(v: Value) -> Option<Value> {
    Some(match v {
        Value::Float(x) => Value::Float(-x),
        Value::Int(x) => Value::Int(x.checked_neg()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array, ListArray, StructArray, UInt64Array};
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::{DataType, Field, Fields};
    use std::sync::Arc;

    #[test]
    fn buckets_match_the_window_arithmetic() {
        let iv = Interval::new(60, None, 0).unwrap();
        assert_eq!(
            bucket_sql(Some(iv)),
            "`__t` - ((((`__t` - (0)) % 60) + 60) % 60)"
        );
        assert_eq!(bucket_sql(None), "toInt64(0)");
        let facts = FactsSql {
            columns: "1 AS `a`",
            from: " FROM `cpu` FINAL",
            joined: false,
        };
        let sql = grouped_sql(
            facts,
            Some(iv),
            Grouping::ByTags("SELECT 2"),
            &columns(0, &Aggregate::Max, "s1", true, false, false),
            11,
        );
        assert_eq!(
            sql,
            "SELECT `__t` - ((((`__t` - (0)) % 60) + 60) % 60) AS `__b`, if(`__rep` = 0, `__sid`, `__rep`) AS `__gsid`, \
             count(`s1`) AS `agg_c0`, maxIf((`s1`, -`__t`), `s1` IS NOT NULL) AS `agg_p0` FROM (SELECT 1 AS `a` FROM `cpu` FINAL) AS `__facts` \
             ANY LEFT JOIN (SELECT 2) AS `__groups` USING (`__sid`) GROUP BY `__b`, `__gsid` LIMIT 11"
        );
        // Without the tag join, the facts' columns are a WITH over the table.
        assert_eq!(
            grouped_sql(facts, None, Grouping::None, &["count() AS `__n`".into()], 3),
            "WITH 1 AS `a` SELECT toInt64(0) AS `__b`, toUInt64(0) AS `__gsid`, count() AS `__n` FROM `cpu` FINAL GROUP BY `__b` LIMIT 3"
        );
        let joined = FactsSql {
            joined: true,
            ..facts
        };
        assert_eq!(
            grouped_sql(joined, None, Grouping::BySeries, &["count() AS `__n`".into()], 3),
            "SELECT toInt64(0) AS `__b`, `__sid` AS `__gsid`, count() AS `__n` FROM (SELECT 1 AS `a` FROM `cpu` FINAL) GROUP BY `__b`, `__gsid` LIMIT 3"
        );
    }

    #[test]
    fn a_percentile_row_becomes_its_rank_window() {
        let cols = columns(0, &Aggregate::Percentile(95.0), "s1", true, false, false);
        assert_eq!(cols.len(), 3);
        assert!(
            cols[1].contains("count(`s1`) * 95.0 / 100 + 0.5") && cols[1].ends_with("AS `agg_r0`")
        );
        assert!(cols[2].starts_with(
            "arraySlice(arraySort(groupArrayIf((`s1`, `__t`), `s1` IS NOT NULL)), `agg_r0`"
        ));
        // The engine's cell: (value, time) tuples; the router sorts them
        // again by its rank order.
        let tuples = StructArray::new(
            Fields::from(vec![
                Field::new("1", DataType::Float64, true),
                Field::new("2", DataType::Int64, false),
            ]),
            vec![
                Arc::new(Float64Array::from(vec![2.0, 1.0, 2.0])) as ArrayRef,
                Arc::new(Int64Array::from(vec![9, 5, 3])),
            ],
            None,
        );
        let item = Arc::new(Field::new("item", tuples.data_type().clone(), false));
        let list = ListArray::new(
            item,
            OffsetBuffer::new(vec![0, 3].into()),
            Arc::new(tuples),
            None,
        );
        let b = RecordBatch::try_from_iter([
            ("agg_c0", Arc::new(UInt64Array::from(vec![40])) as ArrayRef),
            ("agg_r0", Arc::new(Int64Array::from(vec![36]))),
            ("agg_w0", Arc::new(list)),
        ])
        .unwrap();
        let pts = |v: &[(i64, f64)]| {
            v.iter()
                .map(|(t, x)| Point::new(*t, Value::Float(*x)))
                .collect()
        };
        assert_eq!(
            partial(&b, 0, 0, &Aggregate::Percentile(95.0)),
            Some(Partial::Windows(vec![RankWindow {
                total: 40,
                start: 36,
                points: pts(&[(5, 1.0), (3, 2.0), (9, 2.0)]),
            }]))
        );
        assert!(pushable(&Aggregate::Percentile(50.0), Some("integer")));
        assert!(!pushable(&Aggregate::Percentile(50.0), Some("string")));
    }

    #[test]
    fn rows_become_the_partials_the_points_make() {
        let pair = StructArray::new(
            Fields::from(vec![
                Field::new("1", DataType::Int64, false),
                Field::new("2", DataType::Int64, false),
            ]),
            vec![
                Arc::new(Int64Array::from(vec![7])) as ArrayRef,
                Arc::new(Int64Array::from(vec![-20])),
            ],
            None,
        );
        let b = RecordBatch::try_from_iter([
            ("__b", Arc::new(Int64Array::from(vec![0])) as ArrayRef),
            ("__gsid", Arc::new(UInt64Array::from(vec![9]))),
            ("agg_c0", Arc::new(UInt64Array::from(vec![3]))),
            ("agg_p0", Arc::new(pair)),
        ])
        .unwrap();
        assert_eq!(keys(&b, 0), Some((0, 9)));
        assert_eq!(
            partial(&b, 0, 0, &Aggregate::Count),
            Some(Partial::Count(3))
        );
        // max((value, -time)): value 7 at time 20.
        assert_eq!(
            partial(&b, 0, 0, &Aggregate::Max),
            Some(Partial::Selected(
                Rule::Max,
                Some(Point::new(20, Value::Int(7)))
            ))
        );
        assert!(pushable(&Aggregate::Mean, Some("float")));
        assert!(!pushable(&Aggregate::Median, Some("float")));
        assert!(!pushable(&Aggregate::Max, Some("string")));
    }
}
