//! Stages 3 and 4 of a write on their own: the all-or-none shard budgets,
//! and forwarding to a cluster that cannot take the write.

use super::*;
use crate::write::batch::BatchSummary;
use crate::write::stages::Split;
use arrow_array::RecordBatch;
use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use shardhouse_common::wire;
use std::time::Duration;

const RETRY_AFTER: Duration = Duration::from_secs(3);

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
