//! The node roll: one pod at a time, after its leaderships moved away.

use super::events::{node_pod_ref, publish, publish_about};
use super::moves::run_moves;
use super::observe::EtcdView;
use super::Context;
use crate::crd::ShardhouseCluster;
use crate::rebalance::{ClusterMeta, Executor};
use crate::status;
use crate::upgrade::{self, NodePod, UpgradeStep};
use crate::{resources, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::collections::BTreeSet;

/// Moves a node roll forward by one step, telling it whether every shard
/// is healthy; returns what is in progress, if anything.
pub(super) async fn upgrade_step(
    c: &ShardhouseCluster,
    ctx: &Context,
    applied: &StatefulSet,
    etcd: &mut EtcdView,
) -> Result<Option<String>> {
    let live_now: BTreeSet<u64> = etcd.live.keys().copied().collect();
    let healthy = etcd
        .map
        .as_ref()
        .map(|(m, _)| status::healthy_shards(m, &live_now) == c.spec.shard_count)
        .unwrap_or(false);
    rolling_upgrade(
        c,
        ctx,
        applied,
        etcd.map.as_ref().map(|m| &m.0),
        etcd.meta.take(),
        healthy,
    )
    .await
}

/// Drives the one-pod-at-a-time node roll; returns a description while one
/// is in progress.
async fn rolling_upgrade(
    c: &ShardhouseCluster,
    ctx: &Context,
    sts: &StatefulSet,
    map: Option<&shardhouse_common::shard_map::ShardMap>,
    meta: Option<ClusterMeta>,
    healthy: bool,
) -> Result<Option<String>> {
    let Some(update_revision) = sts.status.as_ref().and_then(|s| s.update_revision.clone()) else {
        return Ok(None);
    };
    let ns = c.namespace().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!(
        "{}={},{}=node",
        resources::LABEL_INSTANCE,
        c.name_any(),
        resources::LABEL_COMPONENT
    );
    let pods = pods_api
        .list(&ListParams::default().labels(&selector))
        .await?;
    let views: Vec<NodePod> = pods
        .items
        .iter()
        .filter_map(|p| {
            let name = p.name_any();
            let ordinal: i32 = name.rsplit('-').next()?.parse().ok()?;
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some(NodePod {
                name,
                node_id: resources::node_id_of_ordinal(ordinal),
                revision: p
                    .labels()
                    .get("controller-revision-hash")
                    .cloned()
                    .unwrap_or_default(),
                ready,
                terminating: p.metadata.deletion_timestamp.is_some(),
            })
        })
        .collect();
    match upgrade::next_step(&views, &update_revision, map, healthy) {
        UpgradeStep::Done => Ok(None),
        UpgradeStep::Wait(why) => Ok(Some(why)),
        UpgradeStep::TransferLeaders { node_id, moves } => {
            let Some(meta) = meta else {
                return Ok(Some("waiting for etcd to move leaderships".into()));
            };
            let mut exec = Executor::new(meta);
            let (done, err) = run_moves(&mut exec, &moves, moves.len()).await;
            publish_about(
                ctx,
                c,
                EventType::Normal,
                "TransferLeaders",
                format!(
                    "moved {done}/{} leaderships off node {node_id} before its upgrade",
                    moves.len()
                ),
                Some(node_pod_ref(c, node_id)),
            )
            .await;
            if let Some(e) = err {
                publish(ctx, c, EventType::Warning, "TransferFailed", e.to_string()).await;
            }
            Ok(Some(format!("moving leaderships off node {node_id}")))
        }
        UpgradeStep::DeletePod { name, node_id } => {
            pods_api.delete(&name, &DeleteParams::default()).await?;
            publish_about(
                ctx,
                c,
                EventType::Normal,
                "UpgradePod",
                format!("restarting {name} (node {node_id}) on the new image"),
                Some(node_pod_ref(c, node_id)),
            )
            .await;
            Ok(Some(format!("restarting {name}")))
        }
    }
}
