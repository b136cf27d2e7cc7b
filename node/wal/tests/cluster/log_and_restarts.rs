//! Elections, replication under loss and partitions, snapshots, restarts.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_one_leader_per_shard() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    for shard in 1..=4 {
        c.bootstrap(shard, &c.ids)?;
    }
    for shard in 1..=4 {
        let l = c.leader(shard, &c.ids).await?;
        // Every replica agrees on the leader once heartbeats flow.
        wait_for("followers to learn the leader", || {
            c.ids
                .iter()
                .all(|id| c.status(*id, shard).and_then(|s| s.leader_id) == Some(l))
        })
        .await?;
        let st = c.status(l, shard).unwrap();
        assert_eq!(st.voters, vec![1, 2, 3]);
        assert!(st.term >= 1);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicates_every_committed_entry_once_in_order() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shards: Vec<ShardId> = (10..14).collect();
    for &s in &shards {
        c.bootstrap(s, &c.ids)?;
    }
    let mut expected: HashMap<ShardId, Vec<Vec<u8>>> = HashMap::new();
    // Concurrent proposals over several shards exercise group commit.
    for round in 0..10 {
        let mut tasks = Vec::new();
        for &s in &shards {
            for k in 0..5 {
                let data = payload(&format!("s{s}"), round * 5 + k);
                expected.entry(s).or_default().push(data.clone());
                let l = c.leader(s, &c.ids).await?;
                let w = c.wals[&l].clone();
                tasks.push(tokio::spawn(async move {
                    let r = w.propose(s, data.clone()).await;
                    (s, data, r)
                }));
            }
        }
        for t in tasks {
            let (s, data, r) = t.await?;
            if r.is_err() {
                // A leader change failed it (nothing committed under that
                // proposal's term): propose again.
                c.propose(s, data, &c.ids).await?;
            }
        }
    }
    for &s in &shards {
        let l = c.leader(s, &c.ids).await?;
        let want_len = expected[&s].len();
        let sm = c.sms[&l].clone();
        wait_for("leader to apply", || sm.payloads(s).len() >= want_len).await?;
        let reference = sm.payloads(s);
        // Same set as proposed (an ambiguous failure retried may commit a
        // payload twice, at two indexes), and identical sequence everywhere.
        let mut a = reference.clone();
        a.sort();
        a.dedup();
        let mut b = expected[&s].clone();
        b.sort();
        assert_eq!(a, b, "shard {s}: applied entries differ from proposed");
        c.wait_applied(s, &c.ids, &reference).await?;
        let idx: Vec<u64> = c.sms[&l].entries(s).iter().map(|e| e.0).collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]));
    }
    let stats: Vec<_> = c.ids.iter().map(|id| c.wals[id].stats()).collect();
    for s in &stats {
        assert!(s.synced_batches > 0 && s.synced_entries > 0);
    }
    let leader_stats = c.wals[&c.leader(shards[0], &c.ids).await?].stats();
    eprintln!(
        "group commit: mean {:.2} entries per synced batch ({} batches)",
        leader_stats.mean_group_commit_entries(),
        leader_stats.synced_batches
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicates_under_message_loss() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.leader(1, &c.ids).await?;
    c.net.drop_every.store(7, Ordering::Relaxed);
    let mut expected = Vec::new();
    for i in 0..30 {
        let d = payload("lossy", i);
        c.propose(1, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.net.drop_every.store(0, Ordering::Relaxed);
    let l = c.leader(1, &c.ids).await?;
    let sm = c.sms[&l].clone();
    wait_for("leader apply", || sm.payloads(1).len() >= expected.len()).await?;
    // Retries after an ambiguous failure may duplicate a payload; each
    // committed index is still applied exactly once everywhere.
    let reference = sm.payloads(1);
    for d in &expected {
        assert!(reference.contains(d));
    }
    c.wait_applied(1, &c.ids, &reference).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_leader_steps_down_and_cannot_commit() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    let old = c.leader(1, &c.ids).await?;
    let old_term = c.status(old, 1).unwrap().term;
    c.propose(1, b"before".to_vec(), &c.ids).await?;

    c.net.isolate(old, &c.ids);
    // A proposal on the cut-off leader must not commit.
    let stale = c.wals[&old].propose(1, b"stale-write".to_vec()).await;
    assert!(
        matches!(
            stale,
            Err(WalError::NotLeader { .. } | WalError::Unavailable(_))
        ),
        "old leader committed while partitioned: {stale:?}"
    );
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != old).collect();
    let new = c.leader(1, &rest).await?;
    assert_ne!(new, old);
    assert!(c.status(new, 1).unwrap().term > old_term);
    // check_quorum makes the old leader step down on its own.
    wait_for("old leader to step down", || {
        c.status(old, 1).is_some_and(|s| s.role != Role::Leader)
    })
    .await?;
    c.propose(1, b"after".to_vec(), &rest).await?;

    c.net.heal();
    let expected = vec![b"before".to_vec(), b"after".to_vec()];
    c.wait_applied(1, &c.ids, &expected).await?;
    for id in &c.ids {
        assert!(!c.sms[id].payloads(1).contains(&b"stale-write".to_vec()));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_replica_catches_up_by_snapshot() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    let leader = c.leader(1, &c.ids).await?;
    let lagger = *c.ids.iter().find(|i| **i != leader).unwrap();
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != lagger).collect();
    let mut expected = Vec::new();
    for i in 0..5 {
        let d = payload("early", i);
        c.propose(1, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.wait_applied(1, &c.ids, &expected).await?;

    c.net.isolate(lagger, &c.ids);
    for i in 0..40 {
        let d = payload("late", i);
        c.propose(1, d.clone(), &rest).await?;
        expected.push(d);
    }
    c.wait_applied(1, &rest, &expected).await?;
    let lagger_last = c.status(lagger, 1).unwrap().last_index;
    // Flush on the connected replicas; compaction then drops the entries
    // the lagging replica would need.
    for id in &rest {
        c.sms[id].flush(1);
    }
    let l = c.leader(1, &rest).await?;
    wait_for("leader log compaction past the lagging replica", || {
        c.status(l, 1)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })
    .await?;

    c.net.heal();
    c.wait_applied(1, &c.ids, &expected).await?;
    assert!(
        c.sms[&lagger].restores(1) >= 1,
        "caught up without a snapshot"
    );
    // And it keeps replicating normally afterwards.
    let d = payload("post", 0);
    c.propose(1, d.clone(), &c.ids).await?;
    expected.push(d);
    c.wait_applied(1, &c.ids, &expected).await?;
    wait_for(
        "lagging replica's log to restart after the snapshot",
        || {
            c.status(lagger, 1)
                .is_some_and(|s| s.first_index > lagger_last + 1)
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reloads_log_and_reapplies_above_flushed_exactly_once() -> anyhow::Result<()> {
    let mut c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.bootstrap(2, &c.ids)?;
    let mut expected = Vec::new();
    for i in 0..20 {
        let d = payload("r", i);
        c.propose(1, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.wait_applied(1, &c.ids, &expected).await?;
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
    c.wait_applied(1, &[victim], &expected).await?;
    let idx: Vec<u64> = durable.entries(1).iter().map(|e| e.0).collect();
    assert_eq!(idx, entries.iter().map(|e| e.0).collect::<Vec<_>>());

    // The restarted node keeps working.
    let d = payload("r", 99);
    c.propose(1, d.clone(), &c.ids).await?;
    expected.push(d);
    c.wait_applied(1, &c.ids, &expected).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_restart_keeps_hard_state_and_log() -> anyhow::Result<()> {
    let mut c = Cluster::new(1)?;
    c.bootstrap(5, &[1])?;
    let mut expected = Vec::new();
    for i in 0..10 {
        let d = payload("solo", i);
        c.propose(5, d.clone(), &[1]).await?;
        expected.push(d);
    }
    c.wait_applied(5, &[1], &expected).await?;
    let before = c.status(1, 5).unwrap();
    c.stop(1);
    // Nothing flushed: every committed entry is applied again, once.
    let fresh = Arc::new(MemSm::default());
    c.start(1, fresh.clone())?;
    let after = c.status(1, 5).unwrap();
    assert!(after.term >= before.term);
    assert_eq!(after.last_index, before.last_index, "log lost on restart");
    c.wait_applied(5, &[1], &expected).await?;
    c.leader(5, &[1]).await?;
    wait_for("commit index back", || {
        c.status(1, 5)
            .is_some_and(|s| s.commit_index > before.commit_index)
    })
    .await?;
    Ok(())
}

/// Regression: a single voter's commit advances arrive in raft-rs's
/// LightReady, not in a Ready's hard state. If they are not persisted, the
/// stored commit stays at the bootstrap index while compaction moves the log
/// past it, and raft-rs refuses to start the replica after a restart
/// ("hs.commit 1 is out of range").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_voter_restarts_after_log_compaction() -> anyhow::Result<()> {
    let mut c = Cluster::new(1)?;
    c.bootstrap(6, &[1])?;
    let mut expected = Vec::new();
    for i in 0..60 {
        let d = payload("compact", i);
        c.propose(6, d.clone(), &[1]).await?;
        expected.push(d);
    }
    c.wait_applied(6, &[1], &expected).await?;
    c.sms[&1].flush(6);
    wait_for("log compaction on the single voter", || {
        c.status(1, 6).is_some_and(|s| s.first_index > 30)
    })
    .await?;
    let before = c.status(1, 6).unwrap();
    let durable = Arc::new(c.sms[&1].durable_copy());
    c.stop(1);
    c.start(1, durable.clone())?;
    c.leader(6, &[1]).await?;
    let after = c.status(1, 6).unwrap();
    assert!(after.commit_index >= before.first_index - 1, "{after:?}");
    let d = payload("after-restart", 0);
    c.propose(6, d.clone(), &[1]).await?;
    wait_for("the new entry applied after restart", || {
        durable.payloads(6).last() == Some(&d)
    })
    .await?;
    Ok(())
}
