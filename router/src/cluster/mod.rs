//! The router's view of the cluster: the shard map (from etcd, watched:
//! `map_watch`), learned shard leaders, gRPC channels to nodes and per-shard
//! in-flight budgets. Every call to the nodes is an `impl Cluster` here:
//! [`write`] (shard batches with leader retries, `request_path`), [`read`]
//! (a statement or catalog request on one replica of each shard) and
//! [`storage`] (databases, retention and deletes on every shard).

use crate::error::{Error, Result};
use crate::write::batch::ShardBatch;
use crate::write::coalesce::Pending;
use crate::write::node_mux;
use parking_lot::{Mutex, RwLock};
use request_path::LeaderRetry;
use shardhouse_common::credential::{with_credential, ClusterToken, CredentialChannel};
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::shard_map::{keys, ShardMap};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tonic::transport::Endpoint;

mod map_watch;
pub mod read;
pub mod request_path;
pub mod storage;
pub mod storage_op;
pub mod write;

pub use map_watch::watch_shard_map;

/// Largest query result accepted from a node.
const MAX_QUERY_RESULT_BYTES: usize = 512 << 20;

pub struct Cluster {
    cluster_name: String,
    map: RwLock<Option<Arc<ShardMap>>>,
    map_tx: watch::Sender<u64>,
    /// Leaders learned from `NotLeader` answers: shard -> (node id, addr).
    leaders: Mutex<HashMap<u32, (u64, String)>>,
    channels: Mutex<HashMap<String, CredentialChannel>>,
    /// Presented to nodes on every call (they require it when configured).
    cluster_token: Option<ClusterToken>,
    shard_budgets: Mutex<HashMap<u32, Arc<Semaphore>>>,
    max_shard_inflight_bytes: usize,
    retry_after: Duration,
    /// How a shard write follows leaders and backs off (router -> node).
    retry: LeaderRetry,
    /// Per-shard write queues (see `coalesce`), created on first use.
    queues: Mutex<HashMap<u32, mpsc::UnboundedSender<Pending>>>,
    /// Node.Write calls in flight per shard from this router.
    max_shard_rpcs: usize,
    /// Largest coalesced write (a single larger request still goes alone).
    max_coalesce_bytes: usize,
    /// Requests waiting in shard queues for a free write slot.
    queued: Arc<AtomicUsize>,
    /// Per-node call queues (see `node_mux`), created on first use.
    node_queues: Mutex<HashMap<String, mpsc::UnboundedSender<node_mux::Queued>>>,
    /// Node calls in flight per node; 0 sends every shard write as its own
    /// Node.Write.
    max_node_rpcs: usize,
    /// Shard writes waiting in node queues for a call.
    node_waiting: Arc<AtomicUsize>,
    /// Why the last write attempt to each shard failed (cleared when one
    /// commits): a request that times out says why its shard could not
    /// take it (a full WAL disk, an election), not only that time ran out.
    last_failure: Mutex<HashMap<u32, String>>,
}

/// Defaults for [`Cluster::with_write_coalescing`] and
/// [`Cluster::with_node_batching`] (the options' defaults).
pub use crate::config::{
    DEFAULT_MAX_COALESCE_BYTES, DEFAULT_MAX_NODE_RPCS, DEFAULT_MAX_SHARD_RPCS,
};

impl Cluster {
    pub fn new(
        cluster_name: &str,
        max_shard_inflight_bytes: usize,
        retry_after: Duration,
    ) -> Cluster {
        let (map_tx, _) = watch::channel(0);
        Cluster {
            cluster_name: cluster_name.to_owned(),
            map: RwLock::new(None),
            map_tx,
            leaders: Mutex::default(),
            channels: Mutex::default(),
            cluster_token: None,
            shard_budgets: Mutex::default(),
            max_shard_inflight_bytes: max_shard_inflight_bytes.min(u32::MAX as usize),
            retry_after,
            retry: LeaderRetry::default(),
            queues: Mutex::default(),
            max_shard_rpcs: DEFAULT_MAX_SHARD_RPCS,
            max_coalesce_bytes: DEFAULT_MAX_COALESCE_BYTES,
            queued: Arc::default(),
            node_queues: Mutex::default(),
            max_node_rpcs: DEFAULT_MAX_NODE_RPCS,
            node_waiting: Arc::default(),
            last_failure: Mutex::default(),
        }
    }

    /// The cluster credential presented to nodes (None: nodes run without).
    pub fn with_cluster_token(mut self, token: Option<ClusterToken>) -> Cluster {
        self.cluster_token = token;
        self
    }

    /// How many calls per node may be in flight from this router; shard
    /// writes queued meanwhile go together as one Node.WriteMany. 0 turns
    /// batching off (one Node.Write per shard write).
    pub fn with_node_batching(mut self, max_node_rpcs: usize) -> Cluster {
        self.max_node_rpcs = max_node_rpcs;
        self
    }

