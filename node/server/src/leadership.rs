//! Leaders rebalance by themselves. After restarts, elections leave
//! leadership wherever the surviving replicas were (0 / 10 / 2 shards per
//! node was seen), and a node that leads most shards does most of the
//! cluster's write work. Every few seconds each node checks whether it
//! leads more than its fair share and, if so, hands one shard to a live,
//! caught-up replica that leads fewer (raft leader transfer).
//!
//! The decision is a pure function of the shard map (whose `leader_hint`s
//! the nodes keep pointed at the real leaders) and this node's replica
//! states. A layout that is already balanced, e.g. the operator's, is left
//! alone, and a shard whose leadership moved recently (an operator drain
//! before a pod restart) is not touched.

use shardhouse_common::shard_map::ShardMap;
use shardhouse_wal::{Role, ShardStatus};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::NodeContext;

/// A shard must have had its leader this long before it is moved again.
pub const SETTLE: Duration = Duration::from_secs(30);
/// A transferee may trail the leader by at most this many entries.
pub const MAX_LAG: u64 = 1_000;

/// One shard this node leads, as the rebalancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Led {
    pub shard: u32,
    /// How long this node has led it without interruption.
    pub led_for: Duration,
    /// Entries the slowest follower trails by.
    pub max_follower_lag: u64,
    pub voters: Vec<u64>,
}

/// The transfer this node should make now, if any: `(shard, to)`.
pub fn next_transfer(
    me: u64,
    map: &ShardMap,
    led: &[Led],
    live: &dyn Fn(u64) -> bool,
) -> Option<(u32, u64)> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for n in map.nodes.keys().copied().filter(|n| live(*n)) {
        counts.insert(n, 0);
    }
    counts.insert(me, 0);
    for p in &map.shards {
        if led.iter().any(|l| l.shard == p.shard) {
            continue;
        }
        if p.leader_hint != me && counts.contains_key(&p.leader_hint) {
            *counts.get_mut(&p.leader_hint).expect("present") += 1;
        }
    }
    counts.insert(me, led.len());
    let shards = map.shards.len();
    let fair = shards.div_ceil(counts.len().max(1));
    if led.len() <= fair {
        return None;
    }
    // Settled shards whose followers are caught up, to the live voter that
    // leads the fewest (below the fair share; ties to the lower id).
    let mut best: Option<(usize, u32, u64)> = None;
    for l in led
        .iter()
        .filter(|l| l.led_for >= SETTLE && l.max_follower_lag <= MAX_LAG)
    {
        for &v in l.voters.iter().filter(|v| **v != me) {
            let Some(&c) = counts.get(&v) else { continue };
            if c + 1 > fair || c + 1 >= led.len() {
                continue;
            }
            if best.is_none_or(|(bc, bs, bv)| (c, l.shard, v) < (bc, bs, bv)) {
                best = Some((c, l.shard, v));
            }
        }
    }
    best.map(|(_, shard, to)| (shard, to))
}

/// Runs the rebalancer every `interval` for the life of the process.
pub async fn run(ctx: Arc<NodeContext>, interval: Duration) {
    let mut since: BTreeMap<u32, Instant> = BTreeMap::new();
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        let states: Vec<ShardStatus> = ctx.wal.shard_states();
        let now = Instant::now();
        since.retain(|s, _| {
            states
                .iter()
                .any(|st| st.shard == *s && st.role == Role::Leader)
        });
        let led: Vec<Led> = states
            .iter()
            .filter(|s| s.role == Role::Leader)
            .map(|s| Led {
                shard: s.shard,
                led_for: now - *since.entry(s.shard).or_insert(now),
                max_follower_lag: s.max_follower_lag,
                voters: s.voters.clone(),
            })
            .collect();
        let decision = {
            let map = ctx.shard_map.read();
            let Some(map) = map.as_ref() else { continue };
            let live = |n: u64| n == ctx.node_id || ctx.directory.is_registered(n);
            next_transfer(ctx.node_id, map, &led, &live)
        };
        let Some((shard, to)) = decision else {
            continue;
        };
        tracing::info!(
            shard,
            to,
            leads = led.len(),
            "leading more than a fair share; transferring a leadership"
        );
        match ctx.wal.transfer_leader(shard, to).await {
            Ok(()) => {
                since.remove(&shard);
            }
            Err(e) => {
                tracing::warn!(shard, to, error = %e, "leader transfer failed; will try again")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::shard_map::NodeInfo;

    fn map(leaders: &[u64]) -> ShardMap {
        let nodes = (1..=3)
            .map(|id| NodeInfo {
                node_id: id,
                grpc_addr: String::new(),
                http_addr: String::new(),
                cores: 1,
            })
            .collect();
        let mut m = ShardMap::initial(leaders.len() as u32, 3, nodes);
        for (p, l) in m.shards.iter_mut().zip(leaders) {
            p.leader_hint = *l;
        }
        m
    }

    fn led(m: &ShardMap, me: u64, settled: bool) -> Vec<Led> {
        m.shards
            .iter()
            .filter(|p| p.leader_hint == me)
            .map(|p| Led {
                shard: p.shard,
                led_for: if settled { SETTLE } else { Duration::ZERO },
                max_follower_lag: 0,
                voters: p.replicas.clone(),
            })
            .collect()
    }

    const ALL: &dyn Fn(u64) -> bool = &|_| true;

    /// Replays the rebalancer on every node until nobody moves anything.
    fn settle(mut m: ShardMap, live: &dyn Fn(u64) -> bool) -> (ShardMap, usize) {
        let mut moves = 0;
        loop {
            let mut moved = false;
            for me in 1..=3 {
                if !live(me) {
                    continue;
                }
                if let Some((shard, to)) = next_transfer(me, &m, &led(&m, me, true), live) {
                    m.shards[shard as usize].leader_hint = to;
                    moves += 1;
                    moved = true;
                }
            }
            if !moved {
                return (m, moves);
            }
            assert!(moves < 100, "does not converge");
        }
    }

    fn counts(m: &ShardMap) -> Vec<usize> {
        (1..=3)
            .map(|n| m.shards.iter().filter(|p| p.leader_hint == n).count())
            .collect()
    }

    #[test]
    fn leaders_left_at_0_10_2_rebalance_to_4_4_4() {
        let mut leaders = vec![2; 10];
        leaders.extend([3, 3]);
        let (m, moves) = settle(map(&leaders), ALL);
        assert_eq!(counts(&m), [4, 4, 4]);
        assert_eq!(moves, 6, "only the excess moves");
    }

    #[test]
    fn a_balanced_layout_is_left_alone() {
        let m = map(&[1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
        for me in 1..=3 {
            assert_eq!(next_transfer(me, &m, &led(&m, me, true), ALL), None);
        }
        // Uneven counts within the fair share are balanced enough.
        let m = map(&[1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
        for me in 1..=3 {
            assert_eq!(next_transfer(me, &m, &led(&m, me, true), ALL), None);
        }
    }

    #[test]
    fn nothing_moves_to_dead_nodes_or_out_of_unsettled_shards() {
        let m = map(&[1; 6]);
        let only_1_and_2 = |n: u64| n != 3;
        let (m2, _) = settle(m.clone(), &only_1_and_2);
        assert_eq!(counts(&m2), [3, 3, 0]);
        assert_eq!(next_transfer(1, &m, &led(&m, 1, false), ALL), None);
        let mut lagging = led(&m, 1, true);
        for l in &mut lagging {
            l.max_follower_lag = MAX_LAG + 1;
        }
        assert_eq!(next_transfer(1, &m, &lagging, ALL), None);
    }
}
