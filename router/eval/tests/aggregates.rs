//! Table tests for every aggregate and selector against hand-computed
//! values. The inputs and expected rows are those of InfluxDB 1.8's own
//! `query/select_test.go` cases (re-derived by hand), plus tie rules.

mod support;

use support::*;

const DAY: &str = "WHERE time >= '1970-01-01T00:00:00Z' AND time < '1970-01-02T00:00:00Z'";

/// InfluxDB's usual test data: two series for host A, one for host B.
fn cpu(value: fn(i64) -> shardhouse_eval::Value) -> Vec<shardhouse_eval::partials::SeriesPoint> {
    vec![
        pt("region=west,host=A", 0, value(20)),
        pt("region=west,host=A", 11, value(3)),
        pt("region=west,host=A", 31, value(100)),
        pt("region=west,host=B", 5, value(10)),
        pt("region=west,host=B", 50, value(1)),
        pt("region=west,host=B", 51, value(2)),
        pt("region=west,host=B", 52, value(3)),
        pt("region=west,host=B", 53, value(4)),
        pt("region=west,host=B", 53, value(5)),
        pt("region=east,host=A", 9, value(19)),
        pt("region=east,host=A", 10, value(2)),
    ]
}

fn float(v: i64) -> shardhouse_eval::Value {
    f(v as f64)
}

fn int(v: i64) -> shardhouse_eval::Value {
    i(v)
}

fn unsigned(v: i64) -> shardhouse_eval::Value {
    u(v as u64)
}

fn by_host(call: &str) -> String {
    format!("SELECT {call} FROM cpu {DAY} GROUP BY time(10s), host fill(none)")
}

#[test]
fn min_max_first_last() {
    let data = cpu(float);
    assert_eq!(
        run(&by_host("min(value)"), &data),
        [
            "cpu,host=A | 0:19 | 10:2 | 30:100",
            "cpu,host=B | 0:10 | 50:1"
        ]
    );
    assert_eq!(
        run(&by_host("max(value)"), &data),
        [
            "cpu,host=A | 0:20 | 10:3 | 30:100",
            "cpu,host=B | 0:10 | 50:5"
        ]
    );
    // first: equal times prefer the larger value; last likewise.
    assert_eq!(
        run(&by_host("first(value)"), &data),
        [
            "cpu,host=A | 0:20 | 10:2 | 30:100",
            "cpu,host=B | 0:10 | 50:1"
        ]
    );
    assert_eq!(
        run(&by_host("last(value)"), &data),
        [
            "cpu,host=A | 0:19 | 10:3 | 30:100",
            "cpu,host=B | 0:10 | 50:5"
        ]
    );
}

#[test]
fn selectors_alone_keep_their_point_time_without_group_by_time() {
    let data = cpu(float);
    assert_eq!(run("SELECT max(value) FROM cpu", &data), ["cpu | 31:100"]);
    assert_eq!(run("SELECT min(value) FROM cpu", &data), ["cpu | 50:1"]);
    // Two calls: the query's start (0 when unbounded) for both.
    assert_eq!(
        run("SELECT max(value), min(value) FROM cpu", &data),
        ["cpu | 0:100,1"]
    );
    assert_eq!(
        run("SELECT min(value) FROM cpu WHERE time >= 20s", &data),
        ["cpu | 50:1"]
    );
    assert_eq!(
        run("SELECT mean(value) FROM cpu WHERE time >= 20s", &data),
        ["cpu | 20:19.166666666666668"]
    );
}

#[test]
fn tie_rules_of_selectors() {
    let data = vec![
        pt("host=A", 1, f(5.0)),
        pt("host=B", 2, f(5.0)),
        pt("host=A", 3, f(1.0)),
        pt("host=B", 3, f(7.0)),
        pt("host=A", 4, f(1.0)),
    ];
    // Equal values: the earlier point.
    assert_eq!(
        run("SELECT max(value) FROM cpu WHERE time < 3s", &data),
        ["cpu | 1:5"]
    );
    assert_eq!(run("SELECT min(value) FROM cpu", &data), ["cpu | 3:1"]);
    // Equal times: the larger value, for first and last alike.
    assert_eq!(
        run("SELECT first(value) FROM cpu WHERE time >= 3s", &data),
        ["cpu | 3:7"]
    );
    assert_eq!(
        run("SELECT last(value) FROM cpu WHERE time < 4s", &data),
        ["cpu | 3:7"]
    );
    let bools = vec![pt("host=A", 1, b(true)), pt("host=B", 1, b(false))];
    assert_eq!(
        run("SELECT first(value) FROM cpu", &bools),
        ["cpu | 1:false"]
    );
    assert_eq!(run("SELECT last(value) FROM cpu", &bools), ["cpu | 1:true"]);
    assert_eq!(run("SELECT min(value) FROM cpu", &bools), ["cpu | 1:false"]);
}

