//! The SQL a shard runs for one InfluxQL statement: pure functions from
//! the plan to chDB SQL text (layout v2, docs/storage.md), unit-tested
//! here; the shard's read guard still checks every statement.
//!
//! - fact rows: `time` as integer nanoseconds, `series_id`, and the wanted
//!   fields of one measurement's table (`FINAL`: one row per point, the
//!   InfluxDB point semantics), inside the time range, restricted to the
//!   series a tag condition selects (`series_id IN` the tag index), and
//!   filtered by the condition on fields;
//! - series: the tag index rows of one measurement (tags as two arrays);
//! - schema: the shard's columns of one or all measurements.

use shardhouse_common::names::{sql_ident, sql_literal, SAMPLES_TABLE};
use shardhouse_influxql::time::TimeRange;
use shardhouse_influxql::{BinaryOp, DataType, Expr, Literal, VarRef};

use crate::error::{Error, Result};

/// Column names of the fact rows a shard returns, ahead of the fields.
pub const TIME_COLUMN: &str = "__t";
pub const SERIES_COLUMN: &str = "__sid";

/// The earliest instant a `DateTime64(9)` holds (1900-01-01T00:00:00Z);
/// an earlier bound reads as unbounded.
const MIN_STORED_NS: i64 = -2_208_988_800_000_000_000;

/// The series' tag map joined to each fact row, when a condition on the
/// points reads a tag (see [`FactQuery::join_series_tags`]).
pub const SERIES_TAGS_COLUMN: &str = "__tags";

/// What a name in a condition means on the shard the SQL is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    /// A field column the shard's table has.
    Field(String),
    /// A tag key (read from the series' tag map; a missing tag is '').
    Tag(String),
    /// A tag key whose absence is NULL, so that any comparison with it is
    /// not true (InfluxDB's per-tag evaluation of a cardinality's WHERE).
    PresentTag(String),
    /// A tag key read from the tag map joined to each fact row.
    SeriesTag(String),
    /// A field this shard never received: every point lacks it (NULL).
    Missing,
}

/// How one shard reads one measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct FactQuery<'a> {
    pub measurement: &'a str,
    /// Prometheus metrics live in `_samples`, picked out by the series'
    /// measurement; InfluxDB measurements in a table of their own.
    pub samples: bool,
    /// SQL expressions of the returned fields, already aliased.
    pub columns: Vec<String>,
    pub range: TimeRange,
    /// Over the tag map `tags` (see [`condition_sql`] with tag refs).
    pub tag_condition: Option<String>,
    /// Over the fact table's columns.
    pub field_condition: Option<String>,
    /// At most this many rows (the router's row budget plus one).
    pub limit: Option<u64>,
    /// Join each row's series tags (as [`SERIES_TAGS_COLUMN`]): the field
    /// condition reads a tag (`tag = 'a' OR field = 1`, `tag != field`).
    pub join_series_tags: bool,
}

impl FactQuery<'_> {
    pub fn table(&self) -> &str {
        if self.samples {
            SAMPLES_TABLE
        } else {
            self.measurement
        }
    }
}

/// The fact rows of one measurement on one shard.
pub fn fact_sql(q: &FactQuery<'_>) -> String {
    let (columns, from) = fact_parts(q);
    format!("SELECT {columns}{from}")
}

/// [`fact_sql`] in two parts: the select list, and the rest from ` FROM`
/// on (a pushed-down aggregate names the columns in a `WITH` instead of
/// reading them from a subquery, see `pushdown::FactsSql`).
pub fn fact_parts(q: &FactQuery<'_>) -> (String, String) {
    let mut columns = format!(
        "toUnixTimestamp64Nano(time) AS {}, series_id AS {}",
        sql_ident(TIME_COLUMN),
        sql_ident(SERIES_COLUMN)
    );
    for c in &q.columns {
        columns.push_str(", ");
        columns.push_str(c);
    }
    let mut sql = format!(" FROM {} FINAL", sql_ident(q.table()));
    if q.join_series_tags {
        // ANY: one tag map per series, however many index rows it has.
        sql.push_str(&format!(
            " ANY LEFT JOIN (SELECT series_id, tags AS {} FROM _series WHERE {}) AS `__series` USING (series_id)",
            sql_ident(SERIES_TAGS_COLUMN),
            series_condition(q.measurement, None)
        ));
    }
    let mut conds = time_conditions(q.range);
    if q.samples || q.tag_condition.is_some() {
        conds.push(format!(
            "series_id IN (SELECT series_id FROM _series WHERE {})",
            series_condition(q.measurement, q.tag_condition.as_deref())
        ));
    }
    if let Some(c) = &q.field_condition {
        conds.push(format!("({c})"));
    }
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    if let Some(n) = q.limit {
        sql.push_str(&format!(" LIMIT {n}"));
    }
    (columns, sql)
}

