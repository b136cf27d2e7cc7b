//! Unit tests of the planner: which statements plan to which shard rows
//! and router expressions, which are refused and with what message, and
//! the per-shard rewrite of missing columns.

use super::aggregates::AGGREGATES;
use super::shard_sql::shard_item;
use super::*;
use std::collections::HashSet;

fn groups(sql: &str) -> GroupsPlan {
    match plan(sql).unwrap() {
        Plan::Groups(g) => g,
        p => panic!("{sql}: {p:?}"),
    }
}

#[test]
fn aggregate_list_is_sorted_and_combinators_strip() {
    assert!(AGGREGATES.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(aggregate_name("sumIf"), Some(("sum".into(), vec!["if"])));
    assert_eq!(aggregate_name("COUNT"), Some(("count".into(), vec![])));
    assert_eq!(
        aggregate_name("uniqExactStateIf"),
        Some(("uniqexact".into(), vec!["state", "if"]))
    );
    assert_eq!(aggregate_name("toStartOfHour"), None);
    assert_eq!(aggregate_name("round"), None);
}

#[test]
fn rows_push_order_and_limit_plus_offset() {
    let p = plan("SELECT time, usage FROM cpu FINAL WHERE usage > 1 ORDER BY time DESC, usage LIMIT 10 OFFSET 5").unwrap();
    let Plan::Rows(r) = &p else { panic!("{p:?}") };
    assert_eq!(r.limit, Some(10));
    assert_eq!(r.offset, 5);
    assert_eq!(r.order.len(), 2);
    assert!(r.order[0].desc && !r.order[1].desc);
    assert_eq!(
        p.shard_sql(&HashSet::new(), 1000),
        "SELECT time, usage, time AS __sh_o0, usage AS __sh_o1 FROM cpu FINAL WHERE usage > 1 ORDER BY time DESC, usage LIMIT 15"
    );
    let missing: HashSet<String> = ["usage".to_string()].into();
    assert_eq!(
        p.shard_sql(&missing, 1000),
        "SELECT time, NULL AS usage, time AS __sh_o0, NULL AS __sh_o1 FROM cpu FINAL WHERE NULL > 1 ORDER BY time DESC, NULL LIMIT 15"
    );
    let Plan::Rows(r) = plan("SELECT * FROM cpu LIMIT 5, 10").unwrap() else {
        panic!()
    };
    assert_eq!((r.limit, r.offset), (Some(10), 5));
}

#[test]
fn aggregates_become_partials() {
    let g = groups(
        "SELECT s.tags['host'] AS host, count() AS n, avg(usage), sum(usage) / count(usage) AS m, median(usage), uniqExact(idle) \
         FROM cpu AS f FINAL INNER JOIN (SELECT series_id, tags FROM _series WHERE measurement = 'cpu') AS s USING series_id \
         GROUP BY host HAVING n > 2 ORDER BY host LIMIT 3",
    );
    assert_eq!(g.keys, vec!["host"]);
    assert_eq!(g.scalars, vec!["s.tags['host'] AS host"]);
    assert_eq!(
        g.partials,
        vec![
            "count()",
            "sum(usage)",
            "count(usage)",
            "groupArray(usage)",
            "groupUniqArray(idle)"
        ]
    );
    assert_eq!(g.outputs[0].0, OutName::Shard(1, "host".into()));
    assert_eq!(g.outputs[1].0, OutName::Fixed("n".into()));
    assert_eq!(g.outputs[2].0, OutName::Fixed("avg(usage)".into()));
    assert_eq!(
        g.outputs[3].1,
        RExpr::Bin(BinOp::Div, Box::new(RExpr::Agg(2)), Box::new(RExpr::Agg(3)))
    );
    assert_eq!(
        g.having,
        Some(RExpr::Bin(
            BinOp::Gt,
            Box::new(RExpr::Agg(0)),
            Box::new(RExpr::Lit(Value::UInt(2)))
        ))
    );
    assert_eq!(g.aggs[0].cols, vec![2]);
    assert_eq!(g.order[0].expr, RExpr::Col(1));
    let sql = Plan::Groups(g).shard_sql(&HashSet::new(), 100);
    assert!(
        sql.starts_with("SELECT host, s.tags['host'] AS host, count(), sum(usage)"),
        "{sql}"
    );
    assert!(
        sql.ends_with("USING series_id GROUP BY host LIMIT 100"),
        "{sql}"
    );
}

#[test]
fn if_combinator_quantiles_and_names() {
    let g = groups("SELECT sumIf(x, y = 'a'), quantile(0.9)(x), quantilesExact(0.1, 0.9)(x), count(DISTINCT x), -sum(x*2.50), round(avg(x), 2) FROM t");
    assert_eq!(g.partials[0], "sumIf(x, y = 'a')");
    assert_eq!(
        g.aggs[1].kind,
        AggKind::Quantile {
            levels: vec![0.9],
            interpolated: true,
            multi: false
        }
    );
    assert_eq!(
        g.aggs[2].kind,
        AggKind::Quantile {
            levels: vec![0.1, 0.9],
            interpolated: false,
            multi: true
        }
    );
    assert_eq!(g.aggs[3].kind, AggKind::Uniq);
    let names: Vec<_> = g
        .outputs
        .iter()
        .map(|o| match &o.0 {
            OutName::Fixed(s) => s.clone(),
            OutName::Shard(_, s) => s.clone(),
        })
        .collect();
    assert_eq!(
        names,
        vec![
            "sumIf(x, equals(y, 'a'))",
            "quantile(0.9)(x)",
            "quantilesExact(0.1, 0.9)(x)",
            "countDistinct(x)",
            "negate(sum(multiply(x, 2.5)))",
            "round(avg(x), 2)"
        ]
    );
    assert!(!g.group_by);
}

#[test]
fn distinct_without_aggregates_groups_by_the_columns() {
    let g = groups("SELECT DISTINCT host FROM t ORDER BY host DESC");
    assert_eq!(g.keys, vec!["host"]);
    assert!(g.group_by && g.aggs.is_empty());
    assert!(g.order[0].desc);
}

#[test]
fn refusals_name_the_construct_and_position() {
    for (sql, want) in [
        (
            "SELECT topK(3)(x) FROM t",
            "aggregate `topK` (at line 1, column 8)",
        ),
        ("SELECT count() OVER () FROM t", "window function"),
        (
            "SELECT x FROM a JOIN b ON a.time = b.time",
            "must be on series_id",
        ),
        ("SELECT x FROM a, b", "comma join"),
        (
            "SELECT x FROM t WHERE x > (SELECT avg(x) FROM t)",
            "aggregates",
        ),
        (
            "SELECT x FROM t WHERE series_id IN (SELECT series_id FROM _series LIMIT 3)",
            "LIMIT/OFFSET in the subquery",
        ),
        ("SELECT 1 UNION ALL SELECT 2", "UNION"),
        ("WITH 1 AS a SELECT a", "WITH"),
        ("SELECT x FROM t GROUP BY x WITH TOTALS", "WITH TOTALS"),
        ("SELECT x FROM t LIMIT 1 BY x", "LIMIT"),
        (
            "SELECT CASE WHEN count() > 1 THEN 1 ELSE 0 END FROM t",
            "line 1, column 8",
        ),
        ("SELECT lower(toString(count())) FROM t", "function `lower`"),
        ("SELECT *, count() FROM t", "name the columns"),
    ] {
        let e = plan(sql).unwrap_err();
        assert!(e.0.contains(want), "{sql}: {e}");
    }
    // Shard-local subqueries and joins pass.
    plan("SELECT count() FROM cpu FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE tags['host'] = 'a')").unwrap();
    plan("SELECT max(n) FROM (SELECT series_id, count() AS n FROM cpu GROUP BY series_id)")
        .unwrap();
    plan("SELECT f.time FROM cpu AS f FINAL LEFT JOIN _series AS s ON f.series_id = s.series_id")
        .unwrap();
}

#[test]
fn common_statements_plan() {
    for sql in [
        "SELECT toStartOfMinute(time) AS t, avg(usage) FROM cpu FINAL WHERE time >= now() - INTERVAL 1 HOUR AND series_id IN (SELECT series_id FROM _series WHERE tags['host'] = 'a') GROUP BY t ORDER BY t",
        "SELECT s.tags['host'] AS host, argMax(f.usage, f.time) AS last FROM cpu AS f FINAL JOIN _series AS s USING series_id GROUP BY host",
        "SELECT count() FROM cpu FINAL WHERE usage BETWEEN 1 AND 2",
        "SELECT host, count() FROM (SELECT tags['host'] AS host, series_id FROM _series) GROUP BY host",
        "SELECT avg(usage) AS a, a * 2 AS b FROM cpu",
        "SELECT quantile(0.5)(usage) - min(usage) FROM cpu",
        "select count(*) from cpu final where time > '2023-01-01 00:00:00'",
        "SELECT sum(usage) FROM cpu GROUP BY series_id ORDER BY 1 DESC LIMIT 3",
        "SELECT DISTINCT measurement FROM _series",
        "SELECT CASE WHEN usage > 50 THEN 'hi' ELSE 'lo' END AS lvl, count() c FROM cpu GROUP BY lvl",
        "SELECT time, usage * 2 AS u2 FROM cpu FINAL ORDER BY time DESC NULLS FIRST LIMIT 3",
        "SELECT count() AS \"my count\" FROM cpu",
    ] {
        plan(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let g = groups("SELECT avg(usage) AS a, a * 2 AS b FROM cpu");
    assert_eq!(g.aggs.len(), 1, "{g:?}");
    assert_eq!(
        g.outputs[1].1,
        RExpr::Bin(
            BinOp::Mul,
            Box::new(RExpr::Agg(0)),
            Box::new(RExpr::Lit(Value::UInt(2)))
        )
    );
    let g = groups("SELECT sum(usage) FROM cpu GROUP BY series_id ORDER BY 1 DESC LIMIT 3");
    assert_eq!(g.order[0].expr, RExpr::Agg(0));
    assert!(g.order[0].desc);
}

#[test]
fn statements_without_tables_are_seen() {
    assert!(reads_no_table("SELECT 1"));
    assert!(reads_no_table("SELECT count() FROM numbers(10)"));
    assert!(!reads_no_table("SELECT count() FROM cpu"));
    assert!(!reads_no_table("SELECT x FROM (SELECT 1 AS x FROM cpu)"));
}

#[test]
fn missing_columns_read_null() {
    let m: HashSet<String> = ["usage".to_string()].into();
    assert_eq!(
        rewrite_missing("avg(f.usage) + usage_x AS usage", &m),
        "avg(NULL) + usage_x AS usage"
    );
    assert_eq!(
        rewrite_missing("`usage` > 1 AND usage(1)", &m),
        "NULL > 1 AND usage(1)"
    );
    assert_eq!(shard_item("f.usage", &m), "NULL AS usage");
}
