//! The engine's rollups (`shardhouse_common::rollup`): for each measurement
//! table, one table per level holding, per series and bucket, the count,
//! sum, min, max, first and last of every field, filled by a materialized
//! view on the measurement's inserts. The view runs inside each insert, so
//! every replica's rollup follows its raw rows in log order.
//!
//! A rollup is exact only while every point was inserted once, through the
//! view: reads use it only where they could also drop `FINAL`
//! (rewrites.rs) and only for tables whose rollups were created with them
//! ([`crate::shard_state::ShardState::has_rollups`]). Deletes apply to the
//! rollups too ([`repair`]); retention drops their days with the raw ones.
//! This module makes the statements; ddl.rs, ops.rs and lifecycle.rs run
//! them.

use shardhouse_common::rollup::{self, Kind, Level, Part, LEVELS};

use crate::layout::{ident, qualified, FactOrder, FieldType, SAMPLES_TABLE, SERIES_ID, TIME};

/// Whether a table gets rollups: measurements, not the samples table
/// (PromQL reads it by its own plans).
pub(crate) fn applies_to(table: &str) -> bool {
    table != SAMPLES_TABLE && !crate::layout::is_engine_table(table)
}

fn kind(t: FieldType) -> Kind {
    match t {
        FieldType::Float64 => Kind::Float,
        FieldType::Int64 => Kind::Int,
        FieldType::UInt64 => Kind::UInt,
        FieldType::String | FieldType::Bool => Kind::Other,
    }
}

/// The rollup column type of `part` of a field of type `t`.
fn column_type(part: Part, t: FieldType) -> String {
    let v = t.name();
    match part {
        Part::Count => "SimpleAggregateFunction(sum, UInt64)".into(),
        Part::Sum => format!("SimpleAggregateFunction(sum, {v})"),
        Part::Min => format!("SimpleAggregateFunction(min, Nullable({v}))"),
        Part::Max => format!("SimpleAggregateFunction(max, Nullable({v}))"),
        Part::First => format!("SimpleAggregateFunction(min, Tuple(Int64, {v}))"),
        Part::Last => format!("SimpleAggregateFunction(max, Tuple(Int64, {v}))"),
    }
}

/// The expression of `part` of field column `f` over a group of raw rows.
/// A bucket without a value keeps the neutral element of the merge (the
/// largest tuple for `first`, the smallest for `last`), so that a merge
/// of its row with another keeps the other's.
fn part_sql(part: Part, field: &str, t: FieldType) -> String {
    let f = ident(field);
    let v = t.name();
    let tuple = |empty: &str, agg: &str, value: &str| {
        format!(
            "if(count({f}) = 0, CAST(({empty}, 0), 'Tuple(Int64, {v})'), \
             {agg}(({POINT_TIME}, {value}assumeNotNull({f})), {f} IS NOT NULL))"
        )
    };
    match part {
        Part::Count => format!("count({f})"),
        Part::Sum => format!("sumIf(assumeNotNull({f}), {f} IS NOT NULL)"),
        Part::Min => format!("min({f})"),
        Part::Max => format!("max({f})"),
        Part::First => tuple("9223372036854775807", "minIf", "-"),
        Part::Last => tuple("-9223372036854775808", "maxIf", ""),
    }
}

/// The point's time in nanoseconds, named in a `WITH` ([`select_sql`]).
const POINT_TIME: &str = "`__pt`";

fn field_parts(fields: &[(String, FieldType)]) -> impl Iterator<Item = (Part, &str, FieldType)> {
    fields.iter().flat_map(|(f, t)| {
        rollup::parts(kind(*t))
            .iter()
            .map(move |p| (*p, f.as_str(), *t))
    })
}

