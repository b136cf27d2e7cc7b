//! Binary operators: arithmetic, comparisons with and without `bool`,
//! vector matching and the set operators.

mod common;
use common::*;

fn http_requests() -> shardhouse_promql::MemorySource {
    load(
        5 * M,
        r#"
        http_requests{job="api-server", instance="0", group="production"} 0+10x10
        http_requests{job="api-server", instance="1", group="production"} 0+20x10
        http_requests{job="api-server", instance="0", group="canary"} 0+30x10
        http_requests{job="api-server", instance="1", group="canary"} 0+40x10
        http_requests{job="app-server", instance="0", group="production"} 0+50x10
        http_requests{job="app-server", instance="1", group="production"} 0+60x10
        http_requests{job="app-server", instance="0", group="canary"} 0+70x10
        http_requests{job="app-server", instance="1", group="canary"} 0+80x10
        "#,
    )
}

const T: i64 = 50 * M;

#[tokio::test]
async fn arithmetic_between_aggregates_and_scalars() {
    let s = http_requests();
    let q = "sum(http_requests) by (job) - count(http_requests) by (job)";
    expect(
        &s,
        q,
        T,
        &[
            (r#"{job="api-server"}"#, 996.0),
            (r#"{job="app-server"}"#, 2596.0),
        ],
    )
    .await;
    expect(&s, "2 ^ 3 * 2", T, &[("scalar", 16.0)]).await;
    expect(&s, "-sum(http_requests)", T, &[("{}", -3600.0)]).await;
    expect(&s, "10 % 3", T, &[("scalar", 1.0)]).await;
    expect(&s, "1 / 0", T, &[("scalar", f64::INFINITY)]).await;
    let q = r#"http_requests{job="api-server", group="canary"} * 2"#;
    let want = [
        (r#"{group="canary", instance="0", job="api-server"}"#, 600.0),
        (r#"{group="canary", instance="1", job="api-server"}"#, 800.0),
    ];
    expect(&s, q, T, &want).await;
}

#[tokio::test]
async fn comparisons_filter_or_give_bool() {
    let s = http_requests();
    let q = r#"http_requests{job="api-server"} > 250"#;
    let want = [
        (
            r#"{__name__="http_requests", group="canary", instance="0", job="api-server"}"#,
            300.0,
        ),
        (
            r#"{__name__="http_requests", group="canary", instance="1", job="api-server"}"#,
            400.0,
        ),
    ];
    expect(&s, q, T, &want).await;
    // A scalar on the left still returns the vector's values.
    expect(&s, r#"250 < http_requests{job="api-server"}"#, T, &want).await;
    let q = r#"http_requests{job="api-server", group="canary"} > bool 350"#;
    let want = [
        (r#"{group="canary", instance="0", job="api-server"}"#, 0.0),
        (r#"{group="canary", instance="1", job="api-server"}"#, 1.0),
    ];
    expect(&s, q, T, &want).await;
    expect(&s, "1 > bool 2", T, &[("scalar", 0.0)]).await;
}

#[tokio::test]
async fn set_operators() {
    let s = http_requests();
    let q = r#"http_requests{group="canary"} and http_requests{instance="0"}"#;
    let want = [
        (
            r#"{__name__="http_requests", group="canary", instance="0", job="api-server"}"#,
            300.0,
        ),
        (
            r#"{__name__="http_requests", group="canary", instance="0", job="app-server"}"#,
            700.0,
        ),
    ];
    expect(&s, q, T, &want).await;
    let q = r#"(http_requests{group="canary"} + 1) and http_requests{instance="0"}"#;
    let want = [
        (r#"{group="canary", instance="0", job="api-server"}"#, 301.0),
        (r#"{group="canary", instance="0", job="app-server"}"#, 701.0),
    ];
    expect(&s, q, T, &want).await;
    let q = r#"http_requests{group="canary"} unless http_requests{instance="0"}"#;
    let want = [
        (
            r#"{__name__="http_requests", group="canary", instance="1", job="api-server"}"#,
            400.0,
        ),
        (
            r#"{__name__="http_requests", group="canary", instance="1", job="app-server"}"#,
            800.0,
        ),
    ];
    expect(&s, q, T, &want).await;
    let q = r#"http_requests{group="canary"} or http_requests{group="production"}"#;
    assert_eq!(instant(&s, q, T).await.len(), 8);
    let q = r#"http_requests{group="canary"} and on(instance) http_requests{instance="0", job="api-server"}"#;
    assert_eq!(instant(&s, q, T).await.len(), 2);
    let q = r#"sum by (job) (http_requests) or on() vector(1)"#;
    assert_eq!(instant(&s, q, T).await.len(), 2);
}

#[tokio::test]
async fn one_to_one_and_many_to_one_matching() {
    let s = http_requests();
    let q = r#"http_requests{group="canary"} / ignoring(group) http_requests{group="production"}"#;
    let want = [
        (r#"{instance="0", job="api-server"}"#, 3.0),
        (r#"{instance="1", job="api-server"}"#, 2.0),
        (r#"{instance="0", job="app-server"}"#, 1.4),
        (r#"{instance="1", job="app-server"}"#, 80.0 / 60.0),
    ];
    expect(&s, q, T, &want).await;
    let q =
        r#"http_requests{job="api-server"} / on(group) group_left sum by (group) (http_requests)"#;
    let want = [
        (
            r#"{group="canary", instance="0", job="api-server"}"#,
            300.0 / 2200.0,
        ),
        (
            r#"{group="canary", instance="1", job="api-server"}"#,
            400.0 / 2200.0,
        ),
        (
            r#"{group="production", instance="0", job="api-server"}"#,
            100.0 / 1400.0,
        ),
        (
            r#"{group="production", instance="1", job="api-server"}"#,
            200.0 / 1400.0,
        ),
    ];
    expect(&s, q, T, &want).await;
    // group_right: labels from the right, values in operand order.
    let q = r#"sum by (group) (http_requests) - on(group) group_right http_requests{job="api-server", instance="0"}"#;
    let want = [
        (
            r#"{group="canary", instance="0", job="api-server"}"#,
            1900.0,
        ),
        (
            r#"{group="production", instance="0", job="api-server"}"#,
            1300.0,
        ),
    ];
    expect(&s, q, T, &want).await;
    // group_left(label) copies the label from the one side.
    let s2 = load(M, "m{k=\"a\"} 2\ninfo{k=\"a\", version=\"v1\"} 1");
    let q = r#"m * on(k) group_left(version) info"#;
    expect(&s2, q, 0, &[(r#"{k="a", version="v1"}"#, 2.0)]).await;
}

#[tokio::test]
async fn matching_errors() {
    let s = http_requests();
    expect_err(
        &s,
        r#"http_requests + on(group) http_requests"#,
        T,
        "found duplicate series for the match group",
    )
    .await;
    let q = r#"http_requests{instance="0"} + on(job) group_left sum by (job) (http_requests)"#;
    assert_eq!(instant(&s, q, T).await.len(), 4);
    let s2 = load(M, "a{k=\"1\"} 1\nb{k=\"1\"} 2\nc{k=\"1\"} 3");
    let q = r#"{__name__=~"a|b"} + on(k) group_left c"#;
    expect_err(&s2, q, 0, "grouping labels must ensure unique matches").await;
    let q = r#"c + on(k) {__name__=~"a|b"}"#;
    expect_err(
        &s2,
        q,
        0,
        "found duplicate series for the match group {k=\"1\"} on the right hand-side",
    )
    .await;
    let q = r#"{__name__=~"a|b"} + on(k) c"#;
    expect_err(&s2, q, 0, "many-to-one matching must be explicit").await;
}
