//! Reconcile paths against a mocked API server (tower-test): every call the
//! reconciler makes is recorded and answered here, and the tests assert on
//! the sequence.

use crate::controller::{reconcile, Context};
use crate::crd::ShardhouseCluster;
use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
struct Call {
    method: String,
    path: String,
    query: String,
    body: Value,
}

fn not_found() -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "NotFound", "code": 404, "message": "not found"});
    Response::builder()
        .status(404)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn ok(v: &Value) -> Response<Body> {
    Response::builder()
        .body(Body::from(serde_json::to_vec(v).unwrap()))
        .unwrap()
}

/// Answers like a minimal API server: objects do not exist until applied,
/// patches echo the patched object, lists are empty.
fn spawn_api(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    cluster: Value,
) -> Arc<Mutex<Vec<Call>>> {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let rec = calls.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            rec.lock().unwrap().push(Call {
                method: method.clone(),
                path: path.clone(),
                query,
                body: body.clone(),
            });
            let resp = match method.as_str() {
                "GET" if path.ends_with("/pods") || path.ends_with("/persistentvolumeclaims") => {
                    ok(&json!({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}))
                }
                "GET" => not_found(),
                "PATCH" if path.contains("shardhouseclusters") && !path.ends_with("/status") => {
                    // Finalizer add/remove (JSON patch): answer with the
                    // cluster, finalizers applied.
                    let mut c = cluster.clone();
                    if let Some(ops) = body.as_array() {
                        for op in ops {
                            if op["op"] == "add" {
                                c["metadata"]["finalizers"] = json!(["shardhouse.dev/cleanup"]);
                            }
                            if op["op"] == "remove" {
                                c["metadata"]["finalizers"] = json!([]);
                            }
                        }
                    }
                    ok(&c)
                }
                "PATCH" if path.ends_with("/status") => {
                    let mut c = cluster.clone();
                    c["status"] = body["status"].clone();
                    ok(&c)
                }
                "PATCH" | "POST" => ok(&body),
                "DELETE" => ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
                _ => not_found(),
            };
            send.send_response(resp);
        }
    });
    calls
}

fn cluster_json(finalizers: &[&str], deleting: bool) -> Value {
    let mut v = json!({
        "apiVersion": "shardhouse.dev/v1alpha1",
        "kind": "ShardhouseCluster",
        "metadata": {
            "name": "demo", "namespace": "ns1", "uid": "uid-7", "generation": 2,
            "resourceVersion": "10", "finalizers": finalizers,
        },
        "spec": {
            "shardCount": 4, "replicationFactor": 3,
            "nodes": {"replicas": 3},
            // Nothing listens on port 1: etcd reads fail fast.
            "etcd": {"endpoints": ["http://127.0.0.1:1"]},
        }
    });
    if deleting {
        v["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    }
    v
}

async fn run(cluster: Value) -> (crate::Result<kube::runtime::controller::Action>, Vec<Call>) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let calls = spawn_api(handle, cluster.clone());
    let client = Client::new(svc, "default");
    let mut ctx = Context::new(client);
    ctx.etcd_timeout = Duration::from_millis(500);
    let obj: ShardhouseCluster = serde_json::from_value(cluster).unwrap();
    let res = reconcile(Arc::new(obj), Arc::new(ctx)).await;
    let calls = calls.lock().unwrap().clone();
    (res, calls)
}

#[tokio::test]
async fn first_reconcile_only_adds_the_finalizer() {
    let (res, calls) = run(cluster_json(&[], false)).await;
    res.unwrap();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].method, "PATCH");
    assert!(calls[0]
        .path
        .ends_with("/namespaces/ns1/shardhouseclusters/demo"));
    assert!(calls[0].body.to_string().contains("shardhouse.dev/cleanup"));
}

#[tokio::test]
async fn apply_creates_every_object_with_server_side_apply_then_status() {
    let (res, calls) = run(cluster_json(&["shardhouse.dev/cleanup"], false)).await;
    let action = res.unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(10)),
        "not settled (no pods): requeue soon"
    );
    let applied: Vec<String> = calls
        .iter()
        .filter(|c| c.method == "PATCH" && !c.path.ends_with("/status"))
        .map(|c| {
            assert!(
                c.query.contains("fieldManager=shardhouse-operator")
                    && c.query.contains("force=true"),
                "server-side apply with the fixed field manager: {c:?}"
            );
            c.path
                .rsplit('/')
                .take(2)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    for want in [
        "configmaps/demo-config",
        "services/demo-node",
        "statefulsets/demo-node",
        "services/demo-router",
        "deployments/demo-router",
        "poddisruptionbudgets/demo-node",
        "configmaps/demo-dashboard-overview",
    ] {
        assert!(
            applied.iter().any(|a| a == want),
            "{want} not applied: {applied:?}"
        );
    }
    assert!(
        !applied.iter().any(|a| a.contains("etcd")),
        "external etcd: {applied:?}"
    );
    assert!(
        !applied.iter().any(|a| a.starts_with("servicemonitors")),
        "no ServiceMonitor CRD, no ServiceMonitor"
    );
    let sts = calls
        .iter()
        .find(|c| c.path.ends_with("statefulsets/demo-node") && c.method == "PATCH")
        .unwrap();
    assert_eq!(sts.body["spec"]["replicas"], 3);
    assert_eq!(sts.body["metadata"]["ownerReferences"][0]["uid"], "uid-7");

    let event = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/events"))
        .unwrap();
    assert_eq!(event.body["reason"], "Created");

    let status = calls.last().unwrap();
    assert!(
        status.path.ends_with("/shardhouseclusters/demo/status"),
        "status last: {status:?}"
    );
    let st = &status.body["status"];
    assert_eq!(st["observedGeneration"], 2);
    assert_eq!(st["nodesReady"], "0/3");
    let degraded = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap();
    assert_eq!(degraded["reason"], "EtcdUnreachable");
}

#[tokio::test]
async fn delete_cleans_volumes_and_removes_the_finalizer() {
    let (res, calls) = run(cluster_json(&["shardhouse.dev/cleanup"], true)).await;
    res.unwrap();
    let pvc = calls
        .iter()
        .find(|c| c.method == "DELETE" && c.path.ends_with("/persistentvolumeclaims"))
        .expect("PVC delete-collection");
    assert!(
        pvc.query.contains("app.kubernetes.io%2Finstance%3Ddemo")
            || pvc.query.contains("instance=demo")
            || pvc.query.contains("instance%3Ddemo"),
        "{pvc:?}"
    );
    let last = calls.last().unwrap();
    assert_eq!(last.method, "PATCH");
    assert!(
        last.body.to_string().contains("remove"),
        "finalizer removed last: {last:?}"
    );
    assert!(
        !calls.iter().any(|c| c.path.contains("statefulsets")),
        "nothing is applied while deleting"
    );
}
