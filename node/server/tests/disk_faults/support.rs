//! What the disk fault tests share: a size-limited tmpfs under a node's
//! data, the fault switches (process environment, set only while nodes
//! start), leaders, metrics, and the check that every acknowledged point is
//! on every replica.

use anyhow::{bail, ensure, Context, Result};
use shardhouse_common::proto::admin_client::AdminClient;
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::proto::write_response::Result as WriteResult;
use shardhouse_common::proto::{TransferLeaderRequest, WriteRequest};
use shardhouse_test_support::arrow::points_ipc;
use shardhouse_test_support::node_client::{query_i64, LeaderClient, Outcome};
use shardhouse_test_support::LocalCluster;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const SHARD: u32 = 0;
pub const FAULT_ENV: &str = "SHARDHOUSE_TEST_FAULT_DISK";

/// Nodes read their fault switches from the environment when they start;
/// tests of this file run in parallel, so starts take turns.
static ENV_LOCK: Mutex<()> = Mutex::new(());

/// Runs `f` (which starts nodes) with `SHARDHOUSE_TEST_FAULT_DISK=spec`.
pub fn with_faults<T>(spec: Option<&str>, f: impl FnOnce() -> T) -> T {
    let _g = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    match spec {
        Some(s) => std::env::set_var(FAULT_ENV, s),
        None => std::env::remove_var(FAULT_ENV),
    }
    let r = f();
    std::env::remove_var(FAULT_ENV);
    r
}

/// A 3-node, 1-shard, RF=3 cluster started with `spec`.
pub async fn cluster(name: &str, spec: Option<&str>, args: &[&str]) -> Result<LocalCluster> {
    let c = with_faults(spec, || {
        LocalCluster::builder(name)
            .nodes(3)
            .shards(1)
            .rf(3)
            .node_args(args)
            .start()
    })?;
    c.wait_leaders(Duration::from_secs(60)).await?;
    Ok(c)
}