/// The rows of `level` over `source`'s rows that `filter` keeps (a
/// `WHERE` condition, or none): the view's query, and a repair's.
fn select_sql(
    source: &str,
    level: &Level,
    fields: &[(String, FieldType)],
    filter: Option<&str>,
) -> String {
    let s = level.step_ns;
    let t = POINT_TIME;
    let mut cols = vec![
        format!(
            "fromUnixTimestamp64Nano({t} - ((({t} % {s}) + {s}) % {s})) AS {}",
            ident(TIME)
        ),
        ident(SERIES_ID),
    ];
    for (part, field, ty) in field_parts(fields) {
        cols.push(format!(
            "{} AS {}",
            part_sql(part, field, ty),
            ident(&rollup::column(part, field))
        ));
    }
    // A filter's `time` may name the bucket (ClickHouse prefers a select
    // alias to a column): repairs filter on whole buckets, where both
    // read the same.
    let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
    // The point's own time through a WITH: inside the select list `time`
    // names the bucket alias (ClickHouse prefers an alias to a column),
    // and a first/last of the bucket's start would tie every point.
    format!(
        "WITH toUnixTimestamp64Nano({}) AS {POINT_TIME} SELECT {} FROM {source}{filter} GROUP BY {}, {}",
        ident(TIME),
        cols.join(", "),
        ident(SERIES_ID),
        ident(TIME)
    )
}

fn table_columns(fields: &[(String, FieldType)]) -> Vec<String> {
    field_parts(fields)
        .map(|(part, field, ty)| {
            format!(
                "{} {}",
                ident(&rollup::column(part, field)),
                column_type(part, ty)
            )
        })
        .collect()
}

/// DDL creating `measurement`'s rollup tables and their views, run right
/// after the measurement's table is created and before its first insert.
/// The tables are sorted in the measurement's `order`: hour first, a
/// 1-hour read of the 1-minute level reads its hour, not its day.
pub(crate) fn create(
    db: &str,
    measurement: &str,
    fields: &[(String, FieldType)],
    order: FactOrder,
) -> Vec<String> {
    let mut out = Vec::new();
    for level in &LEVELS {
        let table = qualified(db, &rollup::table(level, measurement));
        let mut cols = vec![
            format!("{} DateTime64(9)", ident(TIME)),
            format!("{} UInt64", ident(SERIES_ID)),
        ];
        cols.extend(table_columns(fields));
        out.push(format!(
            "CREATE TABLE IF NOT EXISTS {table} ({}) ENGINE = AggregatingMergeTree \
             PARTITION BY toYYYYMMDD({time}) ORDER BY {}",
            cols.join(", "),
            order.order_by(),
            time = ident(TIME),
        ));
        out.push(format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {} TO {table} AS {}",
            qualified(db, &rollup::view(level, measurement)),
            select_sql(&qualified(db, measurement), level, fields, None)
        ));
    }
    out
}

/// DDL for new fields of `measurement` (`all`: every field, the new ones
/// included): the rollup tables' new columns, to run before the
/// measurement's own, and the views' new queries, to run after them (a
/// view may only name columns its source has). The shard's flush lock
/// holds inserts off meanwhile, so the first row carrying a new field is
/// rolled up.
pub(crate) fn add_fields(
    db: &str,
    measurement: &str,
    all: &[(String, FieldType)],
    new: &[(String, FieldType)],
) -> (Vec<String>, Vec<String>) {
    let adds: Vec<String> = table_columns(new)
        .into_iter()
        .map(|c| format!("ADD COLUMN IF NOT EXISTS {c}"))
        .collect();
    let tables = LEVELS
        .iter()
        .map(|level| {
            format!(
                "ALTER TABLE {} {}",
                qualified(db, &rollup::table(level, measurement)),
                adds.join(", ")
            )
        })
        .collect();
    let views = LEVELS
        .iter()
        .map(|level| {
            format!(
                "ALTER TABLE {} MODIFY QUERY {}",
                qualified(db, &rollup::view(level, measurement)),
                select_sql(&qualified(db, measurement), level, all, None)
            )
        })
        .collect();
    (tables, views)
}