/// The tag index rows of `measurement` a tag condition selects: series id
/// and the tags as parallel key and value arrays.
pub fn series_sql(measurement: &str, tag_condition: Option<&str>) -> String {
    format!(
        "SELECT series_id, arrayMap(k -> toString(k), mapKeys(tags)) AS keys, mapValues(tags) AS vals FROM _series WHERE {}",
        series_condition(measurement, tag_condition)
    )
}

/// The series of `measurement` a tag condition selects, each with the
/// smallest series id of its group by tags `dims` (missing tags read as
/// `''`, as InfluxDB groups them): the subquery of
/// [`super::pushdown::Grouping::ByTags`].
pub fn series_groups_sql(
    measurement: &str,
    tag_condition: Option<&str>,
    dims: &[String],
) -> String {
    let keys: Vec<String> = dims
        .iter()
        .map(|d| format!("tags[{}]", sql_literal(d)))
        .collect();
    format!(
        "SELECT arrayJoin(groupArray(series_id)) AS {}, min(series_id) AS {} FROM _series WHERE {} GROUP BY {}",
        sql_ident(SERIES_COLUMN),
        sql_ident(super::pushdown::GROUP_REP),
        series_condition(measurement, tag_condition),
        keys.join(", ")
    )
}

fn series_condition(measurement: &str, tag_condition: Option<&str>) -> String {
    match tag_condition {
        Some(c) => format!("measurement = {} AND ({c})", sql_literal(measurement)),
        None => format!("measurement = {}", sql_literal(measurement)),
    }
}

fn time_conditions(range: TimeRange) -> Vec<String> {
    let mut out = Vec::new();
    if range.has_start() && range.start > MIN_STORED_NS {
        out.push(format!(
            "time >= fromUnixTimestamp64Nano(toInt64({}))",
            range.start
        ));
    }
    if range.has_end() {
        out.push(format!(
            "time < fromUnixTimestamp64Nano(toInt64({}))",
            range.end
        ));
    }
    out
}

/// The InfluxDB type name of a stored ClickHouse column type
/// (`SimpleAggregateFunction(anyLast, Nullable(Float64))` is `float`).
pub fn field_type_name(clickhouse: &str) -> &'static str {
    if clickhouse.contains("Float") {
        "float"
    } else if clickhouse.contains("UInt") {
        "unsigned"
    } else if clickhouse.contains("Int") {
        "integer"
    } else if clickhouse.contains("Bool") {
        "boolean"
    } else {
        "string"
    }
}

