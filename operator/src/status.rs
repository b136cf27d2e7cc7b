//! Status computation: a pure function from what the reconciler observed to
//! the `ShardhouseCluster` status (phase, conditions, per-node counts).

use crate::crd::{ClusterCondition, NodeShardCount, Phase, ShardhouseClusterStatus};
use crate::planner;
use shardhouse_common::shard_map::ShardMap;
use std::collections::BTreeSet;

/// What one reconcile saw.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub generation: Option<i64>,
    pub desired_nodes: i32,
    pub ready_nodes: i32,
    /// The shard map, when etcd answered and a map exists.
    pub shard_map: Option<ShardMap>,
    /// Node ids registered (alive) in etcd.
    pub live_nodes: BTreeSet<u64>,
    /// etcd could not be read.
    pub etcd_error: Option<String>,
    pub pending_moves: u32,
    /// A rolling upgrade is in progress (reason text when waiting).
    pub upgrading: Option<String>,
    pub node_image: Option<String>,
    /// Replicas that need attention, from the nodes' `/health`: an apply
    /// stopped at an entry, or a rebuild from a peer's snapshot under way.
    pub replica_problems: Vec<String>,
}

/// Shards whose live voters form a quorum.
pub fn healthy_shards(map: &ShardMap, live: &BTreeSet<u64>) -> u32 {
    map.shards
        .iter()
        .filter(|p| {
            let live_voters = p.replicas.iter().filter(|r| live.contains(r)).count();
            !p.replicas.is_empty() && live_voters > p.replicas.len() / 2
        })
        .count() as u32
}

pub fn compute(
    obs: &Observed,
    shard_count: u32,
    previous: Option<&ShardhouseClusterStatus>,
    now: &str,
) -> ShardhouseClusterStatus {
    let healthy = obs
        .shard_map
        .as_ref()
        .map_or(0, |m| healthy_shards(m, &obs.live_nodes));
    let degraded_reason = degraded_reason(obs, shard_count, healthy);
    let phase = phase(obs, degraded_reason.is_some());
    let prev = previous.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let conditions = conditions(
        obs,
        &phase,
        &format!("{healthy}/{shard_count}"),
        degraded_reason,
        prev,
        now,
    );
    ShardhouseClusterStatus {
        observed_generation: obs.generation,
        phase,
        conditions,
        nodes_ready: format!("{}/{}", obs.ready_nodes, obs.desired_nodes),
        shards_healthy: format!("{healthy}/{shard_count}"),
        ready_nodes: obs.ready_nodes,
        desired_nodes: obs.desired_nodes,
        node_shards: node_shards(obs),
        node_image: obs.node_image.clone(),
        pending_moves: obs.pending_moves,
    }
}

/// Why the cluster is degraded (reason, message), if it is.
fn degraded_reason(
    obs: &Observed,
    shard_count: u32,
    healthy: u32,
) -> Option<(&'static str, String)> {
    let all_healthy = obs.shard_map.is_some() && healthy == shard_count;
    if let Some(e) = &obs.etcd_error {
        Some(("EtcdUnreachable", format!("cannot read the shard map: {e}")))
    } else if obs.shard_map.is_some() && !all_healthy {
        Some((
            "ShardsWithoutQuorum",
            format!(
                "{} of {shard_count} shards lack a live quorum",
                shard_count - healthy
            ),
        ))
    } else {
        None
    }
}

fn phase(obs: &Observed, degraded: bool) -> Phase {
    let nodes_ok = obs.ready_nodes == obs.desired_nodes;
    let rebalancing = obs.pending_moves > 0;
    if obs.ready_nodes == 0 || obs.shard_map.is_none() && obs.etcd_error.is_none() {
        Phase::Provisioning
    } else if obs.upgrading.is_some() {
        Phase::Upgrading
    } else if rebalancing || !nodes_ok {
        Phase::Scaling
    } else if degraded {
        Phase::Degraded
    } else {
        Phase::Running
    }
}

/// The conditions, each keeping its transition time from `prev` while its
/// status is unchanged. `shards_healthy` reads `healthy/total`.
fn conditions(
    obs: &Observed,
    phase: &Phase,
    shards_healthy: &str,
    degraded_reason: Option<(&'static str, String)>,
    prev: &[ClusterCondition],
    now: &str,
) -> Vec<ClusterCondition> {
    let rebalancing = obs.pending_moves > 0;
    let cond = |type_: &str, on: bool, reason: &str, message: String| {
        let status = if on { "True" } else { "False" };
        // The transition time moves only when the status flips.
        let last = prev
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| now.to_string(), |c| c.last_transition_time.clone());
        ClusterCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time: last,
            observed_generation: obs.generation,
        }
    };

    let ready = *phase == Phase::Running;
    let progressing = matches!(
        phase,
        Phase::Provisioning | Phase::Scaling | Phase::Upgrading
    );
    vec![
        cond(
            "Ready",
            ready,
            if ready {
                "AllShardsHealthy"
            } else {
                "NotReady"
            },
            format!(
                "{}/{} nodes ready, {shards_healthy} shards healthy",
                obs.ready_nodes, obs.desired_nodes
            ),
        ),
        cond(
            "Progressing",
            progressing,
            match phase {
                Phase::Provisioning => "Provisioning",
                Phase::Scaling => "Scaling",
                Phase::Upgrading => "RollingUpgrade",
                _ => "Stable",
            },
            obs.upgrading.clone().unwrap_or_default(),
        ),
        match &degraded_reason {
            Some((reason, msg)) => cond("Degraded", true, reason, msg.clone()),
            None => cond("Degraded", false, "Healthy", String::new()),
        },
        replicas_condition(&obs.replica_problems, &cond),
        cond(
            "Rebalancing",
            rebalancing,
            if rebalancing {
                "MovesPending"
            } else {
                "Balanced"
            },
            if rebalancing {
                format!("{} shard moves pending", obs.pending_moves)
            } else {
                String::new()
            },
        ),
    ]
}

