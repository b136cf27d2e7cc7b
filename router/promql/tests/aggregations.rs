//! Aggregation operators; the data and expected values are those of
//! Prometheus's documented aggregation semantics (its testdata's
//! `http_requests` set), worked out by hand.

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

#[tokio::test]
async fn sum_avg_count_by_and_without() {
    let s = http_requests();
    let t = 50 * M;
    let q = r#"sum by (group) (http_requests{job="api-server"})"#;
    expect(
        &s,
        q,
        t,
        &[
            (r#"{group="canary"}"#, 700.0),
            (r#"{group="production"}"#, 300.0),
        ],
    )
    .await;
    let q = r#"avg by (group) (http_requests{job="api-server"})"#;
    expect(
        &s,
        q,
        t,
        &[
            (r#"{group="canary"}"#, 350.0),
            (r#"{group="production"}"#, 150.0),
        ],
    )
    .await;
    let q = r#"count by (group) (http_requests{job="api-server"})"#;
    expect(
        &s,
        q,
        t,
        &[
            (r#"{group="canary"}"#, 2.0),
            (r#"{group="production"}"#, 2.0),
        ],
    )
    .await;
    let q = r#"sum without (instance) (http_requests{job="api-server"})"#;
    let want = [
        (r#"{group="canary", job="api-server"}"#, 700.0),
        (r#"{group="production", job="api-server"}"#, 300.0),
    ];
    expect(&s, q, t, &want).await;
    expect(&s, "sum(http_requests)", t, &[("{}", 3600.0)]).await;
    expect(
        &s,
        "group by (job) (http_requests)",
        t,
        &[
            (r#"{job="api-server"}"#, 1.0),
            (r#"{job="app-server"}"#, 1.0),
        ],
    )
    .await;
    // by (__name__) keeps the name; without never does.
    expect(
        &s,
        "max by (__name__) (http_requests)",
        t,
        &[(r#"{__name__="http_requests"}"#, 800.0)],
    )
    .await;
    expect(&s, "min(http_requests)", t, &[("{}", 100.0)]).await;
}

#[tokio::test]
async fn stddev_stdvar_quantile() {
    let s = http_requests();
    let t = 50 * M;
    expect(
        &s,
        "stddev(http_requests)",
        t,
        &[("{}", 229.128_784_747_792)],
    )
    .await;
    expect(&s, "stdvar(http_requests)", t, &[("{}", 52_500.0)]).await;
    // rank 0.5 * 7 = 3.5: halfway between 400 and 500.
    expect(&s, "quantile(0.5, http_requests)", t, &[("{}", 450.0)]).await;
    expect(&s, "quantile(0.8, http_requests)", t, &[("{}", 660.0)]).await;
    expect(
        &s,
        "quantile(2, http_requests)",
        t,
        &[("{}", f64::INFINITY)],
    )
    .await;
    expect(
        &s,
        "quantile(-1, http_requests)",
        t,
        &[("{}", f64::NEG_INFINITY)],
    )
    .await;
}

#[tokio::test]
async fn topk_bottomk_keep_labels_and_rank() {
    let s = http_requests();
    let t = 50 * M;
    let want = [
        (
            r#"{__name__="http_requests", group="canary", instance="1", job="app-server"}"#,
            800.0,
        ),
        (
            r#"{__name__="http_requests", group="canary", instance="0", job="app-server"}"#,
            700.0,
        ),
        (
            r#"{__name__="http_requests", group="production", instance="1", job="app-server"}"#,
            600.0,
        ),
    ];
    expect(&s, "topk(3, http_requests)", t, &want).await;
    let want = [
        (
            r#"{__name__="http_requests", group="production", instance="0", job="api-server"}"#,
            100.0,
        ),
        (
            r#"{__name__="http_requests", group="production", instance="0", job="app-server"}"#,
            500.0,
        ),
    ];
    expect(&s, "bottomk(1, http_requests) by (job)", t, &want).await;
    expect(&s, "topk(0, http_requests)", t, &[]).await;
    // The answer of an instant topk is in rank order.
    let v = engine()
        .instant(&s, "topk(3, http_requests)", t)
        .await
        .unwrap();
    let shardhouse_promql::QueryValue::Vector(v) = v else {
        panic!()
    };
    let vals: Vec<f64> = v.iter().map(|x| x.2).collect();
    assert_eq!(vals, vec![800.0, 700.0, 600.0]);
}

#[tokio::test]
async fn count_values_labels_by_value() {
    let s = load(M, "x{a=\"1\"} 2\nx{a=\"2\"} 2\nx{a=\"3\"} 0.5");
    let want = [(r#"{v="0.5"}"#, 1.0), (r#"{v="2"}"#, 2.0)];
    expect(&s, r#"count_values("v", x)"#, 0, &want).await;
    expect_err(&s, r#"count_values("1bad", x)"#, 0, "invalid label name").await;
}
