//! How a read is answered when a shard cannot answer it: the statement's
//! own fault stays InfluxDB's in-band statement error (HTTP 200), a shard
//! with no replica answering fails the request (503, `{"error": ...}`),
//! and what a shard lacks is told by the node's status, not its text.

use super::fake::{harness, json_body, QueryFailure};
use shardhouse_common::status::Missing;
use shardhouse_router::error::Error;
use tokio::time::{Duration, Instant};

#[tokio::test]
async fn a_shard_without_an_answering_replica_fails_the_query_with_503() {
    let h = harness(2, 2, |o| o.query_timeout_ms = 2_000).await;
    h.nodes[1].state.lock().await.query_failure = Some(QueryFailure::Unavailable);
    let resp = h
        .client
        .get(h.url("/query"))
        .query(&[("db", "db"), ("q", "SELECT * FROM cpu")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("x-influxdb-error"));
    let body = json_body(resp).await;
    assert!(body.get("results").is_none(), "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("unavailable") && error.contains("no leader for shard"),
        "{error}"
    );
}

#[tokio::test]
async fn a_statement_error_is_still_an_in_band_200() {
    let h = harness(1, 1, |_| {}).await;
    let resp = h
        .client
        .get(h.url("/query"))
        .query(&[("db", "db"), ("q", "SHOW MEASUREMENTS WHERE time > now()")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = json_body(resp).await;
    assert_eq!(
        body["results"][0]["error"],
        "SHOW MEASUREMENTS doesn't support time in WHERE clause"
    );
}

#[tokio::test]
async fn what_a_shard_lacks_is_read_from_the_nodes_status() {
    let h = harness(1, 1, |_| {}).await;
    let deadline = || Instant::now() + Duration::from_secs(2);
    let ask = || h.cluster.query_shard("db", 0, "SELECT 1", deadline());

    // No such table on the shard: no rows from it, not an error.
    h.nodes[0].state.lock().await.query_failure = Some(QueryFailure::Missing(Missing::Table));
    assert_eq!(ask().await.unwrap(), Vec::<u8>::new());

    // No such column: the SQL read-back asks again with it as NULL.
    h.nodes[0].state.lock().await.query_failure = Some(QueryFailure::Missing(Missing::Column));
    match ask().await {
        Err(Error::UnknownColumn { shard: 0, reason }) => {
            assert!(reason.contains("no such table"), "{reason}")
        }
        other => panic!("{other:?}"),
    }

    // The statement's own error: a 400 naming the shard.
    h.nodes[0].state.lock().await.query_failure = Some(QueryFailure::Invalid);
    match ask().await {
        Err(e @ Error::BadRequest(_)) => {
            assert_eq!(e.to_string(), "shard 0: Code: 62. Syntax error")
        }
        other => panic!("{other:?}"),
    }
}
