//! WAL group-commit benchmark: real `Wal`s with fsync on a temp dir, an
//! in-process transport for RF=3, and a no-op state machine that reports
//! everything applied as flushed (so compaction runs). Prints figures; no
//! assertions.
//!
//! cargo run --release -p shardhouse-wal --example wal_bench -- [rf] [shards] [seconds] [entry_kb] [proposers_per_shard]

// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shardhouse_wal::eraftpb::Message;
use shardhouse_wal::{
    ApplyOutcome, NodeId, Role, ShardId, StateMachine, StateMachineError, Transport, Wal, WalConfig,
};

#[derive(Default)]
struct Net {
    nodes: Mutex<HashMap<NodeId, Arc<Wal>>>,
}

struct NetTransport(Arc<Net>);

impl Transport for NetTransport {
    fn send(&self, to: NodeId, msgs: Vec<(ShardId, Message)>) {
        if let Some(w) = self.0.nodes.lock().get(&to).cloned() {
            for (s, m) in msgs {
                let _ = w.step(s, m);
            }
        }
    }
}

#[derive(Default)]
struct NullSm {
    applied: Mutex<HashMap<ShardId, u64>>,
    bytes: AtomicU64,
}

impl StateMachine for NullSm {
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &bytes::Bytes,
    ) -> Result<ApplyOutcome, StateMachineError> {
        self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.applied.lock().insert(shard, index);
        Ok(ApplyOutcome::Applied)
    }
    fn flushed_index(&self, shard: ShardId) -> u64 {
        self.applied.lock().get(&shard).copied().unwrap_or(0)
    }
    fn snapshot(&self, shard: ShardId) -> Result<(u64, Vec<u8>), StateMachineError> {
        Ok((self.flushed_index(shard), Vec::new()))
    }
    fn restore(&self, shard: ShardId, index: u64, _: &[u8]) -> Result<(), StateMachineError> {
        self.applied.lock().insert(shard, index);
        Ok(())
    }
}

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rf = arg(1, 1);
    let shards = arg(2, 8) as ShardId;
    let secs = arg(3, 10);
    let entry_kb = arg(4, 300) as usize;
    let per_shard = arg(5, 4);
    let points_per_entry = 10_000u64;

    let tmp =
        tempfile::tempdir_in(std::env::var("WAL_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))?;
    let net = Arc::new(Net::default());
    let ids: Vec<NodeId> = (1..=rf).collect();
    let mut wals = HashMap::new();
    for &id in &ids {
        let cfg = WalConfig {
            node_id: id,
            dir: tmp.path().join(format!("n{id}")),
            compact_interval: Duration::from_secs(1),
            ..Default::default()
        };
        let w = Wal::open(
            cfg,
            Arc::new(NetTransport(net.clone())),
            Arc::new(NullSm::default()),
        )?;
        net.nodes.lock().insert(id, w.clone());
        wals.insert(id, w);
    }
    for s in 0..shards {
        for id in &ids {
            wals[id].create_replica(s, &ids)?;
        }
    }
    // Wait for leaders.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut leaders: HashMap<ShardId, NodeId> = HashMap::new();
    while leaders.len() < shards as usize {
        anyhow::ensure!(Instant::now() < deadline, "no leaders after 60 s");
        for id in &ids {
            for st in wals[id].shard_states() {
                if st.role == Role::Leader {
                    leaders.insert(st.shard, *id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let payload = vec![7u8; entry_kb * 1024];
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(Mutex::new(Vec::<u64>::new()));
    let before: HashMap<NodeId, _> = ids.iter().map(|id| (*id, wals[id].stats())).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..shards {
        for _ in 0..per_shard {
            let w = wals[&leaders[&s]].clone();
            let (stop, committed, rejected, lat, payload) = (
                stop.clone(),
                committed.clone(),
                rejected.clone(),
                lat.clone(),
                payload.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    match w.propose(s, payload.clone()).await {
                        Ok(_) => {
                            committed.fetch_add(1, Ordering::Relaxed);
                            lat.lock().push(t.elapsed().as_micros() as u64);
                        }
                        Err(shardhouse_wal::WalError::Overloaded { retry_after_ms }) => {
                            rejected.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(retry_after_ms)).await;
                        }
                        Err(e) => {
                            eprintln!("propose error: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = committed.load(Ordering::Relaxed);
    let mut l = lat.lock().clone();
    l.sort_unstable();
    let pct = |p: f64| {
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    println!(
        "wal_bench rf={rf} shards={shards} entry={entry_kb}KiB proposers/shard={per_shard} secs={elapsed:.1}"
    );
    println!(
        "  committed {n} entries: {:.0} entries/s, {:.1} MiB/s, {:.0} points/s (at {points_per_entry} points/entry); overloaded rejections {}",
        n as f64 / elapsed,
        n as f64 * payload.len() as f64 / elapsed / (1 << 20) as f64,
        n as f64 * points_per_entry as f64 / elapsed,
        rejected.load(Ordering::Relaxed)
    );
    println!(
        "  commit latency ms: p50 {:.1} p99 {:.1} max {:.1}",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    for id in &ids {
        let a = wals[id].stats();
        let b = before[id];
        let batches = a.synced_batches - b.synced_batches;
        let entries = a.synced_entries - b.synced_entries;
        println!(
            "  node {id}: {batches} synced batches, mean {:.2} entries per synced batch",
            if batches == 0 {
                0.0
            } else {
                entries as f64 / batches as f64
            }
        );
    }
    for w in wals.values() {
        w.shutdown();
    }
    Ok(())
}