/// DDL dropping `measurement`'s views and rollup tables (views first: no
/// insert may push into a dropped table).
pub(crate) fn drop(db: &str, measurement: &str) -> Vec<String> {
    let views = LEVELS.iter().map(|l| {
        format!(
            "DROP VIEW IF EXISTS {} SYNC",
            qualified(db, &rollup::view(l, measurement))
        )
    });
    let tables = LEVELS.iter().map(|l| {
        format!(
            "DROP TABLE IF EXISTS {} SYNC",
            qualified(db, &rollup::table(l, measurement))
        )
    });
    views.chain(tables).collect()
}

/// Statements that bring `measurement`'s rollups back in line with its raw
/// rows after the points of series `ids` in `[min_ns, max_ns]` were
/// deleted (`None`: every time, a dropped series): each level's buckets
/// that held them are deleted, and those the range cut in part are rolled
/// up again from the raw rows left (run after the raw delete).
pub(crate) fn repair(
    db: &str,
    measurement: &str,
    fields: &[(String, FieldType)],
    ids: &str,
    range: Option<(i64, i64)>,
) -> Vec<String> {
    let mut out = Vec::new();
    for level in &LEVELS {
        let table = qualified(db, &rollup::table(level, measurement));
        let buckets = range.map(|(lo, hi)| {
            let lo = rollup::floor(lo, level.step_ns).unwrap_or(i64::MIN);
            let hi = rollup::floor(hi, level.step_ns)
                .and_then(|h| h.checked_add(level.step_ns))
                .unwrap_or(i64::MAX);
            (lo, hi)
        });
        let cond = match buckets {
            None => format!("{} IN ({ids})", ident(SERIES_ID)),
            Some((lo, hi)) => format!(
                "{} IN ({ids}) AND {} >= fromUnixTimestamp64Nano(toInt64({lo})) \
                 AND {} < fromUnixTimestamp64Nano(toInt64({hi}))",
                ident(SERIES_ID),
                ident(TIME),
                ident(TIME)
            ),
        };
        out.push(format!("DELETE FROM {table} WHERE {cond}"));
        if buckets.is_some() {
            out.push(format!(
                "INSERT INTO {table} {}",
                select_sql(
                    &format!("{} FINAL", qualified(db, measurement)),
                    level,
                    fields,
                    Some(&cond)
                )
            ));
        }
    }
    out
}

