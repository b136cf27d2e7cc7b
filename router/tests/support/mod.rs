//! Real parts for the router's end-to-end tests: etcd, `shardhouse-node`
//! processes (RocksDB WAL + chDB) and the `shardhouse-router` binary, a
//! thin layer over `shardhouse-test-support` that keeps the names these
//! tests use.
//!
//! Needs: `etcd` on the PATH, chDB at `$SHARDHOUSE_CHDB_DIR` (default
//! `.deps/chdb`), and the node binary (`cargo build --release -p
//! shardhouse-node`). Missing pieces fail the test with a clear message.
// Each test file uses part of this module.
#![allow(dead_code, unused_imports)]

use anyhow::Result;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use shardhouse_test_support::node::NodeProc;
pub use shardhouse_test_support::process::{ready_field as field, spawn_ready, Proc};
pub use shardhouse_test_support::{chdb_dir, LocalCluster};
use shardhouse_test_support::{node::node_args, process::workspace_binary, RouterProc};

/// Where cargo put the router binary (and, built first, the node's).
pub fn bin_dir() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_shardhouse-router"))
        .parent()
        .expect("router binary has a parent dir")
}

pub fn free_port() -> Result<u16> {
    Ok(shardhouse_test_support::free_port())
}

pub fn node_binary() -> Result<PathBuf> {
    workspace_binary("shardhouse-node", Some(bin_dir()))
}

/// Polls `f` until `Ok(Some(v))`; see `shardhouse_test_support::eventually`.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    shardhouse_test_support::eventually(what, timeout, f).await
}

/// Starts etcd on free loopback ports (data under `dir`) and waits until
/// it serves.
pub async fn start_etcd(dir: &Path) -> Result<(Proc, String)> {
    shardhouse_test_support::etcd::spawn_etcd(dir)
}

/// A node process that can be killed with SIGKILL and started again on
/// its data directory and ports.
pub struct Node(pub NodeProc);

impl Node {
    /// Node `id` with its data under `dir/node-<id>`, creating the shard
    /// map `init` (`shards=S,rf=R,nodes=N`) if absent, plus `extra` flags.
    pub fn start(
        id: u64,
        dir: &Path,
        etcd_url: &str,
        cluster: &str,
        init: &str,
        extra: &[&str],
    ) -> Result<Node> {
        let data_dir = dir.join(format!("node-{id}"));
        let mut args = node_args(id, &data_dir, etcd_url, cluster)?;
        args.extend(["--init-cluster".to_owned(), init.to_owned()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Ok(Node(NodeProc::start(id, &data_dir, args, Some(bin_dir()))?))
    }

    /// SIGKILL (no shutdown, no final flush), then start again.
    pub fn kill9_and_restart(&mut self) -> Result<()> {
        self.0.restart()
    }
}

impl Deref for Node {
    type Target = NodeProc;
    fn deref(&self) -> &NodeProc {
        &self.0
    }
}

impl DerefMut for Node {
    fn deref_mut(&mut self) -> &mut NodeProc {
        &mut self.0
    }
}

/// Starts the router binary; returns it and its HTTP base URL.
pub fn start_router(dir: &Path, etcd_url: &str, cluster: &str) -> Result<(Proc, String)> {
    let r = RouterProc::start(dir, "router.log", etcd_url, cluster, &[], Some(bin_dir()))?;
    let url = r.url();
    Ok((r.into_proc(), url))
}

/// `nodes` node processes creating `shards` shards at `rf` (with `extra`
/// node flags) and one router, all of cluster `name`.
pub fn cluster(
    name: &str,
    nodes: u64,
    shards: u32,
    rf: u32,
    extra: &[&str],
) -> Result<LocalCluster> {
    LocalCluster::builder(name)
        .nodes(nodes)
        .shards(shards)
        .rf(rf)
        .routers(1)
        .node_args(extra)
        .bin_dir(bin_dir())
        .start()
}

/// xorshift64: deterministic test data from a printed seed (no extra
/// dependency).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One metric's value on the node whose HTTP address is `node_http`
/// (its first sample without labels), `None` when the node has none.
pub async fn node_metric(
    http: &reqwest::Client,
    node_http: &str,
    name: &str,
) -> Result<Option<f64>> {
    let text = http
        .get(format!("http://{node_http}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse::<f64>())
        .transpose()
        .map_err(Into::into)
}

/// Wall-clock now, Unix nanoseconds.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Waits until a write through the router at `base` commits (every shard
/// has a leader), writing into the database `warmup`.
pub async fn wait_writable(http: &reqwest::Client, base: &str) -> Result<()> {
    poll(
        "a committed warm-up write",
        Duration::from_secs(90),
        || async {
            let r = http
                .post(format!("{base}/write?db=warmup"))
                .body("w v=1 1\n")
                .send()
                .await?;
            Ok((r.status().as_u16() == 204).then_some(()))
        },
    )
    .await
}
