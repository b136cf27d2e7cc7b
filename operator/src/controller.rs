//! The reconciler: observes the cluster (Kubernetes objects, the shard map in
//! etcd), asks the pure decision functions what should happen, and applies
//! the result with server-side apply under one field manager.

use crate::crd::{ShardhouseCluster, ShardhouseClusterStatus};
use crate::planner::{self, Move};
use crate::rebalance::{ClusterMeta, Executor};
use crate::resources::{self, Decisions, MANAGER};
use crate::status::{self, Observed};
use crate::upgrade::{self, NodePod, UpgradeStep};
use crate::{autoscale, metrics, Error, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const FINALIZER: &str = "shardhouse.dev/cleanup";

/// Moves one reconcile may run before it requeues, so a long rebalance
/// still reports progress in status and reacts to spec changes.
const MOVES_PER_RECONCILE: usize = 8;

/// Per-cluster memory across reconciles.
#[derive(Debug, Default)]
struct ClusterMemory {
    failures: u32,
    /// Last `(unix seconds, points_total)` scraped from the routers.
    last_points: Option<(f64, f64)>,
    last_scale_down: Option<Instant>,
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// How long to wait for etcd; short in tests where there is none.
    pub etcd_timeout: Duration,
    memory: Mutex<BTreeMap<String, ClusterMemory>>,
}

impl Context {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            etcd_timeout: Duration::from_secs(3),
            memory: Mutex::new(BTreeMap::new()),
        }
    }

    fn memory<T>(&self, key: &str, f: impl FnOnce(&mut ClusterMemory) -> T) -> T {
        let mut m = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        f(m.entry(key.to_string()).or_default())
    }
}

fn key(c: &ShardhouseCluster) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// Entry point for the controller runtime.
pub async fn reconcile(obj: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = metrics::reconcile_timer();
    let ns = obj
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<ShardhouseCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let k = key(&obj);
    let action = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            FinalizerEvent::Apply(c) => apply(c, ctx.clone()).await,
            FinalizerEvent::Cleanup(c) => cleanup(c, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))?;
    ctx.memory(&k, |m| m.failures = 0);
    Ok(action)
}

/// Exponential backoff per cluster: 2s, 4s, 8s ... capped at 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let secs = 2u64.saturating_pow(failures.clamp(1, 9)).min(300);
    Duration::from_secs(secs)
}

pub fn error_policy(obj: Arc<ShardhouseCluster>, err: &Error, ctx: Arc<Context>) -> Action {
    metrics::RECONCILE_ERRORS.inc();
    let failures = ctx.memory(&key(&obj), |m| {
        m.failures += 1;
        m.failures
    });
    let delay = backoff(failures);
    tracing::warn!(cluster = %key(&obj), %err, failures, ?delay, "reconcile failed");
    Action::requeue(delay)
}

async fn publish(
    ctx: &Context,
    c: &ShardhouseCluster,
    type_: EventType,
    reason: &str,
    note: String,
) {
    publish_about(ctx, c, type_, reason, note, None).await
}

/// The node pod an upgrade step concerns, as an event's `related` object.
fn node_pod_ref(c: &ShardhouseCluster, node_id: u64) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: c.namespace(),
        name: Some(format!(
            "{}-{}",
            resources::node_name(c),
            node_id.saturating_sub(1)
        )),
        ..Default::default()
    }
}

/// An event with a `related` object. The recorder folds events with the same
/// reason, action and objects into one series that keeps the first note, so
/// per-pod steps name their pod here or every pod after the first would be
/// reported as the first one (seen on a real cluster's rolling upgrade).
async fn publish_about(
    ctx: &Context,
    c: &ShardhouseCluster,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: related,
    };
    // Events are best effort: a failure to record one must not fail the
    // reconcile that did the work.
    if let Err(e) = ctx.recorder.publish(&ev, &c.object_ref(&())).await {
        tracing::warn!(%e, reason, "could not publish event");
    }
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

/// What etcd told us, or why it could not.
struct EtcdView {
    map: Option<(shardhouse_common::shard_map::ShardMap, i64)>,
    live: BTreeMap<u64, shardhouse_common::shard_map::NodeInfo>,
    error: Option<String>,
    meta: Option<ClusterMeta>,
}

async fn observe_etcd(c: &ShardhouseCluster, timeout: Duration) -> EtcdView {
    let endpoints = c.etcd_endpoints();
    let cluster = resources::etcd_cluster_key(c);
    let fut = async {
        let mut meta = ClusterMeta::connect(&endpoints, &cluster).await?;
        let map = meta.shard_map().await?;
        let live = meta.live_nodes().await?;
        Ok::<_, Error>((meta, map, live))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok((meta, map, live))) => EtcdView {
            map,
            live,
            error: None,
            meta: Some(meta),
        },
        Ok(Err(e)) => EtcdView {
            map: None,
            live: BTreeMap::new(),
            error: Some(e.to_string()),
            meta: None,
        },
        Err(_) => EtcdView {
            map: None,
            live: BTreeMap::new(),
            error: Some(format!(
                "no answer from {} within {timeout:?}",
                endpoints.join(",")
            )),
            meta: None,
        },
    }
}

