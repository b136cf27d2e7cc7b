//! Elections, replication under loss and partitions, snapshots, restarts.

use super::*;

#[test]
fn elects_one_leader_per_shard() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    for shard in 1..=4 {
        c.bootstrap(shard, &c.ids)?;
    }
    // Time only moves when the test ticks, and election timeouts are 10
    // to 19 ticks: after 9, every replica still waits as a follower.
    for _ in 0..9 {
        c.tick();
    }
    for shard in 1..=4 {
        for id in &c.ids {
            assert_eq!(c.status(*id, shard).unwrap().role, Role::Follower);
        }
    }
    for shard in 1..=4 {
        let l = c.leader(shard, &c.ids)?;
        assert!(c.ticks() >= 10);
        // Every replica agrees on the leader once heartbeats flow.
        c.until("followers to learn the leader", |c| {
            c.ids
                .iter()
                .all(|id| c.status(*id, shard).and_then(|s| s.leader_id) == Some(l))
        })?;
        let st = c.status(l, shard).unwrap();
        assert_eq!(st.voters, vec![1, 2, 3]);
        assert!(st.term >= 1);
    }
    Ok(())
}

#[test]
fn replicates_every_committed_entry_once_in_order() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shards: Vec<ShardId> = (10..14).collect();
    for &s in &shards {
        c.bootstrap(s, &c.ids)?;
    }
    let leaders: HashMap<ShardId, NodeId> = shards
        .iter()
        .map(|&s| Ok((s, c.leader(s, &c.ids)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut expected: HashMap<ShardId, Vec<Vec<u8>>> = HashMap::new();
    // Proposals over several shards, all handed to the leaders before any
    // is answered, exercise group commit.
    for round in 0..10 {
        let mut calls = Vec::new();
        for &s in &shards {
            for k in 0..5 {
                let data = payload(&format!("s{s}"), round * 5 + k);
                expected.entry(s).or_default().push(data.clone());
                calls.push(c.start_request(c.wals[&leaders[&s]].propose(s, data)));
            }
        }
        c.until("every proposal of the round answered", |_| {
            calls.iter_mut().all(|x| x.poll())
        })?;
        // No tick passed without a quorum, so no leader changed: every
        // proposal commits, once.
        for call in calls {
            call.answer().expect("answered")?;
        }
    }
    for &s in &shards {
        assert_eq!(c.leader(s, &c.ids)?, leaders[&s]);
        c.wait_applied(s, &c.ids, &expected[&s])?;
        let idx: Vec<u64> = c.sms[&leaders[&s]].entries(s).iter().map(|e| e.0).collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]));
    }
    let stats: Vec<_> = c.ids.iter().map(|id| c.wals[id].stats()).collect();
    for s in &stats {
        assert!(s.synced_batches > 0 && s.synced_entries > 0);
    }
    let leader_stats = c.wals[&c.leader(shards[0], &c.ids)?].stats();
    eprintln!(
        "group commit: mean {:.2} entries per synced batch ({} batches)",
        leader_stats.mean_group_commit_entries(),
        leader_stats.synced_batches
    );
    Ok(())
}

#[test]
fn replicates_under_message_loss() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.leader(1, &c.ids)?;
    c.net.drop_all(1.0 / 7.0);
    let mut expected = Vec::new();
    for i in 0..30 {
        let d = payload("lossy", i);
        c.propose(1, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.net.recover();
    assert!(c.net.counts().1 > 0, "nothing was dropped");
    let l = c.leader(1, &c.ids)?;
    let sm = c.sms[&l].clone();
    c.until("leader apply", |_| sm.payloads(1).len() >= expected.len())?;
    // Retries after an ambiguous failure may duplicate a payload; each
    // committed index is still applied exactly once everywhere.
    let reference = sm.payloads(1);
    for d in &expected {
        assert!(reference.contains(d));
    }
    c.wait_applied(1, &c.ids, &reference)?;
    Ok(())
}

#[test]
fn partitioned_leader_steps_down_and_cannot_commit() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    let old = c.leader(1, &c.ids)?;
    let old_term = c.status(old, 1).unwrap().term;
    c.propose(1, b"before".to_vec(), &c.ids)?;

    c.net.isolate(old);
    // A proposal on the cut-off leader must not commit.
    let stale = c.run(
        "the cut-off leader's proposal",
        c.wals[&old].propose(1, b"stale-write".to_vec()),
    )?;
    assert!(
        matches!(
            stale,
            Err(WalError::NotLeader { .. } | WalError::Unavailable(_))
        ),
        "old leader committed while partitioned: {stale:?}"
    );
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != old).collect();
    let new = c.leader(1, &rest)?;
    assert_ne!(new, old);
    assert!(c.status(new, 1).unwrap().term > old_term);
    // check_quorum makes the old leader step down on its own.
    c.until("old leader to step down", |c| {
        c.status(old, 1).is_some_and(|s| s.role != Role::Leader)
    })?;
    c.propose(1, b"after".to_vec(), &rest)?;

    c.net.recover();
    let expected = vec![b"before".to_vec(), b"after".to_vec()];
    c.wait_applied(1, &c.ids, &expected)?;
    for id in &c.ids {
        assert!(!c.sms[id].payloads(1).contains(&b"stale-write".to_vec()));
    }
    Ok(())
}