    /// How many writes per shard may be in flight from this router
    /// (`max_rpcs` >= 1; 1 serializes a shard's writes) and how large a
    /// coalesced write may grow.
    pub fn with_write_coalescing(mut self, max_rpcs: usize, max_bytes: usize) -> Cluster {
        self.max_shard_rpcs = max_rpcs.max(1);
        self.max_coalesce_bytes = max_bytes.max(1);
        self
    }

    /// Installs a shard map (from etcd, or directly in tests). Older epochs
    /// than the current one are ignored.
    pub fn set_shard_map(&self, map: ShardMap) {
        let mut cur = self.map.write();
        if let Some(c) = cur.as_ref() {
            if map.epoch < c.epoch {
                tracing::warn!(
                    old = map.epoch,
                    current = c.epoch,
                    "ignoring older shard map"
                );
                return;
            }
        }
        tracing::info!(
            epoch = map.epoch,
            shards = map.shard_count,
            "shard map installed"
        );
        let epoch = map.epoch;
        *cur = Some(Arc::new(map));
        drop(cur);
        // The map's leader hints are fresher than what we learned before.
        self.leaders.lock().clear();
        self.map_tx.send_replace(epoch);
    }

    pub fn shard_map(&self) -> Result<Arc<ShardMap>> {
        self.map
            .read()
            .clone()
            .ok_or_else(|| Error::NoShardMap(keys::shard_map(&self.cluster_name)))
    }

    /// Waits until a shard map is installed.
    pub async fn wait_for_shard_map(&self) {
        let mut rx = self.map_tx.subscribe();
        while self.map.read().is_none() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    pub(crate) fn channel(&self, addr: &str) -> Result<CredentialChannel> {
        let mut channels = self.channels.lock();
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let ep = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Error::Internal(format!("bad node address {addr:?}: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true);
        let c = with_credential(ep.connect_lazy(), self.cluster_token.as_ref());
        channels.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    pub(crate) fn node_client(&self, addr: &str) -> Result<NodeClient<CredentialChannel>> {
        Ok(NodeClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_QUERY_RESULT_BYTES)
            .max_encoding_message_size(usize::MAX))
    }

    fn budget(&self, shard: u32) -> Arc<Semaphore> {
        self.shard_budgets
            .lock()
            .entry(shard)
            .or_insert_with(|| Arc::new(Semaphore::new(self.max_shard_inflight_bytes)))
            .clone()
    }

    /// Takes in-flight budget for every batch or none: a saturated shard
    /// answers 429 at once instead of queueing.
    pub fn reserve(&self, batches: &[ShardBatch]) -> Result<Vec<OwnedSemaphorePermit>> {
        let mut per_shard: HashMap<u32, usize> = HashMap::new();
        for b in batches {
            *per_shard.entry(b.shard).or_default() += b.bytes;
        }
        let mut permits = Vec::with_capacity(per_shard.len());
        for (shard, bytes) in per_shard {
            // A batch bigger than the whole budget still goes alone.
            let n = bytes.clamp(1, self.max_shard_inflight_bytes) as u32;
            match self.budget(shard).try_acquire_many_owned(n) {
                Ok(p) => permits.push(p),
                Err(_) => {
                    return Err(Error::Overloaded(
                        format!("shard {shard} has too many bytes in flight"),
                        self.retry_after,
                    ))
                }
            }
        }
        Ok(permits)
    }

    /// Where to send a write for `shard` first: a learned leader, else the
    /// map's hint, else the first replica.
    pub(crate) fn first_target(&self, map: &ShardMap, shard: u32) -> Result<(u64, String)> {
        if let Some(l) = self.leaders.lock().get(&shard) {
            return Ok(l.clone());
        }
        let p = map.shard(shard).ok_or_else(|| Error::Unavailable {
            shard,
            reason: format!("shard map epoch {} has no placement for it", map.epoch),
        })?;
        let node = if p.leader_hint != 0 {
            p.leader_hint
        } else {
            *p.replicas.first().ok_or_else(|| Error::Unavailable {
                shard,
                reason: "no replicas placed".into(),
            })?
        };
        let addr = map.addr_of(node).ok_or_else(|| Error::Unavailable {
            shard,
            reason: format!("node {node} has no registered address"),
        })?;
        Ok((node, addr.to_owned()))
    }

    /// The replica after `node` in the shard's placement (round robin).
    pub(crate) fn next_replica(
        &self,
        map: &ShardMap,
        shard: u32,
        node: u64,
    ) -> Option<(u64, String)> {
        let p = map.shard(shard)?;
        if p.replicas.is_empty() {
            return None;
        }
        let i = p
            .replicas
            .iter()
            .position(|&r| r == node)
            .map_or(0, |i| i + 1);
        let next = p.replicas[i % p.replicas.len()];
        Some((next, map.addr_of(next)?.to_owned()))
    }

    /// Shard requests waiting for a write slot right now (all shards).
    pub fn queued_requests(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Shard writes waiting in node queues for a call right now.
    pub fn queued_node_writes(&self) -> usize {
        self.node_waiting.load(Ordering::Acquire)
    }
}