/// How many node pods to run: grow at once, shrink only once the nodes
/// being removed hold no replicas (the drain is done).
pub fn node_replicas(
    target: i32,
    current: Option<i32>,
    map: Option<&shardhouse_common::shard_map::ShardMap>,
) -> i32 {
    let Some(current) = current else {
        return target;
    };
    if target >= current {
        return target;
    }
    let Some(map) = map else { return target };
    let draining = (target..current)
        .map(resources::node_id_of_ordinal)
        .any(|id| planner::replicas_on(map, id) > 0);
    if draining {
        current
    } else {
        target
    }
}

async fn apply(c: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let client = ctx.client.clone();
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let existing = sts_api.get_opt(&resources::node_name(&c)).await?;
    let current = existing
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.replicas);

    let mut etcd = observe_etcd(&c, ctx.etcd_timeout).await;
    let target = autoscaled_target(&c, &ctx, current).await;
    let replicas = node_replicas(target, current, etcd.map.as_ref().map(|m| &m.0));

    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let service_monitor = crd_api
        .get_opt("servicemonitors.monitoring.coreos.com")
        .await?
        .is_some();
    let desired = resources::desired(
        &c,
        &Decisions {
            node_replicas: replicas,
            service_monitor,
        },
    );

    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let svc_api: Api<Service> = Api::namespaced(client.clone(), &ns);
    ssa(&cm_api, &desired.config).await?;
    if let (Some(svc), Some(sts)) = (&desired.etcd_service, &desired.etcd) {
        ssa(&svc_api, svc).await?;
        ssa(&sts_api, sts).await?;
    }
    ssa(&svc_api, &desired.node_service).await?;
    let applied = ssa(&sts_api, &desired.nodes).await?;
    ssa(&svc_api, &desired.router_service).await?;
    ssa(
        &Api::<Deployment>::namespaced(client.clone(), &ns),
        &desired.routers,
    )
    .await?;
    ssa(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns),
        &desired.node_pdb,
    )
    .await?;
    for d in &desired.dashboards {
        ssa(&cm_api, d).await?;
    }
    if let Some(sm) = &desired.service_monitor {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &resources::service_monitor_resource());
        ssa(&api, sm).await?;
    }

    match current {
        None => {
            publish(
                &ctx,
                &c,
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
                &ctx,
                &c,
                EventType::Normal,
                "ScaledNodes",
                format!("node StatefulSet {cur} -> {replicas}"),
            )
            .await
        }
        Some(cur) if replicas > target => {
            publish(
                &ctx,
                &c,
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

    let ready = applied
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);

    // Rebalance once every node pod is up and registered.
    let mut pending = 0u32;
    // While node pods roll, leave leaderships where the upgrade puts them:
    // balancing them would hand the next pod's leaderships straight back
    // (seen on a real cluster: the upgrade moved them off node 3, the
    // planner moved them back, for ever). Replica moves still run.
    // (`OnDelete` never advances currentRevision: count the pods instead.)
    let rolling = applied
        .status
        .as_ref()
        .is_some_and(|s| s.updated_replicas.unwrap_or(0) < s.replicas);
    let live: BTreeSet<u64> = etcd.live.keys().copied().collect();
    let all_registered = (0..replicas).all(|o| live.contains(&resources::node_id_of_ordinal(o)));
    if let (Some((map, _)), Some(meta)) = (etcd.map.clone(), etcd.meta.take()) {
        if ready == replicas && all_registered {
            let targets: Vec<u64> = (0..target.min(replicas))
                .map(resources::node_id_of_ordinal)
                .collect();
            match planner::plan(&map, &targets) {
                Ok(moves) if worth_running(&moves, rolling) => {
                    publish(
                        &ctx,
                        &c,
                        EventType::Normal,
                        "Rebalancing",
                        format!("{} shard moves planned onto nodes {targets:?}", moves.len()),
                    )
                    .await;
                    let mut exec = Executor::new(meta);
                    let done = run_moves(&mut exec, &moves, MOVES_PER_RECONCILE).await;
                    pending = (moves.len() - done.0) as u32;
                    if let Some(e) = done.1 {
                        publish(
                            &ctx,
                            &c,
                            EventType::Warning,
                            "RebalanceFailed",
                            e.to_string(),
                        )
                        .await;
                    }
                    // Re-read so status shows the map after the moves.
                    if let Some(m) = exec.meta.shard_map().await.ok().flatten() {
                        etcd.map = Some(m);
                    }
                    etcd.meta = Some(exec.meta);
                }
                Ok(_) => etcd.meta = Some(meta),
                Err(planner::PlanError::MoveInFlight { .. }) => {
                    // A relocation stopped half way (a failed step, or an
                    // operator restart): finish it (promote a learner on a
                    // kept node, remove one on a drained node), then plan
                    // again on the next reconcile.
                    let moves = planner::resume(&map, &targets);
                    publish(
                        &ctx,
                        &c,
                        EventType::Normal,
                        "Rebalancing",
                        format!("finishing {} interrupted shard moves", moves.len()),
                    )
                    .await;
                    let mut exec = Executor::new(meta);
                    let done = run_moves(&mut exec, &moves, moves.len()).await;
                    if let Some(e) = done.1 {
                        publish(
                            &ctx,
                            &c,
                            EventType::Warning,
                            "RebalanceFailed",
                            e.to_string(),
                        )
                        .await;
                    }
                    pending = (moves.len() - done.0) as u32 + 1;
                    if let Some(m) = exec.meta.shard_map().await.ok().flatten() {
                        etcd.map = Some(m);
                    }
                    etcd.meta = Some(exec.meta);
                }
                Err(e) => {
                    publish(&ctx, &c, EventType::Warning, "PlanFailed", e.to_string()).await;
                    etcd.meta = Some(meta);
                    // Not balanced and not able to say how far off: never
                    // report Running over it.
                    pending = 1;
                }
            }
        } else {
            etcd.meta = Some(meta);
        }
    }

    let live_now: BTreeSet<u64> = etcd.live.keys().copied().collect();
    let healthy = etcd
        .map
        .as_ref()
        .map(|(m, _)| status::healthy_shards(m, &live_now) == c.spec.shard_count)
        .unwrap_or(false);
    let upgrading = if pending == 0 {
        rolling_upgrade(
            &c,
            &ctx,
            &applied,
            etcd.map.as_ref().map(|m| &m.0),
            etcd.meta.take(),
            healthy,
        )
        .await?
    } else {
        None
    };

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
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let st = status::compute(&obs, c.spec.shard_count, c.status.as_ref(), &now);
    write_status(&ctx, &c, &st).await?;

    let settled = st.phase == crate::crd::Phase::Running && upgrading.is_none();
    Ok(Action::requeue(if settled {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(10)
    }))
}

/// Runs up to `limit` moves; returns how many succeeded and the first error.
async fn run_moves(exec: &mut Executor, moves: &[Move], limit: usize) -> (usize, Option<Error>) {
    let n = batch_len(moves, limit);
    let mut done = 0;
    for mv in &moves[..n] {
        if let Err(e) = exec.execute(mv).await {
            return (done, Some(e));
        }
        done += 1;
    }
    (done, None)
}

/// Whether to run a plan now: not when empty, and not when it only moves
/// leaderships while node pods are rolling.
fn worth_running(moves: &[Move], rolling: bool) -> bool {
    let leaders_only = moves
        .iter()
        .all(|m| matches!(m, Move::TransferLeader { .. }));
    !moves.is_empty() && (!rolling || !leaders_only)
}

/// How many of `moves` one reconcile runs: at least `limit`, but never
/// stopping inside a relocation (AddLearner .. RemoveReplica of one shard).
/// A batch that ended between AddLearner and PromoteLearner left a learner
/// in the map, and the next plan refused to run over it (seen on a real
/// cluster: the scale-out stopped after 8 moves while the status said
/// Running).
fn batch_len(moves: &[Move], limit: usize) -> usize {
    let mut n = limit.min(moves.len());
    while n > 0 && n < moves.len() {
        let (last, next) = (&moves[n - 1], &moves[n]);
        if matches!(next, Move::AddLearner { .. }) || next.shard() != last.shard() {
            break;
        }
        n += 1;
    }
    n
}

async fn autoscaled_target(c: &ShardhouseCluster, ctx: &Context, current: Option<i32>) -> i32 {
    let Some(policy) = c.spec.autoscaling.as_ref().filter(|a| a.enabled) else {
        return c.spec.nodes.replicas;
    };
    let current = current.unwrap_or(policy.min_nodes);
    let url = format!(
        "{}-router.{}.svc:{}",
        c.name_any(),
        c.namespace().unwrap_or_default(),
        resources::ROUTER_HTTP_PORT
    );
    let Some(total) = scrape_points_total(&url).await else {
        return current.clamp(policy.min_nodes, policy.max_nodes);
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let k = key(c);
    let (prev, since) = ctx.memory(&k, |m| {
        let prev = m.last_points.replace((now, total));
        (prev, m.last_scale_down.map(|t| t.elapsed().as_secs()))
    });
    let Some(prev) = prev else { return current };
    let rate = autoscale::counter_rate(prev, (now, total));
    let want = autoscale::desired_nodes(
        policy,
        c.spec.nodes.cores,
        current,
        autoscale::Observation {
            points_per_second: rate,
            since_last_scale_down: since,
        },
    );
    if want < current {
        ctx.memory(&k, |m| m.last_scale_down = Some(Instant::now()));
    }
    want
}

/// Sum of `shardhouse_router_points_total` behind the router Service. One
/// scrape hits one router; with several routers the Service spreads scrapes,
/// which the rate tolerates as noise (documented limitation).
async fn scrape_points_total(addr: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(parse_counter_sum(&body, "shardhouse_router_points_total"))
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
}

/// Sums every sample of a counter in Prometheus text format.
pub fn parse_counter_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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

/// Removes what owner references do not: node and etcd volumes (created by
/// the StatefulSet controller, not owned by the cluster) and, for external
/// etcd, the cluster's keys.
async fn cleanup(c: Arc<ShardhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
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

/// Runs the controller until the process is told to stop.
pub async fn run(client: Client) {
    let ctx = Arc::new(Context::new(client.clone()));
    let clusters: Api<ShardhouseCluster> = Api::all(client.clone());
    let wc = watcher::Config::default().any_semantic();
    Controller::new(clusters, wc.clone())
        .owns(Api::<StatefulSet>::all(client.clone()), wc.clone())
        .owns(Api::<Deployment>::all(client.clone()), wc)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(cluster = %obj.name, "reconciled"),
                Err(e) => tracing::debug!(%e, "reconcile error"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::shard_map::{NodeInfo, ShardMap};

    #[test]
    fn batches_never_stop_inside_a_relocation() {
        let r = |shard, from, to| {
            vec![
                Move::AddLearner { shard, node: to },
                Move::PromoteLearner { shard, node: to },
                Move::TransferLeader { shard, from, to },
                Move::RemoveReplica { shard, node: from },
            ]
        };
        let moves: Vec<Move> = [r(0, 1, 4), r(0, 2, 5), r(1, 1, 4)].concat();
        assert_eq!(batch_len(&moves, 8), 8, "two whole relocations");
        assert_eq!(batch_len(&moves, 9), 12, "the third one is finished");
        assert_eq!(batch_len(&moves, 5), 8);
        assert_eq!(batch_len(&moves, 100), 12);
        assert_eq!(batch_len(&[], 8), 0);
        let transfers = vec![
            Move::TransferLeader {
                shard: 0,
                from: 1,
                to: 2,
            },
            Move::TransferLeader {
                shard: 1,
                from: 1,
                to: 3,
            },
        ];
        assert_eq!(batch_len(&transfers, 1), 1);
    }

    #[test]
    fn leader_balancing_waits_for_a_rolling_upgrade() {
        let transfer = Move::TransferLeader {
            shard: 0,
            from: 3,
            to: 1,
        };
        let add = Move::AddLearner { shard: 1, node: 4 };
        assert!(worth_running(std::slice::from_ref(&transfer), false));
        assert!(
            !worth_running(std::slice::from_ref(&transfer), true),
            "would undo the upgrade's transfers"
        );
        assert!(
            worth_running(&[add, transfer], true),
            "data moves still run"
        );
        assert!(!worth_running(&[], false));
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(2), Duration::from_secs(4));
        assert_eq!(backoff(5), Duration::from_secs(32));
        assert_eq!(backoff(30), Duration::from_secs(300));
    }

    #[test]
    fn shrink_waits_for_the_drain() {
        let nodes = (1..=4)
            .map(|id| NodeInfo {
                node_id: id,
                grpc_addr: String::new(),
                http_addr: String::new(),
                cores: 1,
            })
            .collect();
        let map = ShardMap::initial(8, 3, nodes);
        assert_eq!(node_replicas(5, Some(4), Some(&map)), 5, "grow at once");
        assert_eq!(
            node_replicas(3, Some(4), Some(&map)),
            4,
            "node 4 still holds replicas"
        );
        let moves = planner::plan(&map, &[1, 2, 3]).unwrap();
        let mut drained = map.clone();
        for mv in &moves {
            planner::apply_move(&mut drained, mv);
        }
        assert_eq!(
            node_replicas(3, Some(4), Some(&drained)),
            3,
            "drained: shrink"
        );
        assert_eq!(node_replicas(3, None, None), 3);
    }

    #[test]
    fn counter_sum_reads_prometheus_text() {
        let text = "# HELP x\n# TYPE shardhouse_router_points_total counter\n\
            shardhouse_router_points_total{endpoint=\"v1\"} 100\n\
            shardhouse_router_points_total{endpoint=\"v2\"} 23.5\n\
            shardhouse_router_points_total_other 5\n";
        assert_eq!(
            parse_counter_sum(text, "shardhouse_router_points_total"),
            123.5
        );
    }
}
