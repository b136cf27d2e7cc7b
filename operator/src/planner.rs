//! Shard placement and move planning: a pure function from the current
//! placement and the nodes that should hold replicas to an ordered list of
//! Raft membership changes.
//!
//! Every relocation is add learner -> promote -> (transfer leadership) ->
//! remove old, so a shard's voter count never drops below its replication
//! factor and the replica being removed is never the leader. The plan moves
//! only as many replicas as balance requires: drained nodes empty out, then
//! the most loaded nodes give replicas to the least loaded until every node
//! is within one replica of the others; leaders are balanced last with
//! transfers, which move no data.

use serde::{Deserialize, Serialize};
use shardhouse_common::shard_map::{NodeInfo, ShardMap, ShardPlacement};
use std::collections::{BTreeMap, BTreeSet};

/// One step of a rebalance. The executor runs them in order; each one is
/// applied to the shard map in etcd once the node admin API confirmed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Move {
    /// Create an empty replica on `node` and add it to the group as a learner.
    AddLearner { shard: u32, node: u64 },
    /// Wait until the learner has caught up, then make it a voter.
    PromoteLearner { shard: u32, node: u64 },
    /// Hand the shard's leadership from `from` to `to` (both voters).
    TransferLeader { shard: u32, from: u64, to: u64 },
    /// Remove a voter that is not the leader.
    RemoveReplica { shard: u32, node: u64 },
}

impl Move {
    pub fn shard(&self) -> u32 {
        match self {
            Move::AddLearner { shard, .. }
            | Move::PromoteLearner { shard, .. }
            | Move::TransferLeader { shard, .. }
            | Move::RemoveReplica { shard, .. } => *shard,
        }
    }
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{nodes} target nodes cannot hold {rf} replicas per shard: keep at least {rf} nodes")]
    TooFewNodes { nodes: usize, rf: usize },
    #[error("shard {shard} has learners in flight ({learners:?}): finish or abort the running rebalance first")]
    MoveInFlight { shard: u32, learners: Vec<u64> },
}

