//! Time bounds InfluxDB 1.8 fills in when a statement leaves them open.
//!
//! `GROUP BY time()` without a lower bound starts at the first point the
//! statement reads (and `fill()` runs from that point's bucket), without an
//! upper bound it ends at `now()`; a subquery sees the outer statement's
//! time range, so the inner one reads only what the outer one keeps.

use shardhouse_influxql::time::split_condition;
use shardhouse_influxql::{BinaryOp, Expr, SelectStatement};

use super::fetch::{self, int_at};
use super::sqlgen::{self, FactQuery};
use super::Ctx;
use crate::error::Result;
use shardhouse_influxql::time::TimeRange;

/// The time of the earliest point of `measurement` in `range` whose series
/// match the tag condition, across the shards; `None` when there is none.
pub(super) async fn first_time(
    ctx: &Ctx<'_>,
    database: &str,
    measurement: &str,
    samples: bool,
    range: TimeRange,
    tag_condition: Option<&str>,
) -> Result<Option<i64>> {
    let inner = sqlgen::fact_sql(&FactQuery {
        measurement,
        samples,
        columns: Vec::new(),
        range,
        tag_condition: tag_condition.map(str::to_owned),
        field_condition: None,
        limit: None,
        join_series_tags: false,
    });
    let t = shardhouse_common::names::sql_ident(sqlgen::TIME_COLUMN);
    let sql = format!("SELECT min({t}), count() FROM ({inner})");
    let answers = fetch::on_every_shard(ctx.router, database, &sql, ctx.deadline).await?;
    let mut first: Option<i64> = None;
    for (_, batches) in &answers {
        for b in batches {
            for row in 0..b.num_rows() {
                let points = int_at(b.column(1), row).unwrap_or(0);
                if let (true, Some(t)) = (points > 0, int_at(b.column(0), row)) {
                    first = Some(first.map_or(t, |f| f.min(t)));
                }
            }
        }
    }
    Ok(first)
}

/// `inner` restricted to the time range of `outer`'s WHERE (its other
/// conditions apply to the inner result's columns, at the router).
pub(super) fn with_outer_time(
    inner: &SelectStatement,
    outer: &SelectStatement,
) -> Result<SelectStatement> {
    let mut out = inner.clone();
    let Some(c) = &outer.condition else {
        return Ok(out);
    };
    let parts = split_condition(c, |_| false)?;
    if let Some(time) = parts.time {
        out.condition = Some(match out.condition.take() {
            Some(own) => Expr::Binary {
                op: BinaryOp::And,
                lhs: Box::new(own),
                rhs: Box::new(time),
            },
            None => time,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_influxql::Statement;

    fn select(q: &str) -> SelectStatement {
        match shardhouse_influxql::parse_statement(q).unwrap() {
            Statement::Select(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_outer_time_range_reaches_the_inner_statement() {
        let outer = select(
            "SELECT max(m) FROM (SELECT mean(v) AS m FROM cpu WHERE host = 'a' GROUP BY time(1m)) WHERE time >= '2000-01-01T00:00:00Z' AND time < '2000-01-02T00:00:00Z'",
        );
        let shardhouse_influxql::Source::Subquery(inner) = &outer.from[0] else {
            panic!("a subquery");
        };
        let pushed = with_outer_time(inner, &outer).unwrap();
        assert_eq!(
            pushed.condition.unwrap().to_string(),
            "host = 'a' AND (time >= '2000-01-01T00:00:00Z' AND time < '2000-01-02T00:00:00Z')"
        );
        let no_time = select("SELECT max(m) FROM (SELECT mean(v) AS m FROM cpu)");
        let shardhouse_influxql::Source::Subquery(inner) = &no_time.from[0] else {
            panic!("a subquery");
        };
        assert_eq!(with_outer_time(inner, &no_time).unwrap().condition, None);
    }
}
