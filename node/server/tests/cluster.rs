//! Process-level tests of the node: real `shardhouse-node` processes, real
//! etcd, RocksDB and chDB, faults injected with kill -9 and SIGSTOP.
//!
//! Every written point has a unique value (and a unique (series_id, time)),
//! the client never re-sends a batch whose outcome it did not see, and the
//! checks demand every acknowledged value exactly once with FINAL. Where no
//! flush can have been cut short by a crash, they also demand no value
//! twice without FINAL (a replay after an interrupted flush re-inserts rows
//! that ReplacingMergeTree collapses; that is the engine's design).

use anyhow::{ensure, Result};
use shardhouse_test_support::arrow::points_ipc;
use shardhouse_test_support::node_client::{verify_shard, LeaderClient, Outcome};
use shardhouse_test_support::{eventually, LocalCluster};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

const TABLE: &str = "m";

/// The tests each run several chDB processes; on a 2-core box they run one
/// at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// `nodes` node processes (one chDB connection each) that create a map of
/// `shards` shards at `rf`, plus `extra` flags.
fn cluster(nodes: u64, shards: u32, rf: u32, extra: &[&str]) -> Result<LocalCluster> {
    LocalCluster::builder("test")
        .nodes(nodes)
        .shards(shards)
        .rf(rf)
        .node_args(&["--pool-size", "1"])
        .node_args(extra)
        .start()
}

/// Continuous writers, one per shard, recording acknowledged values.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<u32, Vec<i64>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(addrs: Vec<String>, shards: u32, batch: i64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<BTreeMap<u32, Vec<i64>>>> = Arc::new(Mutex::new(BTreeMap::new()));
        let next = Arc::new(AtomicI64::new(1));
        let tasks = (0..shards)
            .map(|shard| {
                let (stop, acked, next, addrs) =
                    (stop.clone(), acked.clone(), next.clone(), addrs.clone());
                tokio::spawn(async move {
                    let mut router = LeaderClient::new(addrs);
                    while !stop.load(Ordering::Relaxed) {
                        let first = next.fetch_add(batch, Ordering::Relaxed);
                        let values: Vec<i64> = (first..first + batch).collect();
                        let ipc = points_ipc(&values);
                        match router
                            .write(shard, TABLE, ipc, Duration::from_secs(3))
                            .await
                        {
                            Outcome::Acked => {
                                acked.lock().await.entry(shard).or_default().extend(values)
                            }
                            Outcome::Failed(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await
                            }
                        }
                    }
                })
            })
            .collect();
        Load { stop, acked, tasks }
    }

    async fn acked_total(&self) -> usize {
        self.acked.lock().await.values().map(Vec::len).sum()
    }

    /// Waits until `more` further points were acknowledged.
    async fn wait_more(&self, more: usize, timeout: Duration) -> Result<()> {
        let want = self.acked_total().await + more;
        eventually(
            &format!("{more} more acknowledged points (writes stalled)"),
            timeout,
            || async { Ok((self.acked_total().await >= want).then_some(())) },
        )
        .await
    }

    async fn finish(self) -> BTreeMap<u32, Vec<i64>> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        let mut acked = self.acked.lock().await.clone();
        for v in acked.values_mut() {
            v.sort_unstable();
        }
        acked
    }
}

async fn verify_all(
    c: &LocalCluster,
    node: u64,
    acked: &BTreeMap<u32, Vec<i64>>,
    strict_raw: bool,
) -> Result<usize> {
    let addr = c
        .nodes
        .iter()
        .find(|n| n.id == node)
        .expect("node")
        .grpc
        .clone();
    let mut total = 0;
    for shard in 0..c.shards {
        let values = acked.get(&shard).cloned().unwrap_or_default();
        ensure!(
            !values.is_empty(),
            "no acknowledged writes on shard {shard}: the test proved nothing"
        );
        let (n, _) = verify_shard(
            &addr,
            shard,
            TABLE,
            &values,
            Duration::from_secs(60),
            strict_raw,
        )
        .await?;
        total += n;
    }
    Ok(total)
}

