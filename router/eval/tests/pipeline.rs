//! fill(), transformations and result shaping, end to end through the test
//! planner, against hand-computed rows (InfluxDB 1.8's `select_test.go`
//! cases where it has them).

mod support;

use shardhouse_eval::column_names;
use shardhouse_influxql::{parse_statement, Statement};
use support::*;

const MINUTE: &str = "WHERE time >= '1970-01-01T00:00:00Z' AND time < '1970-01-01T00:01:00Z'";

fn mean_by_host(fill: &str) -> String {
    format!("SELECT mean(value) FROM cpu {MINUTE} GROUP BY host, time(10s) fill({fill})")
}

#[test]
fn fill_modes() {
    let one = vec![pt("host=A", 12, f(2.0))];
    assert_eq!(
        run(&mean_by_host("null"), &one),
        ["cpu,host=A | 0:null | 10:2 | 20:null | 30:null | 40:null | 50:null"]
    );
    // No fill() means fill(null).
    assert_eq!(
        run(
            &format!("SELECT mean(value) FROM cpu {MINUTE} GROUP BY host, time(10s)"),
            &one
        ),
        run(&mean_by_host("null"), &one)
    );
    assert_eq!(
        run(&mean_by_host("1"), &one),
        ["cpu,host=A | 0:1 | 10:2 | 20:1 | 30:1 | 40:1 | 50:1"]
    );
    assert_eq!(run(&mean_by_host("none"), &one), ["cpu,host=A | 10:2"]);
    assert_eq!(
        run(&mean_by_host("previous"), &one),
        ["cpu,host=A | 0:null | 10:2 | 20:2 | 30:2 | 40:2 | 50:2"]
    );
    let two = vec![pt("host=A", 12, f(2.0)), pt("host=A", 32, f(4.0))];
    assert_eq!(
        run(&mean_by_host("linear"), &two),
        ["cpu,host=A | 0:null | 10:2 | 20:3 | 30:4 | 40:null | 50:null"]
    );
    // Linear never crosses series.
    let split = vec![pt("host=A", 12, f(2.0)), pt("host=B", 32, f(4.0))];
    assert_eq!(
        run(&mean_by_host("linear"), &split),
        [
            "cpu,host=A | 0:null | 10:2 | 20:null | 30:null | 40:null | 50:null",
            "cpu,host=B | 0:null | 10:null | 20:null | 30:4 | 40:null | 50:null"
        ]
    );
    // Integers interpolate and truncate.
    let ints = vec![pt("host=A", 12, i(1)), pt("host=A", 72, i(10))];
    let q = "SELECT max(value) FROM cpu WHERE time >= 0s AND time < 80s GROUP BY host, time(10s) fill(linear)";
    assert_eq!(
        run(q, &ints),
        ["cpu,host=A | 0:null | 10:1i | 20:2i | 30:4i | 40:5i | 50:7i | 60:8i | 70:10i"]
    );
    // Previous carries per series.
    let last = vec![
        pt("host=A", 30, f(20.0)),
        pt("host=A", 40, f(30.0)),
        pt("host=B", 30, f(1.0)),
        pt("host=B", 40, f(2.0)),
    ];
    let q = format!("SELECT last(value) FROM cpu {MINUTE} GROUP BY host, time(10s) fill(previous)");
    assert_eq!(
        run(&q, &last),
        [
            "cpu,host=A | 0:null | 10:null | 20:null | 30:20 | 40:30 | 50:30",
            "cpu,host=B | 0:null | 10:null | 20:null | 30:1 | 40:2 | 50:2"
        ]
    );
}