/// Plans the moves that take `map` to a balanced placement over `nodes`.
/// Replicas on nodes not in `nodes` are drained. An empty plan means the map
/// is already balanced.
pub fn plan(map: &ShardMap, nodes: &[u64]) -> Result<Vec<Move>, PlanError> {
    let targets: BTreeSet<u64> = nodes.iter().copied().collect();
    let rf = map.replication_factor.max(1) as usize;
    if targets.len() < rf {
        return Err(PlanError::TooFewNodes {
            nodes: targets.len(),
            rf,
        });
    }
    if let Some(p) = map.shards.iter().find(|p| !p.learners.is_empty()) {
        return Err(PlanError::MoveInFlight {
            shard: p.shard,
            learners: p.learners.clone(),
        });
    }

    let mut placement: Vec<ShardPlacement> = map.shards.clone();
    let mut moves = Vec::new();

    // 0. Trim: a move interrupted between "promote" and "remove old replica"
    // leaves a shard with more voters than the replication factor. Remove
    // the surplus, never the leader, replicas on drained nodes first. With
    // no known leader the shard is left alone (a wrong guess would remove it).
    for p in placement.iter_mut() {
        if p.replicas.len() <= rf || !p.replicas.contains(&p.leader_hint) {
            continue;
        }
        let mut surplus: Vec<u64> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| *r != p.leader_hint)
            .collect();
        // Drained nodes first, then the highest ids (deterministic).
        surplus.sort_by_key(|r| (targets.contains(r), std::cmp::Reverse(*r)));
        surplus.truncate(p.replicas.len() - rf);
        for node in surplus {
            p.replicas.retain(|r| *r != node);
            moves.push(Move::RemoveReplica {
                shard: p.shard,
                node,
            });
        }
    }

    // Replica load over target nodes only; drained nodes are emptied first.
    let mut load: BTreeMap<u64, usize> = targets.iter().map(|&t| (t, 0)).collect();
    for p in &placement {
        for r in &p.replicas {
            if let Some(l) = load.get_mut(r) {
                *l += 1;
            }
        }
    }

    // 1. Drain: every replica on a non-target node goes to the least loaded
    // target that does not already hold the shard.
    for p in placement.iter_mut() {
        let drained: Vec<u64> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !targets.contains(r))
            .collect();
        for from in drained {
            let to = least_loaded(&load, |t| !p.replicas.contains(&t));
            let Some(to) = to else { continue };
            relocate(p, from, to, &mut moves);
            *load.get_mut(&to).expect("target") += 1;
        }
    }

    // 2. Balance replicas: move from the most to the least loaded node until
    // loads differ by at most one. Each move lowers an over-full node, so the
    // count is the minimum.
    loop {
        let (max_node, max_load) = load
            .iter()
            .max_by_key(|(id, l)| (**l, std::cmp::Reverse(**id)))
            .map(|(i, l)| (*i, *l))
            .expect("targets");
        let min_load = *load.values().min().expect("targets");
        if max_load <= min_load + 1 {
            break;
        }
        // The first shard on the fullest node whose replicas miss some
        // less-loaded node.
        let mut chosen = None;
        for (i, p) in placement.iter().enumerate() {
            if !p.replicas.contains(&max_node) {
                continue;
            }
            if let Some(to) = least_loaded(&load, |t| {
                !p.replicas.contains(&t) && load[&t] + 1 < max_load
            }) {
                chosen = Some((i, to));
                break;
            }
        }
        let Some((i, to)) = chosen else { break };
        relocate(&mut placement[i], max_node, to, &mut moves);
        *load.get_mut(&max_node).expect("target") -= 1;
        *load.get_mut(&to).expect("target") += 1;
    }

    // 3. Balance leaders with transfers only.
    let mut leaders: BTreeMap<u64, usize> = targets.iter().map(|&t| (t, 0)).collect();
    for p in &placement {
        if let Some(l) = leaders.get_mut(&p.leader_hint) {
            *l += 1;
        }
    }
    // Any transfer from a leader to one of its shard's voters that has at
    // least two fewer leaderships narrows the spread; take the widest gap
    // first. The sum of squared leader counts falls with every transfer, so
    // this ends.
    loop {
        let mut best: Option<(usize, u64, u64, usize)> = None;
        for (i, p) in placement.iter().enumerate() {
            let Some(&from_count) = leaders.get(&p.leader_hint) else {
                continue;
            };
            for &r in &p.replicas {
                if r == p.leader_hint || leaders[&r] + 1 >= from_count {
                    continue;
                }
                let gap = from_count - leaders[&r];
                if best.is_none_or(|b| gap > b.3) {
                    best = Some((i, p.leader_hint, r, gap));
                }
            }
        }
        let steps = match best {
            Some((i, from, to, _)) => vec![(i, from, to)],
            // No direct transfer helps: hand one leadership down a chain
            // a -> b -> d where b keeps its count and d gains what a loses.
            None => match leader_chain(&placement, &leaders) {
                Some(chain) => chain,
                None => break,
            },
        };
        for (i, from, to) in steps {
            moves.push(Move::TransferLeader {
                shard: placement[i].shard,
                from,
                to,
            });
            placement[i].leader_hint = to;
            *leaders.get_mut(&from).expect("target") -= 1;
            *leaders.get_mut(&to).expect("target") += 1;
        }
    }
    Ok(moves)
}

