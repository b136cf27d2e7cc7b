//! Against a real kube-apiserver + etcd (+ kube-controller-manager for
//! garbage collection): the CRD's validation, the reconciler creating owned
//! objects, scaling, status, deletion through the finalizer, and the Helm
//! chart applied with `kubectl apply --dry-run=server`.

mod support;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use shardhouse_common::shard_map::{keys, NodeInfo, ShardMap};
use shardhouse_operator::crd::ShardhouseCluster;
use shardhouse_test_support::eventually;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::ControlPlane;

async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = ShardhouseCluster::crd();
    crds.patch(
        "shardhouseclusters.shardhouse.dev",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    eventually("CRD Established", Duration::from_secs(30), || {
        let crds = crds.clone();
        async move {
            let c = crds.get("shardhouseclusters.shardhouse.dev").await?;
            let est = c.status.and_then(|s| s.conditions).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            anyhow::Ok(est.then_some(()))
        }
    })
    .await
    .unwrap();
}

/// Merge-patches the cluster (`kubectl patch --type merge`).
async fn merge_patch(shc: &Api<ShardhouseCluster>, name: &str, patch: serde_json::Value) {
    shc.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("merge-patch the cluster");
}

/// Writes the cluster's shard map as the nodes would.
async fn put_shard_map(etcd: &mut etcd_client::Client, cluster: &str, map: &ShardMap) {
    let value = serde_json::to_vec(map).unwrap();
    etcd.put(keys::shard_map(cluster), value, None)
        .await
        .expect("put the shard map");
}

fn cluster(name: &str, etcd: &str, nodes: i32, rf: u32) -> ShardhouseCluster {
    serde_json::from_value(json!({
        "apiVersion": "shardhouse.dev/v1alpha1",
        "kind": "ShardhouseCluster",
        "metadata": {"name": name},
        "spec": {
            "shardCount": 8,
            "replicationFactor": rf,
            "nodes": {"replicas": nodes, "cores": 1, "memory": "1Gi"},
            "routers": {"replicas": 1},
            "etcd": {"endpoints": [etcd]},
        }
    }))
    .unwrap()
}

