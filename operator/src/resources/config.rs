//! The ConfigMap nodes and routers read their settings from.

use super::{config_name, etcd_cluster_key, from_json, meta};
use super::{
    NODE_CHDB_DIR, NODE_DATA_DIR, NODE_GRPC_PORT, NODE_HTTP_PORT, ROUTER_GRPC_PORT,
    ROUTER_HTTP_PORT,
};
use crate::crd::ShardhouseCluster;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

/// Environment shared by nodes and routers (flags of docs/contracts.md as
/// env vars). Changing it does not roll pods, which is why values that must
/// stay put (init shape) live here rather than in the pod template.
pub fn config_map(c: &ShardhouseCluster) -> ConfigMap {
    let etcd = c.etcd_endpoints().join(",");
    let cluster = etcd_cluster_key(c);
    let s = &c.spec;
    from_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(c, config_name(c), "config"),
        "data": {
            "SHARDHOUSE_NODE_ETCD_ENDPOINTS": etcd,
            "SHARDHOUSE_NODE_CLUSTER": cluster,
            "SHARDHOUSE_NODE_GRPC_LISTEN": format!("0.0.0.0:{NODE_GRPC_PORT}"),
            "SHARDHOUSE_NODE_HTTP_LISTEN": format!("0.0.0.0:{NODE_HTTP_PORT}"),
            "SHARDHOUSE_NODE_DATA_DIR": NODE_DATA_DIR,
            "SHARDHOUSE_NODE_CHDB_DIR": NODE_CHDB_DIR,
            "SHARDHOUSE_NODE_CORES": s.nodes.cores.to_string(),
            "SHARDHOUSE_NODE_POOL_SIZE": s.nodes.cores.to_string(),
            // The first `rf` nodes write the initial map; every later node
            // receives replicas through the operator's rebalance, the same
            // path scale-out uses.
            "SHARDHOUSE_NODE_INIT_CLUSTER": format!(
                "shards={},rf={},nodes={}", s.shard_count, s.replication_factor, s.replication_factor),
            "SHARDHOUSE_ROUTER_ETCD_ENDPOINTS": etcd,
            "SHARDHOUSE_ROUTER_CLUSTER": cluster,
            "SHARDHOUSE_ROUTER_HTTP_LISTEN": format!("0.0.0.0:{ROUTER_HTTP_PORT}"),
            "SHARDHOUSE_ROUTER_GRPC_LISTEN": format!("0.0.0.0:{ROUTER_GRPC_PORT}"),
        }
    }))
}
