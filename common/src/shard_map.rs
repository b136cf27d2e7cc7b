//! The shard map: which nodes hold which shard, and who leads it.
//!
//! Stored as JSON in etcd under [`keys::shard_map`]; routers watch it, nodes
//! update leader hints, the operator and `shardhouse-ctl` rewrite placement.
//! `epoch` increases on every change so a stale writer can be detected.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A node process as registered in etcd (under a lease).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node_id: u64,
    /// gRPC address routers and peers dial, `host:port`.
    pub grpc_addr: String,
    /// HTTP address for `/metrics` and health, `host:port`.
    pub http_addr: String,
    /// Cores the process is sized for (it sizes the chDB pool).
    pub cores: u32,
}

/// Placement of one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPlacement {
    pub shard: u32,
    /// Voting replicas (node ids).
    pub replicas: Vec<u64>,
    /// Learners being caught up during a move.
    #[serde(default)]
    pub learners: Vec<u64>,
    /// Last known leader; 0 when unknown. A hint only: the node answers
    /// `NotLeader` with a better one when it is stale.
    #[serde(default)]
    pub leader_hint: u64,
}

/// The whole map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    pub epoch: u64,
    pub shard_count: u32,
    pub replication_factor: u32,
    pub shards: Vec<ShardPlacement>,
    /// Known nodes by id.
    pub nodes: BTreeMap<u64, NodeInfo>,
}

impl ShardMap {
    /// The placement of `shard`, if it exists.
    pub fn shard(&self, shard: u32) -> Option<&ShardPlacement> {
        self.shards.get(shard as usize).filter(|p| p.shard == shard)
    }

    /// gRPC address of a node.
    pub fn addr_of(&self, node_id: u64) -> Option<&str> {
        self.nodes.get(&node_id).map(|n| n.grpc_addr.as_str())
    }

    /// Round-robin initial placement: shard `s` goes to `rf` consecutive
    /// nodes starting at `s mod n`; the first replica is the leader hint.
    pub fn initial(shard_count: u32, replication_factor: u32, nodes: Vec<NodeInfo>) -> ShardMap {
        let ids: Vec<u64> = nodes.iter().map(|n| n.node_id).collect();
        let rf = (replication_factor as usize).min(ids.len()).max(1);
        let shards = (0..shard_count)
            .map(|s| {
                let replicas: Vec<u64> =
                    (0..rf).map(|i| ids[(s as usize + i) % ids.len()]).collect();
                ShardPlacement {
                    shard: s,
                    leader_hint: replicas[0],
                    replicas,
                    learners: vec![],
                }
            })
            .collect();
        ShardMap {
            epoch: 1,
            shard_count,
            replication_factor: rf as u32,
            shards,
            nodes: nodes.into_iter().map(|n| (n.node_id, n)).collect(),
        }
    }
}

/// etcd key layout, all under `/shardhouse/<cluster>/`.
pub mod keys {
    pub fn prefix(cluster: &str) -> String {
        format!("/shardhouse/{cluster}/")
    }
    pub fn shard_map(cluster: &str) -> String {
        format!("/shardhouse/{cluster}/shardmap")
    }
    pub fn nodes_prefix(cluster: &str) -> String {
        format!("/shardhouse/{cluster}/nodes/")
    }
    pub fn node(cluster: &str, node_id: u64) -> String {
        format!("/shardhouse/{cluster}/nodes/{node_id}")
    }
    pub fn rebalance_plan(cluster: &str) -> String {
        format!("/shardhouse/{cluster}/rebalance")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64) -> NodeInfo {
        NodeInfo {
            node_id: id,
            grpc_addr: format!("127.0.0.1:{}", 7000 + id),
            http_addr: format!("127.0.0.1:{}", 8000 + id),
            cores: 2,
        }
    }

    #[test]
    fn initial_placement_spreads_replicas_and_leaders() {
        let map = ShardMap::initial(6, 3, vec![node(1), node(2), node(3)]);
        assert_eq!(map.shards.len(), 6);
        for p in &map.shards {
            let mut r = p.replicas.clone();
            r.sort();
            r.dedup();
            assert_eq!(r.len(), 3, "distinct replicas for shard {}", p.shard);
        }
        let mut leaders = BTreeMap::new();
        for p in &map.shards {
            *leaders.entry(p.leader_hint).or_insert(0) += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    #[test]
    fn rf_is_capped_by_node_count_and_map_round_trips_as_json() {
        let map = ShardMap::initial(4, 3, vec![node(1)]);
        assert_eq!(map.replication_factor, 1);
        let json = serde_json::to_string(&map).unwrap();
        let back: ShardMap = serde_json::from_str(&json).unwrap();
        assert_eq!(back, map);
        assert_eq!(back.shard(3).unwrap().replicas, vec![1]);
        assert_eq!(back.addr_of(1), Some("127.0.0.1:7001"));
    }
}