/// Two transfers `(shard index, from, to)` that move one leadership from a
/// node to one with at least two fewer via an intermediate node.
fn leader_chain(
    placement: &[ShardPlacement],
    leaders: &BTreeMap<u64, usize>,
) -> Option<Vec<(usize, u64, u64)>> {
    for (i, p) in placement.iter().enumerate() {
        let a = p.leader_hint;
        let Some(&ca) = leaders.get(&a) else { continue };
        for &b in p.replicas.iter().filter(|&&b| b != a) {
            if leaders[&b] + 1 != ca {
                continue;
            }
            for (j, q) in placement.iter().enumerate() {
                if j == i || q.leader_hint != b {
                    continue;
                }
                if let Some(&d) = q
                    .replicas
                    .iter()
                    .find(|&&d| d != b && d != a && leaders[&d] + 2 <= ca)
                {
                    return Some(vec![(i, a, b), (j, b, d)]);
                }
            }
        }
    }
    None
}

fn least_loaded(load: &BTreeMap<u64, usize>, ok: impl Fn(u64) -> bool) -> Option<u64> {
    load.iter()
        .filter(|(t, _)| ok(**t))
        .min_by_key(|(t, l)| (**l, **t))
        .map(|(t, _)| *t)
}

/// Appends the steps that move `p`'s replica from `from` to `to` and updates
/// `p` as the executor will once they ran.
fn relocate(p: &mut ShardPlacement, from: u64, to: u64, moves: &mut Vec<Move>) {
    let shard = p.shard;
    moves.push(Move::AddLearner { shard, node: to });
    moves.push(Move::PromoteLearner { shard, node: to });
    p.replicas.push(to);
    if p.leader_hint == from {
        // The new replica is freshly caught up and on the least loaded node,
        // so it is a good home for the leadership too.
        moves.push(Move::TransferLeader { shard, from, to });
        p.leader_hint = to;
    }
    moves.push(Move::RemoveReplica { shard, node: from });
    p.replicas.retain(|r| *r != from);
}

/// Applies one move to a shard map the way the cluster changes when the move
/// succeeds (the executor writes this back to etcd after each step). Bumps
/// the epoch so routers notice.
pub fn apply_move(map: &mut ShardMap, mv: &Move) {
    let Some(p) = map.shards.iter_mut().find(|p| p.shard == mv.shard()) else {
        return;
    };
    match *mv {
        Move::AddLearner { node, .. } => {
            if !p.learners.contains(&node) && !p.replicas.contains(&node) {
                p.learners.push(node);
            }
        }
        Move::PromoteLearner { node, .. } => {
            p.learners.retain(|l| *l != node);
            if !p.replicas.contains(&node) {
                p.replicas.push(node);
            }
        }
        Move::TransferLeader { to, .. } => p.leader_hint = to,
        Move::RemoveReplica { node, .. } => {
            p.replicas.retain(|r| *r != node);
            p.learners.retain(|r| *r != node);
        }
    }
    map.epoch += 1;
}

/// The moves that finish relocations a previous run left half way (shards
/// with learners, which `plan` refuses to plan over): a learner on a target
/// node is promoted (the executor waits until it caught up), one on a node
/// being drained is removed. A surplus voter the promotion leaves is
/// trimmed by the next `plan`.
pub fn resume(map: &ShardMap, nodes: &[u64]) -> Vec<Move> {
    let mut moves = Vec::new();
    for p in &map.shards {
        for &node in &p.learners {
            if nodes.contains(&node) {
                moves.push(Move::PromoteLearner {
                    shard: p.shard,
                    node,
                });
            } else {
                moves.push(Move::RemoveReplica {
                    shard: p.shard,
                    node,
                });
            }
        }
    }
    moves
}

/// Puts the address of every node the map places a replica or learner on
/// into the map's node table (routers send writes only to addresses found
/// there): a node added by a scale-out is registered in etcd but was not in
/// the map the cluster was created with. Known entries are refreshed from
/// `nodes` (live registrations) when they differ; nodes the map no longer
/// places anything on keep their entry.
pub fn record_node_addresses(map: &mut ShardMap, nodes: &BTreeMap<u64, NodeInfo>) {
    let placed: BTreeSet<u64> = map
        .shards
        .iter()
        .flat_map(|p| p.replicas.iter().chain(&p.learners).copied())
        .collect();
    for id in placed {
        if let Some(info) = nodes.get(&id) {
            if map.nodes.get(&id) != Some(info) {
                map.nodes.insert(id, info.clone());
            }
        }
    }
}