/// Translates a condition (no `time` in it) to SQL; `resolve` says what
/// each name is on this shard. Errors name what cannot be translated.
pub fn condition_sql(expr: &Expr, resolve: &dyn Fn(&VarRef) -> Ref) -> Result<String> {
    Ok(match expr {
        Expr::VarRef(v) => match resolve(v) {
            Ref::Field(name) => sql_ident(&name),
            Ref::Tag(key) => format!("tags[{}]", sql_literal(&key)),
            Ref::PresentTag(key) => {
                let k = sql_literal(&key);
                format!("if(mapContains(tags, {k}), tags[{k}], NULL)")
            }
            Ref::SeriesTag(key) => {
                format!("{}[{}]", sql_ident(SERIES_TAGS_COLUMN), sql_literal(&key))
            }
            Ref::Missing => "NULL".into(),
        },
        Expr::Literal(l) => literal_sql(l),
        Expr::Binary { op, lhs, rhs } => {
            if matches!(op, BinaryOp::EqRegex | BinaryOp::NotEqRegex) {
                let Expr::Regex(re) = rhs.as_ref() else {
                    return Err(Error::statement(format!(
                        "{} needs a /regex/ on its right, found {rhs}",
                        op.symbol()
                    )));
                };
                let target = condition_sql(lhs, resolve)?;
                let m = format!("match({target}, {})", sql_literal(&re.0));
                return Ok(if *op == BinaryOp::NotEqRegex {
                    format!("NOT {m}")
                } else {
                    m
                });
            }
            let l = condition_sql(lhs, resolve)?;
            let r = condition_sql(rhs, resolve)?;
            let sym = match op {
                // InfluxDB: x / 0 and x % 0 are 0 (ClickHouse: inf, and an
                // error for integers).
                BinaryOp::Div => return Ok(format!("if({r} = 0, 0, {l} / {r})")),
                BinaryOp::Mod => return Ok(format!("if({r} = 0, 0, {l} % if({r} = 0, 1, {r}))")),
                BinaryOp::Eq => "=",
                BinaryOp::NotEq => "!=",
                BinaryOp::And => "AND",
                BinaryOp::Or => "OR",
                BinaryOp::BitAnd => return Ok(format!("bitAnd({l}, {r})")),
                BinaryOp::BitOr => return Ok(format!("bitOr({l}, {r})")),
                BinaryOp::BitXor => return Ok(format!("bitXor({l}, {r})")),
                other => other.symbol(),
            };
            format!("({l} {sym} {r})")
        }
        Expr::Regex(re) => {
            return Err(Error::statement(format!(
                "a regex (/{}/) is only valid on the right of =~ or !~",
                re.0
            )))
        }
        Expr::Wildcard(_) => return Err(Error::statement("`*` is not valid in a WHERE clause")),
        Expr::Call(c) => {
            return Err(Error::statement(format!(
                "function calls are not supported in WHERE, found {}()",
                c.name
            )))
        }
    })
}

fn literal_sql(l: &Literal) -> String {
    match l {
        Literal::Integer(v) => v.to_string(),
        Literal::Unsigned(v) => v.to_string(),
        Literal::Float(v) if v.is_nan() => "nan".into(),
        Literal::Float(v) if v.is_infinite() => if *v > 0.0 { "inf" } else { "-inf" }.into(),
        Literal::Float(v) => format!("{v:?}"),
        Literal::String(s) => sql_literal(s),
        Literal::Boolean(b) => b.to_string(),
        Literal::Duration(d) => d.to_string(),
    }
}

/// A condition on points with each comparison between a tag and a value
/// that is not a string (a number, a boolean, a field of another type)
/// made `false`: InfluxDB compares types strictly, so those never match
/// (and ClickHouse refuses to compare a String with a number).
/// `field_type`: the InfluxDB type of a field, `None` for a tag.
pub fn untyped_tag_comparisons(
    e: &Expr,
    field_type: &dyn Fn(&VarRef) -> Option<&'static str>,
) -> Expr {
    let Expr::Binary { op, lhs, rhs } = e else {
        return e.clone();
    };
    let comparison = matches!(
        op,
        BinaryOp::Eq
            | BinaryOp::NotEq
            | BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Gt
            | BinaryOp::GtEq
    );
    if comparison {
        // Some(true): a tag; Some(false): a value that is not a string.
        let kind = |x: &Expr| match x {
            Expr::VarRef(v) => match field_type(v) {
                None => Some(true),
                Some(t) => (t != "string").then_some(false),
            },
            Expr::Literal(Literal::String(_)) => None,
            Expr::Literal(_) => Some(false),
            _ => None,
        };
        let (l, r) = (kind(lhs), kind(rhs));
        if matches!(
            (l, r),
            (Some(true), Some(false)) | (Some(false), Some(true))
        ) {
            return Expr::Literal(Literal::Boolean(false));
        }
    }
    Expr::Binary {
        op: *op,
        lhs: Box::new(untyped_tag_comparisons(lhs, field_type)),
        rhs: Box::new(untyped_tag_comparisons(rhs, field_type)),
    }
}

