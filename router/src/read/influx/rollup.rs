//! Pushed aggregates over a measurement's rollups
//! (`shardhouse_common::rollup`): the whole rollup buckets of the range
//! from the rollup table, the partial buckets at its ends from the raw
//! points, both as per-bucket parts (count, sum, min, max, first, last)
//! that the shard's statement merges into the same partial columns
//! pushdown.rs reads. The router sends it beside the raw statement; the
//! node runs it only where the rollups are exact (docs/storage.md,
//! "Rollups"), so the answer is the raw statement's either way.
//!
//! A statement qualifies when every field is `count`, `sum`, `mean`,
//! `spread` or, with `GROUP BY time()`, `min`, `max`, `first`, `last` of
//! one field, without a condition on fields, over a bounded range, and a
//! rollup level tiles its windows ([`rollup::level_for`]).

use shardhouse_common::names::sql_ident;
use shardhouse_common::rollup::{self, Level, Part};
use shardhouse_eval::{Aggregate, Interval};
use shardhouse_influxql::time::TimeRange;

/// Points per series and second a raw read is assumed to cost when
/// choosing a level: one per 10 s, Telegraf's default interval.
const ASSUMED_POINT_SPACING_NS: i64 = 10_000_000_000;

/// Ranges shorter than this read raw points: a series' few points cost
/// less than the second table the union reads.
const MIN_SPAN_NS: i64 = 3_600_000_000_000;

/// One pushed aggregate: plan `j` over slot `slot`, a field of InfluxDB
/// type `field_type`.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub j: usize,
    pub agg: &'a Aggregate,
    pub slot: usize,
    pub field_type: &'a str,
}

/// What reads `[lo, hi)` from `level`'s rollups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub level: Level,
    pub lo: i64,
    pub hi: i64,
}

/// Whether rollups can answer these calls (each a plain field), and which
/// level reads least: a rollup row per series and bucket, the raw points
/// of the partial buckets; `None` for a range under an hour, or when no
/// level reads less than half the raw points.
pub fn choose(calls: &[Call<'_>], interval: Option<Interval>, read: TimeRange) -> Option<Choice> {
    if calls.is_empty() || !read.has_start() || !read.has_end() {
        return None;
    }
    let selectors_fit = interval.is_some();
    let fits = calls.iter().all(|c| match c.agg {
        Aggregate::Count => true,
        Aggregate::Sum | Aggregate::Mean | Aggregate::Spread => {
            matches!(c.field_type, "float" | "integer" | "unsigned")
        }
        Aggregate::Min | Aggregate::Max | Aggregate::First | Aggregate::Last => {
            selectors_fit && matches!(c.field_type, "float" | "integer")
        }
        _ => false,
    });
    if !fits {
        return None;
    }
    let span = read.end.checked_sub(read.start)?;
    if span < MIN_SPAN_NS {
        return None;
    }
    let raw_cost = span / ASSUMED_POINT_SPACING_NS;
    // The coarsest level that tiles the windows; the finer ones whose
    // width divides its width tile them too.
    let tiles = rollup::level_for(interval.map(|iv| (iv.duration, iv.offset)))?;
    rollup::LEVELS
        .iter()
        .filter(|l| tiles.step_ns % l.step_ns == 0)
        .filter_map(|l| {
            let (lo, hi) = rollup::whole_buckets(read.start, read.end - 1, l.step_ns)?;
            let cost = (hi - lo) / l.step_ns + (span - (hi - lo)) / ASSUMED_POINT_SPACING_NS;
            Some((cost, Choice { level: *l, lo, hi }))
        })
        .filter(|(cost, _)| *cost * 2 < raw_cost)
        .min_by_key(|(cost, _)| *cost)
        .map(|(_, c)| c)
}

/// The parts a call needs of its slot.
fn parts_of(agg: &Aggregate) -> &'static [Part] {
    match agg {
        Aggregate::Sum | Aggregate::Mean => &[Part::Count, Part::Sum],
        Aggregate::Min => &[Part::Count, Part::Min],
        Aggregate::Max => &[Part::Count, Part::Max],
        Aggregate::First => &[Part::Count, Part::First],
        Aggregate::Last => &[Part::Count, Part::Last],
        Aggregate::Spread => &[Part::Count, Part::Min, Part::Max],
        _ => &[Part::Count],
    }
}

