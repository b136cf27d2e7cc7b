//! Unit tests of the merge: rows sorted and windowed across shards, groups
//! merged per aggregate kind against the values one table would give, and
//! the router's expression evaluation.

use super::*;
use crate::read::sql::plan::{plan, Plan};

fn groups(sql: &str) -> GroupsPlan {
    match plan(sql).unwrap() {
        Plan::Groups(g) => g,
        p => panic!("{p:?}"),
    }
}

fn shard(names: &[&str], rows: Vec<Vec<Value>>) -> ShardRows {
    ShardRows {
        names: names.iter().map(|s| s.to_string()).collect(),
        rows,
    }
}

fn list(v: &[i64]) -> Value {
    Value::List(v.iter().map(|x| Value::Int(*x)).collect())
}

#[test]
fn global_aggregates_merge_exactly() {
    let g = groups("SELECT count(), sum(x), avg(x), min(x), max(x), uniqExact(x), median(x), medianExact(x), varSamp(x), stddevPop(x) FROM t");
    // Each shard's partials, computed here from its values.
    let part = |xs: &[i64]| -> Vec<Value> {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<i64>() as f64 / n;
        let var = xs.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
        let mut uniq: Vec<i64> = xs.to_vec();
        uniq.sort();
        uniq.dedup();
        g.partials
            .iter()
            .map(|p| match p.as_str() {
                "count()" | "count(x)" => Value::UInt(xs.len() as u64),
                "sum(x)" => Value::Int(xs.iter().sum()),
                "min(x)" => Value::Int(*xs.iter().min().unwrap()),
                "max(x)" => Value::Int(*xs.iter().max().unwrap()),
                "groupUniqArray(x)" => list(&uniq),
                "groupArray(x)" => list(xs),
                "avg(x)" => Value::Float(mean),
                "varPop(x)" => Value::Float(var),
                other => panic!("partial {other}"),
            })
            .collect()
    };
    let names: Vec<String> = (0..g.partials.len()).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let a = merge_groups(
        &g,
        vec![
            shard(&names, vec![part(&[1, 2, 2])]),
            shard(&names, vec![part(&[4, 10])]),
            ShardRows::default(),
        ],
    )
    .unwrap();
    let r = &a.rows[0];
    assert_eq!(r[0], Value::UInt(5));
    assert_eq!(r[1], Value::Int(19));
    assert_eq!(r[2], Value::Float(3.8));
    assert_eq!(
        (r[3].clone(), r[4].clone()),
        (Value::Int(1), Value::Int(10))
    );
    assert_eq!(r[5], Value::UInt(4));
    assert_eq!(r[6], Value::Float(2.0));
    assert_eq!(r[7], Value::Int(2));
    let all = [1.0, 2.0, 2.0, 4.0, 10.0];
    let mean = 3.8;
    let m2: f64 = all.iter().map(|x| (x - mean) * (x - mean)).sum();
    assert!((r[8].as_f64().unwrap() - m2 / 4.0).abs() < 1e-9);
    assert!((r[9].as_f64().unwrap() - (m2 / 5.0).sqrt()).abs() < 1e-9);
    assert_eq!(a.names[0], "count()");
    // No rows anywhere: one row, count 0 and NULLs.
    let empty = merge_groups(&g, vec![]).unwrap();
    assert_eq!(empty.rows.len(), 1);
    assert_eq!(empty.rows[0][0], Value::UInt(0));
    assert!(empty.rows[0][1].is_null() && empty.rows[0][2].is_null());
}

#[test]
fn groups_merge_then_having_order_limit() {
    let g = groups("SELECT host, count() AS n, sum(x) / count() AS m FROM t GROUP BY host HAVING n > 1 ORDER BY n DESC, host LIMIT 2 OFFSET 1");
    // Shard row: the key, then the partials count() and sum(x) (each
    // once, however often the statement names them).
    assert_eq!(g.keys, vec!["host"]);
    assert_eq!(g.partials, vec!["count()", "sum(x)"]);
    let row = |h: &str, c: u64, s: i64| vec![Value::Str(h.into()), Value::UInt(c), Value::Int(s)];
    let names = ["host", "count()", "sum(x)"];
    let a = merge_groups(
        &g,
        vec![
            shard(
                &names,
                vec![row("a", 2, 10), row("b", 1, 1), row("c", 5, 5)],
            ),
            shard(&names, vec![row("a", 1, 2), row("b", 2, 2), row("d", 1, 1)]),
        ],
    )
    .unwrap();
    assert_eq!(a.names, vec!["host", "n", "m"]);
    // groups: a 3 (12), b 3 (3), c 5 (5), d 1 -> having n>1: c5, a3, b3 -> offset 1 limit 2: a, b
    assert_eq!(
        a.rows,
        vec![
            vec![Value::Str("a".into()), Value::UInt(3), Value::Float(4.0)],
            vec![Value::Str("b".into()), Value::UInt(3), Value::Float(1.0)]
        ]
    );
}

#[test]
fn rows_sort_across_shards_and_unify_columns() {
    let Plan::Rows(p) = plan("SELECT * FROM t ORDER BY v DESC LIMIT 3 OFFSET 1").unwrap() else {
        panic!()
    };
    let a = merge_rows(
        &p,
        vec![
            shard(
                &["time", "v", "w", "__sh_o0"],
                vec![
                    vec![Value::Int(1), Value::Int(5), Value::Int(9), Value::Int(5)],
                    vec![Value::Int(2), Value::Int(1), Value::Null, Value::Int(1)],
                ],
            ),
            shard(
                &["time", "v", "__sh_o0"],
                vec![
                    vec![Value::Int(3), Value::Int(7), Value::Int(7)],
                    vec![Value::Int(4), Value::Null, Value::Null],
                ],
            ),
        ],
    );
    assert_eq!(a.names, vec!["time", "v", "w"]);
    assert_eq!(
        a.rows,
        vec![
            vec![Value::Int(1), Value::Int(5), Value::Int(9)],
            vec![Value::Int(2), Value::Int(1), Value::Null],
            vec![Value::Int(4), Value::Null, Value::Null],
        ]
    );
}

#[test]
fn quantiles_follow_clickhouse() {
    let v: Vec<f64> = (1..=7).map(f64::from).collect();
    assert!((quantile_interpolated(&v, 0.3) - 2.8).abs() < 1e-12);
    assert!((quantile_interpolated(&v, 0.1) - 1.6).abs() < 1e-12);
    let vals: Vec<Value> = (1..=7).map(Value::Int).collect();
    assert_eq!(quantile_exact(&vals, 0.3), Value::Int(3));
    let four: Vec<Value> = (1..=4).map(Value::Int).collect();
    assert_eq!(quantile_exact(&four, 0.5), Value::Int(3));
    assert_eq!(quantile_interpolated(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
}