/// Shards and leaderships per node, from the shard map.
fn node_shards(obs: &Observed) -> Vec<NodeShardCount> {
    obs.shard_map.as_ref().map_or_else(Vec::new, |m| {
        planner::counts(m)
            .into_iter()
            .map(|(node_id, (shards, leaders))| NodeShardCount {
                node_id,
                shards,
                leaders,
            })
            .collect()
    })
}

/// `ReplicasHealthy`: False while a node reports a replica stuck on an
/// entry (it is rebuilt from a peer past the bound, or by `shardhouse-ctl
/// rebuild-replica`) or being rebuilt.
fn replicas_condition(
    problems: &[String],
    cond: &dyn Fn(&str, bool, &str, String) -> ClusterCondition,
) -> ClusterCondition {
    if problems.is_empty() {
        return cond(
            "ReplicasHealthy",
            true,
            "AllReplicasApplying",
            String::new(),
        );
    }
    let stuck = problems.iter().any(|p| p.contains(" apply:"));
    let mut message = problems
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > 3 {
        message.push_str(&format!("; and {} more", problems.len() - 3));
    }
    cond(
        "ReplicasHealthy",
        false,
        if stuck {
            "ReplicaStuck"
        } else {
            "ReplicaRebuilding"
        },
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::shard_map::NodeInfo;

    fn map(n: u64) -> ShardMap {
        ShardMap::initial(
            8,
            3,
            (1..=n)
                .map(|id| NodeInfo {
                    node_id: id,
                    grpc_addr: String::new(),
                    http_addr: String::new(),
                    cores: 1,
                })
                .collect(),
        )
    }

    fn obs(ready: i32, live: &[u64]) -> Observed {
        Observed {
            generation: Some(4),
            desired_nodes: 3,
            ready_nodes: ready,
            shard_map: Some(map(3)),
            live_nodes: live.iter().copied().collect(),
            ..Default::default()
        }
    }

    fn condition<'a>(s: &'a ShardhouseClusterStatus, t: &str) -> &'a ClusterCondition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn healthy_cluster_is_running_and_ready() {
        let s = compute(&obs(3, &[1, 2, 3]), 8, None, "t0");
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(s.nodes_ready, "3/3");
        assert_eq!(s.shards_healthy, "8/8");
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(condition(&s, "Degraded").status, "False");
        assert_eq!(s.node_shards.len(), 3);
        assert_eq!(s.node_shards.iter().map(|n| n.shards).sum::<u32>(), 24);
        assert_eq!(s.node_shards.iter().map(|n| n.leaders).sum::<u32>(), 8);
    }

    #[test]
    fn losing_quorum_degrades_and_one_node_down_does_not() {
        let s = compute(&obs(3, &[1, 2]), 8, None, "t0");
        assert_eq!(s.shards_healthy, "8/8", "2 of 3 replicas is a quorum");
        let s = compute(&obs(3, &[1]), 8, None, "t0");
        assert_eq!(s.phase, Phase::Degraded);
        assert_eq!(s.shards_healthy, "0/8");
        assert_eq!(condition(&s, "Degraded").reason, "ShardsWithoutQuorum");
    }

    #[test]
    fn scaling_rebalancing_and_transition_times() {
        let mut o = obs(3, &[1, 2, 3]);
        o.desired_nodes = 4;
        o.pending_moves = 5;
        let s1 = compute(&o, 8, None, "t1");
        assert_eq!(s1.phase, Phase::Scaling);
        assert_eq!(condition(&s1, "Rebalancing").status, "True");
        assert_eq!(condition(&s1, "Progressing").status, "True");
        // Same state later: transition time is kept.
        let s2 = compute(&o, 8, Some(&s1), "t2");
        assert_eq!(condition(&s2, "Rebalancing").last_transition_time, "t1");
        o.pending_moves = 0;
        o.ready_nodes = 4;
        let s3 = compute(&o, 8, Some(&s2), "t3");
        assert_eq!(s3.phase, Phase::Running);
        assert_eq!(condition(&s3, "Rebalancing").last_transition_time, "t3");
    }

    #[test]
    fn no_pods_or_no_etcd() {
        let mut o = obs(0, &[]);
        o.shard_map = None;
        let s = compute(&o, 8, None, "t");
        assert_eq!(s.phase, Phase::Provisioning);
        assert_eq!(s.shards_healthy, "0/8");
        o.ready_nodes = 3;
        o.etcd_error = Some("connection refused".into());
        let s = compute(&o, 8, None, "t");
        assert_eq!(condition(&s, "Degraded").reason, "EtcdUnreachable");
        assert_eq!(s.phase, Phase::Degraded);
    }

    #[test]
    fn a_stuck_or_rebuilding_replica_is_a_condition() {
        let s = compute(&obs(3, &[1, 2, 3]), 8, None, "t");
        assert_eq!(condition(&s, "ReplicasHealthy").status, "True");
        let mut o = obs(3, &[1, 2, 3]);
        o.replica_problems = vec!["node 2: shard 0 rebuild: being rebuilt (auto)".into()];
        let s = compute(&o, 8, None, "t");
        let c = condition(&s, "ReplicasHealthy");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "ReplicaRebuilding")
        );
        o.replica_problems
            .push("node 3: shard 1 apply: apply stopped at index 9".into());
        let s = compute(&o, 8, None, "t");
        let c = condition(&s, "ReplicasHealthy");
        assert_eq!(c.reason, "ReplicaStuck");
        assert!(c.message.contains("node 3: shard 1"), "{}", c.message);
    }
}