/// For arithmetic over fields (`f1 + f2`): SQL true when the point has
/// any of them, so a point missing one still has its (null) row, as in
/// InfluxDB. `None` for a lone field or an expression of no field.
pub fn any_field_sql(expr: &Expr, resolve: &dyn Fn(&VarRef) -> Ref) -> Option<String> {
    fn refs<'a>(e: &'a Expr, out: &mut Vec<&'a VarRef>) {
        match e {
            Expr::VarRef(v) => out.push(v),
            Expr::Binary { lhs, rhs, .. } => {
                refs(lhs, out);
                refs(rhs, out);
            }
            _ => {}
        }
    }
    if matches!(expr, Expr::VarRef(_)) {
        return None;
    }
    let mut found = Vec::new();
    refs(expr, &mut found);
    let present: Vec<String> = found
        .into_iter()
        .map(|v| {
            let column = condition_sql(&Expr::VarRef(v.clone()), resolve).unwrap_or_default();
            format!("{column} IS NOT NULL")
        })
        .collect();
    (!present.is_empty()).then(|| format!("({})", present.join(" OR ")))
}

/// Whether a name is a tag under the query's schema: `::tag` says so,
/// `::field` (or another field type) says not; otherwise it is a tag
/// unless the measurement has a field of that name (a field wins, as in
/// InfluxDB).
pub fn is_tag_ref(v: &VarRef, is_field: &dyn Fn(&str) -> bool) -> bool {
    match v.data_type {
        Some(DataType::Tag) => true,
        Some(_) => false,
        None => !is_field(&v.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_influxql::parse_statement;
    use shardhouse_influxql::Statement;

    fn cond(text: &str) -> Expr {
        let Statement::Select(s) =
            parse_statement(&format!("SELECT v FROM m WHERE {text}")).unwrap()
        else {
            unreachable!()
        };
        s.condition.unwrap()
    }

    fn resolve(v: &VarRef) -> Ref {
        match v.name.as_str() {
            "v" | "w" => Ref::Field(v.name.clone()),
            "gone" => Ref::Missing,
            _ => Ref::Tag(v.name.clone()),
        }
    }

    #[test]
    fn conditions_translate_tags_fields_and_regexes() {
        let sql = |t: &str| condition_sql(&cond(t), &resolve).unwrap();
        assert_eq!(sql("host = 'a'"), "(tags['host'] = 'a')");
        assert_eq!(
            sql("host =~ /^a.*/ AND v > 1.5"),
            "(match(tags['host'], '^a.*') AND (`v` > 1.5))"
        );
        assert_eq!(sql("host !~ /x/"), "NOT match(tags['host'], 'x')");
        assert_eq!(
            sql("v + w >= 2 OR gone = 1"),
            "(((`v` + `w`) >= 2) OR (NULL = 1))"
        );
        assert_eq!(sql("host = 'it\\'s'"), "(tags['host'] = 'it\\'s')");
        assert_eq!(sql("v = 1.0"), "(`v` = 1.0)");
        assert!(condition_sql(&cond("v = /x/"), &resolve).is_err());
    }

    #[test]
    fn fact_sql_prunes_by_time_and_series() {
        let q = FactQuery {
            measurement: "cpu",
            samples: false,
            columns: vec!["`usage` AS `f0`".into()],
            range: TimeRange { start: 10, end: 20 },
            tag_condition: Some("(tags['host'] = 'a')".into()),
            field_condition: Some("(`usage` > 1)".into()),
            limit: Some(101),
            join_series_tags: false,
        };
        assert_eq!(
            fact_sql(&q),
            "SELECT toUnixTimestamp64Nano(time) AS `__t`, series_id AS `__sid`, `usage` AS `f0` FROM `cpu` FINAL \
             WHERE time >= fromUnixTimestamp64Nano(toInt64(10)) AND time < fromUnixTimestamp64Nano(toInt64(20)) \
             AND series_id IN (SELECT series_id FROM _series WHERE measurement = 'cpu' AND ((tags['host'] = 'a'))) \
             AND ((`usage` > 1)) LIMIT 101"
        );
        // Prometheus metrics: `_samples`, always through the metric's series.
        let q = FactQuery {
            samples: true,
            measurement: "up",
            columns: vec![],
            range: TimeRange::UNBOUNDED,
            tag_condition: None,
            field_condition: None,
            limit: None,
            join_series_tags: false,
        };
        assert_eq!(
            fact_sql(&q),
            "SELECT toUnixTimestamp64Nano(time) AS `__t`, series_id AS `__sid` FROM `_samples` FINAL \
             WHERE series_id IN (SELECT series_id FROM _series WHERE measurement = 'up')"
        );
    }

    #[test]
    fn a_field_condition_reading_a_tag_joins_the_series_tags() {
        let resolve = |v: &VarRef| match v.name.as_str() {
            "foo" | "n" => Ref::Field(v.name.clone()),
            _ => Ref::SeriesTag(v.name.clone()),
        };
        fn field_type(v: &VarRef) -> Option<&'static str> {
            match v.name.as_str() {
                "foo" => Some("string"),
                "n" => Some("integer"),
                _ => None,
            }
        }
        let sql = |t: &str| {
            condition_sql(&untyped_tag_comparisons(&cond(t), &field_type), &resolve).unwrap()
        };
        assert_eq!(
            sql("tennant = 'paul' OR foo = 'bar'"),
            "((`__tags`['tennant'] = 'paul') OR (`foo` = 'bar'))"
        );
        assert_eq!(sql("tennant != foo"), "(`__tags`['tennant'] != `foo`)");
        // A tag never equals (nor differs from) an integer field or a number.
        assert_eq!(sql("tennant != n OR n = 2"), "(false OR (`n` = 2))");
        assert_eq!(
            sql("5 < tennant AND foo = 'x'"),
            "(false AND (`foo` = 'x'))"
        );
        let q = FactQuery {
            measurement: "w",
            samples: false,
            columns: vec!["`foo` AS `s0`".into()],
            range: TimeRange::UNBOUNDED,
            tag_condition: None,
            field_condition: Some(sql("tennant = 'paul' OR foo = 'bar'")),
            limit: None,
            join_series_tags: true,
        };
        assert_eq!(
            fact_sql(&q),
            "SELECT toUnixTimestamp64Nano(time) AS `__t`, series_id AS `__sid`, `foo` AS `s0` FROM `w` FINAL \
             ANY LEFT JOIN (SELECT series_id, tags AS `__tags` FROM _series WHERE measurement = 'w') AS `__series` USING (series_id) \
             WHERE (((`__tags`['tennant'] = 'paul') OR (`foo` = 'bar')))"
        );
    }

    #[test]
    fn arithmetic_rows_need_one_of_their_fields() {
        let Statement::Select(s) = parse_statement("SELECT v + gone * 2, v, 1 + 2 FROM m").unwrap()
        else {
            unreachable!()
        };
        let sql = |i: usize| any_field_sql(&s.fields[i].expr, &resolve);
        assert_eq!(sql(0).unwrap(), "(`v` IS NOT NULL OR NULL IS NOT NULL)");
        assert_eq!(sql(1), None);
        assert_eq!(sql(2), None);
    }

    #[test]
    fn a_present_tag_is_null_when_absent() {
        let sql = condition_sql(&cond("region !~ /us/"), &|v: &VarRef| {
            Ref::PresentTag(v.name.clone())
        })
        .unwrap();
        assert_eq!(
            sql,
            "NOT match(if(mapContains(tags, 'region'), tags['region'], NULL), 'us')"
        );
    }

    #[test]
    fn stored_types_read_as_influx_types() {
        assert_eq!(
            field_type_name("SimpleAggregateFunction(anyLast, Nullable(Float64))"),
            "float"
        );
        assert_eq!(
            field_type_name("SimpleAggregateFunction(anyLast, Nullable(Int64))"),
            "integer"
        );
        assert_eq!(
            field_type_name("SimpleAggregateFunction(anyLast, Nullable(UInt64))"),
            "unsigned"
        );
        assert_eq!(
            field_type_name("SimpleAggregateFunction(anyLast, Nullable(Bool))"),
            "boolean"
        );
        assert_eq!(
            field_type_name("SimpleAggregateFunction(anyLast, Nullable(String))"),
            "string"
        );
    }
}
