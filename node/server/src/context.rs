//! State shared by the gRPC services, the etcd tasks and HTTP.

use crate::admission::Admission;
use crate::directory::PeerDirectory;
use parking_lot::RwLock;
use shardhouse_common::credential::ClusterToken;
use shardhouse_common::proto::NotLeader;
use shardhouse_common::shard_map::ShardMap;
use shardhouse_engine::Engine;
use shardhouse_wal::Wal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct NodeContext {
    pub node_id: u64,
    pub wal: Arc<Wal>,
    pub engine: Arc<Engine>,
    pub admission: Arc<Admission>,
    pub directory: Arc<PeerDirectory>,
    /// Latest shard map seen in etcd, None before the cluster is initialised.
    pub shard_map: RwLock<Option<ShardMap>>,
    /// Set once both servers listen and the node registered itself.
    pub ready: AtomicBool,
    /// The cluster credential this node requires and presents to peers.
    pub cluster_token: Option<ClusterToken>,
}

impl NodeContext {
    /// gRPC address of a node: the shard map's node table first (what routers
    /// use), then live registrations.
    pub fn addr_of(&self, node: u64) -> Option<String> {
        if let Some(a) = self
            .shard_map
            .read()
            .as_ref()
            .and_then(|m| m.addr_of(node).map(str::to_owned))
        {
            return Some(a);
        }
        self.directory.addr(node)
    }

    /// A NotLeader answer for `leader_hint` (None/0 = election in progress).
    pub fn not_leader(&self, leader_hint: Option<u64>) -> NotLeader {
        let hint = leader_hint.unwrap_or(0);
        let leader_addr = if hint == 0 || hint == self.node_id {
            String::new()
        } else {
            self.addr_of(hint).unwrap_or_default()
        };
        NotLeader {
            leader_hint: hint,
            leader_addr,
        }
    }

    /// Leader hint of a shard according to the shard map.
    pub fn mapped_leader(&self, shard: u32) -> Option<u64> {
        self.shard_map
            .read()
            .as_ref()
            .and_then(|m| m.shard(shard).map(|p| p.leader_hint))
            .filter(|&l| l != 0 && l != self.node_id)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}