#[test]
fn fill_details() {
    let one = vec![pt("host=A", 12, f(2.0))];
    // count() fills null with 0.
    let q = format!("SELECT count(value) FROM cpu {MINUTE} GROUP BY time(20s)");
    assert_eq!(run(&q, &one), ["cpu | 0:1i | 20:0i | 40:0i"]);
    // Descending order walks the buckets backwards.
    let q = format!(
        "SELECT mean(value) FROM cpu {MINUTE} GROUP BY time(20s) fill(0) ORDER BY time DESC"
    );
    assert_eq!(run(&q, &one), ["cpu | 40:0 | 20:0 | 0:2"]);
    // A number in an integer column is truncated; strings get "".
    let q = format!("SELECT max(value) FROM cpu {MINUTE} GROUP BY time(20s) fill(1.9)");
    assert_eq!(run(&q, &[pt("", 1, i(7))]), ["cpu | 0:7i | 20:1i | 40:1i"]);
    let q = format!("SELECT mode(value) FROM cpu {MINUTE} GROUP BY time(20s) fill(1)");
    assert_eq!(
        run(&q, &[pt("", 1, s("x"))]),
        [r#"cpu | 0:"x" | 20:"" | 40:"""#]
    );
    // A null float (stddev of one point) is a value: not filled.
    let q = format!("SELECT stddev(value) FROM cpu {MINUTE} GROUP BY time(20s) fill(previous)");
    assert_eq!(run(&q, &one), ["cpu | 0:null | 20:null | 40:null"]);
    // Only series with points are filled; nothing at all gives no series.
    assert!(run(&mean_by_host("0"), &[]).is_empty());
    // Offsets: buckets at 5s past each 20s.
    let q = format!("SELECT count(value) FROM cpu {MINUTE} GROUP BY time(20s, 5s)");
    assert_eq!(run(&q, &one), ["cpu | -15:0i | 5:1i | 25:0i | 45:0i"]);
}

#[test]
fn raw_transformations() {
    let data = vec![
        pt("", 0, f(20.0)),
        pt("", 4, f(10.0)),
        pt("", 8, f(19.0)),
        pt("", 12, f(3.0)),
    ];
    let q = |call: &str, order: &str| {
        format!("SELECT {call} FROM cpu WHERE time >= 0s AND time < 16s {order}")
    };
    assert_eq!(
        run(&q("derivative(value, 1s)", ""), &data),
        ["cpu | 4:-2.5 | 8:2.25 | 12:-4"]
    );
    // InfluxDB negates elapsed time in descending order.
    assert_eq!(
        run(&q("derivative(value, 1s)", "ORDER BY time DESC"), &data),
        ["cpu | 8:4 | 4:-2.25 | 0:2.5"]
    );
    assert_eq!(
        run(&q("non_negative_derivative(value, 2s)", ""), &data),
        ["cpu | 8:4.5"]
    );
    assert_eq!(
        run(&q("difference(value)", ""), &data),
        ["cpu | 4:-10 | 8:9 | 12:-16"]
    );
    assert_eq!(
        run(&q("non_negative_difference(value)", ""), &data),
        ["cpu | 8:9"]
    );
    assert_eq!(
        run(&q("moving_average(value, 2)", ""), &data),
        ["cpu | 4:15 | 8:14.5 | 12:11"]
    );
    assert_eq!(
        run(&q("cumulative_sum(value)", ""), &data),
        ["cpu | 0:20 | 4:30 | 8:49 | 12:52"]
    );
    assert_eq!(
        run(&q("elapsed(value, 1s)", ""), &data),
        ["cpu | 4:4i | 8:4i | 12:4i"]
    );
    // Points at the same time: derivative and difference keep the first.
    let dup = vec![
        pt("", 0, f(20.0)),
        pt("", 0, f(19.0)),
        pt("", 4, f(10.0)),
        pt("", 4, f(3.0)),
        pt("", 8, f(30.0)),
    ];
    assert_eq!(
        run(&q("derivative(value, 1s)", ""), &dup),
        ["cpu | 4:-2.5 | 8:5"]
    );
    assert_eq!(
        run(&q("non_negative_difference(value)", ""), &dup),
        ["cpu | 8:20"]
    );
    assert_eq!(
        run(&q("cumulative_sum(value)", ""), &dup),
        ["cpu | 0:20 | 0:39 | 4:49 | 4:52 | 8:82"]
    );
    let ints = vec![pt("", 0, i(5)), pt("", 1, i(i64::MIN))];
    assert_eq!(
        run(&q("difference(value)", ""), &ints),
        [format!("cpu | 1:{}i", i64::MIN.wrapping_sub(5))]
    );
}

#[test]
fn transformations_of_aggregates_read_one_bucket_back() {
    let data = vec![
        pt("", 5, f(10.0)),
        pt("", 15, f(30.0)),
        pt("", 25, f(20.0)),
        pt("", 35, f(50.0)),
    ];
    let q = |call: &str, fill: &str| {
        format!("SELECT {call} FROM cpu WHERE time >= 10s AND time < 40s GROUP BY time(10s) fill({fill})")
    };
    assert_eq!(
        run(&q("derivative(mean(value), 1s)", "null"), &data),
        ["cpu | 10:2 | 20:-1 | 30:3"]
    );
    // Default unit: the GROUP BY interval.
    assert_eq!(
        run(&q("derivative(mean(value))", "null"), &data),
        ["cpu | 10:20 | 20:-10 | 30:30"]
    );
    assert_eq!(
        run(&q("non_negative_derivative(max(value))", "null"), &data),
        ["cpu | 10:20 | 30:30"]
    );
    assert_eq!(
        run(&q("moving_average(mean(value), 2)", "null"), &data),
        ["cpu | 10:20 | 20:25 | 30:35"]
    );
    // cumulative_sum does not read back.
    assert_eq!(
        run(&q("cumulative_sum(sum(value))", "null"), &data),
        ["cpu | 10:30 | 20:50 | 30:100"]
    );
    // Empty buckets are skipped; filled ones are values.
    let sparse = vec![pt("", 5, f(10.0)), pt("", 25, f(20.0)), pt("", 35, f(50.0))];
    assert_eq!(
        run(&q("difference(mean(value))", "null"), &sparse),
        ["cpu | 20:10 | 30:30"]
    );
    assert_eq!(
        run(&q("difference(mean(value))", "0"), &sparse),
        ["cpu | 10:-10 | 20:20 | 30:30"]
    );
    assert_eq!(
        run(&q("elapsed(mean(value), 1s)", "none"), &sparse),
        ["cpu | 20:20i | 30:10i"]
    );
}

fn columns(q: &str) -> Vec<String> {
    let Statement::Select(select) = parse_statement(q).unwrap() else {
        unreachable!()
    };
    column_names(&select.fields)
}

#[test]
fn column_names_follow_influxdb() {
    assert_eq!(
        columns("SELECT mean(x), mean(y) FROM m"),
        ["time", "mean", "mean_1"]
    );
    assert_eq!(
        columns("SELECT mean(x) AS mean_1, mean(y), mean(z) FROM m"),
        ["time", "mean_1", "mean", "mean_2"]
    );
    assert_eq!(
        columns("SELECT x + y, x * 2, (mean(x)) FROM m"),
        ["time", "x_y", "x", "mean"]
    );
    assert_eq!(columns("SELECT time AS t, value FROM m"), ["t", "value"]);
    assert_eq!(
        columns("SELECT top(v, host, region, 3) FROM m"),
        ["time", "top", "host", "region"]
    );
    assert_eq!(
        columns("SELECT derivative(mean(x)), max(x) AS d, max(y) FROM m"),
        ["time", "derivative", "d", "max"]
    );
}

#[test]
fn series_order_limits_and_multiple_fields() {
    let data = vec![
        pt("host=b", 1, f(1.0)),
        pt("host=b", 2, f(2.0)),
        pt("host=a", 3, f(3.0)),
        pt("host=a", 4, f(4.0)),
        pt("region=x", 5, f(5.0)),
    ];
    let q = |tail: &str| format!("SELECT value FROM cpu GROUP BY host {tail}");
    // A missing tag groups as "", which sorts first.
    assert_eq!(
        run(&q(""), &data),
        [
            "cpu,host= | 5:5",
            "cpu,host=a | 3:3 | 4:4",
            "cpu,host=b | 1:1 | 2:2"
        ]
    );
    assert_eq!(
        run(&q("ORDER BY time DESC"), &data),
        [
            "cpu,host=b | 2:2 | 1:1",
            "cpu,host=a | 4:4 | 3:3",
            "cpu,host= | 5:5"
        ]
    );
    assert_eq!(
        run(&q("LIMIT 1 OFFSET 1"), &data),
        ["cpu,host=a | 4:4", "cpu,host=b | 2:2"]
    );
    assert_eq!(
        run(&q("SLIMIT 1 SOFFSET 1"), &data),
        ["cpu,host=a | 3:3 | 4:4"]
    );
    assert_eq!(
        run(&q("ORDER BY time DESC SLIMIT 2"), &data),
        ["cpu,host=a | 4:4 | 3:3", "cpu,host= | 5:5"]
    );
    // As in InfluxDB 1.8, SOFFSET without SLIMIT leaves nothing.
    assert!(run(&q("SOFFSET 1"), &data).is_empty());

    // Several aggregates: one row per time any of them has a value; with
    // fill(none) the missing one is null, with fill(<n>) it is n.
    let sparse = vec![pt("", 1, f(1.0)), pt("", 12, f(2.0)), pt("", 13, f(3.0))];
    let q = |fill: &str| {
        format!("SELECT percentile(value, 40), count(value) FROM cpu WHERE time >= 0s AND time < 20s GROUP BY time(10s) fill({fill})")
    };
    assert_eq!(run(&q("none"), &sparse), ["cpu | 0:null,1i | 10:2,2i"]);
    assert_eq!(run(&q("7"), &sparse), ["cpu | 0:7,1i | 10:2,2i"]);
    // LIMIT applies to each aggregate before rows are joined (InfluxDB's
    // limit iterator sits on each field), so sparse fields can give more
    // rows than the limit.
    let q = "SELECT percentile(value, 40), count(value) FROM cpu WHERE time >= 0s AND time < 20s GROUP BY time(10s) fill(none) LIMIT 1";
    assert_eq!(run(q, &sparse), ["cpu | 0:null,1i | 10:2,null"]);
}