/// The column of `part` of slot `slot` in both halves of the union.
fn part_column(slot: usize, part: Part) -> String {
    sql_ident(&rollup::column(part, &format!("s{slot}")))
}

/// Each slot's parts, once, in call order: (slot, part, field type).
fn slot_parts<'a>(calls: &[Call<'a>]) -> Vec<(usize, Part, &'a str)> {
    let mut out: Vec<(usize, Part, &str)> = Vec::new();
    for c in calls {
        for p in parts_of(c.agg) {
            if !out.iter().any(|(s, q, _)| *s == c.slot && q == p) {
                out.push((c.slot, *p, c.field_type));
            }
        }
    }
    out
}

/// The union's columns read from the rollup table: `fields[slot]` is the
/// field slot `slot` reads.
pub fn rollup_columns(calls: &[Call<'_>], field: &dyn Fn(usize) -> String) -> Vec<String> {
    slot_parts(calls)
        .into_iter()
        .map(|(slot, part, _)| {
            format!(
                "{} AS {}",
                sql_ident(&rollup::column(part, &field(slot))),
                part_column(slot, part)
            )
        })
        .collect()
}

/// The same columns computed from each raw point (the partial buckets):
/// a point is a bucket of one.
pub fn raw_columns(calls: &[Call<'_>], field: &dyn Fn(usize) -> String) -> Vec<String> {
    slot_parts(calls)
        .into_iter()
        .map(|(slot, part, field_type)| {
            let f = sql_ident(&field(slot));
            let v = if field_type == "float" { "Float64" } else { "Int64" };
            let t = sql_ident(super::sqlgen::TIME_COLUMN);
            let expr = match part {
                Part::Count => format!("toUInt64({f} IS NOT NULL)"),
                Part::Sum | Part::Min | Part::Max => f,
                Part::First => format!(
                    "if({f} IS NULL, CAST((9223372036854775807, 0), 'Tuple(Int64, {v})'), ({t}, -assumeNotNull({f})))"
                ),
                Part::Last => format!(
                    "if({f} IS NULL, CAST((-9223372036854775808, 0), 'Tuple(Int64, {v})'), ({t}, assumeNotNull({f})))"
                ),
            };
            format!("{expr} AS {}", part_column(slot, part))
        })
        .collect()
}

/// The partial columns of each call from the union's parts, named as
/// `pushdown::columns` names them (`agg_c{j}`, `agg_s{j}`, ...), so
/// `pushdown::partial` reads them unchanged. Selectors run with
/// `GROUP BY time()` only: their answer shows the bucket's time.
pub fn merge_columns(calls: &[Call<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    for c in calls {
        let j = c.j;
        let col = |p| part_column(c.slot, p);
        out.push(format!("sum({}) AS `agg_c{j}`", col(Part::Count)));
        match c.agg {
            Aggregate::Sum | Aggregate::Mean if c.field_type == "float" => {
                out.push(format!("sumKahan({}) AS `agg_s{j}`", col(Part::Sum)))
            }
            Aggregate::Sum | Aggregate::Mean => {
                out.push(format!("sum({}) AS `agg_s{j}`", col(Part::Sum)))
            }
            Aggregate::Min => out.push(format!("(min({}), `__b`) AS `agg_p{j}`", col(Part::Min))),
            Aggregate::Max => out.push(format!("(max({}), -`__b`) AS `agg_p{j}`", col(Part::Max))),
            Aggregate::First => out.push(format!("min({}) AS `agg_p{j}`", col(Part::First))),
            Aggregate::Last => out.push(format!("max({}) AS `agg_p{j}`", col(Part::Last))),
            Aggregate::Spread => {
                out.push(format!("min({}) AS `agg_lo{j}`", col(Part::Min)));
                out.push(format!("max({}) AS `agg_hi{j}`", col(Part::Max)));
            }
            _ => {}
        }
    }
    out
}

/// The rollup table a choice reads.
pub fn table_name(c: &Choice, measurement: &str) -> String {
    rollup::table(&c.level, measurement)
}

/// The time condition of the raw half: the points outside the whole
/// buckets `[lo, hi)`.
pub fn outside_sql(c: &Choice) -> String {
    format!(
        "(time < fromUnixTimestamp64Nano(toInt64({})) OR time >= fromUnixTimestamp64Nano(toInt64({})))",
        c.lo, c.hi
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = 60_000_000_000;
    const H: i64 = 60 * M;

    fn call<'a>(j: usize, agg: &'a Aggregate, field_type: &'a str) -> Call<'a> {
        Call {
            j,
            agg,
            slot: 0,
            field_type,
        }
    }

    #[test]
    fn long_ranges_read_the_coarsest_level_that_tiles_their_windows() {
        let mean = Aggregate::Mean;
        let calls = [call(0, &mean, "float")];
        let week = TimeRange {
            start: 7 * H + 5,
            end: 7 * 24 * H + 7 * H + 5,
        };
        let hourly = Interval::new(H, None, 0).unwrap();
        let c = choose(&calls, Some(hourly), week).unwrap();
        assert_eq!(
            (c.level.name, c.lo, c.hi),
            ("1h", 8 * H, 7 * 24 * H + 7 * H)
        );
        // 5-minute windows: only 1-minute buckets tile them.
        let five = Interval::new(5 * M, None, 0).unwrap();
        assert_eq!(choose(&calls, Some(five), week).unwrap().level.name, "1m");
        // 90 s windows: no level tiles them.
        let odd = Interval::new(90_000_000_000, None, 0).unwrap();
        assert_eq!(choose(&calls, Some(odd), week), None);
        // Three hours without an interval: 1-minute buckets leave less raw.
        let three = TimeRange {
            start: 30 * M + 1,
            end: 3 * H + 30 * M + 1,
        };
        assert_eq!(choose(&calls, None, three).unwrap().level.name, "1m");
        // Ten minutes: the raw points are as cheap.
        let short = TimeRange {
            start: 1,
            end: 10 * M,
        };
        assert_eq!(choose(&calls, None, short), None);
    }

    #[test]
    fn only_calls_the_parts_answer_exactly_qualify() {
        let (min, first, median, sum) = (
            Aggregate::Min,
            Aggregate::First,
            Aggregate::Median,
            Aggregate::Sum,
        );
        let week = TimeRange {
            start: 0,
            end: 7 * 24 * H,
        };
        let hourly = Some(Interval::new(H, None, 0).unwrap());
        assert!(choose(&[call(0, &min, "float")], hourly, week).is_some());
        // A selector without GROUP BY time() shows its point's time.
        assert!(choose(&[call(0, &min, "float")], None, week).is_none());
        assert!(choose(&[call(0, &first, "float")], None, week).is_none());
        assert!(choose(&[call(0, &median, "float")], hourly, week).is_none());
        assert!(choose(&[call(0, &sum, "string")], hourly, week).is_none());
        assert!(choose(&[call(0, &first, "unsigned")], hourly, week).is_none());
        let unbounded = TimeRange {
            start: 0,
            end: i64::MAX,
        };
        assert!(choose(&[call(0, &sum, "float")], hourly, unbounded).is_none());
    }

    #[test]
    fn both_halves_name_the_same_parts_and_the_merge_reads_them() {
        let (mean, last, count) = (Aggregate::Mean, Aggregate::Last, Aggregate::Count);
        let calls = [
            call(0, &mean, "float"),
            call(1, &last, "float"),
            Call {
                slot: 1,
                ..call(2, &count, "integer")
            },
        ];
        let field = |s: usize| ["usage", "load"][s].to_string();
        assert_eq!(
            rollup_columns(&calls, &field),
            vec![
                "`c:usage` AS `c:s0`",
                "`s:usage` AS `s:s0`",
                "`l:usage` AS `l:s0`",
                "`c:load` AS `c:s1`"
            ]
        );
        let raw = raw_columns(&calls, &field);
        assert_eq!(raw[0], "toUInt64(`usage` IS NOT NULL) AS `c:s0`");
        assert_eq!(raw[1], "`usage` AS `s:s0`");
        assert_eq!(
            raw[2],
            "if(`usage` IS NULL, CAST((-9223372036854775808, 0), 'Tuple(Int64, Float64)'), (`__t`, assumeNotNull(`usage`))) AS `l:s0`"
        );
        assert_eq!(
            merge_columns(&calls),
            vec![
                "sum(`c:s0`) AS `agg_c0`",
                "sumKahan(`s:s0`) AS `agg_s0`",
                "sum(`c:s0`) AS `agg_c1`",
                "max(`l:s0`) AS `agg_p1`",
                "sum(`c:s1`) AS `agg_c2`"
            ]
        );
    }
}