/// Shard 1 on three nodes: 5 entries everywhere, then a follower is
/// isolated and 40 more are committed and flushed without it. Returns the
/// lagger, the others, the lagger's last index and every payload.
#[allow(clippy::type_complexity)]
fn write_past_a_lagger(c: &Cluster) -> anyhow::Result<(NodeId, Vec<NodeId>, u64, Vec<Vec<u8>>)> {
    c.bootstrap(1, &c.ids)?;
    let leader = c.leader(1, &c.ids)?;
    let lagger = *c.ids.iter().find(|i| **i != leader).unwrap();
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != lagger).collect();
    let mut expected = Vec::new();
    for i in 0..5 {
        let d = payload("early", i);
        c.propose(1, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.wait_applied(1, &c.ids, &expected)?;
    c.net.isolate(lagger);
    for i in 0..40 {
        let d = payload("late", i);
        c.propose(1, d.clone(), &rest)?;
        expected.push(d);
    }
    c.wait_applied(1, &rest, &expected)?;
    let lagger_last = c.status(lagger, 1).unwrap().last_index;
    for id in &rest {
        c.sms[id].flush(1);
    }
    Ok((lagger, rest, lagger_last, expected))
}

/// A replica further behind than the leader keeps log for is sent a
/// snapshot (retention off here: every lagger is "too far").
#[test]
fn lagging_replica_catches_up_by_snapshot() -> anyhow::Result<()> {
    let c = Cluster::with(3, |cfg| cfg.follower_log_retention_bytes = 0)?;
    // Compaction then drops the entries the lagging replica would need.
    let (lagger, rest, lagger_last, mut expected) = write_past_a_lagger(&c)?;
    let l = c.leader(1, &rest)?;
    c.until("leader log compaction past the lagging replica", |c| {
        c.status(l, 1)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })?;

    c.net.recover();
    c.wait_applied(1, &c.ids, &expected)?;
    assert!(
        c.sms[&lagger].restores(1) >= 1,
        "caught up without a snapshot"
    );
    // And it keeps replicating normally afterwards.
    let d = payload("post", 0);
    c.propose(1, d.clone(), &c.ids)?;
    expected.push(d);
    c.wait_applied(1, &c.ids, &expected)?;
    c.until("lagging replica's log to restart after the snapshot", |c| {
        c.status(lagger, 1)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })?;
    Ok(())
}

#[test]
fn restart_reloads_log_and_reapplies_above_flushed_exactly_once() -> anyhow::Result<()> {
    let mut c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.bootstrap(2, &c.ids)?;
    let mut expected = Vec::new();
    for i in 0..20 {
        let d = payload("r", i);
        c.propose(1, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.wait_applied(1, &c.ids, &expected)?;
    let victim = 1;
    let before = c.status(victim, 1).unwrap();
    let entries = c.sms[&victim].entries(1);
    let flushed_at = entries[9].0;
    c.sms[&victim].flush_to(1, flushed_at);

    c.stop(victim);
    let durable = Arc::new(c.sms[&victim].durable_copy());
    assert_eq!(durable.payloads(1).len(), 10);
    c.start(victim, durable.clone())?;

    let after = c.status(victim, 1).context("replica reloaded")?;
    assert!(after.term >= before.term);
    assert!(
        after.last_index >= before.last_index,
        "log lost: {after:?} vs {before:?}"
    );
    assert!(c.status(victim, 2).is_some(), "second shard not reloaded");
    assert_eq!(after.voters, vec![1, 2, 3]);
    // Entries above flushed come back exactly once (the state machine
    // flags any at or below flushed, or any repeat).
    c.wait_applied(1, &[victim], &expected)?;
    let idx: Vec<u64> = durable.entries(1).iter().map(|e| e.0).collect();
    assert_eq!(idx, entries.iter().map(|e| e.0).collect::<Vec<_>>());

    // The restarted node keeps working.
    let d = payload("r", 99);
    c.propose(1, d.clone(), &c.ids)?;
    expected.push(d);
    c.wait_applied(1, &c.ids, &expected)?;
    Ok(())
}

#[test]
fn single_node_restart_keeps_hard_state_and_log() -> anyhow::Result<()> {
    let mut c = Cluster::new(1)?;
    c.bootstrap(5, &[1])?;
    let mut expected = Vec::new();
    for i in 0..10 {
        let d = payload("solo", i);
        c.propose(5, d.clone(), &[1])?;
        expected.push(d);
    }
    c.wait_applied(5, &[1], &expected)?;
    let before = c.status(1, 5).unwrap();
    c.stop(1);
    // Nothing flushed: every committed entry is applied again, once.
    let fresh = Arc::new(MemSm::default());
    c.start(1, fresh.clone())?;
    let after = c.status(1, 5).unwrap();
    assert!(after.term >= before.term);
    assert_eq!(after.last_index, before.last_index, "log lost on restart");
    c.wait_applied(5, &[1], &expected)?;
    c.leader(5, &[1])?;
    c.until("commit index back", |c| {
        c.status(1, 5)
            .is_some_and(|s| s.commit_index > before.commit_index)
    })?;
    Ok(())
}

/// Regression: a single voter's commit advances arrive in raft-rs's
/// LightReady, not in a Ready's hard state. If they are not persisted, the
/// stored commit stays at the bootstrap index while compaction moves the log
/// past it, and raft-rs refuses to start the replica after a restart
/// ("hs.commit 1 is out of range").
#[test]
fn single_voter_restarts_after_log_compaction() -> anyhow::Result<()> {
    let mut c = Cluster::new(1)?;
    c.bootstrap(6, &[1])?;
    let mut expected = Vec::new();
    for i in 0..60 {
        let d = payload("compact", i);
        c.propose(6, d.clone(), &[1])?;
        expected.push(d);
    }
    c.wait_applied(6, &[1], &expected)?;
    c.sms[&1].flush(6);
    c.until("log compaction on the single voter", |c| {
        c.status(1, 6).is_some_and(|s| s.first_index > 30)
    })?;
    let before = c.status(1, 6).unwrap();
    let durable = Arc::new(c.sms[&1].durable_copy());
    c.stop(1);
    c.start(1, durable.clone())?;
    c.leader(6, &[1])?;
    let after = c.status(1, 6).unwrap();
    assert!(after.commit_index >= before.first_index - 1, "{after:?}");
    let d = payload("after-restart", 0);
    c.propose(6, d.clone(), &[1])?;
    c.until("the new entry applied after restart", |_| {
        durable.payloads(6).last() == Some(&d)
    })?;
    Ok(())
}

/// A replica a little behind catches up from the leader's log: the leader
/// keeps what it needs past the engine's flush (within
/// `follower_log_retention_bytes`) instead of compacting it away and
/// sending the whole shard as a snapshot.
#[test]
fn a_replica_a_little_behind_catches_up_from_the_log() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let (lagger, rest, lagger_last, expected) = write_past_a_lagger(&c)?;
    let l = c.leader(1, &rest)?;
    // The follower compacts to its flush; the leader keeps the lagger's part.
    let follower = *rest.iter().find(|i| **i != l).unwrap();
    c.until("the other follower's log compaction", |c| {
        c.status(follower, 1)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })?;
    for _ in 0..20 {
        c.tick();
    }
    let first = c.status(l, 1).unwrap().first_index;
    assert!(
        first <= lagger_last + 1,
        "the leader compacted to {first} past the lagger's {lagger_last}"
    );
    c.net.recover();
    c.wait_applied(1, &c.ids, &expected)?;
    assert_eq!(c.sms[&lagger].restores(1), 0, "caught up by a snapshot");
    // Once it has caught up, the leader compacts to its flush again.
    for id in &c.ids {
        c.sms[id].flush(1);
    }
    c.until("the leader's log compaction after the catch-up", |c| {
        c.status(l, 1)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })?;
    Ok(())
}
