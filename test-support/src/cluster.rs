//! A local cluster of real processes: etcd, N `shardhouse-node`s that
//! create the shard map (`--init-cluster shards=S,rf=R,nodes=N`) and M
//! `shardhouse-router`s, in one temp dir; everything is killed on drop.
//!
//! ```no_run
//! # fn f() -> anyhow::Result<()> {
//! let mut c = shardhouse_test_support::LocalCluster::builder("demo")
//!     .nodes(3).shards(8).rf(3).routers(1)
//!     .start()?;
//! let url = c.router_url();
//! c.node(2).kill9();
//! c.node(2).restart()?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use shardhouse_common::proto::{admin_client::AdminClient, ShardStatesRequest};

use crate::etcd::Etcd;
use crate::node::{node_args, NodeProc};
use crate::router::RouterProc;
use crate::wait::eventually;

pub struct LocalClusterBuilder {
    name: String,
    nodes: u64,
    shards: u32,
    rf: u32,
    routers: usize,
    node_args: Vec<String>,
    router_args: Vec<String>,
    bin_dir: Option<PathBuf>,
}

impl LocalClusterBuilder {
    /// Node count (default 1).
    pub fn nodes(mut self, n: u64) -> Self {
        self.nodes = n;
        self
    }

    /// Shard count (default 2).
    pub fn shards(mut self, n: u32) -> Self {
        self.shards = n;
        self
    }

    /// Replication factor (default 1).
    pub fn rf(mut self, n: u32) -> Self {
        self.rf = n;
        self
    }

    /// Router processes (default 0).
    pub fn routers(mut self, n: usize) -> Self {
        self.routers = n;
        self
    }

    /// Extra flags for every node.
    pub fn node_args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.node_args
            .extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Extra flags for every router.
    pub fn router_args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.router_args
            .extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Where the binaries are (default: see `process::workspace_binary`).
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Starts etcd, then the nodes in parallel (each loads chDB, which
    /// takes a moment), then the routers.
    pub fn start(self) -> Result<LocalCluster> {
        crate::dirs::chdb_dir()?;
        let etcd = Etcd::start()?;
        let dir = crate::dirs::temp_dir(&format!("shardhouse-{}", self.name))?;
        let init = format!("shards={},rf={},nodes={}", self.shards, self.rf, self.nodes);
        let handles: Vec<_> = (1..=self.nodes)
            .map(|id| {
                let data_dir = dir.path().join(format!("node-{id}"));
                let mut args = node_args(id, &data_dir, &etcd.endpoint, &self.name)?;
                args.extend(["--init-cluster".to_owned(), init.clone()]);
                args.extend(self.node_args.iter().cloned());
                let bin_dir = self.bin_dir.clone();
                Ok(std::thread::spawn(move || {
                    NodeProc::start(id, &data_dir, args, bin_dir.as_deref())
                }))
            })
            .collect::<Result<_>>()?;
        let mut nodes = Vec::new();
        for h in handles {
            nodes.push(h.join().map_err(|_| anyhow!("node start panicked"))??);
        }
        let routers = (0..self.routers)
            .map(|i| {
                let log = if i == 0 {
                    "router.log".to_owned()
                } else {
                    format!("router-{i}.log")
                };
                RouterProc::start(
                    dir.path(),
                    &log,
                    &etcd.endpoint,
                    &self.name,
                    &self.router_args,
                    self.bin_dir.as_deref(),
                )
            })
            .collect::<Result<_>>()?;
        Ok(LocalCluster {
            routers,
            nodes,
            shards: self.shards,
            name: self.name,
            etcd,
            dir,
        })
    }
}

/// The running cluster. Fields drop in order: routers, nodes, etcd, dir.
pub struct LocalCluster {
    pub routers: Vec<RouterProc>,
    pub nodes: Vec<NodeProc>,
    pub shards: u32,
    /// The cluster name in etcd.
    pub name: String,
    pub etcd: Etcd,
    pub dir: tempfile::TempDir,
}

impl LocalCluster {
    /// A builder for cluster `name`: 1 node, 2 shards, RF 1, no router.
    pub fn builder(name: &str) -> LocalClusterBuilder {
        LocalClusterBuilder {
            name: name.to_owned(),
            nodes: 1,
            shards: 2,
            rf: 1,
            routers: 0,
            node_args: Vec::new(),
            router_args: Vec::new(),
            bin_dir: None,
        }
    }

    /// The node with id `id` (ids start at 1).
    pub fn node(&mut self, id: u64) -> &mut NodeProc {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node id")
    }

    /// The first router's HTTP base URL.
    pub fn router_url(&self) -> String {
        self.routers.first().expect("a router").url()
    }

    /// (id, gRPC address) of the nodes running and not stopped.
    pub fn live_addrs(&self) -> Vec<(u64, String)> {
        self.nodes
            .iter()
            .filter(|n| n.running())
            .map(|n| (n.id, n.grpc.clone()))
            .collect()
    }

    /// shard -> leader node id, as reported by the leaders themselves.
    pub async fn leaders(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for (id, addr) in self.live_addrs() {
            let Ok(Ok(mut c)) = tokio::time::timeout(
                Duration::from_secs(2),
                AdminClient::connect(format!("http://{addr}")),
            )
            .await
            else {
                continue;
            };
            let Ok(Ok(r)) = tokio::time::timeout(
                Duration::from_secs(2),
                c.shard_states(ShardStatesRequest {}),
            )
            .await
            else {
                continue;
            };
            for s in r.into_inner().shards {
                if s.role == "leader" {
                    out.insert(s.shard, id);
                }
            }
        }
        out
    }

    /// Waits until every shard has a live leader.
    pub async fn wait_leaders(&self, timeout: Duration) -> Result<BTreeMap<u32, u64>> {
        eventually("a leader for every shard", timeout, || async {
            let l = self.leaders().await;
            if l.len() != self.shards as usize {
                bail!(
                    "only {} of {} shards have a leader: {l:?}",
                    l.len(),
                    self.shards
                );
            }
            Ok(Some(l))
        })
        .await
    }
}