#[test]
fn count_sum_mean_spread() {
    for (data, suffix) in [(cpu(float), ""), (cpu(int), "i")] {
        assert_eq!(
            run(&by_host("count(value)"), &data),
            [
                "cpu,host=A | 0:2i | 10:2i | 30:1i",
                "cpu,host=B | 0:1i | 50:5i"
            ]
        );
        let x = |v: &str| format!("{v}{suffix}");
        assert_eq!(
            run(&by_host("sum(value)"), &data),
            [
                format!(
                    "cpu,host=A | 0:{} | 10:{} | 30:{}",
                    x("39"),
                    x("5"),
                    x("100")
                ),
                format!("cpu,host=B | 0:{} | 50:{}", x("10"), x("15")),
            ]
        );
        assert_eq!(
            run(&by_host("spread(value)"), &data),
            [
                format!("cpu,host=A | 0:{} | 10:{} | 30:{}", x("1"), x("1"), x("0")),
                format!("cpu,host=B | 0:{} | 50:{}", x("0"), x("4")),
            ]
        );
        assert_eq!(
            run(&by_host("mean(value)"), &data),
            [
                "cpu,host=A | 0:19.5 | 10:2.5 | 30:100",
                "cpu,host=B | 0:10 | 50:3"
            ]
        );
    }
    let data = cpu(unsigned);
    assert_eq!(
        run(&by_host("sum(value)"), &data),
        [
            "cpu,host=A | 0:39u | 10:5u | 30:100u",
            "cpu,host=B | 0:10u | 50:15u"
        ]
    );
    // Integer sums wrap as Go's int64 does.
    let data = vec![pt("", 0, i(i64::MAX)), pt("", 1, i(2))];
    assert_eq!(
        run("SELECT sum(value) FROM cpu", &data),
        [format!("cpu | 0:{}i", i64::MIN + 1)]
    );
}

#[test]
fn median_stddev_percentile() {
    for data in [cpu(float), cpu(int), cpu(unsigned)] {
        assert_eq!(
            run(&by_host("median(value)"), &data),
            [
                "cpu,host=A | 0:19.5 | 10:2.5 | 30:100",
                "cpu,host=B | 0:10 | 50:3"
            ]
        );
        // One point: InfluxDB's null float (not filled).
        assert_eq!(
            run(&by_host("stddev(value)"), &data),
            [
                "cpu,host=A | 0:0.7071067811865476 | 10:0.7071067811865476 | 30:null",
                "cpu,host=B | 0:null | 50:1.5811388300841898"
            ]
        );
    }
    let mut data = cpu(float);
    data.retain(|p| p.time < 50 * S);
    for (k, v) in (50..60).zip((1..=10).rev()) {
        data.push(pt("region=west,host=B", k, f(v as f64)));
    }
    assert_eq!(
        run(&by_host("percentile(value, 90)"), &data),
        [
            "cpu,host=A | 0:20 | 10:3 | 30:100",
            "cpu,host=B | 0:10 | 50:9"
        ]
    );
    // Alone and without GROUP BY time, the selected point's time.
    assert_eq!(
        run(
            "SELECT percentile(value, 50) FROM cpu WHERE time >= 50s",
            &data
        ),
        ["cpu | 55:5"]
    );
    // Nearest rank below the first point: no value at all.
    assert_eq!(
        run(
            "SELECT percentile(value, 1) FROM cpu WHERE time >= 50s",
            &data
        ),
        Vec::<String>::new()
    );
}

