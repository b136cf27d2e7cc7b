//! Apply outcomes and reads.

use super::*;

/// A state machine failure must stop the shard's apply at that entry (the
/// entry is retried, never skipped), report it, and resume in order once
/// the failure passes. The entry used to be logged and skipped, and the
/// next flush moved the flushed index (and log compaction) past it.
#[test]
fn a_failing_apply_stops_the_shard_and_is_never_skipped() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 1;
    c.bootstrap(shard, &c.ids)?;
    let leader = c.leader(shard, &c.ids)?;
    let follower = *c.ids.iter().find(|id| **id != leader).unwrap();
    let mut expected = Vec::new();
    for i in 0..3 {
        let d = payload("a", i);
        c.propose(shard, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.wait_applied(shard, &c.ids, &expected)?;
    let stuck = c.status(follower, shard).unwrap().applied_index + 2;
    *c.sms[&follower].fail_at.lock() = Some((shard, stuck));
    for i in 3..10 {
        let d = payload("a", i);
        c.propose(shard, d.clone(), &c.ids)?;
        expected.push(d);
    }
    // The follower stops right below the failing entry and says why.
    c.until("the follower's apply to stall", |c| {
        c.status(follower, shard)
            .and_then(|s| s.apply_stalled)
            .is_some_and(|st| st.index == stuck && st.attempts >= 2)
    })?;
    // Held for 40 ticks (2 s of its clock) in all: retries back off from
    // 100 ms, doubling, so 5 attempts (at 0, 2, 6, 14 and 30 ticks), not
    // one per tick or per message.
    for _ in 2..40 {
        c.tick();
    }
    let st = c.status(follower, shard).unwrap();
    let attempts = st.apply_stalled.as_ref().unwrap().attempts;
    assert!(
        (3..=6).contains(&attempts),
        "{attempts} attempts in 40 ticks"
    );
    assert_eq!(st.applied_index, stuck - 1);
    assert!(st.apply_stalled.unwrap().error.contains("injected failure"));
    // A flush now cannot pass the entry: nothing after it was applied.
    c.sms[&follower].flush(shard);
    assert!(c.sms[&follower].flushed_index(shard) < stuck);
    // Writes keep committing on the other two replicas meanwhile.
    let d = payload("a", 10);
    c.propose(shard, d.clone(), &c.ids)?;
    expected.push(d);
    // The failure passes: everything is applied once, in order.
    *c.sms[&follower].fail_at.lock() = None;
    c.wait_applied(shard, &c.ids, &expected)?;
    c.until("the stall to clear", |c| {
        c.status(follower, shard).unwrap().apply_stalled.is_none()
    })?;
    // Retries backed off: a few attempts, not a busy loop.
    let failures = c.sms[&follower].failures.load(Ordering::Relaxed);
    assert!((3..10).contains(&failures), "{failures} attempts");
    Ok(())
}

/// On the leader, a proposal is answered only once its entry is applied:
/// a stalled apply holds the answer back instead of acknowledging a write
/// whose fate (stored or rejected) is not decided yet.
#[test]
fn a_proposal_is_answered_after_its_apply() -> anyhow::Result<()> {
    let c = Cluster::new(1)?;
    let shard = 2;
    c.bootstrap(shard, &c.ids)?;
    c.leader(shard, &c.ids)?;
    let next = c.propose(shard, payload("b", 0), &c.ids)?.index + 1;
    *c.sms[&1].fail_at.lock() = Some((shard, next));
    let mut pending = c.start_request(c.wals[&1].propose(shard, payload("b", 1)));
    c.until("the apply to stall", |c| {
        c.status(1, shard).unwrap().apply_stalled.is_some()
    })?;
    // Committed long since, retried a few times, still not answered.
    for _ in 0..10 {
        c.tick();
    }
    assert!(c.status(1, shard).unwrap().commit_index >= next);
    assert!(!pending.poll(), "answered before the entry was applied");
    *c.sms[&1].fail_at.lock() = None;
    c.until("the retried apply to answer the proposal", |_| {
        pending.poll()
    })?;
    let committed = pending.answer().expect("answered")?;
    assert_eq!(committed.index, next);
    assert_eq!(c.sms[&1].payloads(shard).len(), 2);
    Ok(())
}

/// An entry the state machine rejects is answered with `Rejected`, and
/// every replica skips it alike; the entries around it are stored.
#[test]
fn rejected_entries_are_answered_and_skipped_on_every_replica() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 3;
    c.bootstrap(shard, &c.ids)?;
    let leader = c.leader(shard, &c.ids)?;
    let ok1 = payload("c", 1);
    c.propose(shard, ok1.clone(), &c.ids)?;
    let mut bad = REJECT.to_vec();
    bad.extend_from_slice(b"field g conflicts");
    match c.run("a rejected proposal", c.wals[&leader].propose(shard, bad))? {
        Err(WalError::Rejected(reason)) => assert!(reason.contains("asks for it"), "{reason}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    let ok2 = payload("c", 2);
    c.propose(shard, ok2.clone(), &c.ids)?;
    c.wait_applied(shard, &c.ids, &[ok1, ok2])?;
    Ok(())
}

/// A read index covers every acknowledged write, on the leader and on a
/// follower: once a replica has applied up to it, it holds them all.
#[test]
fn a_read_index_covers_every_acknowledged_write() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 4;
    c.bootstrap(shard, &c.ids)?;
    c.leader(shard, &c.ids)?;
    let mut acked = Vec::new();
    let mut last = 0;
    for i in 0..20 {
        let d = payload("d", i);
        last = c.propose(shard, d.clone(), &c.ids)?.index;
        acked.push(d);
    }
    for id in c.ids.clone() {
        let wal = &c.wals[&id];
        let idx = c.run("a read index", wal.read_index(shard))??;
        assert!(
            idx >= last,
            "node {id}: read index {idx} < acknowledged {last}"
        );
        c.run(
            "this replica to apply the read index",
            wal.wait_applied(shard, idx, Duration::from_secs(10)),
        )??;
        let got = c.sms[&id].payloads(shard);
        assert_eq!(got, acked, "node {id} misses acknowledged writes");
    }
    // An isolated replica cannot confirm a read index.
    let leader = c.leader(shard, &c.ids)?;
    let follower = *c.ids.iter().find(|id| **id != leader).unwrap();
    c.net.isolate(follower);
    let r = c.run(
        "the isolated replica's read index",
        c.wals[&follower].read_index(shard),
    )?;
    assert!(
        r.is_err(),
        "an isolated replica answered a read index: {r:?}"
    );
    c.net.recover();
    Ok(())
}
