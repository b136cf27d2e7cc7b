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
