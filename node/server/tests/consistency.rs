//! Replicas agree and reads see acknowledged writes: real `shardhouse-node`
//! processes, etcd, RocksDB and chDB.
//!
//! - A field introduced concurrently with two types: every replica of a
//!   shard stores the same type and the same rows, the request that lost
//!   (in that shard's log order) is rejected, and no value is cast. Before,
//!   the node-wide type catalog let replicas disagree (Int64 on two nodes,
//!   Float64 on the third) and cast values.
//! - A write acknowledged, then read at once from a follower: the read
//!   waits for the shard's read index and sees it. Before, 2 of 60 reads
//!   through the router missed the point.

use anyhow::{ensure, Result};
use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use shardhouse_test_support::arrow::{ipc_bytes, points_ipc};
use shardhouse_test_support::node_client::{query_i64, LeaderClient, Outcome};
use shardhouse_test_support::LocalCluster;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// Three node processes (one chDB connection each) at RF 3.
fn cluster(shards: u32) -> Result<LocalCluster> {
    LocalCluster::builder("test")
        .nodes(3)
        .shards(shards)
        .rf(3)
        .node_args(&["--pool-size", "1"])
        .start()
}

/// One point of field `g`, as Float64 (value + 0.5) or Int64 (value).
fn g_point(value: i64, float: bool) -> Vec<u8> {
    let (ty, col): (DataType, ArrayRef) = if float {
        (
            DataType::Float64,
            Arc::new(Float64Array::from(vec![value as f64 + 0.5])),
        )
    } else {
        (DataType::Int64, Arc::new(Int64Array::from(vec![value])))
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
        Field::new("series_id", DataType::UInt64, false),
        Field::new("g", ty, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![value])),
            Arc::new(UInt64Array::from(vec![value as u64])),
            col,
        ],
    )
    .expect("batch");
    ipc_bytes(&schema, &[batch])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_decide_a_new_fields_type_alike() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let shards = 4;
    let mut cluster = cluster(shards)?;
    cluster.wait_leaders(Duration::from_secs(60)).await?;
    let addrs: Vec<String> = cluster.live_addrs().into_iter().map(|(_, a)| a).collect();
    // Per shard, 12 concurrent writers: half offer `g` as float, half as int.
    let mut tasks = Vec::new();
    for shard in 0..shards {
        for w in 0..12i64 {
            let addrs = addrs.clone();
            tasks.push(tokio::spawn(async move {
                let mut router = LeaderClient::new(addrs);
                let value = i64::from(shard) * 1000 + w;
                let float = w % 2 == 0;
                let out = router
                    .write(shard, "m", g_point(value, float), Duration::from_secs(20))
                    .await;
                (shard, value, float, out)
            }));
        }
    }
    let mut acked = Vec::new();
    for t in tasks {
        let (shard, value, float, out) = t.await?;
        match out {
            Outcome::Acked => acked.push((shard, value, float)),
            Outcome::Failed(why) => ensure!(
                why.contains("rejected") && why.contains("`g`"),
                "shard {shard} value {value}: unexpected failure {why}"
            ),
        }
    }
    for shard in 0..shards {
        let winners: Vec<bool> = acked.iter().filter(|a| a.0 == shard).map(|a| a.2).collect();
        ensure!(!winners.is_empty(), "shard {shard}: nothing acknowledged");
        ensure!(
            winners.iter().all(|f| *f == winners[0]),
            "shard {shard}: both types acknowledged: {winners:?}"
        );
        let float = winners[0];
        // Every replica: the same column type, exactly the acknowledged
        // values, none cast (floats keep their .5).
        let want: Vec<i64> = {
            let mut v: Vec<i64> = acked.iter().filter(|a| a.0 == shard).map(|a| a.1).collect();
            v.sort_unstable();
            v
        };
        for addr in &addrs {
            let want_ty = if float {
                "SimpleAggregateFunction(anyLast, Nullable(Float64))"
            } else {
                "SimpleAggregateFunction(anyLast, Nullable(Int64))"
            };
            let same = query_i64(
                addr,
                shard,
                &format!("SELECT toInt64(type = '{want_ty}') FROM system.columns WHERE database = currentDatabase() AND table = 'm' AND name = 'g'"),
            )
            .await?;
            ensure!(
                same == [1],
                "shard {shard} on {addr}: column g is not {want_ty} like the acknowledged writes"
            );
            let got = query_i64(
                addr,
                shard,
                "SELECT series_id FROM m FINAL ORDER BY series_id",
            )
            .await?;
            ensure!(
                got == want,
                "shard {shard} on {addr}: rows {got:?}, acknowledged {want:?}"
            );
            if float {
                let cast = query_i64(
                    addr,
                    shard,
                    "SELECT count() FROM m FINAL WHERE g != floor(g) + 0.5",
                )
                .await?;
                ensure!(cast == [0], "shard {shard} on {addr}: values were cast");
            }
        }
    }
    drop(cluster.nodes.drain(..));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_right_after_an_ack_sees_the_write_on_every_replica() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut cluster = cluster(2)?;
    let leaders = cluster.wait_leaders(Duration::from_secs(60)).await?;
    let addrs: Vec<(u64, String)> = cluster.live_addrs();
    let mut router = LeaderClient::new(addrs.iter().map(|(_, a)| a.clone()).collect());
    let shard = 0;
    let leader = leaders[&shard];
    let mut misses = Vec::new();
    for i in 1..=60i64 {
        let out = router
            .write(shard, "m", points_ipc(&[i]), Duration::from_secs(10))
            .await;
        ensure!(matches!(out, Outcome::Acked), "write {i} not acknowledged");
        // Round-robin over the replicas, followers included.
        let (id, addr) = &addrs[(i as usize) % addrs.len()];
        let got = query_i64(addr, shard, &format!("SELECT v FROM m FINAL WHERE v = {i}")).await?;
        if got != [i] {
            misses.push((i, *id, *id == leader));
        }
    }
    ensure!(
        misses.is_empty(),
        "reads right after the ack missed the point: {misses:?} (value, node, leader?)"
    );
    drop(cluster.nodes.drain(..));
    Ok(())
}
