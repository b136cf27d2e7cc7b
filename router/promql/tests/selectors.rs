//! Selectors: the 5-minute lookback, stale markers, offset, `@`, range
//! windows (closed at both ends in Prometheus 2.x) and subqueries.

mod common;
use common::*;
use shardhouse_promql::{Engine, EngineOptions, QueryValue};

#[tokio::test]
async fn lookback_is_five_minutes_inclusive() {
    let s = load(10 * M, "metric 1");
    expect(&s, "metric", 5 * M, &[(r#"{__name__="metric"}"#, 1.0)]).await;
    expect(&s, "metric", 5 * M + 1, &[]).await;
    expect(&s, "metric", -1, &[]).await;
}

#[tokio::test]
async fn stale_marker_ends_a_series() {
    let s = load(M, "metric 1 2 stale 4");
    expect(&s, "metric", 90_000, &[(r#"{__name__="metric"}"#, 2.0)]).await;
    expect(&s, "metric", 2 * M, &[]).await;
    expect(&s, "metric", 150_000, &[]).await;
    expect(&s, "metric", 3 * M, &[(r#"{__name__="metric"}"#, 4.0)]).await;
    // Range windows skip the marker.
    expect(&s, "count_over_time(metric[10m])", 3 * M, &[("{}", 3.0)]).await;
}

#[tokio::test]
async fn offset_and_at() {
    let s = load(M, "metric 0+1x20");
    expect(
        &s,
        "metric offset 5m",
        10 * M,
        &[(r#"{__name__="metric"}"#, 5.0)],
    )
    .await;
    expect(
        &s,
        "metric @ 120",
        10 * M,
        &[(r#"{__name__="metric"}"#, 2.0)],
    )
    .await;
    expect(
        &s,
        "metric @ 600 offset 2m",
        0,
        &[(r#"{__name__="metric"}"#, 8.0)],
    )
    .await;
    expect(
        &s,
        "metric offset -2m",
        5 * M,
        &[(r#"{__name__="metric"}"#, 7.0)],
    )
    .await;
    // In a range query @ start() pins every step to the start.
    let v = engine()
        .range(&s, "metric @ start()", 3 * M, 6 * M, M)
        .await
        .unwrap();
    let QueryValue::Matrix(m) = v else { panic!() };
    let vals: Vec<f64> = m[0].points.iter().map(|p| p.1).collect();
    assert_eq!(vals, vec![3.0, 3.0, 3.0, 3.0]);
}

#[tokio::test]
async fn range_windows_are_closed() {
    let s = load(M, "metric 0+1x10");
    // [2m, 5m] holds the points at 2, 3, 4 and 5 minutes.
    expect(&s, "count_over_time(metric[3m])", 5 * M, &[("{}", 4.0)]).await;
    expect(&s, "sum_over_time(metric[3m])", 5 * M, &[("{}", 14.0)]).await;
    let v = engine().instant(&s, "metric[2m]", 5 * M).await.unwrap();
    let QueryValue::Matrix(m) = v else {
        panic!("{v:?}")
    };
    assert_eq!(m[0].points, vec![(3 * M, 3.0), (4 * M, 4.0), (5 * M, 5.0)]);
}

#[tokio::test]
async fn subqueries_align_to_their_step() {
    let s = load(10_000, "metric 1+1x1000");
    // Steps 950s..1000s by 10s: values 96..101.
    expect(
        &s,
        "sum_over_time(metric[50s:10s])",
        1_000_000,
        &[("{}", 591.0)],
    )
    .await;
    // Steps are multiples of 20s: 960, 980, 1000.
    expect(
        &s,
        "count_over_time(metric[50s:20s])",
        1_000_000,
        &[("{}", 3.0)],
    )
    .await;
    expect(
        &s,
        "max_over_time(rate(metric[20s])[1m:10s])",
        1_000_000,
        &[("{}", 0.1)],
    )
    .await;
    expect(
        &s,
        "min_over_time(metric[30s:10s] offset 100s)",
        1_000_000,
        &[("{}", 88.0)],
    )
    .await;
}

#[tokio::test]
async fn range_query_matrix_sorted_with_gaps() {
    let s = load(M, "a{x=\"2\"} 1 _ _ _ _ _ _ 5\na{x=\"1\"} 1 2 3");
    let v = engine().range(&s, "a", 0, 7 * M, M).await.unwrap();
    let QueryValue::Matrix(m) = v else { panic!() };
    assert_eq!(m[0].labels.get("x"), "1");
    assert_eq!(m[0].points.len(), 8);
    // x=2: present through 5m (lookback), absent at 6m, back at 7m.
    let times: Vec<i64> = m[1].points.iter().map(|p| p.0 / M).collect();
    assert_eq!(times, vec![0, 1, 2, 3, 4, 5, 7]);
}

#[tokio::test]
async fn sample_limit_gives_prometheus_error() {
    let s = load(M, "metric 0+1x100");
    let e = Engine::new(EngineOptions {
        max_samples: 50,
        ..Default::default()
    });
    let err = e
        .instant(&s, "sum_over_time(metric[100m])", 100 * M)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "query processing would load too many samples into memory in query execution"
    );
    assert!(e
        .instant(&s, "sum_over_time(metric[10m])", 100 * M)
        .await
        .is_ok());
}

#[tokio::test]
async fn parse_errors_are_bad_data() {
    let s = load(M, "metric 1");
    let err = engine().instant(&s, "sum(metric", 0).await.unwrap_err();
    assert!(
        matches!(err, shardhouse_promql::Error::BadData(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("parse error"), "{err}");
}
