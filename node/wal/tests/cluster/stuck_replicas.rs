//! Replicas that cannot make progress on their own: a snapshot the state
//! machine fails to restore, an entry it keeps failing to apply.

use super::*;

/// Isolates `lagger`, commits `n` entries of `shard` without it and lets
/// the others compact their logs past it, so it can only catch up by
/// snapshot. Appends the entries to `expected`.
fn leave_behind(
    c: &Cluster,
    shard: ShardId,
    lagger: NodeId,
    n: usize,
    expected: &mut Vec<Vec<u8>>,
) -> anyhow::Result<()> {
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != lagger).collect();
    c.net.isolate(lagger);
    for i in 0..n {
        let d = payload("late", i);
        c.propose(shard, d.clone(), &rest)?;
        expected.push(d);
    }
    c.wait_applied(shard, &rest, expected)?;
    let lagger_last = c.status(lagger, shard).unwrap().last_index;
    for id in &rest {
        c.sms[id].flush(shard);
    }
    let l = c.leader(shard, &rest)?;
    c.until("leader log compaction past the lagging replica", |c| {
        c.status(l, shard)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })?;
    Ok(())
}

/// A snapshot the state machine fails to restore is an error the shard
/// reports and retries, not a panic of the poll thread; and while it is
/// stuck, another shard driven by the same poll thread (and the same apply
/// thread) keeps committing and applying on that node. The restore used to
/// block the poll thread waiting for the apply thread, and panic on failure.
#[test]
fn a_failing_restore_stalls_its_shard_only_and_is_retried() -> anyhow::Result<()> {
    // One poll thread; shards 1 and 3 also share apply thread 1 of 2.
    // No log kept for lagging followers, so the lagger needs a snapshot.
    let c = Cluster::with(3, |cfg| {
        cfg.poll_threads = 1;
        cfg.follower_log_retention_bytes = 0;
    })?;
    let (stuck, other) = (1, 3);
    c.bootstrap(stuck, &c.ids)?;
    c.bootstrap(other, &c.ids)?;
    let leader = c.leader(stuck, &c.ids)?;
    let lagger = *c.ids.iter().find(|i| **i != leader).unwrap();
    let mut expected = Vec::new();
    for i in 0..3 {
        let d = payload("early", i);
        c.propose(stuck, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.wait_applied(stuck, &c.ids, &expected)?;
    let early = expected.clone();
    leave_behind(&c, stuck, lagger, 20, &mut expected)?;

    *c.sms[&lagger].fail_restore.lock() = Some(stuck);
    c.net.recover();
    c.until("the lagging replica to report its failing restore", |c| {
        c.status(lagger, stuck)
            .and_then(|s| s.apply_stalled)
            .is_some_and(|st| st.attempts >= 2 && st.error.contains("restoring the snapshot"))
    })?;

    // The other shard on the same threads goes on, on every replica.
    let mut other_expected = Vec::new();
    for i in 0..5 {
        let d = payload("other", i);
        c.propose(other, d.clone(), &c.ids)?;
        other_expected.push(d);
    }
    c.wait_applied(other, &c.ids, &other_expected)?;
    // The stuck replica kept its old, consistent state: no hole, no
    // partial snapshot.
    assert_eq!(c.sms[&lagger].payloads(stuck), early);
    let failures = c.sms[&lagger].restore_failures.load(Ordering::Relaxed);
    assert!(failures >= 2, "{failures} restore attempts");

    // The failure passes: the retried restore brings it level.
    *c.sms[&lagger].fail_restore.lock() = None;
    c.wait_applied(stuck, &c.ids, &expected)?;
    c.until("the stall to clear", |c| {
        c.status(lagger, stuck).unwrap().apply_stalled.is_none()
    })?;
    let d = payload("post", 0);
    c.propose(stuck, d.clone(), &c.ids)?;
    expected.push(d);
    c.wait_applied(stuck, &c.ids, &expected)?;
    Ok(())
}

/// A replica whose apply keeps failing at one entry is rebuilt from its
/// leader's snapshot once the failures pass the bound, on a follower and
/// on a leader (which hands leadership over first); the snapshot covers
/// the stuck entry, and every replica ends with every committed entry.
#[test]
fn a_replica_stuck_on_one_entry_is_rebuilt_from_a_peer() -> anyhow::Result<()> {
    let c = Cluster::with(3, |cfg| cfg.rebuild_after_failed_applies = 3)?;
    let shard = 1;
    c.bootstrap(shard, &c.ids)?;
    let mut expected = Vec::new();
    let mut n = 0;
    let mut write = |c: &Cluster, expected: &mut Vec<Vec<u8>>, k: usize| -> anyhow::Result<()> {
        for _ in 0..k {
            let d = payload("w", n);
            n += 1;
            c.propose(shard, d.clone(), &c.ids)?;
            expected.push(d);
        }
        Ok(())
    };
    write(&c, &mut expected, 3)?;
    c.wait_applied(shard, &c.ids, &expected)?;
    let leader = c.leader(shard, &c.ids)?;
    let follower = *c.ids.iter().find(|i| **i != leader).unwrap();

    for stuck_node in [follower, leader] {
        let before = c.sms[&stuck_node].restores(shard);
        let stuck_at = c.status(stuck_node, shard).unwrap().applied_index + 2;
        // Fails for good: only a rebuild gets past it.
        *c.sms[&stuck_node].fail_at.lock() = Some((shard, stuck_at));
        write(&c, &mut expected, 5)?;
        c.until("the stuck replica to be rebuilt", |c| {
            c.sms[&stuck_node].restores(shard) > before
                && c.status(stuck_node, shard)
                    .is_some_and(|s| s.apply_stalled.is_none() && s.rebuilding.is_none())
        })?;
        write(&c, &mut expected, 2)?;
        c.wait_applied(shard, &c.ids, &expected)?;
        assert!(c.sms[&stuck_node].failures.load(Ordering::Relaxed) >= 3);
        *c.sms[&stuck_node].fail_at.lock() = None;
    }
    Ok(())
}

/// An operator can rebuild a healthy replica by hand (shardhouse-ctl): its
/// state is replaced by the leader's snapshot and it keeps replicating.
#[test]
fn a_replica_is_rebuilt_on_demand() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 2;
    c.bootstrap(shard, &c.ids)?;
    let mut expected = Vec::new();
    for i in 0..4 {
        let d = payload("m", i);
        c.propose(shard, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.wait_applied(shard, &c.ids, &expected)?;
    let leader = c.leader(shard, &c.ids)?;
    let target = *c.ids.iter().find(|i| **i != leader).unwrap();
    c.run("rebuild request", c.wals[&target].rebuild_replica(shard))??;
    assert!(c.status(target, shard).unwrap().rebuilding.is_some());
    c.until("the replica to be rebuilt", |c| {
        c.sms[&target].restores(shard) == 1 && c.status(target, shard).unwrap().rebuilding.is_none()
    })?;
    let d = payload("m", 4);
    c.propose(shard, d.clone(), &c.ids)?;
    expected.push(d);
    c.wait_applied(shard, &c.ids, &expected)?;
    Ok(())
}
