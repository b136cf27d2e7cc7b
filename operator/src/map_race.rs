//! Recording a finished move when the shard map changed since the move
//! began. Nodes publish their leader hints (and their addresses) into the
//! same etcd key with a compare-and-swap, and under load leaderships move
//! often, so a move's own compare-and-swap lost that race: a drain under
//! 200k points/s stopped with "shard map changed while applying a move".
//! Such a change places no replica, so the move is recorded on the new map;
//! a change of replicas or learners (another rebalancer) still stops it.

use shardhouse_common::shard_map::ShardMap;

/// Whether `fresh` differs from `seen` only in what nodes publish on their
/// own: leader hints, node addresses and the epoch. Every shard keeps its
/// replicas and learners.
pub fn only_hints_changed(seen: &ShardMap, fresh: &ShardMap) -> bool {
    seen.shard_count == fresh.shard_count
        && seen.replication_factor == fresh.replication_factor
        && seen.shards.len() == fresh.shards.len()
        && seen.shards.iter().zip(&fresh.shards).all(|(a, b)| {
            a.shard == b.shard && a.replicas == b.replicas && a.learners == b.learners
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::shard_map::NodeInfo;

    fn map() -> ShardMap {
        let nodes = (1..=4)
            .map(|id| NodeInfo {
                node_id: id,
                grpc_addr: format!("127.0.0.1:{}", 7000 + id),
                http_addr: String::new(),
                cores: 1,
            })
            .collect();
        ShardMap::initial(4, 3, nodes)
    }

    #[test]
    fn hints_and_addresses_do_not_conflict() {
        let seen = map();
        let mut fresh = seen.clone();
        fresh.shards[1].leader_hint = 3;
        fresh.epoch += 2;
        fresh.nodes.get_mut(&2).unwrap().grpc_addr = "127.0.0.1:9".into();
        assert!(only_hints_changed(&seen, &fresh));
    }

    #[test]
    fn another_rebalancers_moves_do() {
        let seen = map();
        let mut learner = seen.clone();
        learner.shards[0].learners.push(4);
        assert!(!only_hints_changed(&seen, &learner));
        let mut removed = seen.clone();
        removed.shards[2].replicas.pop();
        assert!(!only_hints_changed(&seen, &removed));
        let mut fewer = seen.clone();
        fewer.shards.pop();
        assert!(!only_hints_changed(&seen, &fewer));
    }
}
