//! Deleting a cluster: what owner references do not remove.

use super::events::publish;
use super::Context;
use crate::crd::ShardhouseCluster;
use crate::resources::{self, MANAGER};
use crate::{Error, Result};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::sync::Arc;

/// Removes what owner references do not: node and etcd volumes (created by
/// the StatefulSet controller, not owned by the cluster) and, for external
/// etcd, the cluster's keys.
pub(super) async fn cleanup(c: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    publish(
        &ctx,
        &c,
        EventType::Normal,
        "Deleting",
        "removing volumes and metadata".into(),
    )
    .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!(
        "{}={},{}={}",
        resources::LABEL_INSTANCE,
        c.name_any(),
        resources::LABEL_MANAGED_BY,
        MANAGER
    );
    pvcs.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&selector),
    )
    .await?;
    if !c.spec.etcd.is_managed() {
        let cluster = resources::etcd_cluster_key(&c);
        let endpoints = c.etcd_endpoints();
        let del = async {
            let mut client = etcd_client::Client::connect(&endpoints, None).await?;
            client
                .delete(
                    shardhouse_common::shard_map::keys::prefix(&cluster),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                )
                .await
        };
        // Unreachable etcd must not wedge deletion forever; the keys are
        // small and a recreated cluster of the same name rewrites them.
        match tokio::time::timeout(ctx.etcd_timeout, del).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(%e, "could not delete cluster keys from etcd"),
            Err(_) => tracing::warn!("etcd did not answer; cluster keys left behind"),
        }
    }
    Ok(Action::await_change())
}
