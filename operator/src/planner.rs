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
    check_plannable(map, &targets, rf)?;

    let mut placement: Vec<ShardPlacement> = map.shards.clone();
    let mut moves = Vec::new();
    trim_surplus(&mut placement, &targets, rf, &mut moves);
    let mut load = replica_load(&placement, &targets);
    drain(&mut placement, &targets, &mut load, &mut moves);
    balance_replicas(&mut placement, &mut load, &mut moves);
    balance_leaders(&mut placement, &targets, &mut moves);
    Ok(moves)
}

/// Enough target nodes for the replication factor, and no move in flight.
fn check_plannable(map: &ShardMap, targets: &BTreeSet<u64>, rf: usize) -> Result<(), PlanError> {
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
    Ok(())
}

/// Step 0, trim: a move interrupted between "promote" and "remove old replica"
/// leaves a shard with more voters than the replication factor. Remove
/// the surplus, never the leader, replicas on drained nodes first. With
/// no known leader the shard is left alone (a wrong guess would remove it).
fn trim_surplus(
    placement: &mut [ShardPlacement],
    targets: &BTreeSet<u64>,
    rf: usize,
    moves: &mut Vec<Move>,
) {
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
}

/// Replica load over target nodes only; drained nodes are emptied first.
fn replica_load(placement: &[ShardPlacement], targets: &BTreeSet<u64>) -> BTreeMap<u64, usize> {
    let mut load: BTreeMap<u64, usize> = targets.iter().map(|&t| (t, 0)).collect();
    for p in placement {
        for r in &p.replicas {
            if let Some(l) = load.get_mut(r) {
                *l += 1;
            }
        }
    }
    load
}

/// Step 1, drain: every replica on a non-target node goes to the least loaded
/// target that does not already hold the shard.
fn drain(
    placement: &mut [ShardPlacement],
    targets: &BTreeSet<u64>,
    load: &mut BTreeMap<u64, usize>,
    moves: &mut Vec<Move>,
) {
    for p in placement.iter_mut() {
        let drained: Vec<u64> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !targets.contains(r))
            .collect();
        for from in drained {
            let to = least_loaded(load, |t| !p.replicas.contains(&t));
            let Some(to) = to else { continue };
            relocate(p, from, to, moves);
            *load.get_mut(&to).expect("target") += 1;
        }
    }
}

/// Step 2, balance replicas: move from the most to the least loaded node until
/// loads differ by at most one. Each move lowers an over-full node, so the
/// count is the minimum.
fn balance_replicas(
    placement: &mut [ShardPlacement],
    load: &mut BTreeMap<u64, usize>,
    moves: &mut Vec<Move>,
) {
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
            if let Some(to) = least_loaded(load, |t| {
                !p.replicas.contains(&t) && load[&t] + 1 < max_load
            }) {
                chosen = Some((i, to));
                break;
            }
        }
        let Some((i, to)) = chosen else { break };
        relocate(&mut placement[i], max_node, to, moves);
        *load.get_mut(&max_node).expect("target") -= 1;
        *load.get_mut(&to).expect("target") += 1;
    }
}

/// Step 3: balance leaders with transfers only.
fn balance_leaders(
    placement: &mut [ShardPlacement],
    targets: &BTreeSet<u64>,
    moves: &mut Vec<Move>,
) {
    let mut leaders: BTreeMap<u64, usize> = targets.iter().map(|&t| (t, 0)).collect();
    for p in placement.iter() {
        if let Some(l) = leaders.get_mut(&p.leader_hint) {
            *l += 1;
        }
    }
    // Any transfer from a leader to one of its shard's voters that has at
    // least two fewer leaderships narrows the spread; take the widest gap
    // first. The sum of squared leader counts falls with every transfer, so
    // this ends.
    loop {
        let steps = match widest_transfer(placement, &leaders) {
            Some(step) => vec![step],
            // No direct transfer helps: hand one leadership down a chain
            // a -> b -> d where b keeps its count and d gains what a loses.
            None => match leader_chain(placement, &leaders) {
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
}

/// The direct transfer `(shard index, from, to)` with the widest gap in
/// leader counts, if any narrows the spread.
fn widest_transfer(
    placement: &[ShardPlacement],
    leaders: &BTreeMap<u64, usize>,
) -> Option<(usize, u64, u64)> {
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
    best.map(|(i, from, to, _)| (i, from, to))
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
mod tests;
