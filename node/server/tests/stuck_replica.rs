//! A replica stuck on one entry heals: real `shardhouse-node` processes,
//! etcd, RocksDB and chDB (issue 16, "a stuck replica heals").
//!
//! Node 2 fails, for good, to apply one entry of shard 0 (test fault
//! injection, `SHARDHOUSE_TEST_FAULT_APPLY`, docs/operations.md). Its apply
//! stops there and it says so (ShardStates, metrics); after
//! `--wal-rebuild-after-failed-applies` attempts it is rebuilt from its
//! leader's snapshot, and every acknowledged point is then found on every
//! replica. Then an operator's rebuild by hand (the Admin call behind
//! `shardhouse-ctl rebuild-replica`) of a healthy replica loses nothing.

use anyhow::{ensure, Context, Result};
use shardhouse_common::proto::admin_client::AdminClient;
use shardhouse_common::proto::{RebuildReplicaRequest, ShardStatesRequest};
use shardhouse_test_support::arrow::points_ipc;
use shardhouse_test_support::node_client::{query_i64, LeaderClient, Outcome};
use shardhouse_test_support::LocalCluster;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARD: u32 = 0;
const STUCK_NODE: u64 = 2;

async fn admin(addr: &str) -> Result<AdminClient<tonic::transport::Channel>> {
    Ok(AdminClient::connect(format!("http://{addr}")).await?)
}

/// (apply_stalled, rebuilding) of `SHARD` on the node at `addr`.
async fn shard_state(addr: &str) -> Result<(String, String)> {
    let states = admin(addr)
        .await?
        .shard_states(ShardStatesRequest {})
        .await?
        .into_inner();
    let st = states
        .shards
        .into_iter()
        .find(|s| s.shard == SHARD)
        .context("shard 0 missing")?;
    Ok((st.apply_stalled, st.rebuilding))
}

/// Sum of a metric's samples (with `labels` in the sample's label set).
async fn metric(http: &str, name: &str, labels: &str) -> Result<f64> {
    let text = reqwest::get(format!("http://{http}/metrics"))
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Every replica holds exactly the acknowledged values.
async fn every_replica_has(cluster: &LocalCluster, acked: &[i64]) -> Result<()> {
    for (id, addr) in cluster.live_addrs() {
        let got = query_i64(&addr, SHARD, "SELECT v FROM m FINAL ORDER BY v").await?;
        let missing: Vec<_> = acked.iter().filter(|v| !got.contains(v)).collect();
        ensure!(
            missing.is_empty(),
            "node {id}: {} of {} acknowledged points missing: {missing:?}",
            missing.len(),
            acked.len()
        );
    }
    Ok(())
}

/// The stuck node's log lines about the fault, stalls and rebuilds.
fn stuck_log(data_dir: &std::path::Path) -> String {
    let log = data_dir.join("node.log");
    std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            ["fault", "apply", "rebuild", "snapshot", "ERROR"]
                .iter()
                .any(|k| l.contains(k))
        })
        .take(40)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_stuck_on_one_entry_is_rebuilt_from_a_peer() -> Result<()> {
    // Node 2 fails its 5th data entry of shard 0 (the others ignore it).
    std::env::set_var(
        "SHARDHOUSE_TEST_FAULT_APPLY",
        format!("node={STUCK_NODE},shard={SHARD},entry=5"),
    );
    let mut cluster = LocalCluster::builder("stuck")
        .nodes(3)
        .shards(1)
        .rf(3)
        .node_args(&[
            "--pool-size",
            "1",
            "--wal-rebuild-after-failed-applies",
            "5",
        ])
        .start()?;
    std::env::remove_var("SHARDHOUSE_TEST_FAULT_APPLY");
    cluster.wait_leaders(Duration::from_secs(60)).await?;
    let addrs = cluster.live_addrs();
    let stuck_grpc = cluster.node(STUCK_NODE).grpc.clone();
    let stuck_http = cluster.node(STUCK_NODE).http.clone();
    let stuck_dir = cluster.node(STUCK_NODE).data_dir.clone();
    let mut client = LeaderClient::new(addrs.iter().map(|(_, a)| a.clone()).collect());

    // Write one point per request, recording every acknowledgement, while
    // watching what the stuck replica reports. The watcher runs on its own:
    // when node 2 leads the shard, the write of the failing entry waits for
    // the whole stall and its rebuild (the leader acknowledges after it
    // applies), so polling between writes would miss both.
    let mut acked = Vec::new();
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = tokio::spawn({
        let (watching, stuck_grpc) = (watching.clone(), stuck_grpc.clone());
        async move {
            let (mut saw_stall, mut saw_rebuild) = (String::new(), String::new());
            while watching.load(Ordering::Acquire) {
                let (stall, rebuild) = shard_state(&stuck_grpc).await?;
                if saw_stall.is_empty() {
                    saw_stall = stall;
                }
                if saw_rebuild.is_empty() {
                    saw_rebuild = rebuild;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok((saw_stall, saw_rebuild))
        }
    });
    let started = Instant::now();
    for v in 1..=40i64 {
        if let Outcome::Acked = client
            .write(SHARD, "m", points_ipc(&[v]), Duration::from_secs(10))
            .await
        {
            acked.push(v);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watching.store(false, Ordering::Release);
    let (saw_stall, saw_rebuild) = watcher.await??;
    ensure!(
        acked.len() >= 38,
        "only {} of 40 writes acknowledged",
        acked.len()
    );
    // It stopped at the entry and said why.
    ensure!(
        saw_stall.contains("injected apply failure") || saw_rebuild == "auto",
        "the stuck replica never reported its stall (saw {saw_stall:?} / {saw_rebuild:?}); its log:\n{}",
        stuck_log(&stuck_dir)
    );
    // Rebuilt automatically once, from a peer, within the test.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rebuilds = metric(&stuck_http, "shardhouse_wal_replica_rebuilds_total", "auto").await?;
        let (stall, rebuild) = shard_state(&stuck_grpc).await?;
        if rebuilds >= 1.0 && stall.is_empty() && rebuild.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "not rebuilt: rebuilds {rebuilds}, stall {stall:?}, rebuilding {rebuild:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failures = metric(&stuck_http, "shardhouse_wal_apply_failures_total", "").await?;
    ensure!(
        failures >= 5.0,
        "{failures} failed applies before the rebuild"
    );
    every_replica_has(&cluster, &acked).await?;

    // By hand (shardhouse-ctl rebuild-replica): a healthy replica.
    let manual = addrs
        .iter()
        .find(|(id, _)| *id != STUCK_NODE)
        .map(|(_, a)| a.clone())
        .unwrap();
    let reply = admin(&manual)
        .await?
        .rebuild_replica(RebuildReplicaRequest { shard: SHARD })
        .await?
        .into_inner();
    ensure!(reply.ok, "rebuild refused: {}", reply.message);
    for v in 41..=50i64 {
        if let Outcome::Acked = client
            .write(SHARD, "m", points_ipc(&[v]), Duration::from_secs(10))
            .await
        {
            acked.push(v);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !shard_state(&manual).await?.1.is_empty() {
        ensure!(Instant::now() < deadline, "manual rebuild did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    every_replica_has(&cluster, &acked).await?;
    eprintln!(
        "stuck replica healed: {} points acknowledged, all on every replica, in {:?}",
        acked.len(),
        started.elapsed()
    );
    drop(cluster.nodes.drain(..));
    Ok(())
}
