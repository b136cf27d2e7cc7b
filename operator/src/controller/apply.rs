//! One reconcile of a live cluster, as named steps: observe, apply the
//! desired objects, announce node scaling, rebalance shards, move a node
//! roll forward, report status.

use super::events::publish;
use super::moves::rebalance;
use super::observe::{autoscaled_target, node_replicas, observe_etcd, replica_problems, EtcdView};
use super::rolling::upgrade_step;
use super::Context;
use crate::crd::{ShardhouseCluster, ShardhouseClusterStatus};
use crate::resources::{self, Decisions, MANAGER};
use crate::status::{self, Observed};
use crate::{Error, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

pub(super) async fn apply(c: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = sts_api.get_opt(&resources::node_name(&c)).await?;
    let current = existing
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.replicas);

    let token = super::credential::cluster_token(&c, &ctx.client, &ns).await?;
    let mut etcd = observe_etcd(&c, ctx.etcd_timeout, token).await;
    let target = autoscaled_target(&c, &ctx, current).await;
    let replicas = node_replicas(target, current, etcd.map.as_ref().map(|m| &m.0));

    let applied = apply_desired(&c, &ctx.client, &ns, replicas).await?;
    announce_node_scaling(&ctx, &c, current, replicas, target).await;

    let ready = applied
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let pending = rebalance(&ctx, &c, &applied, &mut etcd, target, replicas, ready).await;
    let upgrading = if pending == 0 {
        upgrade_step(&c, &ctx, &applied, &mut etcd).await?
    } else {
        None
    };
    report(&ctx, &c, etcd, target, ready, pending, upgrading).await
}

/// Applies every object the cluster should own (server-side apply) and
/// returns the node StatefulSet as the API server stored it.
async fn apply_desired(
    c: &ShardhouseCluster,
    client: &Client,
    ns: &str,
    replicas: i32,
) -> Result<StatefulSet> {
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let service_monitor = crd_api
        .get_opt("servicemonitors.monitoring.coreos.com")
        .await?
        .is_some();
    let desired = resources::desired(
        c,
        &Decisions {
            node_replicas: replicas,
            service_monitor,
        },
    );

    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let svc_api: Api<Service> = Api::namespaced(client.clone(), ns);
    ssa(&cm_api, &desired.config).await?;
    if let (Some(svc), Some(sts)) = (&desired.etcd_service, &desired.etcd) {
        ssa(&svc_api, svc).await?;
        ssa(&sts_api, sts).await?;
    }
    ssa(&svc_api, &desired.node_service).await?;
    let applied = ssa(&sts_api, &desired.nodes).await?;
    ssa(&svc_api, &desired.router_service).await?;
    ssa(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &desired.routers,
    )
    .await?;
    ssa(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        &desired.node_pdb,
    )
    .await?;
    for d in &desired.dashboards {
        ssa(&cm_api, d).await?;
    }
    if let Some(sm) = &desired.service_monitor {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &resources::service_monitor_resource());
        ssa(&api, sm).await?;
    }
    Ok(applied)
}

/// An event when the node StatefulSet is created, resized, or held at its
/// size while nodes drain.
async fn announce_node_scaling(
    ctx: &Context,
    c: &ShardhouseCluster,
    current: Option<i32>,
    replicas: i32,
    target: i32,
) {
    match current {
        None => {
            publish(
                ctx,
                c,
                EventType::Normal,
                "Created",
                format!(
                    "created node StatefulSet ({replicas} nodes), router Deployment and config"
                ),
            )
            .await
        }
        Some(cur) if cur != replicas => {
            publish(
                ctx,
                c,
                EventType::Normal,
                "ScaledNodes",
                format!("node StatefulSet {cur} -> {replicas}"),
            )
            .await
        }
        Some(cur) if replicas > target => {
            publish(
                ctx,
                c,
                EventType::Normal,
                "Draining",
                format!(
                    "draining nodes {}..={} before shrinking from {cur} to {target}",
                    resources::node_id_of_ordinal(target),
                    resources::node_id_of_ordinal(cur - 1)
                ),
            )
            .await
        }
        _ => {}
    }
}

/// Writes the status the observations add up to, and requeues: in a
/// minute once settled, in ten seconds while anything is in progress.
async fn report(
    ctx: &Context,
    c: &ShardhouseCluster,
    etcd: EtcdView,
    target: i32,
    ready: i32,
    pending: u32,
    upgrading: Option<String>,
) -> Result<Action> {
    let live_now: BTreeSet<u64> = etcd.live.keys().copied().collect();
    let replica_problems = replica_problems(&ctx.scrape, &etcd.live).await;
    let obs = Observed {
        generation: c.metadata.generation,
        desired_nodes: target,
        ready_nodes: ready,
        shard_map: etcd.map.map(|m| m.0),
        live_nodes: live_now,
        etcd_error: etcd.error,
        pending_moves: pending,
        upgrading: upgrading.clone(),
        node_image: Some(c.spec.image.node()),
        replica_problems,
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let st = status::compute(&obs, c.spec.shard_count, c.status.as_ref(), &now);
    write_status(ctx, c, &st).await?;

    let settled = st.phase == crate::crd::Phase::Running && upgrading.is_none();
    Ok(Action::requeue(if settled {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(10)
    }))
}

async fn ssa<K>(api: &Api<K>, obj: &K) -> Result<K>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

async fn write_status(
    ctx: &Context,
    c: &ShardhouseCluster,
    st: &ShardhouseClusterStatus,
) -> Result<()> {
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<ShardhouseCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({
        "apiVersion": crate::crd::GROUP.to_string() + "/" + crate::crd::VERSION,
        "kind": "ShardhouseCluster",
        "status": st,
    });
    api.patch_status(
        &c.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await?;
    Ok(())
}