fn busiest(leaders: &BTreeMap<u32, u64>) -> u64 {
    let mut count: BTreeMap<u64, usize> = BTreeMap::new();
    for l in leaders.values() {
        *count.entry(*l).or_default() += 1;
    }
    count
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map(|(n, _)| n)
        .expect("leaders")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kill9_mid_stream_loses_no_acknowledged_write() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = cluster(3, 4, 3, &["--flush-max-age-ms", "200"])?;
    let leaders = c.wait_leaders(Duration::from_secs(30)).await?;
    let addrs: Vec<String> = c.nodes.iter().map(|n| n.grpc.clone()).collect();
    let load = Load::start(addrs, c.shards, 50);
    load.wait_more(2_000, Duration::from_secs(20)).await?;

    let victim = busiest(&leaders);
    c.node(victim).kill9();
    // The survivors elect new leaders and keep acknowledging.
    load.wait_more(2_000, Duration::from_secs(20)).await?;
    c.node(victim).restart()?;
    c.wait_leaders(Duration::from_secs(30)).await?;
    load.wait_more(2_000, Duration::from_secs(20)).await?;
    let acked = load.finish().await;

    // The restarted node must have caught up, and a survivor must agree.
    let n = verify_all(&c, victim, &acked, false).await?;
    let other = if victim == 1 { 2 } else { 1 };
    verify_all(&c, other, &acked, false).await?;
    eprintln!("verified {n} acknowledged points after kill -9 of leader node {victim}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_cluster_kill9_and_restart_loses_no_acknowledged_write() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = cluster(3, 3, 3, &["--flush-max-age-ms", "500"])?;
    c.wait_leaders(Duration::from_secs(30)).await?;
    let addrs: Vec<String> = c.nodes.iter().map(|n| n.grpc.clone()).collect();
    let load = Load::start(addrs.clone(), c.shards, 50);
    load.wait_more(3_000, Duration::from_secs(20)).await?;
    for n in &mut c.nodes {
        n.kill9();
    }
    let before_restart = load.finish().await;
    for n in &mut c.nodes {
        n.restart()?;
    }
    c.wait_leaders(Duration::from_secs(30)).await?;
    // Everything acknowledged before the crash survived, on every node.
    for id in 1..=3 {
        verify_all(&c, id, &before_restart, false).await?;
    }
    // And the restarted cluster takes writes again.
    let load = Load::start(addrs, c.shards, 50);
    load.wait_more(1_000, Duration::from_secs(20)).await?;
    let after = load.finish().await;
    verify_all(&c, 1, &after, false).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitioned_follower_catches_up_after_healing() -> Result<()> {
    // Partition by SIGSTOP/SIGCONT of the node process: iptables is not
    // installed on these machines, and a stopped process neither sends nor
    // answers Raft traffic, which is what the majority observes.
    let _serial = SERIAL.lock().await;
    let mut c = cluster(3, 3, 3, &["--flush-max-age-ms", "200"])?;
    let leaders = c.wait_leaders(Duration::from_secs(30)).await?;
    let addrs: Vec<String> = c.nodes.iter().map(|n| n.grpc.clone()).collect();
    let load = Load::start(addrs, c.shards, 50);
    load.wait_more(1_000, Duration::from_secs(20)).await?;

    // The node leading the fewest shards plays the partitioned follower.
    let mut lead_count: BTreeMap<u64, usize> = (1..=3).map(|n| (n, 0)).collect();
    for l in leaders.values() {
        *lead_count.entry(*l).or_default() += 1;
    }
    let isolated = lead_count
        .into_iter()
        .min_by_key(|(_, c)| *c)
        .map(|(n, _)| n)
        .expect("nodes");
    c.node(isolated).sigstop();
    let during = tokio::time::Instant::now();
    load.wait_more(3_000, Duration::from_secs(30)).await?;
    let partitioned_for = during.elapsed();
    c.node(isolated).sigcont();
    load.wait_more(1_000, Duration::from_secs(20)).await?;
    let acked = load.finish().await;
    let n = verify_all(&c, isolated, &acked, true).await?;
    eprintln!(
        "isolated node {isolated} for {partitioned_for:?}; it has all {n} acknowledged points"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_replays_exactly_the_unflushed_entries() -> Result<()> {
    let _serial = SERIAL.lock().await;
    // One node, RF=1; flushes only by hand: nothing reaches chDB before the crash.
    let mut c = cluster(
        1,
        2,
        1,
        &[
            "--flush-max-age-ms",
            "3600000",
            "--flush-max-rows",
            "100000000",
        ],
    )?;
    c.wait_leaders(Duration::from_secs(30)).await?;
    let addr = c.nodes[0].grpc.clone();
    let load = Load::start(vec![addr.clone()], c.shards, 100);
    load.wait_more(5_000, Duration::from_secs(20)).await?;
    let acked = load.finish().await;
    // (A query would flush its shard first, so ask the metrics instead.)
    let metrics = reqwest::get(format!("http://{}/metrics", c.nodes[0].http))
        .await?
        .text()
        .await?;
    let flushes = metrics
        .lines()
        .find_map(|l| l.strip_prefix("shardhouse_engine_flushes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    ensure!(
        flushes == Some(0.0),
        "the node flushed before the crash (flushes_total {flushes:?}); the test would not exercise replay"
    );
    c.nodes[0].kill9();
    c.nodes[0].restart_with(&[("--flush-max-age-ms", "200")])?;
    c.wait_leaders(Duration::from_secs(30)).await?;
    let n = verify_all(&c, 1, &acked, true).await?;
    eprintln!("replayed {n} acknowledged points after kill -9 before any flush");

    // A graceful stop flushes and exits cleanly.
    let status = c.nodes[0].terminate()?;
    ensure!(status.success(), "SIGTERM exit status {status}");
    Ok(())
}
