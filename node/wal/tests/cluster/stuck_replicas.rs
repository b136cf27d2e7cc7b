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
    let c = Cluster::with(3, |cfg| cfg.poll_threads = 1)?;
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
