//! Acting on damaged engine data (shardhouse_engine::damage): a shard whose
//! stored copy here is damaged has its replica rebuilt from its leader's
//! snapshot, the same rebuild a stuck replica gets; until then the engine
//! refuses reads of it, so the router reads another replica. A shard with
//! no other voter (RF=1) cannot be rebuilt: `/health` says so.

use crate::context::NodeContext;
use shardhouse_engine::ShardDamage;
use shardhouse_wal::ShardStatus;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// What to do about one damaged shard (pure, for tests).
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing now: its replica is not open yet, or is being rebuilt.
    Wait,
    /// Ask the WAL to rebuild the replica from its leader's snapshot.
    Rebuild,
    /// No other voter holds the shard: nothing to rebuild from.
    NoPeer,
}

/// `status`: this node's replica of the shard, if the WAL has it.
pub fn next(node_id: u64, status: Option<&ShardStatus>) -> Next {
    let Some(s) = status else {
        return Next::Wait;
    };
    if s.rebuilding.is_some() {
        return Next::Wait;
    }
    if !s.voters.iter().any(|v| *v != node_id) {
        return Next::NoPeer;
    }
    Next::Rebuild
}

/// Whether a damaged shard can be rebuilt here (some other voter holds it).
pub fn has_peer(node_id: u64, status: Option<&ShardStatus>) -> bool {
    next(node_id, status) != Next::NoPeer
}

/// Every `every`: damaged shards not being rebuilt are rebuilt.
pub async fn run(ctx: Arc<NodeContext>, every: Duration) {
    let mut told_no_peer: BTreeSet<u32> = BTreeSet::new();
    loop {
        let damaged: Vec<ShardDamage> = ctx.engine.damaged_shards();
        if !damaged.is_empty() {
            let states = ctx.wal.shard_states();
            for d in &damaged {
                let status = states.iter().find(|s| s.shard == d.shard);
                match next(ctx.node_id, status) {
                    Next::Wait => {}
                    Next::Rebuild => {
                        if let Err(e) = ctx.wal.rebuild_damaged_replica(d.shard).await {
                            tracing::warn!(shard = d.shard, error = %e, "cannot start the rebuild of a damaged replica yet");
                        }
                    }
                    Next::NoPeer => {
                        if told_no_peer.insert(d.shard) {
                            tracing::error!(
                                shard = d.shard,
                                parts = %d.describe(),
                                "shard's engine data is damaged and no other replica holds it: it cannot be rebuilt; its reads are refused (restore it from a backup, see docs/operations.md)"
                            );
                        }
                    }
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_wal::Rebuild;

    #[test]
    fn a_damaged_replica_is_rebuilt_once_open_unless_it_has_no_peer() {
        assert_eq!(next(1, None), Next::Wait, "replica not open yet");
        let mut s = ShardStatus {
            shard: 4,
            voters: vec![1, 2, 3],
            ..ShardStatus::default()
        };
        assert_eq!(next(1, Some(&s)), Next::Rebuild);
        s.rebuilding = Some(Rebuild::Damaged);
        assert_eq!(next(1, Some(&s)), Next::Wait, "already under way");
        let alone = ShardStatus {
            voters: vec![1],
            ..ShardStatus::default()
        };
        assert_eq!(next(1, Some(&alone)), Next::NoPeer);
        assert!(!has_peer(1, Some(&alone)));
        assert!(has_peer(2, Some(&alone)), "the voter is another node");
    }
}