/// A size-limited tmpfs mounted at a directory; unmounted on drop.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Moves `dir` (of a stopped node) onto a new `mib` MiB tmpfs. Err with
    /// the reason where this process may not mount (not root).
    pub fn take_over(dir: &Path, mib: u64) -> Result<Tmpfs> {
        let before = dir.with_extension("before-tmpfs");
        std::fs::rename(dir, &before)?;
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .output()?;
        if !out.status.success() {
            std::fs::remove_dir(dir)?;
            std::fs::rename(&before, dir)?;
            bail!(
                "cannot mount a tmpfs at {} (needs root): {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let fs = Tmpfs {
            dir: dir.to_path_buf(),
        };
        let cp = Command::new("cp")
            .arg("-a")
            .arg(before.join("."))
            .arg(dir)
            .status()?;
        ensure!(
            cp.success(),
            "copying {} onto the tmpfs failed",
            before.display()
        );
        std::fs::remove_dir_all(&before)?;
        Ok(fs)
    }

    /// Fills the filesystem until `leave` bytes are free; returns the
    /// ballast file (delete it to free the space again).
    pub fn fill(&self, leave: u64) -> Result<PathBuf> {
        use std::io::Write;
        let ballast = self.dir.join("ballast");
        let mut f = std::fs::File::create(&ballast)?;
        let chunk = vec![0xA5u8; 1 << 20];
        loop {
            let free = free_bytes(&self.dir)?;
            if free <= leave {
                break;
            }
            let n = (free - leave).min(chunk.len() as u64) as usize;
            match f.write_all(&chunk[..n]) {
                Ok(()) => {}
                // Full to the last block.
                Err(e) if e.raw_os_error() == Some(libc_enospc()) => break,
                Err(e) => return Err(e.into()),
            }
        }
        f.sync_all().ok();
        Ok(ballast)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a node killed a moment ago may still hold files open.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn libc_enospc() -> i32 {
    28
}

pub fn free_bytes(dir: &Path) -> Result<u64> {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .context("df output")
}

/// Prints why a test cannot run here and whether it was skipped.
pub fn skip(test: &str, why: &anyhow::Error) {
    eprintln!("SKIPPED {test}: {why:#} (run as root to mount a tmpfs)");
}

pub async fn admin(addr: &str) -> Result<AdminClient<tonic::transport::Channel>> {
    Ok(AdminClient::connect(format!("http://{addr}")).await?)
}

/// Makes node `to` the leader of `SHARD`.
pub async fn make_leader(cluster: &mut LocalCluster, to: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leaders = cluster.wait_leaders(Duration::from_secs(30)).await?;
        let leader = leaders[&SHARD];
        if leader == to {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "node {to} never became leader");
        let addr = cluster.node(leader).grpc.clone();
        let _ = admin(&addr)
            .await?
            .transfer_leader(TransferLeaderRequest {
                shard: SHARD,
                to_node: to,
            })
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Any node other than `not`, made leader.
pub async fn lead_elsewhere(cluster: &mut LocalCluster, not: u64) -> Result<u64> {
    let leader = cluster.wait_leaders(Duration::from_secs(30)).await?[&SHARD];
    if leader != not {
        return Ok(leader);
    }
    let to = if not == 1 { 2 } else { 1 };
    make_leader(cluster, to).await?;
    Ok(to)
}

/// Sum of a metric's samples whose line contains `labels`.
pub async fn metric(http: &str, name: &str, labels: &str) -> Result<f64> {
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

pub async fn health(http: &str) -> Result<String> {
    Ok(reqwest::get(format!("http://{http}/health"))
        .await?
        .text()
        .await?)
}

/// One write straight to the node at `addr`, its answer as text
/// ("committed", or the kind and reason).
pub async fn write_at(addr: &str, values: &[i64]) -> Result<String> {
    let mut c = NodeClient::connect(format!("http://{addr}")).await?;
    let r = c
        .write(WriteRequest {
            shard: SHARD,
            measurement: "m".into(),
            points_ipc: points_ipc(values).into(),
            database: shardhouse_test_support::node_client::TEST_DATABASE.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .result;
    Ok(match r {
        Some(WriteResult::Committed(_)) => "committed".into(),
        Some(WriteResult::Overloaded(o)) => {
            format!(
                "overloaded (retry after {} ms): {}",
                o.retry_after_ms, o.reason
            )
        }
        Some(WriteResult::Unavailable(u)) => format!("unavailable: {}", u.reason),
        Some(WriteResult::Rejected(r)) => format!("rejected: {}", r.reason),
        Some(WriteResult::NotLeader(_)) => "not leader".into(),
        None => "empty".into(),
    })
}

/// Acknowledged writes, one batch of values per request.
pub struct Ledger {
    pub client: LeaderClient,
    pub acked: Vec<i64>,
    pub failures: Vec<String>,
    next: i64,
}

impl Ledger {
    pub fn new(cluster: &LocalCluster) -> Ledger {
        let addrs = cluster.live_addrs().into_iter().map(|(_, a)| a).collect();
        Ledger {
            client: LeaderClient::new(addrs),
            acked: Vec::new(),
            failures: Vec::new(),
            next: 1,
        }
    }

    /// Writes `n` new values in one request; true when acknowledged.
    pub async fn write(&mut self, n: usize, deadline: Duration) -> bool {
        let values: Vec<i64> = (self.next..self.next + n as i64).collect();
        self.next += n as i64;
        match self
            .client
            .write(SHARD, "m", points_ipc(&values), deadline)
            .await
        {
            Outcome::Acked => {
                self.acked.extend(values);
                true
            }
            Outcome::Failed(why) => {
                self.failures.push(why);
                false
            }
        }
    }

    /// Values of the next request (for a raw write outside the ledger).
    pub fn take(&mut self, n: usize) -> Vec<i64> {
        let values: Vec<i64> = (self.next..self.next + n as i64).collect();
        self.next += n as i64;
        values
    }
}

/// Every running replica holds every acknowledged value (waiting up to
/// `timeout` for followers to catch up).
pub async fn every_replica_has(
    cluster: &LocalCluster,
    acked: &[i64],
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    for (id, addr) in cluster.live_addrs() {
        loop {
            let (got, err) = match query_i64(&addr, SHARD, "SELECT v FROM m FINAL ORDER BY v").await
            {
                Ok(got) => (got, String::new()),
                Err(e) => (Vec::new(), format!("; its query failed: {e:#}")),
            };
            let missing: Vec<_> = acked
                .iter()
                .filter(|v| got.binary_search(v).is_err())
                .collect();
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let dir = &cluster
                    .nodes
                    .iter()
                    .find(|n| n.id == id)
                    .expect("live")
                    .data_dir;
                bail!(
                    "node {id}: {} of {} acknowledged points missing (first {:?}){err}; its log:\n{}",
                    missing.len(),
                    acked.len(),
                    &missing[..missing.len().min(10)],
                    log_lines(dir, &["ERROR", "WARN", "replica", "snapshot", "panicked"])
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Lines of a node's log containing any of `words`.
pub fn log_lines(data_dir: &Path, words: &[&str]) -> String {
    std::fs::read_to_string(data_dir.join("node.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| words.iter().any(|w| l.contains(w)))
        .take(20)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The 95th percentile of `d`.
pub fn p95(d: &mut [Duration]) -> Duration {
    d.sort();
    d[(d.len() * 95 / 100).min(d.len() - 1)]
}
