//! Each stage of a write on its own: admission against the in-flight
//! budget, the split of a body into shard batches, the all-or-none shard
//! budgets, and forwarding to a cluster that cannot take the write.

use super::*;
use crate::batch::RejectReason;
use crate::cardinality::Cardinality;
use arrow_array::RecordBatch;
use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use shardhouse_common::wire;

const RETRY_AFTER: Duration = Duration::from_secs(3);

fn options(max_inflight_bytes: usize) -> RouterOptions {
    RouterOptions {
        max_inflight_bytes,
        request_timeout_ms: 10_000,
        ..RouterOptions::default()
    }
}

/// A shard batch that counts `bytes` against the budgets.
fn shard_batch(shard: u32, bytes: usize) -> ShardBatch {
    ShardBatch {
        shard,
        database: "db".into(),
        measurement: "cpu".into(),
        rows: 1,
        points: RecordBatch::new_empty(wire::points_schema(std::iter::empty::<(
            &str,
            arrow_schema::DataType,
        )>())),
        series: RecordBatch::new_empty(wire::series_schema()),
        bytes,
    }
}

fn split_of(batches: Vec<ShardBatch>) -> Split {
    Split {
        batches,
        summary: BatchSummary::default(),
    }
}

#[test]
fn admit_holds_the_body_bytes_until_dropped_and_refuses_a_full_budget() {
    let opts = options(100);
    let inflight = Arc::new(Semaphore::new(100));
    let first = admit(&opts, &inflight, RETRY_AFTER, "db", 60).unwrap();
    assert_eq!(inflight.available_permits(), 40);
    assert!(first.deadline > Instant::now() + Duration::from_secs(9));
    match admit(&opts, &inflight, RETRY_AFTER, "db", 60) {
        Err(Error::Overloaded(_, after)) => assert_eq!(after, RETRY_AFTER),
        other => panic!("expected Overloaded, got {:?}", other.err()),
    }
    drop(first);
    assert_eq!(inflight.available_permits(), 100);
    // A body larger than the whole budget still goes, alone.
    let big = admit(&opts, &inflight, RETRY_AFTER, "db", 1000).unwrap();
    assert_eq!(inflight.available_permits(), 0);
    drop(big);
}

#[test]
fn admit_refuses_an_invalid_database_name_before_taking_budget() {
    let inflight = Arc::new(Semaphore::new(100));
    match admit(&options(100), &inflight, RETRY_AFTER, "bad/name", 10) {
        Err(Error::BadRequest(_)) => {}
        other => panic!("expected BadRequest, got {:?}", other.err()),
    }
    assert_eq!(inflight.available_permits(), 100);
}

#[test]
fn split_puts_every_good_point_in_a_shard_batch_of_the_database() {
    let body = b"cpu,host=a v=1 10\ncpu,host=b v=2 20\nmem,host=a used=3i 30\nnot a line\n";
    let split = split("v1", "metrics", 4, Precision::Nanosecond, None, None, |b| {
        b.add_line_protocol(body)
    })
    .unwrap();
    assert_eq!(split.summary.points, 3);
    assert_eq!(split.summary.rejected, 1);
    let first = split.summary.first_rejection.as_ref().unwrap();
    assert_eq!(
        (first.position, &first.reason),
        (4, &RejectReason::BadPoint)
    );
    assert_eq!(split.batches.iter().map(|b| b.rows).sum::<usize>(), 3);
    for b in &split.batches {
        assert_eq!(b.database, "metrics");
        assert!(b.shard < 4, "shard {}", b.shard);
        assert!(b.points.num_rows() > 0 && b.series.num_rows() > 0);
    }
    let mut tables: Vec<&str> = split
        .batches
        .iter()
        .map(|b| b.measurement.as_str())
        .collect();
    tables.sort_unstable();
    tables.dedup();
    assert_eq!(tables, ["cpu", "mem"]);
}

#[test]
fn split_rejects_series_over_the_database_limit() {
    let cardinality = Cardinality::new(1);
    let db = cardinality.db("metrics");
    let split = split(
        "v1",
        "metrics",
        4,
        Precision::Nanosecond,
        db.as_deref(),
        None,
        |b| b.add_line_protocol(b"cpu,host=a v=1 10\ncpu,host=b v=2 20\ncpu,host=a v=3 30\n"),
    )
    .unwrap();
    assert_eq!(split.summary.points, 2);
    assert_eq!(split.summary.rejected_for_cardinality, 1);
}

#[test]
fn reserve_takes_every_shard_budget_or_none() {
    let cluster = Cluster::new("test", 100, RETRY_AFTER);
    let held = reserve(&cluster, split_of(vec![shard_batch(1, 60)])).unwrap();
    // Shard 1 has 40 bytes left: the request fails and shard 0 keeps all.
    let both = split_of(vec![shard_batch(0, 60), shard_batch(1, 60)]);
    match reserve(&cluster, both) {
        Err(Error::Overloaded(reason, after)) => {
            assert!(reason.contains("shard 1"), "{reason}");
            assert_eq!(after, RETRY_AFTER);
        }
        other => panic!(
            "expected Overloaded, got {:?}",
            other.err().map(|e| e.to_string())
        ),
    }
    let shard0 = reserve(&cluster, split_of(vec![shard_batch(0, 100)])).unwrap();
    drop(held);
    let shard1 = reserve(&cluster, split_of(vec![shard_batch(1, 100)])).unwrap();
    drop((shard0, shard1));
}

fn one_shard_map(addr: &str, replicas: Vec<u64>) -> ShardMap {
    let mut map = ShardMap::initial(
        1,
        1,
        vec![NodeInfo {
            node_id: 7,
            grpc_addr: addr.into(),
            http_addr: addr.into(),
            cores: 1,
        }],
    );
    map.shards[0].replicas = replicas;
    map.shards[0].leader_hint = 0;
    map
}

#[tokio::test]
async fn forward_answers_unavailable_when_a_shard_has_no_replica() {
    let cluster = Arc::new(Cluster::new("test", 100, RETRY_AFTER));
    cluster.set_shard_map(one_shard_map("127.0.0.1:1", vec![]));
    let reserved = reserve(&cluster, split_of(vec![shard_batch(0, 10)])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    match forward(&cluster, reserved, "r-1", deadline).await {
        Err(Error::Unavailable { shard: 0, reason }) => {
            assert!(reason.contains("no replicas"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn forward_retries_an_unreachable_leader_until_the_deadline_then_frees_the_budget() {
    // Port 1 refuses connections: every attempt fails at the transport.
    let cluster = Arc::new(Cluster::new("test", 100, RETRY_AFTER).with_node_batching(0));
    cluster.set_shard_map(one_shard_map("127.0.0.1:1", vec![7]));
    let reserved = reserve(&cluster, split_of(vec![shard_batch(0, 100)])).unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_millis(300);
    match forward(&cluster, reserved, "r-2", deadline).await {
        Err(Error::Unavailable { shard: 0, .. }) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The shard's whole budget is free again.
    reserve(&cluster, split_of(vec![shard_batch(0, 100)])).unwrap();
}