/// Statements counting every field's values at or after `from` (a time
/// a whole hour starts, so both levels' buckets split there; `None`: all
/// time): over the raw rows first, then over each level's rollup. After a
/// crash, an insert may have left its rollup rows without its raw ones;
/// the counts then differ (ddl.rs drops such rollups).
pub(crate) fn count_sql(
    db: &str,
    measurement: &str,
    fields: &[(String, FieldType)],
    from: Option<i64>,
) -> Vec<String> {
    let cond = from
        .map(|f| {
            format!(
                " WHERE {} >= fromUnixTimestamp64Nano(toInt64({f}))",
                ident(TIME)
            )
        })
        .unwrap_or_default();
    let list = |col: &dyn Fn(&str) -> String| {
        let mut cols: Vec<String> = fields.iter().map(|(f, _)| col(f)).collect();
        cols.insert(0, "toUInt64(0)".into());
        cols.join(", ")
    };
    let mut out = vec![format!(
        "SELECT {} FROM {}{cond}",
        list(&|f| format!("toUInt64(count({}))", ident(f))),
        qualified(db, measurement)
    )];
    for level in &LEVELS {
        out.push(format!(
            "SELECT {} FROM {}{cond}",
            list(&|f| format!("toUInt64(sum({}))", ident(&rollup::column(Part::Count, f)))),
            qualified(db, &rollup::table(level, measurement))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_type_keeps_the_parts_its_reads_need() {
        let fields = vec![
            ("u".to_string(), FieldType::Float64),
            ("s".to_string(), FieldType::String),
        ];
        let ddl = create("d", "cpu", &fields, FactOrder::SeriesTime);
        assert_eq!(ddl.len(), 4);
        assert!(ddl[0].contains("ORDER BY (series_id, time)"), "{}", ddl[0]);
        let hour_first = create("d", "cpu", &fields, FactOrder::HourSeriesTime);
        assert!(hour_first[2].contains("ORDER BY (toStartOfHour(time), series_id, time)"));
        assert!(ddl[0].starts_with("CREATE TABLE IF NOT EXISTS `d`.`_sh_1h_cpu` (`time` DateTime64(9), `series_id` UInt64, `c:u` SimpleAggregateFunction(sum, UInt64), `s:u` SimpleAggregateFunction(sum, Float64)"));
        assert!(ddl[0].contains("`f:u` SimpleAggregateFunction(min, Tuple(Int64, Float64))"));
        assert!(ddl[0].contains("`c:s` SimpleAggregateFunction(sum, UInt64)"));
        assert!(!ddl[0].contains("`s:s`"));
        assert!(ddl[1].starts_with(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS `d`.`_sh_v1h_cpu` TO `d`.`_sh_1h_cpu` AS WITH toUnixTimestamp64Nano(`time`) AS `__pt` SELECT"
        ));
        assert!(ddl[1].contains("% 3600000000000"));
        assert!(ddl[3].contains("% 60000000000"));
        assert!(ddl[1].ends_with("FROM `d`.`cpu` GROUP BY `series_id`, `time`"));
    }

    #[test]
    fn new_fields_reach_the_tables_before_the_views() {
        let all = vec![
            ("u".to_string(), FieldType::Float64),
            ("n".to_string(), FieldType::UInt64),
        ];
        let (tables, views) = add_fields("d", "cpu", &all, &all[1..]);
        assert_eq!((tables.len(), views.len()), (2, 2));
        assert!(
            tables[0].starts_with("ALTER TABLE `d`.`_sh_1h_cpu` ADD COLUMN IF NOT EXISTS `c:n`")
        );
        assert!(
            !tables[0].contains("`f:n`"),
            "unsigned fields keep no first/last"
        );
        assert!(views[0].starts_with("ALTER TABLE `d`.`_sh_v1h_cpu` MODIFY QUERY WITH"));
        assert!(views[1].contains("`c:u`") && views[1].contains("`x:n`"));
    }

    #[test]
    fn repairs_cover_the_buckets_the_delete_touched() {
        let fields = vec![("u".to_string(), FieldType::Int64)];
        let r = repair(
            "d",
            "cpu",
            &fields,
            "1,2",
            Some((61_000_000_000, 119_000_000_000)),
        );
        assert_eq!(r.len(), 4);
        assert!(r[2].contains("`time` >= fromUnixTimestamp64Nano(toInt64(60000000000))"));
        assert!(r[2].contains("`time` < fromUnixTimestamp64Nano(toInt64(120000000000))"));
        assert!(r[3].starts_with("INSERT INTO `d`.`_sh_1m_cpu` WITH"));
        assert!(r[3].contains("FROM `d`.`cpu` FINAL WHERE `series_id` IN (1,2)"));
        let dropped = repair("d", "cpu", &fields, "1", None);
        assert_eq!(
            dropped,
            vec![
                "DELETE FROM `d`.`_sh_1h_cpu` WHERE `series_id` IN (1)".to_string(),
                "DELETE FROM `d`.`_sh_1m_cpu` WHERE `series_id` IN (1)".to_string()
            ]
        );
        assert!(applies_to("cpu") && !applies_to("_samples"));
        let counts = count_sql("d", "cpu", &fields, Some(3_600_000_000_000));
        assert_eq!(
            counts[0],
            "SELECT toUInt64(0), toUInt64(count(`u`)) FROM `d`.`cpu` WHERE `time` >= fromUnixTimestamp64Nano(toInt64(3600000000000))"
        );
        assert_eq!(
            counts[2],
            "SELECT toUInt64(0), toUInt64(sum(`c:u`)) FROM `d`.`_sh_1m_cpu` WHERE `time` >= fromUnixTimestamp64Nano(toInt64(3600000000000))"
        );
    }
}