#[test]
fn mode_by_type() {
    let mut data = cpu(float);
    data[0].value = f(10.0);
    data[1].value = f(2.0);
    assert_eq!(
        run(&by_host("mode(value)"), &data),
        [
            "cpu,host=A | 0:10 | 10:2 | 30:100",
            "cpu,host=B | 0:10 | 50:1"
        ]
    );
    let strings = vec![
        pt("region=west,host=A", 0, s("a")),
        pt("region=west,host=A", 1, s("a")),
        pt("region=west,host=B", 5, s("cxxx")),
        pt("region=west,host=B", 6, s("zzzz")),
        pt("region=west,host=B", 7, s("zzzz")),
        pt("region=west,host=B", 8, s("zxxx")),
        pt("region=east,host=A", 9, s("b")),
        pt("region=east,host=A", 10, s("d")),
        pt("region=east,host=A", 11, s("d")),
        pt("region=east,host=A", 12, s("d")),
    ];
    assert_eq!(
        run(&by_host("mode(value)"), &strings),
        [r#"cpu,host=A | 0:"a" | 10:"d""#, r#"cpu,host=B | 0:"zzzz""#]
    );
    let bools = vec![
        pt("region=west,host=A", 0, b(true)),
        pt("region=west,host=A", 1, b(false)),
        pt("region=west,host=A", 2, b(false)),
        pt("region=west,host=B", 5, b(true)),
        pt("region=west,host=B", 6, b(false)),
        pt("region=east,host=A", 9, b(false)),
        pt("region=east,host=A", 10, b(true)),
        pt("region=east,host=A", 11, b(false)),
        pt("region=east,host=A", 12, b(true)),
    ];
    assert_eq!(
        run(&by_host("mode(value)"), &bools),
        ["cpu,host=A | 0:false | 10:true", "cpu,host=B | 0:true"]
    );
}

#[test]
fn distinct_and_count_distinct() {
    let data = vec![
        pt("region=west,host=A", 0, f(20.0)),
        pt("region=west,host=A", 1, f(19.0)),
        pt("region=west,host=B", 5, f(10.0)),
        pt("region=east,host=A", 9, f(19.0)),
        pt("region=east,host=A", 10, f(2.0)),
        pt("region=east,host=A", 11, f(2.0)),
        pt("region=east,host=A", 12, f(2.0)),
    ];
    assert_eq!(
        run(&by_host("distinct(value)"), &data),
        ["cpu,host=A | 0:20 | 0:19 | 10:2", "cpu,host=B | 0:10"]
    );
    assert_eq!(
        run(&by_host("count(distinct(value))"), &data),
        ["cpu,host=A | 0:2i | 10:1i", "cpu,host=B | 0:1i"]
    );
}

#[test]
fn top_and_bottom() {
    let data = cpu(float);
    let q = |call: &str, group: &str| {
        format!("SELECT {call} FROM cpu {DAY} GROUP BY {group} fill(none)")
    };
    // Point times, even with GROUP BY time; equal times best first.
    assert_eq!(
        run(&q("top(value, 2)", "time(30s), host"), &data),
        [
            "cpu,host=A | 0:20 | 9:19 | 31:100",
            "cpu,host=B | 5:10 | 53:5 | 53:4"
        ]
    );
    assert_eq!(
        run(&q("bottom(value, 2)", "time(30s), host"), &data),
        [
            "cpu,host=A | 10:2 | 11:3 | 31:100",
            "cpu,host=B | 5:10 | 50:1 | 51:2"
        ]
    );
    // With a tag argument: the best point per host, then the best hosts.
    assert_eq!(
        run(&q("top(value, host, 2)", "time(30s)"), &data),
        [r#"cpu | 0:20,"A" | 5:10,"B" | 31:100,"A" | 53:5,"B""#]
    );
    assert_eq!(
        run(&q("bottom(value, host, 2)", "time(30s)"), &data),
        [r#"cpu | 5:10,"B" | 10:2,"A" | 31:100,"A" | 50:1,"B""#]
    );
    assert_eq!(
        run(&q("top(value, host, 1)", "region, time(30s)"), &data),
        [
            r#"cpu,region=east | 9:19,"A""#,
            r#"cpu,region=west | 0:20,"A" | 31:100,"A""#
        ]
    );
    assert_eq!(
        run(&q("bottom(value, host, 1)", "region, time(30s)"), &data),
        [
            r#"cpu,region=east | 10:2,"A""#,
            r#"cpu,region=west | 11:3,"A" | 50:1,"B""#
        ]
    );
    let ints = cpu(int);
    assert_eq!(
        run("SELECT top(value, 3) FROM cpu", &ints),
        ["cpu | 0:20i | 9:19i | 31:100i"]
    );
}

#[test]
fn integral_across_buckets() {
    let data = vec![
        pt("", 10, f(20.0)),
        pt("", 15, f(10.0)),
        pt("", 20, f(0.0)),
        pt("", 30, f(-10.0)),
    ];
    assert_eq!(
        run("SELECT integral(value) FROM cpu", &data),
        ["cpu | 0:50"]
    );
    let grouped =
        "SELECT integral(value) FROM cpu WHERE time > 0s AND time < 60s GROUP BY time(20s)";
    assert_eq!(run(grouped, &data), ["cpu | 0:100 | 20:-50"]);
    // The trapezoid across 20s is split at the edge.
    let data = vec![
        pt("", 10, f(20.0)),
        pt("", 15, f(10.0)),
        pt("", 25, f(0.0)),
        pt("", 30, f(-10.0)),
    ];
    assert_eq!(run(grouped, &data), ["cpu | 0:112.5 | 20:-12.5"]);
    // A later point at the same time replaces the earlier one; units.
    let data = vec![
        pt("", 0, i(20)),
        pt("", 5, i(10)),
        pt("", 5, i(30)),
        pt("", 10, i(40)),
    ];
    assert_eq!(
        run("SELECT integral(value) FROM cpu", &data),
        ["cpu | 0:250"]
    );
    assert_eq!(
        run("SELECT integral(value, 2s) FROM cpu", &data),
        ["cpu | 0:125"]
    );
}

#[test]
fn group_by_time_offset_and_now() {
    let data = vec![
        pt("region=west,host=A", 34, f(20.0)),
        pt("region=west,host=A", 57, f(3.0)),
        pt("region=west,host=A", 92, f(100.0)),
        pt("region=west,host=B", 45, f(10.0)),
    ];
    let q = "SELECT mean(value) FROM cpu WHERE time >= now() - 2m AND time < now() GROUP BY time(1m, now())";
    let out = render(&query_shards(q, std::slice::from_ref(&data), 150 * S).unwrap());
    assert_eq!(out, ["cpu | 30:11 | 90:100"]);
    let q = "SELECT mean(value) FROM cpu WHERE time >= 30s AND time < 150s GROUP BY time(1m, 30s)";
    assert_eq!(run(q, &data), ["cpu | 30:11 | 90:100"]);
    // Aligned to the epoch, with tz() shifting daily buckets to local midnight.
    let q = "SELECT count(value) FROM cpu WHERE time >= 0s AND time < 120s GROUP BY time(1m)";
    assert_eq!(run(q, &data), ["cpu | 0:3i | 60:1i"]);
    let day = vec![pt("", 3 * 3600, f(1.0)), pt("", 6 * 3600, f(2.0))];
    let q = "SELECT sum(value) FROM cpu WHERE time >= '1969-12-31T00:00:00Z' AND time < '1970-01-02T00:00:00Z' GROUP BY time(1d) fill(none) tz('Etc/GMT+5')";
    assert_eq!(run(q, &day), ["cpu | -68400:1 | 18000:2"]);
}

#[test]
fn type_errors_name_the_function() {
    let data = vec![pt("", 0, s("x"))];
    let err = query("SELECT mean(value) FROM cpu", &data).unwrap_err();
    assert_eq!(err.to_string(), "unsupported mean iterator type: string");
    let mixed = vec![pt("host=a", 0, f(1.0)), pt("host=b", 1, i(1))];
    let err = query("SELECT sum(value) FROM cpu", &mixed).unwrap_err();
    assert!(err.to_string().contains("both float and integer"), "{err}");
}

#[test]
fn sample_keeps_every_point_up_to_n_and_a_fixed_pick_beyond() {
    let data = cpu(float);
    // At most N points in a bucket: all of them, at their own times.
    assert_eq!(
        run(
            &format!("SELECT sample(value, 5) FROM cpu {DAY} GROUP BY time(30s), host fill(none)"),
            &data
        ),
        [
            "cpu,host=A | 0:20 | 9:19 | 10:2 | 11:3 | 31:100",
            "cpu,host=B | 5:10 | 50:1 | 51:2 | 52:3 | 53:4 | 53:5"
        ]
    );
    // More than N: N of them, in time order, the same on every run.
    let q = "SELECT sample(value, 2) FROM cpu GROUP BY host";
    let first = run(q, &data);
    assert_eq!(first, run(q, &data));
    for series in &first {
        assert_eq!(series.matches(" | ").count(), 2, "{series}");
    }
}
