//! Shard moves: running a batch of the planner's moves in one reconcile
//! without stopping inside a relocation.

use super::events::publish;
use super::observe::EtcdView;
use super::{Context, MOVES_PER_RECONCILE};
use crate::crd::ShardhouseCluster;
use crate::planner::{self, Move};
use crate::rebalance::Executor;
use crate::resources;
use crate::Error;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::runtime::events::EventType;
use std::collections::BTreeSet;

/// Runs a batch of the planned shard moves (or finishes interrupted ones)
/// and returns how many are still pending. `etcd` gets the shard map as it
/// is after the moves, and its connection back.
pub(super) async fn rebalance(
    ctx: &Context,
    c: &ShardhouseCluster,
    applied: &StatefulSet,
    etcd: &mut EtcdView,
    target: i32,
    replicas: i32,
    ready: i32,
) -> u32 {
    // Rebalance once every node pod is up and registered.
    let mut pending = 0u32;
    // While node pods roll, leave leaderships where the upgrade puts them:
    // balancing them would hand the next pod's leaderships straight back
    // (seen on a real cluster: the upgrade moved them off node 3, the
    // planner moved them back, for ever). Replica moves still run.
    // (`OnDelete` never advances currentRevision: count the pods instead.)
    let rolling = applied
        .status
        .as_ref()
        .is_some_and(|s| s.updated_replicas.unwrap_or(0) < s.replicas);
    let live: BTreeSet<u64> = etcd.live.keys().copied().collect();
    let all_registered = (0..replicas).all(|o| live.contains(&resources::node_id_of_ordinal(o)));
    if let (Some((map, _)), Some(meta)) = (etcd.map.clone(), etcd.meta.take()) {
        if ready == replicas && all_registered {
            let targets: Vec<u64> = (0..target.min(replicas))
                .map(resources::node_id_of_ordinal)
                .collect();
            match planner::plan(&map, &targets) {
                Ok(moves) if worth_running(&moves, rolling) => {
                    publish(
                        ctx,
                        c,
                        EventType::Normal,
                        "Rebalancing",
                        format!("{} shard moves planned onto nodes {targets:?}", moves.len()),
                    )
                    .await;
                    let mut exec = Executor::new(meta);
                    let done = run_moves(&mut exec, &moves, MOVES_PER_RECONCILE).await;
                    pending = (moves.len() - done.0) as u32;
                    if let Some(e) = done.1 {
                        publish(ctx, c, EventType::Warning, "RebalanceFailed", e.to_string()).await;
                    }
                    // Re-read so status shows the map after the moves.
                    if let Some(m) = exec.meta.shard_map().await.ok().flatten() {
                        etcd.map = Some(m);
                    }
                    etcd.meta = Some(exec.meta);
                }
                Ok(_) => etcd.meta = Some(meta),
                Err(planner::PlanError::MoveInFlight { .. }) => {
                    // A relocation stopped half way (a failed step, or an
                    // operator restart): finish it (promote a learner on a
                    // kept node, remove one on a drained node), then plan
                    // again on the next reconcile.
                    let moves = planner::resume(&map, &targets);
                    publish(
                        ctx,
                        c,
                        EventType::Normal,
                        "Rebalancing",
                        format!("finishing {} interrupted shard moves", moves.len()),
                    )
                    .await;
                    let mut exec = Executor::new(meta);
                    let done = run_moves(&mut exec, &moves, moves.len()).await;
                    if let Some(e) = done.1 {
                        publish(ctx, c, EventType::Warning, "RebalanceFailed", e.to_string()).await;
                    }
                    pending = (moves.len() - done.0) as u32 + 1;
                    if let Some(m) = exec.meta.shard_map().await.ok().flatten() {
                        etcd.map = Some(m);
                    }
                    etcd.meta = Some(exec.meta);
                }
                Err(e) => {
                    publish(ctx, c, EventType::Warning, "PlanFailed", e.to_string()).await;
                    etcd.meta = Some(meta);
                    // Not balanced and not able to say how far off: never
                    // report Running over it.
                    pending = 1;
                }
            }
        } else {
            etcd.meta = Some(meta);
        }
    }
    pending
}

/// Runs up to `limit` moves; returns how many succeeded and the first error.
pub(super) async fn run_moves(
    exec: &mut Executor,
    moves: &[Move],
    limit: usize,
) -> (usize, Option<Error>) {
    let n = batch_len(moves, limit);
    let mut done = 0;
    for mv in &moves[..n] {
        if let Err(e) = exec.execute(mv).await {
            return (done, Some(e));
        }
        done += 1;
    }
    (done, None)
}

/// Whether to run a plan now: not when empty, and not when it only moves
/// leaderships while node pods are rolling.
fn worth_running(moves: &[Move], rolling: bool) -> bool {
    let leaders_only = moves
        .iter()
        .all(|m| matches!(m, Move::TransferLeader { .. }));
    !moves.is_empty() && (!rolling || !leaders_only)
}

/// How many of `moves` one reconcile runs: at least `limit`, but never
/// stopping inside a relocation (AddLearner .. RemoveReplica of one shard).
/// A batch that ended between AddLearner and PromoteLearner left a learner
/// in the map, and the next plan refused to run over it (seen on a real
/// cluster: the scale-out stopped after 8 moves while the status said
/// Running).
fn batch_len(moves: &[Move], limit: usize) -> usize {
    let mut n = limit.min(moves.len());
    while n > 0 && n < moves.len() {
        let (last, next) = (&moves[n - 1], &moves[n]);
        if matches!(next, Move::AddLearner { .. }) || next.shard() != last.shard() {
            break;
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_never_stop_inside_a_relocation() {
        let r = |shard, from, to| {
            vec![
                Move::AddLearner { shard, node: to },
                Move::PromoteLearner { shard, node: to },
                Move::TransferLeader { shard, from, to },
                Move::RemoveReplica { shard, node: from },
            ]
        };
        let moves: Vec<Move> = [r(0, 1, 4), r(0, 2, 5), r(1, 1, 4)].concat();
        assert_eq!(batch_len(&moves, 8), 8, "two whole relocations");
        assert_eq!(batch_len(&moves, 9), 12, "the third one is finished");
        assert_eq!(batch_len(&moves, 5), 8);
        assert_eq!(batch_len(&moves, 100), 12);
        assert_eq!(batch_len(&[], 8), 0);
        let transfers = vec![
            Move::TransferLeader {
                shard: 0,
                from: 1,
                to: 2,
            },
            Move::TransferLeader {
                shard: 1,
                from: 1,
                to: 3,
            },
        ];
        assert_eq!(batch_len(&transfers, 1), 1);
    }

    #[test]
    fn leader_balancing_waits_for_a_rolling_upgrade() {
        let transfer = Move::TransferLeader {
            shard: 0,
            from: 3,
            to: 1,
        };
        let add = Move::AddLearner { shard: 1, node: 4 };
        assert!(worth_running(std::slice::from_ref(&transfer), false));
        assert!(
            !worth_running(std::slice::from_ref(&transfer), true),
            "would undo the upgrade's transfers"
        );
        assert!(
            worth_running(&[add, transfer], true),
            "data moves still run"
        );
        assert!(!worth_running(&[], false));
    }
}
