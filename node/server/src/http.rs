//! The node's small HTTP surface: Prometheus metrics and probes.

use crate::context::NodeContext;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::Encoder;
use shardhouse_common::proto::{admin_client::AdminClient, ShardStatesRequest};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

pub fn router(ctx: Arc<NodeContext>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .with_state(ctx)
}

async fn metrics() -> impl IntoResponse {
    let encoder = prometheus::TextEncoder::new();
    let mut buf = Vec::new();
    match encoder.encode(&prometheus::gather(), &mut buf) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            buf,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Ready = serving, registered in etcd, and caught up: every replica the
/// shard map places on this node has applied its leader's commit index (asked
/// of the leader, or its own when it leads) within `CATCH_UP_WAIT`. The
/// operator's rolling upgrade and rebalance wait on this before touching the
/// next pod.
async fn ready(State(ctx): State<Arc<NodeContext>>) -> impl IntoResponse {
    if !ctx.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting".to_owned());
    }
    match caught_up(&ctx).await {
        Ok(n) => (StatusCode::OK, format!("ready: {n} replicas caught up")),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// Longest a probe waits for local apply to reach the leaders' commit
/// indexes; under load a caught-up replica trails by milliseconds.
const CATCH_UP_WAIT: Duration = Duration::from_secs(2);
const LEADER_QUERY_TIMEOUT: Duration = Duration::from_secs(1);

async fn caught_up(ctx: &NodeContext) -> Result<usize, String> {
    let me = ctx.node_id;
    // Replicas the map no longer places here (removed by a move, not yet
    // destroyed) get no more entries and are not waited for.
    let placed: Option<BTreeSet<u32>> = ctx.shard_map.read().as_ref().map(|m| {
        m.shards
            .iter()
            .filter(|p| p.replicas.contains(&me) || p.learners.contains(&me))
            .map(|p| p.shard)
            .collect()
    });
    let states: Vec<_> = ctx
        .wal
        .shard_states()
        .into_iter()
        .filter(|s| placed.as_ref().is_none_or(|p| p.contains(&s.shard)))
        .collect();
    let mut target: BTreeMap<u32, u64> = BTreeMap::new();
    let mut by_leader: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for s in &states {
        match s.leader_id.unwrap_or(0) {
            0 => return Err(format!("shard {} has no known leader", s.shard)),
            l if l == me => {
                target.insert(s.shard, s.commit_index);
            }
            l => by_leader.entry(l).or_default().push(s.shard),
        }
    }
    for (leader, shards) in by_leader {
        let addr = ctx
            .addr_of(leader)
            .ok_or_else(|| format!("no address for node {leader}, leader of {shards:?}"))?;
        let ask = async {
            let mut c = AdminClient::connect(format!("http://{addr}")).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                c.shard_states(ShardStatesRequest {}).await?.into_inner(),
            )
        };
        let reply = match tokio::time::timeout(LEADER_QUERY_TIMEOUT, ask).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(format!("leader {leader} at {addr}: {e}")),
            Err(_) => return Err(format!("leader {leader} at {addr} did not answer")),
        };
        for shard in shards {
            let commit = reply
                .shards
                .iter()
                .find(|s| s.shard == shard)
                .map(|s| s.commit_index)
                .ok_or_else(|| format!("leader {leader} has no replica of shard {shard}"))?;
            target.insert(shard, commit);
        }
    }
    let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
    loop {
        let behind: Vec<String> = ctx
            .wal
            .shard_states()
            .into_iter()
            .filter_map(|s| {
                let want = *target.get(&s.shard)?;
                (s.applied_index < want)
                    .then(|| format!("{}:{}/{}", s.shard, s.applied_index, want))
            })
            .collect();
        if behind.is_empty() {
            return Ok(target.len());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "catching up (shard:applied/leader commit) {}",
                behind.join(" ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
