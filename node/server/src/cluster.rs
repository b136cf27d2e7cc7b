//! The node's side of etcd: its registration under a lease, the one-time
//! initial shard map, the shard-map watch that creates replicas placed on
//! this node, and best-effort leader hints for routers.

use crate::context::NodeContext;
use crate::error::{NodeError, Result};
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use shardhouse_common::shard_map::{keys, NodeInfo, ShardMap};
use std::sync::Arc;
use std::time::Duration;

/// Connects to etcd, retrying for up to `deadline` (etcd may start after us).
pub async fn connect(endpoints: &[String], deadline: Duration) -> Result<Client> {
    let start = tokio::time::Instant::now();
    loop {
        match Client::connect(endpoints, None).await {
            Ok(mut c) => match c.status().await {
                Ok(_) => return Ok(c),
                Err(e) if start.elapsed() >= deadline => return Err(e.into()),
                Err(_) => {}
            },
            Err(e) if start.elapsed() >= deadline => return Err(e.into()),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Registers `nodes/<id>` under a lease and keeps it alive for the life of
/// the process; re-registers with a fresh lease if the old one expired
/// (e.g. after an etcd outage longer than the TTL).
pub async fn register(mut client: Client, cluster: String, me: NodeInfo, ttl: i64) -> Result<()> {
    let key = keys::node(&cluster, me.node_id);
    let value = serde_json::to_vec(&me)?;
    let lease = client.lease_grant(ttl, None).await?.id();
    client
        .put(
            key.clone(),
            value.clone(),
            Some(PutOptions::new().with_lease(lease)),
        )
        .await?;
    tokio::spawn(async move {
        let mut lease = lease;
        loop {
            if let Err(e) = keep_alive(&mut client, lease, ttl).await {
                tracing::warn!(error = %e, "etcd lease keep-alive failed; re-registering");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let re = async {
                let l = client.lease_grant(ttl, None).await?.id();
                client
                    .put(
                        key.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(l)),
                    )
                    .await?;
                Ok::<i64, etcd_client::Error>(l)
            };
            match re.await {
                Ok(l) => lease = l,
                Err(e) => tracing::warn!(error = %e, "etcd re-registration failed; retrying"),
            }
        }
    });
    Ok(())
}

async fn keep_alive(client: &mut Client, lease: i64, ttl: i64) -> Result<()> {
    let (mut keeper, mut responses) = client.lease_keep_alive(lease).await?;
    let period = Duration::from_millis((ttl as u64 * 1000 / 3).max(300));
    loop {
        keeper.keep_alive().await?;
        match responses.message().await? {
            Some(r) if r.ttl() > 0 => {}
            _ => return Err(NodeError::Serve(format!("lease {lease} expired"))),
        }
        tokio::time::sleep(period).await;
    }
}

/// Registered nodes, by id.
pub async fn registered_nodes(client: &mut Client, cluster: &str) -> Result<Vec<NodeInfo>> {
    let resp = client
        .get(
            keys::nodes_prefix(cluster),
            Some(GetOptions::new().with_prefix()),
        )
        .await?;
    let mut nodes: Vec<NodeInfo> = resp
        .kvs()
        .iter()
        .filter_map(|kv| serde_json::from_slice(kv.value()).ok())
        .collect();
    nodes.sort_by_key(|n| n.node_id);
    Ok(nodes)
}

/// Waits until `nodes` are registered, then writes `ShardMap::initial`
/// unless some map exists already (create-if-absent transaction, so several
/// nodes started with `--init-cluster` agree on one map).
pub async fn init_cluster(
    mut client: Client,
    cluster: String,
    shards: u32,
    rf: u32,
    nodes: u32,
) -> Result<()> {
    let key = keys::shard_map(&cluster);
    loop {
        if client.get(key.clone(), None).await?.count() > 0 {
            return Ok(());
        }
        let registered = registered_nodes(&mut client, &cluster).await?;
        if registered.len() >= nodes as usize {
            let chosen: Vec<NodeInfo> = registered.into_iter().take(nodes as usize).collect();
            let map = ShardMap::initial(shards, rf, chosen);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), serde_json::to_vec(&map)?, None)]);
            let resp = client.txn(txn).await?;
            if resp.succeeded() {
                tracing::info!(shards, rf, nodes, "initial shard map written");
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates the replicas the map places on this node and remembers the map.
pub fn apply_shard_map(ctx: &NodeContext, map: ShardMap) {
    for (id, info) in &map.nodes {
        ctx.directory.set_fallback(*id, info.grpc_addr.clone());
    }
    for p in &map.shards {
        if ctx.wal.has_replica(p.shard) {
            continue;
        }
        let voters: &[u64] = if p.replicas.contains(&ctx.node_id) {
            &p.replicas
        } else if p.learners.contains(&ctx.node_id) {
            &[]
        } else {
            continue;
        };
        match ctx.wal.create_replica(p.shard, voters) {
            Ok(()) => tracing::info!(shard = p.shard, ?voters, "replica created from shard map"),
            Err(e) => tracing::error!(shard = p.shard, error = %e, "cannot create replica"),
        }
    }
    *ctx.shard_map.write() = Some(map);
}

/// Follows the shard map and node registrations for the life of the process.
pub async fn watch(ctx: Arc<NodeContext>, mut client: Client, cluster: String) {
    let prefix = keys::prefix(&cluster);
    let map_key = keys::shard_map(&cluster);
    let nodes_prefix = keys::nodes_prefix(&cluster);
    let mut backoff = Duration::from_millis(100);
    loop {
        let res: Result<()> = async {
            let snapshot = client
                .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
                .await?;
            let rev = snapshot.header().map_or(0, |h| h.revision());
            for kv in snapshot.kvs() {
                on_put(&ctx, kv.key(), kv.value(), &map_key, &nodes_prefix);
            }
            let mut stream = client
                .watch(
                    prefix.clone(),
                    Some(
                        WatchOptions::new()
                            .with_prefix()
                            .with_start_revision(rev + 1),
                    ),
                )
                .await?;
            while let Some(resp) = stream.message().await? {
                if resp.canceled() {
                    break;
                }
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    match ev.event_type() {
                        EventType::Put => {
                            on_put(&ctx, kv.key(), kv.value(), &map_key, &nodes_prefix)
                        }
                        EventType::Delete => {
                            if let Some(id) = node_id_of(kv.key(), &nodes_prefix) {
                                ctx.directory.remove_registered(id);
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = res {
            tracing::warn!(error = %e, "etcd watch broke; re-reading");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

fn node_id_of(key: &[u8], nodes_prefix: &str) -> Option<u64> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix(nodes_prefix)?
        .parse()
        .ok()
}

fn on_put(ctx: &NodeContext, key: &[u8], value: &[u8], map_key: &str, nodes_prefix: &str) {
    if key == map_key.as_bytes() {
        match serde_json::from_slice::<ShardMap>(value) {
            Ok(map) => apply_shard_map(ctx, map),
            Err(e) => tracing::error!(error = %e, "shard map in etcd is not valid JSON; ignored"),
        }
    } else if node_id_of(key, nodes_prefix).is_some() {
        if let Ok(info) = serde_json::from_slice::<NodeInfo>(value) {
            ctx.directory.set_registered(info.node_id, info.grpc_addr);
        }
    }
}

/// What this node would change in the map: leader hints of shards it leads
/// and its own address if it moved. Pure, so it is unit-tested.
pub fn hint_updates(map: &ShardMap, me: &NodeInfo, led: &[u32]) -> Option<ShardMap> {
    let mut next = map.clone();
    let mut changed = false;
    for &s in led {
        if let Some(p) = next.shards.get_mut(s as usize).filter(|p| p.shard == s) {
            if p.leader_hint != me.node_id && p.replicas.contains(&me.node_id) {
                p.leader_hint = me.node_id;
                changed = true;
            }
        }
    }
    if let Some(info) = next.nodes.get_mut(&me.node_id) {
        if info != me {
            *info = me.clone();
            changed = true;
        }
    }
    if changed {
        next.epoch += 1;
        Some(next)
    } else {
        None
    }
}

/// Periodically publishes leader hints (compare-and-swap on the map's mod
/// revision; losing a race just means trying again next round).
pub async fn publish_leader_hints(
    ctx: Arc<NodeContext>,
    mut client: Client,
    cluster: String,
    me: NodeInfo,
) {
    let key = keys::shard_map(&cluster);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let led: Vec<u32> = ctx
            .wal
            .shard_states()
            .into_iter()
            .filter(|s| s.role == shardhouse_wal::Role::Leader)
            .map(|s| s.shard)
            .collect();
        let needed = ctx
            .shard_map
            .read()
            .as_ref()
            .is_some_and(|m| hint_updates(m, &me, &led).is_some());
        if !needed {
            continue;
        }
        let res: Result<()> = async {
            let resp = client.get(key.clone(), None).await?;
            let Some(kv) = resp.kvs().first() else {
                return Ok(());
            };
            let map: ShardMap = serde_json::from_slice(kv.value())?;
            let Some(next) = hint_updates(&map, &me, &led) else {
                return Ok(());
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::put(key.clone(), serde_json::to_vec(&next)?, None)]);
            client.txn(txn).await?;
            Ok(())
        }
        .await;
        if let Err(e) = res {
            tracing::debug!(error = %e, "leader hint update skipped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64, port: u16) -> NodeInfo {
        NodeInfo {
            node_id: id,
            grpc_addr: format!("127.0.0.1:{port}"),
            http_addr: format!("127.0.0.1:{}", port + 1),
            cores: 2,
        }
    }

    #[test]
    fn hints_change_only_for_led_shards_and_moved_address() {
        let map = ShardMap::initial(3, 3, vec![node(1, 10), node(2, 20), node(3, 30)]);
        // Node 2 leads shard 1 already per the initial map, and shard 0 newly.
        assert!(hint_updates(&map, &node(2, 20), &[1]).is_none());
        let next = hint_updates(&map, &node(2, 20), &[0, 1]).unwrap();
        assert_eq!(next.shard(0).unwrap().leader_hint, 2);
        assert_eq!(
            next.shard(2).unwrap().leader_hint,
            map.shard(2).unwrap().leader_hint
        );
        assert_eq!(next.epoch, map.epoch + 1);
        // A restart on another port rewrites the node table entry.
        let moved = hint_updates(&map, &node(3, 99), &[]).unwrap();
        assert_eq!(moved.addr_of(3), Some("127.0.0.1:99"));
    }
}
