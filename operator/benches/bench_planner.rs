//! `make bench-planner` (= `cargo bench -p shardhouse-operator --bench
//! bench-planner`): the shard planner at scale (issue 18): 100 nodes
//! holding 4,096 shards at RF=3, then nodes added and one drained. For each
//! change: the time to plan (best of several runs, one thread), the moves
//! (replicas relocated, leadership transfers) against the fewest any plan
//! could make, and the balance after the plan is applied (replicas and
//! leaders per node, max - min).

#![allow(clippy::print_stdout)] // a benchmark prints its figures

use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use shardhouse_operator::planner::{self, Move};
use std::time::Instant;

const SHARDS: u32 = 4096;
const RF: u32 = 3;
const NODES: u64 = 100;
const RUNS: usize = 3;

fn node(id: u64) -> NodeInfo {
    NodeInfo {
        node_id: id,
        grpc_addr: format!("node-{id}:7100"),
        http_addr: format!("node-{id}:7101"),
        cores: 2,
    }
}

/// What one plan did.
struct Outcome {
    label: String,
    nodes: usize,
    plan_ms: f64,
    relocated: usize,
    transfers: usize,
    fewest_relocations: usize,
    replica_spread: (u32, u32),
    leader_spread: (u32, u32),
}

/// Min and max of replicas and leaders per target node.
fn spread(map: &ShardMap, targets: &[u64]) -> ((u32, u32), (u32, u32)) {
    let c = planner::counts(map);
    let per = |f: fn(&(u32, u32)) -> u32| {
        let v: Vec<u32> = targets.iter().map(|t| c.get(t).map_or(0, f)).collect();
        (
            v.iter().copied().min().unwrap_or(0),
            v.iter().copied().max().unwrap_or(0),
        )
    };
    (per(|x| x.0), per(|x| x.1))
}

/// Replicas that must move at the least: those on drained nodes, plus
/// what the new nodes need to reach the floor of the even share.
fn fewest_relocations(map: &ShardMap, targets: &[u64]) -> usize {
    let c = planner::counts(map);
    let total = (map.shard_count * map.replication_factor) as usize;
    let floor = total / targets.len();
    let drained: usize = c
        .iter()
        .filter(|(n, _)| !targets.contains(n))
        .map(|(_, x)| x.0 as usize)
        .sum();
    let short: usize = targets
        .iter()
        .map(|t| floor.saturating_sub(c.get(t).map_or(0, |x| x.0) as usize))
        .sum();
    drained.max(short)
}

/// Plans `map` onto `targets`, applies the plan, returns what it did.
fn step(label: &str, map: &mut ShardMap, targets: &[u64]) -> Outcome {
    for &t in targets {
        map.nodes.entry(t).or_insert_with(|| node(t));
    }
    let fewest = fewest_relocations(map, targets);
    let mut best = f64::MAX;
    let mut moves = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        moves = planner::plan(map, targets).expect("plannable");
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    for m in &moves {
        planner::apply_move(map, m);
    }
    map.nodes.retain(|n, _| targets.contains(n));
    let (replica_spread, leader_spread) = spread(map, targets);
    Outcome {
        label: label.to_string(),
        nodes: targets.len(),
        plan_ms: best,
        relocated: moves
            .iter()
            .filter(|m| matches!(m, Move::AddLearner { .. }))
            .count(),
        transfers: moves
            .iter()
            .filter(|m| matches!(m, Move::TransferLeader { .. }))
            .count(),
        fewest_relocations: fewest,
        replica_spread,
        leader_spread,
    }
}

fn main() {
    let ids: Vec<u64> = (1..=NODES).collect();
    let mut map = ShardMap::initial(SHARDS, RF, ids.iter().map(|&i| node(i)).collect());
    let mut targets = ids.clone();
    let mut out = vec![step("initial placement, replanned", &mut map, &targets)];
    targets.push(NODES + 1);
    out.push(step("add 1 node", &mut map, &targets));
    targets.extend(NODES + 2..=NODES + 10);
    out.push(step("add 9 more nodes", &mut map, &targets));
    targets.retain(|&n| n != 1);
    out.push(step("drain node 1", &mut map, &targets));

    println!(
        "### Shard planner: {SHARDS} shards, RF={RF}, from {NODES} nodes (best of {RUNS} plans)\n"
    );
    println!("| change | target nodes | plan (ms) | replicas relocated | fewest possible | leader transfers | replicas per node (min-max) | leaders per node (min-max) |");
    println!("|---|---|---|---|---|---|---|---|");
    for o in &out {
        println!(
            "| {} | {} | {:.1} | {} | {} | {} | {}-{} | {}-{} |",
            o.label,
            o.nodes,
            o.plan_ms,
            o.relocated,
            o.fewest_relocations,
            o.transfers,
            o.replica_spread.0,
            o.replica_spread.1,
            o.leader_spread.0,
            o.leader_spread.1
        );
    }
    let (add1, add9) = (&out[1], &out[2]);
    println!();
    println!("planner_plan_ms_add1={:.1}", add1.plan_ms);
    println!("planner_moves_per_added_node_add1={}", add1.relocated);
    println!(
        "planner_moves_per_added_node_add9={:.1}",
        add9.relocated as f64 / 9.0
    );
    println!(
        "planner_replica_spread_after_add9={}",
        add9.replica_spread.1 - add9.replica_spread.0
    );
}
