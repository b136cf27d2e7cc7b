//! Rolling upgrade of node pods: a pure decision per reconcile.
//!
//! The node StatefulSet uses `OnDelete`, so a new image only reaches a pod
//! when the operator deletes it. One pod at a time, highest ordinal first,
//! only while every other pod is ready and every shard has its quorum, and
//! only after the pod leads no shard (leaderships are transferred first, so
//! writes never wait for an election).

use crate::planner::Move;
use shardhouse_common::shard_map::ShardMap;
use std::collections::BTreeMap;

/// A node pod as the reconciler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePod {
    pub name: String,
    pub node_id: u64,
    /// `controller-revision-hash` label.
    pub revision: String,
    pub ready: bool,
    pub terminating: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeStep {
    /// Every pod runs the StatefulSet's update revision.
    Done,
    /// Nothing to do now; requeue. The reason goes into status and events.
    Wait(String),
    /// Move these leaderships off the next pod first.
    TransferLeaders { node_id: u64, moves: Vec<Move> },
    /// The pod leads nothing: delete it so the StatefulSet recreates it
    /// with the new template.
    DeletePod { name: String, node_id: u64 },
}

pub fn next_step(
    pods: &[NodePod],
    update_revision: &str,
    map: Option<&ShardMap>,
    all_shards_healthy: bool,
) -> UpgradeStep {
    let mut outdated: Vec<&NodePod> = pods
        .iter()
        .filter(|p| p.revision != update_revision)
        .collect();
    if outdated.is_empty() {
        return UpgradeStep::Done;
    }
    if let Some(p) = pods.iter().find(|p| p.terminating || !p.ready) {
        return UpgradeStep::Wait(format!("waiting for pod {} to be ready", p.name));
    }
    if !all_shards_healthy {
        return UpgradeStep::Wait("waiting for every shard to have a healthy quorum".into());
    }
    outdated.sort_by_key(|p| std::cmp::Reverse(p.node_id));
    let next = outdated[0];
    let moves = map
        .map(|m| leaders_off(m, next.node_id))
        .unwrap_or_default();
    if moves.is_empty() {
        UpgradeStep::DeletePod {
            name: next.name.clone(),
            node_id: next.node_id,
        }
    } else {
        UpgradeStep::TransferLeaders {
            node_id: next.node_id,
            moves,
        }
    }
}

/// Leader transfers that leave `node` leading nothing, each to the voter of
/// that shard with the fewest leaderships so far.
pub fn leaders_off(map: &ShardMap, node: u64) -> Vec<Move> {
    let mut leaders: BTreeMap<u64, usize> = BTreeMap::new();
    for p in &map.shards {
        *leaders.entry(p.leader_hint).or_default() += 1;
    }
    let mut moves = Vec::new();
    for p in map.shards.iter().filter(|p| p.leader_hint == node) {
        let to = p
            .replicas
            .iter()
            .copied()
            .filter(|r| *r != node)
            .min_by_key(|r| (leaders.get(r).copied().unwrap_or(0), *r));
        if let Some(to) = to {
            *leaders.entry(to).or_default() += 1;
            moves.push(Move::TransferLeader {
                shard: p.shard,
                from: node,
                to,
            });
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::shard_map::NodeInfo;

    fn pods(revs: &[&str]) -> Vec<NodePod> {
        revs.iter()
            .enumerate()
            .map(|(i, r)| NodePod {
                name: format!("c-node-{i}"),
                node_id: i as u64 + 1,
                revision: r.to_string(),
                ready: true,
                terminating: false,
            })
            .collect()
    }

    fn map3() -> ShardMap {
        let nodes = (1..=3)
            .map(|id| NodeInfo {
                node_id: id,
                grpc_addr: String::new(),
                http_addr: String::new(),
                cores: 1,
            })
            .collect();
        ShardMap::initial(6, 3, nodes)
    }

    #[test]
    fn done_when_every_pod_is_on_the_update_revision() {
        assert_eq!(
            next_step(&pods(&["b", "b", "b"]), "b", None, true),
            UpgradeStep::Done
        );
    }

    #[test]
    fn transfers_leaders_off_the_highest_outdated_pod_first() {
        let m = map3();
        let step = next_step(&pods(&["a", "a", "a"]), "b", Some(&m), true);
        let UpgradeStep::TransferLeaders { node_id, moves } = step else {
            panic!("{step:?}")
        };
        assert_eq!(node_id, 3);
        assert_eq!(moves.len(), 2, "node 3 leads 2 of 6 shards");
        for mv in &moves {
            let Move::TransferLeader { from, to, .. } = mv else {
                panic!()
            };
            assert_eq!(*from, 3);
            assert_ne!(*to, 3);
        }
        // Once those transfers ran, the pod is deleted.
        let mut m2 = m.clone();
        for mv in &moves {
            crate::planner::apply_move(&mut m2, mv);
        }
        assert_eq!(
            next_step(&pods(&["a", "a", "a"]), "b", Some(&m2), true),
            UpgradeStep::DeletePod {
                name: "c-node-2".into(),
                node_id: 3
            }
        );
    }

    #[test]
    fn waits_for_unready_pods_and_unhealthy_shards() {
        let mut p = pods(&["b", "a", "b"]);
        p[2].ready = false;
        assert!(matches!(
            next_step(&p, "b", None, true),
            UpgradeStep::Wait(_)
        ));
        let p = pods(&["b", "a", "b"]);
        assert!(matches!(
            next_step(&p, "b", None, false),
            UpgradeStep::Wait(_)
        ));
        let mut p = pods(&["b", "a", "b"]);
        p[0].terminating = true;
        assert!(matches!(
            next_step(&p, "b", None, true),
            UpgradeStep::Wait(_)
        ));
        // One outdated pod and all healthy: that pod goes next.
        let p = pods(&["b", "a", "b"]);
        assert_eq!(
            next_step(&p, "b", None, true),
            UpgradeStep::DeletePod {
                name: "c-node-1".into(),
                node_id: 2
            }
        );
    }
}