/// Replica and leader counts per node in a map.
pub fn counts(map: &ShardMap) -> BTreeMap<u64, (u32, u32)> {
    let mut c: BTreeMap<u64, (u32, u32)> = map.nodes.keys().map(|&n| (n, (0, 0))).collect();
    for p in &map.shards {
        for r in &p.replicas {
            c.entry(*r).or_default().0 += 1;
        }
        if p.leader_hint != 0 {
            c.entry(p.leader_hint).or_default().1 += 1;
        }
    }
    c
}

/// Shards a node still holds a replica or learner of (drain is complete when
/// this is zero for every node being removed).
pub fn replicas_on(map: &ShardMap, node: u64) -> usize {
    map.shards
        .iter()
        .filter(|p| p.replicas.contains(&node) || p.learners.contains(&node))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u64) -> NodeInfo {
        NodeInfo {
            node_id: id,
            grpc_addr: format!("10.0.0.{id}:7000"),
            http_addr: format!("10.0.0.{id}:7001"),
            cores: 2,
        }
    }

    fn map(shards: u32, rf: u32, nodes: &[u64]) -> ShardMap {
        ShardMap::initial(shards, rf, nodes.iter().map(|&n| info(n)).collect())
    }

    /// Runs a plan step by step, checking the safety rules at every step,
    /// and returns the final map.
    fn simulate(mut m: ShardMap, moves: &[Move]) -> ShardMap {
        let rf = m.replication_factor as usize;
        for mv in moves {
            let p = m.shard(mv.shard()).unwrap().clone();
            match mv {
                Move::AddLearner { node, .. } => {
                    assert!(!p.replicas.contains(node), "{mv:?}: already a voter");
                }
                Move::PromoteLearner { node, .. } => {
                    assert!(
                        p.learners.contains(node),
                        "{mv:?}: promote of a non-learner"
                    );
                }
                Move::TransferLeader { from, to, .. } => {
                    assert_eq!(p.leader_hint, *from, "{mv:?}: from is not the leader");
                    assert!(p.replicas.contains(to), "{mv:?}: to is not a voter");
                }
                Move::RemoveReplica { node, .. } => {
                    assert_ne!(p.leader_hint, *node, "{mv:?}: removing the leader");
                    assert!(
                        p.learners.contains(node) || p.replicas.len() > rf,
                        "{mv:?}: removing would leave {} voters < rf {rf}",
                        p.replicas.len() - 1
                    );
                }
            }
            apply_move(&mut m, mv);
            let p = m.shard(mv.shard()).unwrap();
            assert!(p.replicas.len() >= rf, "{mv:?}: below rf");
            assert!(
                p.replicas.contains(&p.leader_hint),
                "{mv:?}: leader not a voter"
            );
        }
        m
    }

    fn assert_balanced(m: &ShardMap, nodes: &[u64]) {
        let c = counts(m);
        let replicas: Vec<u32> = nodes.iter().map(|n| c.get(n).map_or(0, |x| x.0)).collect();
        let leaders: Vec<u32> = nodes.iter().map(|n| c.get(n).map_or(0, |x| x.1)).collect();
        let spread = |v: &[u32]| v.iter().max().unwrap() - v.iter().min().unwrap();
        assert!(spread(&replicas) <= 1, "replicas unbalanced: {replicas:?}");
        assert!(spread(&leaders) <= 1, "leaders unbalanced: {leaders:?}");
        for p in &m.shards {
            let distinct: BTreeSet<_> = p.replicas.iter().collect();
            assert_eq!(distinct.len(), p.replicas.len(), "duplicate replica {p:?}");
            assert_eq!(p.replicas.len(), m.replication_factor as usize);
            assert!(
                p.replicas.iter().all(|r| nodes.contains(r)),
                "{p:?} off target"
            );
            assert!(p.learners.is_empty());
        }
    }

    fn data_moves(moves: &[Move]) -> usize {
        moves
            .iter()
            .filter(|m| matches!(m, Move::AddLearner { .. }))
            .count()
    }

    #[test]
    fn balanced_map_needs_no_moves() {
        let m = map(12, 3, &[1, 2, 3]);
        assert_eq!(plan(&m, &[1, 2, 3]).unwrap(), vec![]);
    }

    #[test]
    fn scale_out_moves_the_minimum_and_balances() {
        let m = map(12, 3, &[1, 2, 3]);
        let nodes = [1, 2, 3, 4];
        let moves = plan(&m, &nodes).unwrap();
        // 36 replicas over 4 nodes = 9 each: node 4 needs exactly 9.
        assert_eq!(data_moves(&moves), 9);
        let end = simulate(m, &moves);
        assert_balanced(&end, &nodes);
    }

    #[test]
    fn scale_in_drains_removed_nodes_first_and_keeps_quorum() {
        let m = map(16, 3, &[1, 2, 3, 4, 5]);
        let nodes = [1, 2, 3, 4];
        let moves = plan(&m, &nodes).unwrap();
        let on_5 = replicas_on(&m, 5);
        assert_eq!(data_moves(&moves), on_5, "only node 5's replicas move");
        // The drain comes before any balancing move.
        let last_drain = moves
            .iter()
            .rposition(|mv| matches!(mv, Move::RemoveReplica { node: 5, .. }))
            .unwrap();
        assert!(moves[..last_drain]
            .iter()
            .all(|mv| !matches!(mv, Move::RemoveReplica { node, .. } if *node != 5)));
        let end = simulate(m, &moves);
        assert_eq!(replicas_on(&end, 5), 0);
        assert_balanced(&end, &nodes);
    }

    #[test]
    fn many_shapes_stay_safe_balanced_and_minimal() {
        for shards in [1u32, 7, 16, 64] {
            for rf in [1u32, 3, 5] {
                for from in 1..=8u64 {
                    for to in 1..=8u64 {
                        if (from as u32) < rf || (to as u32) < rf {
                            continue;
                        }
                        let before: Vec<u64> = (1..=from).collect();
                        let after: Vec<u64> = (1..=to).collect();
                        let m = map(shards, rf, &before);
                        let moves = plan(&m, &after).unwrap();
                        // Lower bound: replicas above the ceiling must leave
                        // and replicas below the floor must arrive.
                        let total = (shards * rf) as usize;
                        let (floor, ceil) = (total / after.len(), total.div_ceil(after.len()));
                        let c = counts(&m);
                        let load = |n: &u64| c.get(n).map_or(0, |x| x.0 as usize);
                        let out: usize = c
                            .iter()
                            .map(|(n, x)| {
                                let cap = if after.contains(n) { ceil } else { 0 };
                                (x.0 as usize).saturating_sub(cap)
                            })
                            .sum();
                        let inn: usize = after.iter().map(|n| floor.saturating_sub(load(n))).sum();
                        let n = data_moves(&moves);
                        assert!(
                            n <= out.max(inn) + 1 && n >= out.max(inn),
                            "{shards} shards rf {rf} {from}->{to}: {n} moves, bound {}",
                            out.max(inn)
                        );
                        let end = simulate(m, &moves);
                        assert_balanced(&end, &after);
                    }
                }
            }
        }
    }

    #[test]
    fn leader_only_imbalance_is_fixed_with_transfers() {
        let mut m = map(6, 3, &[1, 2, 3]);
        for p in &mut m.shards {
            p.leader_hint = 1;
        }
        let moves = plan(&m, &[1, 2, 3]).unwrap();
        assert!(moves
            .iter()
            .all(|m| matches!(m, Move::TransferLeader { .. })));
        assert_eq!(moves.len(), 4, "6 leaders -> 2/2/2 takes 4 transfers");
        assert_balanced(&simulate(m, &moves), &[1, 2, 3]);
    }

    #[test]
    fn refuses_to_go_below_rf_or_to_plan_over_a_running_move() {
        let m = map(4, 3, &[1, 2, 3]);
        assert_eq!(
            plan(&m, &[1, 2]),
            Err(PlanError::TooFewNodes { nodes: 2, rf: 3 })
        );
        let mut m2 = m.clone();
        m2.shards[2].learners = vec![4];
        assert!(matches!(
            plan(&m2, &[1, 2, 3, 4]),
            Err(PlanError::MoveInFlight { shard: 2, .. })
        ));
    }

    #[test]
    fn surplus_replicas_from_an_interrupted_move_are_trimmed() {
        // RF=1, shard 1 kept its old replica on node 2 after its new one on
        // node 3 was promoted and took the leadership.
        let mut map = map(6, 1, &[1, 2, 3]);
        map.shards[1].replicas = vec![2, 3];
        map.shards[1].leader_hint = 3;
        let moves = plan(&map, &[1, 2, 3]).unwrap();
        assert_eq!(
            moves.first(),
            Some(&Move::RemoveReplica { shard: 1, node: 2 }),
            "{moves:?}"
        );
        let mut trimmed = map.clone();
        apply_move(&mut trimmed, &moves[0]);
        assert_eq!(trimmed.shards[1].replicas, vec![3], "the leader stays");
        let after = simulate(map.clone(), &moves);
        assert!(
            after.shards.iter().all(|p| p.replicas.len() == 1),
            "{after:?}"
        );
        // Unknown leader: nothing is guessed.
        map.shards[1].leader_hint = 0;
        let moves = plan(&map, &[1, 2, 3]).unwrap();
        assert!(!moves
            .iter()
            .any(|m| matches!(m, Move::RemoveReplica { shard: 1, .. })));
    }

    #[test]
    fn moves_onto_new_nodes_record_their_addresses() {
        let mut m = map(4, 3, &[1, 2, 3]);
        let live: BTreeMap<u64, NodeInfo> = (1..=5).map(|id| (id, info(id))).collect();
        let moves = plan(&m, &[1, 2, 3, 4, 5]).unwrap();
        assert!(!moves.is_empty());
        for mv in &moves {
            apply_move(&mut m, mv);
            record_node_addresses(&mut m, &live);
            for p in &m.shards {
                for n in p.replicas.iter().chain(&p.learners) {
                    assert!(
                        m.addr_of(*n).is_some(),
                        "node {n} placed without an address"
                    );
                }
            }
        }
        assert_eq!(m.addr_of(4), Some("10.0.0.4:7000"));
        // A node missing from the live set keeps what the map knew.
        let mut m2 = m.clone();
        record_node_addresses(&mut m2, &BTreeMap::new());
        assert_eq!(m2.nodes, m.nodes);
    }

    #[test]
    fn interrupted_relocations_are_finished_then_planned() {
        let mut m = map(4, 3, &[1, 2, 3]);
        m.shards[1].learners = vec![4];
        m.shards[2].learners = vec![5];
        assert!(matches!(
            plan(&m, &[1, 2, 3, 4]),
            Err(PlanError::MoveInFlight { .. })
        ));
        let fix = resume(&m, &[1, 2, 3, 4]);
        assert_eq!(
            fix,
            vec![
                Move::PromoteLearner { shard: 1, node: 4 },
                Move::RemoveReplica { shard: 2, node: 5 },
            ]
        );
        let after = simulate(m, &fix);
        let moves = plan(&after, &[1, 2, 3, 4]).unwrap();
        let done = simulate(after, &moves);
        assert!(done
            .shards
            .iter()
            .all(|p| p.replicas.len() == 3 && p.learners.is_empty()));
        assert_balanced(&done, &[1, 2, 3, 4]);
    }
}
