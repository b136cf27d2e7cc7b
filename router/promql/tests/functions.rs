//! Functions: rates with Prometheus's extrapolation and counter resets,
//! regressions, `*_over_time`, `histogram_quantile`, label functions,
//! math, time and `absent`.

mod common;
use common::*;

fn counters() -> shardhouse_promql::MemorySource {
    load(
        5 * M,
        r#"
        http_requests{path="/foo"} 0+10x10
        http_requests{path="/bar"} 0+10x5 0+10x4
        testcounter_reset_middle 0+10x4 0+10x5
        testcounter_reset_end 0+10x9 0 10
        "#,
    )
}

#[tokio::test]
async fn increase_rate_with_resets() {
    let s = counters();
    let t = 50 * M;
    expect(
        &s,
        "increase(http_requests[50m])",
        t,
        &[(r#"{path="/bar"}"#, 90.0), (r#"{path="/foo"}"#, 100.0)],
    )
    .await;
    // The zero point of a counter bounds the extrapolation.
    expect(
        &s,
        "increase(http_requests[100m])",
        t,
        &[(r#"{path="/bar"}"#, 90.0), (r#"{path="/foo"}"#, 100.0)],
    )
    .await;
    expect(
        &s,
        "rate(testcounter_reset_middle[50m])",
        t,
        &[("{}", 0.03)],
    )
    .await;
    // /bar was reset at 30m: 50 then 0 gives 0 over the last interval.
    expect(
        &s,
        "irate(http_requests[50m])",
        30 * M,
        &[
            (r#"{path="/bar"}"#, 0.0),
            (r#"{path="/foo"}"#, 10.0 / 300.0),
        ],
    )
    .await;
    expect(
        &s,
        "irate(http_requests[50m])",
        35 * M,
        &[
            (r#"{path="/bar"}"#, 10.0 / 300.0),
            (r#"{path="/foo"}"#, 10.0 / 300.0),
        ],
    )
    .await;
    // irate over a reset: the last value over the interval.
    expect(
        &s,
        "irate(testcounter_reset_end[50m])",
        50 * M,
        &[("{}", 0.0)],
    )
    .await;
    expect(
        &s,
        "idelta(testcounter_reset_end[50m])",
        50 * M,
        &[("{}", -90.0)],
    )
    .await;
    expect(
        &s,
        "resets(testcounter_reset_middle[50m])",
        t,
        &[("{}", 1.0)],
    )
    .await;
    expect(
        &s,
        "changes(testcounter_reset_middle[50m])",
        t,
        &[("{}", 10.0)],
    )
    .await;
}

#[tokio::test]
async fn extrapolation_by_hand() {
    // Points at 1m..4m (values 10..40) in the window [0, 5m]: 180s
    // sampled, 60s apart; 60s to each end is under 1.1 * 60s, so the
    // rate extrapolates to the whole 300s: 30 * 300/180 = 50.
    let s = load(M, "c _ 10 20 30 40");
    expect(&s, "increase(c[5m])", 5 * M, &[("{}", 50.0)]).await;
    expect(&s, "rate(c[5m])", 5 * M, &[("{}", 50.0 / 300.0)]).await;
    // delta does not stop at a zero point: 30 * 300/180.
    expect(&s, "delta(c[5m])", 5 * M, &[("{}", 50.0)]).await;
    // The counter would reach zero 60s before its first point at 10/min,
    // exactly at the window start; for value 20 at 1m it would be 120s
    // back, so the start extends only the 60s there.
    let s = load(M, "c _ 20 30 40 50");
    expect(&s, "increase(c[5m])", 5 * M, &[("{}", 50.0)]).await;
    // Far from the ends (over 1.1 gaps) only half a gap is added: points
    // at 3m and 4m in [0, 10m]: 60 + 30 + 30 = 120s, 10 * 120/60 = 20.
    let s = load(M, "g _ _ _ 5 15");
    expect(&s, "delta(g[10m])", 10 * M, &[("{}", 20.0)]).await;
    expect(&s, "rate(g[1m])", 10 * M, &[]).await;
}

#[tokio::test]
async fn deriv_and_predict_linear() {
    let s = load(5 * M, "ramp 0+80x10\nflat 3 3 3");
    expect(&s, "deriv(ramp[50m])", 50 * M, &[("{}", 80.0 / 300.0)]).await;
    // At 50m the line is at 800; an hour later 800 + 3600 * 80/300.
    expect(
        &s,
        "predict_linear(ramp[50m], 3600)",
        50 * M,
        &[("{}", 1760.0)],
    )
    .await;
    expect(&s, "deriv(flat[10m])", 10 * M, &[("{}", 0.0)]).await;
    let s = counters();
    expect(
        &s,
        "deriv(testcounter_reset_middle[100m])",
        50 * M,
        &[("{}", 0.010_606_060_606_060_607)],
    )
    .await;
}

#[tokio::test]
async fn over_time_family() {
    let s = load(M, "m 1 2 3 4 NaN\nn 2 8");
    let t = 3 * M;
    expect(&s, "avg_over_time(m[3m])", t, &[("{}", 2.5)]).await;
    expect(&s, "min_over_time(m[3m])", t, &[("{}", 1.0)]).await;
    expect(&s, "max_over_time(m[3m])", t, &[("{}", 4.0)]).await;
    expect(&s, "stdvar_over_time(n[5m])", t, &[("{}", 9.0)]).await;
    expect(&s, "stddev_over_time(n[5m])", t, &[("{}", 3.0)]).await;
    expect(&s, "quantile_over_time(0.5, m[3m])", t, &[("{}", 2.5)]).await;
    expect(
        &s,
        "last_over_time(m[3m])",
        t,
        &[(r#"{__name__="m"}"#, 4.0)],
    )
    .await;
    expect(&s, "present_over_time(m[3m])", t, &[("{}", 1.0)]).await;
    expect(&s, "max_over_time(m[1m])", 4 * M, &[("{}", 4.0)]).await;
    expect(&s, "absent_over_time(m[1m])", 10 * M, &[("{}", 1.0)]).await;
    expect(
        &s,
        "absent_over_time(m{a=\"b\"}[1m])",
        10 * M,
        &[(r#"{a="b"}"#, 1.0)],
    )
    .await;
    expect(&s, "absent_over_time(m[1m])", 3 * M, &[]).await;
}

#[tokio::test]
async fn holt_winters_smooths() {
    // Linear data is followed exactly by double exponential smoothing.
    let s = load(M, "lin 0+10x10");
    expect(
        &s,
        "holt_winters(lin[10m], 0.5, 0.5)",
        10 * M,
        &[("{}", 100.0)],
    )
    .await;
    expect_err(
        &s,
        "holt_winters(lin[10m], 1, 0.5)",
        10 * M,
        "invalid smoothing factor",
    )
    .await;
}

#[tokio::test]
async fn histogram_quantile_classic_buckets() {
    let s = load(
        5 * M,
        r#"
        testhistogram_bucket{le="0.1", start="positive"} 0+5x10
        testhistogram_bucket{le=".2", start="positive"} 0+7x10
        testhistogram_bucket{le="1e0", start="positive"} 0+11x10
        testhistogram_bucket{le="+Inf", start="positive"} 0+12x10
        testhistogram_bucket{le="-.2", start="negative"} 0+1x10
        testhistogram_bucket{le="-0.1", start="negative"} 0+2x10
        testhistogram_bucket{le="0.3", start="negative"} 0+2x10
        testhistogram_bucket{le="+Inf", start="negative"} 0+3x10
        "#,
    );
    let t = 50 * M;
    let q = "histogram_quantile(0.5, testhistogram_bucket)";
    expect(
        &s,
        q,
        t,
        &[
            (r#"{start="negative"}"#, -0.15),
            (r#"{start="positive"}"#, 0.15),
        ],
    )
    .await;
    let q = "histogram_quantile(0, testhistogram_bucket)";
    expect(
        &s,
        q,
        t,
        &[
            (r#"{start="negative"}"#, -0.2),
            (r#"{start="positive"}"#, 0.0),
        ],
    )
    .await;
    // Rank in the +Inf bucket: the highest finite bound.
    let q = "histogram_quantile(0.99, testhistogram_bucket)";
    expect(
        &s,
        q,
        t,
        &[
            (r#"{start="negative"}"#, 0.3),
            (r#"{start="positive"}"#, 1.0),
        ],
    )
    .await;
    let q = "histogram_quantile(0.5, sum by (le) (rate(testhistogram_bucket{start=\"positive\"}[10m])))";
    expect(&s, q, t, &[("{}", 0.15)]).await;
    // Without a +Inf bucket the answer is NaN.
    let s = load(M, "h_bucket{le=\"1\"} 3\nh_bucket{le=\"2\"} 4");
    expect(
        &s,
        "histogram_quantile(0.5, h_bucket)",
        0,
        &[("{}", f64::NAN)],
    )
    .await;
}

#[tokio::test]
async fn label_replace_and_join() {
    let s = load(
        M,
        r#"testmetric{src="source-value-10", src1="a", src2="b"} 0"#,
    );
    let q =
        r#"label_replace(testmetric, "dst", "destination-value-$1", "src", "source-value-(.*)")"#;
    let want = r#"{__name__="testmetric", dst="destination-value-10", src="source-value-10", src1="a", src2="b"}"#;
    expect(&s, q, 0, &[(want, 0.0)]).await;
    // The regex is anchored: "value-(.*)" does not match the whole value.
    let q = r#"label_replace(testmetric, "dst", "x-$1", "src", "value-(.*)")"#;
    expect(
        &s,
        q,
        0,
        &[(
            r#"{__name__="testmetric", src="source-value-10", src1="a", src2="b"}"#,
            0.0,
        )],
    )
    .await;
    let q = r#"label_replace(testmetric, "src", "", "src", ".*")"#;
    expect(
        &s,
        q,
        0,
        &[(r#"{__name__="testmetric", src1="a", src2="b"}"#, 0.0)],
    )
    .await;
    let q = r#"label_join(testmetric, "dst", "-", "src1", "src2", "missing")"#;
    let want = r#"{__name__="testmetric", dst="a-b-", src="source-value-10", src1="a", src2="b"}"#;
    expect(&s, q, 0, &[(want, 0.0)]).await;
    expect_err(
        &s,
        r#"label_replace(testmetric, "1x", "", "src", ".*")"#,
        0,
        "invalid destination label name",
    )
    .await;
    expect_err(
        &s,
        r#"label_replace(testmetric, "d", "", "src", "(.*")"#,
        0,
        "invalid regular expression",
    )
    .await;
}

#[tokio::test]
async fn math_time_and_vector_functions() {
    let s = load(M, "v{a=\"1\"} -2.5\nv{a=\"2\"} 4");
    expect(&s, "abs(v)", 0, &[(r#"{a="1"}"#, 2.5), (r#"{a="2"}"#, 4.0)]).await;
    expect(
        &s,
        "round(v)",
        0,
        &[(r#"{a="1"}"#, -2.0), (r#"{a="2"}"#, 4.0)],
    )
    .await;
    expect(
        &s,
        "round(v, 3)",
        0,
        &[(r#"{a="1"}"#, -3.0), (r#"{a="2"}"#, 3.0)],
    )
    .await;
    expect(
        &s,
        "clamp(v, -1, 3)",
        0,
        &[(r#"{a="1"}"#, -1.0), (r#"{a="2"}"#, 3.0)],
    )
    .await;
    expect(&s, "clamp(v, 3, -1)", 0, &[]).await;
    expect(
        &s,
        "clamp_max(v, 0)",
        0,
        &[(r#"{a="1"}"#, -2.5), (r#"{a="2"}"#, 0.0)],
    )
    .await;
    expect(&s, "sqrt(v{a=\"2\"})", 0, &[(r#"{a="2"}"#, 2.0)]).await;
    expect(
        &s,
        "sgn(v)",
        0,
        &[(r#"{a="1"}"#, -1.0), (r#"{a="2"}"#, 1.0)],
    )
    .await;
    expect(&s, "time()", 90_000, &[("scalar", 90.0)]).await;
    expect(
        &s,
        "timestamp(v)",
        2 * M,
        &[(r#"{a="1"}"#, 0.0), (r#"{a="2"}"#, 0.0)],
    )
    .await;
    expect(
        &s,
        "timestamp(-v)",
        2 * M,
        &[(r#"{a="1"}"#, 120.0), (r#"{a="2"}"#, 120.0)],
    )
    .await;
    expect(&s, "scalar(v{a=\"2\"})", 0, &[("scalar", 4.0)]).await;
    expect(&s, "scalar(v)", 0, &[("scalar", f64::NAN)]).await;
    expect(&s, "vector(7)", 0, &[("{}", 7.0)]).await;
    expect(
        &s,
        "absent(nope{job=\"x\", a=~\"y\"})",
        0,
        &[(r#"{job="x"}"#, 1.0)],
    )
    .await;
    expect(&s, "absent(v)", 0, &[]).await;
    // 2021-03-01 is a Monday; February 2020 had 29 days.
    expect(&s, "day_of_week(vector(1614556800))", 0, &[("{}", 1.0)]).await;
    expect(&s, "days_in_month(vector(1580601600))", 0, &[("{}", 29.0)]).await;
    expect(&s, "hour()", 3 * 3600 * 1000, &[("{}", 3.0)]).await;
    expect(&s, "year(vector(1614556800))", 0, &[("{}", 2021.0)]).await;
    let v = engine().instant(&s, "sort_desc(v)", 0).await.unwrap();
    let shardhouse_promql::QueryValue::Vector(v) = v else {
        panic!()
    };
    assert_eq!(v.iter().map(|x| x.2).collect::<Vec<_>>(), vec![4.0, -2.5]);
}

#[tokio::test]
async fn functions_dropping_names_may_collide() {
    let s = load(M, "a{x=\"1\"} 1 2\nb{x=\"1\"} 1 2");
    expect_err(&s, "rate({x=\"1\"}[5m])", M, "same labelset").await;
    expect_err(&s, "abs({x=\"1\"})", M, "same labelset").await;
}
