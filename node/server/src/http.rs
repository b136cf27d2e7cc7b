//! The node's small HTTP surface: Prometheus metrics and probes.

use crate::context::NodeContext;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::Encoder;
use shardhouse_common::proto::ShardStatesRequest;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

pub fn router(ctx: Arc<NodeContext>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(ctx)
}

async fn metrics(State(ctx): State<Arc<NodeContext>>) -> impl IntoResponse {
    crate::memory::refresh_gauges(&ctx);
    let engine = Arc::clone(&ctx.engine);
    // An engine statement: off the async workers.
    let _ = tokio::task::spawn_blocking(move || engine.refresh_read_counters()).await;
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

/// Liveness and what needs an operator: always 200 while the process
/// serves (restarting would not fix a table that cannot flush), with
/// `"status": "pass"` or `"degraded"` and one check per problem: shards
/// whose apply is stopped at an entry that keeps failing, and shards with
/// tables whose rows keep failing to flush, and shards whose stored engine
/// data is damaged. Metrics: `shardhouse_wal_apply_stalled_shards`,
/// `shardhouse_engine_flush_failing_shards`, `shardhouse_engine_damaged_shards`.
async fn health(State(ctx): State<Arc<NodeContext>>) -> impl IntoResponse {
    let body = health_report(
        ctx.node_id,
        &ctx.wal.shard_states(),
        &ctx.engine.flush_failures(),
        &ctx.engine.damaged_shards(),
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

/// One entry of `/health`'s `checks`.
fn check(name: String, status: &str, message: String) -> serde_json::Value {
    serde_json::json!({ "name": name, "status": status, "message": message })
}

/// The `/health` document (pure, for tests).
pub fn health_report(
    node_id: u64,
    shards: &[shardhouse_wal::ShardStatus],
    flush_failures: &[shardhouse_engine::FlushFailure],
    damaged: &[shardhouse_engine::ShardDamage],
) -> serde_json::Value {
    let mut checks = Vec::new();
    for d in damaged {
        let status = shards.iter().find(|s| s.shard == d.shard);
        let what = if !crate::engine_damage::has_peer(node_id, status) {
            "no other replica holds this shard, so it cannot be rebuilt: restore it from a backup (docs/operations.md, \"A damaged engine part\")"
        } else {
            "the replica is rebuilt from its leader's snapshot"
        };
        checks.push(check(
            format!("shard {} engine data", d.shard),
            "fail",
            format!(
                "stored data is damaged: {}; reads of this shard are refused here; {what}",
                d.describe()
            ),
        ));
    }
    for s in shards {
        if let Some(st) = &s.apply_stalled {
            checks.push(check(
                format!("shard {} apply", s.shard),
                "fail",
                format!(
                    "apply stopped at index {} after {} attempts: {} (retried with backoff; the entry is never skipped; the replica is rebuilt from its leader's snapshot past the bound, or by `shardhouse-ctl rebuild-replica`)",
                    st.index, st.attempts, st.error
                ),
            ));
        }
        if let Some(why) = s.rebuilding {
            checks.push(check(
                format!("shard {} rebuild", s.shard),
                "warn",
                format!(
                    "being rebuilt from its leader's snapshot ({}); reads on this replica may wait or fail until the snapshot is restored",
                    why.as_str()
                ),
            ));
        }
    }
    for f in flush_failures {
        checks.push(check(
            format!("shard {} flush", f.shard),
            "fail",
            format!(
                "tables {:?} have failed to flush for {} s ({} attempts): {} (their rows stay buffered and in the WAL; see docs/operations.md)",
                f.tables, f.failing_for.as_secs(), f.attempts, f.error
            ),
        ));
    }
    let status = if checks.is_empty() {
        "pass"
    } else {
        "degraded"
    };
    serde_json::json!({
        "name": "shardhouse-node",
        "node_id": node_id,
        "status": status,
        "message": if checks.is_empty() { "serving".to_string() } else { format!("{} problem(s) need attention", checks.len()) },
        "checks": checks,
        "version": env!("CARGO_PKG_VERSION"),
    })
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
            let mut c = crate::auth::peer_admin_client(ctx.cluster_token.as_ref(), &addr).await?;
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

#[cfg(test)]
mod health_tests {
    use super::health_report;
    use shardhouse_engine::FlushFailure;
    use shardhouse_wal::{ApplyStall, ShardStatus};
    use std::time::Duration;

    #[test]
    fn health_is_pass_until_a_shard_needs_attention_then_says_which_and_why() {
        let ok = health_report(1, &[ShardStatus::default()], &[], &[]);
        assert_eq!(ok["status"], "pass");
        assert_eq!(ok["checks"].as_array().unwrap().len(), 0);
        let stalled = ShardStatus {
            shard: 3,
            apply_stalled: Some(ApplyStall {
                index: 42,
                error: "engine unavailable".into(),
                attempts: 5,
            }),
            ..ShardStatus::default()
        };
        let failing = FlushFailure {
            shard: 7,
            tables: vec!["cpu".into()],
            error: "disk full".into(),
            attempts: 2,
            failing_for: Duration::from_secs(9),
        };
        let bad = health_report(1, &[stalled], &[failing], &[]);
        assert_eq!(bad["status"], "degraded");
        let checks = bad["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 2);
        let text = bad.to_string();
        for want in [
            "shard 3 apply",
            "index 42",
            "engine unavailable",
            "shard 7 flush",
            "cpu",
            "disk full",
        ] {
            assert!(text.contains(want), "{want} missing from {text}");
        }
    }

    #[test]
    fn a_damaged_shard_fails_health_and_says_whether_it_can_be_rebuilt() {
        use shardhouse_engine::{DamagedPart, ShardDamage};
        let damage = |shard| ShardDamage {
            shard,
            parts: vec![DamagedPart {
                database: "shard_0002_00000000000000aa".into(),
                table: "cpu".into(),
                part: "broken-on-start_19700101_1_1_0".into(),
                reason: "broken-on-start".into(),
            }],
        };
        let shard = |shard, voters: Vec<u64>| ShardStatus {
            shard,
            voters,
            ..ShardStatus::default()
        };
        let shards = [shard(2, vec![1, 2, 3]), shard(5, vec![1])];
        let h = health_report(1, &shards, &[], &[damage(2), damage(5)]);
        assert_eq!(h["status"], "degraded");
        let checks = h["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 2);
        let msg = |i: usize| checks[i]["message"].as_str().unwrap().to_string();
        assert_eq!(checks[0]["name"], "shard 2 engine data");
        assert_eq!(checks[0]["status"], "fail");
        assert!(
            msg(0).contains("broken-on-start_19700101_1_1_0"),
            "{}",
            msg(0)
        );
        assert!(msg(0).contains("rebuilt from its leader"), "{}", msg(0));
        assert!(msg(1).contains("cannot be rebuilt"), "{}", msg(1));
    }
}