fn rejection(err: kube::Error) -> String {
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "expected Invalid, got {s:?}");
            s.message
        }
        other => panic!("expected an API rejection, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_against_a_real_apiserver() {
    let cp = ControlPlane::start(true).await.expect("control plane");
    let client = cp.client().await.unwrap();
    install_crd(&client).await;
    let ns = "shardhouse-test";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let shc: Api<ShardhouseCluster> = Api::namespaced(client.clone(), ns);

    // --- the API server enforces the CEL rules
    let pp = PostParams::default();
    let msg = rejection(
        shc.create(&pp, &cluster("even", &cp.etcd_url, 3, 2))
            .await
            .unwrap_err(),
    );
    assert!(msg.contains("replicationFactor must be odd"), "{msg}");
    let msg = rejection(
        shc.create(&pp, &cluster("toofew", &cp.etcd_url, 2, 3))
            .await
            .unwrap_err(),
    );
    assert!(msg.contains("must not exceed nodes.replicas"), "{msg}");
    let mut bad = cluster("zero", &cp.etcd_url, 3, 3);
    bad.spec.shard_count = 0;
    rejection(shc.create(&pp, &bad).await.unwrap_err());

    // --- run the reconciler in-process
    let controller = tokio::spawn(shardhouse_operator::controller::run(client.clone()));

    let name = "demo";
    shc.create(&pp, &cluster(name, &cp.etcd_url, 3, 3))
        .await
        .unwrap();
    let msg = rejection(
        shc.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shardCount": 9}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(msg.contains("shardCount is immutable"), "{msg}");

    // --- owned objects appear, owned by the cluster
    let uid = shc.get(name).await.unwrap().uid().unwrap();
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let sts = eventually("node StatefulSet", Duration::from_secs(60), || {
        let a = sts_api.clone();
        async move { anyhow::Ok(a.get_opt("demo-node").await?) }
    })
    .await
    .unwrap();
    // The dashboards are the last objects a reconcile applies (before the
    // optional ServiceMonitor): once all five exist, so does everything the
    // checks below read. Seeing only the StatefulSet is not enough.
    let dashboards = eventually("five dashboard ConfigMaps", Duration::from_secs(60), || {
        let a: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        async move {
            let l = a
                .list(&ListParams::default().labels("grafana_dashboard=1"))
                .await?;
            anyhow::Ok((l.items.len() >= 5).then_some(l))
        }
    })
    .await
    .unwrap();
    let owned_by = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|o| o.uid == uid && o.controller == Some(true)))
    };
    assert!(owned_by(&sts.metadata));
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(3));
    let dep = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("demo-router")
        .await
        .unwrap();
    assert!(owned_by(&dep.metadata));
    for svc in ["demo-node", "demo-router"] {
        let s = Api::<Service>::namespaced(client.clone(), ns)
            .get(svc)
            .await
            .unwrap();
        assert!(owned_by(&s.metadata), "{svc}");
    }
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    assert!(owned_by(&cms.get("demo-config").await.unwrap().metadata));
    assert_eq!(dashboards.items.len(), 5);
    assert!(owned_by(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
            .get("demo-node")
            .await
            .unwrap()
            .metadata
    ));
    // External etcd: no managed etcd StatefulSet.
    assert!(sts_api.get_opt("demo-etcd").await.unwrap().is_none());
    // The finalizer is on.
    assert!(shc
        .get(name)
        .await
        .unwrap()
        .finalizers()
        .contains(&"shardhouse.dev/cleanup".to_string()));

    // --- status and conditions are written
    let st = eventually("status with conditions", Duration::from_secs(60), || {
        let shc = shc.clone();
        async move {
            let c = shc.get(name).await?;
            let generation = c.metadata.generation;
            anyhow::Ok(
                c.status
                    .filter(|st| st.observed_generation == generation && st.conditions.len() == 5),
            )
        }
    })
    .await
    .unwrap();
    let types: Vec<&str> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        [
            "Ready",
            "Progressing",
            "Degraded",
            "ReplicasHealthy",
            "Rebalancing"
        ]
    );
    assert_eq!(st.desired_nodes, 3);
    assert_eq!(st.shards_healthy, "0/8");

    // --- an event was recorded
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), ns);
    eventually("Created event", Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await?;
            let created = list
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("Created"));
            anyhow::Ok(created.then_some(()))
        }
    })
    .await
    .unwrap();

    // --- scale out: the StatefulSet follows
    merge_patch(&shc, name, json!({"spec": {"nodes": {"replicas": 5}}})).await;
    let replicas = |want: i32| {
        let a = sts_api.clone();
        async move {
            let s = a.get("demo-node").await?;
            let at = s.spec.is_some_and(|s| s.replicas == Some(want));
            anyhow::Ok(at.then_some(()))
        }
    };
    eventually("StatefulSet at 5 replicas", Duration::from_secs(60), || {
        replicas(5)
    })
    .await
    .unwrap();

    // --- scale in while nodes 4 and 5 still hold replicas: no shrink
    let mut etcd = etcd_client::Client::connect([cp.etcd_url.as_str()], None)
        .await
        .unwrap();
    let nodes: Vec<NodeInfo> = (1..=5)
        .map(|id| NodeInfo {
            node_id: id,
            grpc_addr: format!("127.0.0.1:{}", 1 + id),
            http_addr: String::new(),
            cores: 1,
        })
        .collect();
    let map = ShardMap::initial(8, 3, nodes);
    put_shard_map(&mut etcd, "demo", &map).await;
    merge_patch(&shc, name, json!({"spec": {"nodes": {"replicas": 3}}})).await;
    eventually(
        "status desired 3 while draining",
        Duration::from_secs(60),
        || {
            let shc = shc.clone();
            async move {
                let draining = shc
                    .get(name)
                    .await?
                    .status
                    .is_some_and(|st| st.desired_nodes == 3 && st.node_shards.len() == 5);
                anyhow::Ok(draining.then_some(()))
            }
        },
    )
    .await
    .unwrap();
    let s = sts_api.get("demo-node").await.unwrap();
    assert_eq!(
        s.spec.unwrap().replicas,
        Some(5),
        "must not shrink before the drain"
    );

    // Once the map no longer places replicas on nodes 4 and 5, it shrinks.
    let drained = ShardMap::initial(8, 3, map.nodes.values().take(3).cloned().collect());
    put_shard_map(&mut etcd, "demo", &drained).await;
    // Nudge a reconcile (the operator also requeues on its own).
    merge_patch(
        &shc,
        name,
        json!({"metadata": {"annotations": {"nudge": "1"}}}),
    )
    .await;
    eventually(
        "StatefulSet shrinks to 3 after the drain",
        Duration::from_secs(60),
        || replicas(3),
    )
    .await
    .unwrap();

    // --- the chart, rendered and dry-run applied to this API server
    chart_dry_run(&cp, ns);

    // --- delete: finalizer cleans etcd keys; owner references do the rest
    shc.delete(name, &DeleteParams::default()).await.unwrap();
    eventually("cluster gone", Duration::from_secs(60), || {
        let shc = shc.clone();
        async move { anyhow::Ok(shc.get_opt(name).await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
    let left = etcd
        .get(
            keys::prefix("demo"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(
        left.kvs().len(),
        0,
        "finalizer removes the cluster's etcd keys"
    );
    assert!(
        cp.has_controller_manager,
        "kube-controller-manager is missing (scripts/deps.d/kube.sh builds it): owned objects are deleted by its garbage collector"
    );
    eventually(
        "owned objects garbage collected",
        Duration::from_secs(90),
        || {
            let a = sts_api.clone();
            async move { anyhow::Ok(a.get_opt("demo-node").await?.is_none().then_some(())) }
        },
    )
    .await
    .unwrap();

    controller.abort();
}

fn chart_dry_run(cp: &ControlPlane, ns: &str) {
    let helm = support::require(&support::cache_bin("helm"));
    let kubectl = support::which("kubectl").expect("kubectl 1.32+ must be on the PATH");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let chart = root.join("charts/shardhouse");
    let lint = Command::new(&helm)
        .arg("lint")
        .arg(&chart)
        .output()
        .unwrap();
    assert!(
        lint.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&lint.stdout)
    );

    let value_sets: Vec<Vec<String>> = vec![
        vec![],
        vec!["--set".into(), "cluster.enabled=true".into()],
        vec![
            "--set".into(),
            "cluster.enabled=true".into(),
            "--set-json".into(),
            format!(
                "cluster.spec={}",
                serde_json::to_string(
                    &serde_yaml::from_str::<serde_json::Value>(
                        &std::fs::read_to_string(root.join("manifests/examples/large.yaml"))
                            .unwrap()
                    )
                    .unwrap()["spec"]
                )
                .unwrap()
            ),
        ],
    ];
    for extra in value_sets {
        let out = Command::new(&helm)
            .args(["template", "shardhouse"])
            .arg(&chart)
            .args(["--namespace", ns, "--kube-version", "1.34.4"])
            .args(&extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm template {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        kubectl_dry_run(
            &kubectl,
            cp,
            Some(ns),
            &out.stdout,
            &format!("chart {extra:?}"),
        );
    }
    for f in [
        "manifests/examples/small.yaml",
        "manifests/examples/large.yaml",
    ] {
        let body = std::fs::read(root.join(f)).unwrap();
        kubectl_dry_run(&kubectl, cp, Some(ns), &body, f);
    }
    // The bundle names its own namespace; a server-side dry run cannot
    // create it, so it must exist first.
    let out = Command::new(&kubectl)
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .args(["create", "namespace", "shardhouse-system"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = std::fs::read(root.join("manifests/install.yaml")).unwrap();
    kubectl_dry_run(&kubectl, cp, None, &body, "manifests/install.yaml");
}

fn kubectl_dry_run(
    kubectl: &std::path::Path,
    cp: &ControlPlane,
    ns: Option<&str>,
    yaml: &[u8],
    what: &str,
) {
    use std::io::Write;
    let mut cmd = Command::new(kubectl);
    cmd.arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .args(["apply", "--dry-run=server", "-f", "-"]);
    if let Some(ns) = ns {
        cmd.args(["-n", ns]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(yaml).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply --dry-run=server ({what}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
