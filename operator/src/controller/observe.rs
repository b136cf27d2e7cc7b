//! What a reconcile observes before it decides: etcd's view of the
//! cluster, the routers' ingest rate (for the autoscaler), and the node
//! count that follows from them.

use super::{key, Context};
use crate::crd::ShardhouseCluster;
use crate::rebalance::ClusterMeta;
use crate::{autoscale, planner, resources, Error};
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What etcd told us, or why it could not.
pub(super) struct EtcdView {
    pub(super) map: Option<(shardhouse_common::shard_map::ShardMap, i64)>,
    pub(super) live: BTreeMap<u64, shardhouse_common::shard_map::NodeInfo>,
    pub(super) error: Option<String>,
    pub(super) meta: Option<ClusterMeta>,
}

pub(super) async fn observe_etcd(
    c: &ShardhouseCluster,
    timeout: Duration,
    node_token: Option<shardhouse_common::credential::ClusterToken>,
) -> EtcdView {
    let endpoints = c.etcd_endpoints();
    let cluster = resources::etcd_cluster_key(c);
    let fut = async {
        let mut meta = ClusterMeta::connect(&endpoints, &cluster)
            .await?
            .with_node_token(node_token);
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

pub(super) async fn autoscaled_target(
    c: &ShardhouseCluster,
    ctx: &Context,
    current: Option<i32>,
) -> i32 {
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
    let Some(total) = scrape_points_total(&ctx.scrape, &url).await else {
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
async fn scrape_points_total(http: &reqwest::Client, addr: &str) -> Option<f64> {
    let fut = async {
        let body = http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .ok()?
            .error_for_status()
            .ok()?
            .text()
            .await
            .ok()?;
        Some(parse_counter_sum(&body, "shardhouse_router_points_total"))
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
}

/// How long one node's `/health` may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Nodes asked at once. One after another, 100 registered nodes that
/// accept connections and never answer held every reconcile for 100 x 2 s
/// (`make bench-operator-scale NODE_ADDRS=hung`); 64 at once bound it to
/// 2 s per 64 nodes.
const HEALTH_SCRAPES_AT_ONCE: usize = 64;

/// What every live node's `/health` says about its replicas (stuck
/// applies, rebuilds), in node order; a node that does not answer adds
/// nothing (etcd liveness covers it).
pub(super) async fn replica_problems(
    http: &reqwest::Client,
    live: &BTreeMap<u64, shardhouse_common::shard_map::NodeInfo>,
) -> Vec<String> {
    use futures::stream::{self, StreamExt};
    // Owned inputs per future: futures borrowing `live` are not `Send`
    // for every lifetime, which the controller's task requires.
    let asks: Vec<_> = live
        .iter()
        .map(|(&id, n)| {
            let (http, url) = (http.clone(), format!("http://{}/health", n.http_addr));
            async move {
                let fut = async { http.get(url).send().await.ok()?.text().await.ok() };
                match tokio::time::timeout(HEALTH_TIMEOUT, fut).await {
                    Ok(Some(body)) => health_problems(id, &body),
                    _ => Vec::new(),
                }
            }
        })
        .collect();
    let per_node: Vec<Vec<String>> = stream::iter(asks)
        .buffered(HEALTH_SCRAPES_AT_ONCE)
        .collect()
        .await;
    per_node.concat()
}

/// The replica checks of one node's `/health` document, as
/// `node <id>: <check name>: <message>`.
pub fn health_problems(node_id: u64, body: &str) -> Vec<String> {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(body) else {
        return Vec::new();
    };
    doc["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let name = c["name"].as_str()?;
            (name.ends_with(" apply") || name.ends_with(" rebuild")).then(|| {
                format!(
                    "node {node_id}: {name}: {}",
                    c["message"].as_str().unwrap_or("")
                )
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner;
    use shardhouse_common::shard_map::{NodeInfo, ShardMap};

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
    fn health_problems_are_the_replica_checks() {
        let body = r#"{"status":"degraded","checks":[
            {"name":"shard 3 apply","status":"fail","message":"apply stopped at index 9"},
            {"name":"shard 4 flush","status":"fail","message":"disk full"},
            {"name":"shard 5 rebuild","status":"warn","message":"being rebuilt (auto)"}]}"#;
        assert_eq!(
            health_problems(2, body),
            [
                "node 2: shard 3 apply: apply stopped at index 9",
                "node 2: shard 5 rebuild: being rebuilt (auto)"
            ]
        );
        assert!(health_problems(2, "not json").is_empty());
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

    /// A router's `/metrics` on a free port, answering `status` and `body`.
    async fn metrics_endpoint(status: u16, body: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let status = axum::http::StatusCode::from_u16(status).unwrap();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || async move { (status, body) }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    #[tokio::test]
    async fn stuck_nodes_cost_one_health_timeout_not_one_each() {
        // Accepts connections and never answers: a stuck node process.
        let stuck = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stuck_addr = stuck.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = stuck.accept().await {
                held.push(conn);
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let healthy_addr = listener.local_addr().unwrap().to_string();
        let body = r#"{"checks":[{"name":"shard 7 apply","message":"apply stopped at index 3"}]}"#;
        let app =
            axum::Router::new().route("/health", axum::routing::get(move || async move { body }));
        tokio::spawn(async move { axum::serve(listener, app).await });

        let node = |id: u64, addr: &str| NodeInfo {
            node_id: id,
            grpc_addr: String::new(),
            http_addr: addr.to_string(),
            cores: 1,
        };
        let mut live: BTreeMap<u64, NodeInfo> =
            (1..=10).map(|id| (id, node(id, &stuck_addr))).collect();
        live.insert(11, node(11, &healthy_addr));
        let started = Instant::now();
        let problems = replica_problems(&reqwest::Client::new(), &live).await;
        let took = started.elapsed();
        assert_eq!(
            problems,
            ["node 11: shard 7 apply: apply stopped at index 3"]
        );
        assert!(
            took < HEALTH_TIMEOUT * 2,
            "10 stuck nodes took {took:?}: asked one after another?"
        );
    }

    #[tokio::test]
    async fn scrape_reads_the_routers_counter_over_http() {
        let http = reqwest::Client::new();
        let addr = metrics_endpoint(
            200,
            "# TYPE shardhouse_router_points_total counter\n\
             shardhouse_router_points_total{endpoint=\"v1\"} 40\n\
             shardhouse_router_points_total{endpoint=\"v2\"} 2\n",
        )
        .await;
        assert_eq!(scrape_points_total(&http, &addr).await, Some(42.0));
        // A router that fails to answer is no reading, not a reading of 0.
        let failing = metrics_endpoint(500, "shardhouse_router_points_total 7\n").await;
        assert_eq!(scrape_points_total(&http, &failing).await, None);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        assert_eq!(scrape_points_total(&http, &closed).await, None);
    }
}
