//! Apply outcomes and reads.

use super::*;

/// A state machine failure must stop the shard's apply at that entry (the
/// entry is retried, never skipped), report it, and resume in order once
/// the failure passes. The entry used to be logged and skipped, and the
/// next flush moved the flushed index (and log compaction) past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_apply_stops_the_shard_and_is_never_skipped() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 1;
    c.bootstrap(shard, &c.ids)?;
    let leader = c.leader(shard, &c.ids).await?;
    let follower = *c.ids.iter().find(|id| **id != leader).unwrap();
    let mut expected = Vec::new();
    for i in 0..3 {
        let d = payload("a", i);
        c.propose(shard, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.wait_applied(shard, &c.ids, &expected).await?;
    let stuck = c.status(follower, shard).unwrap().applied_index + 2;
    *c.sms[&follower].fail_at.lock() = Some((shard, stuck));
    for i in 3..10 {
        let d = payload("a", i);
        c.propose(shard, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    // The follower stops right below the failing entry and says why.
    wait_for("the follower's apply to stall", || {
        c.status(follower, shard)
            .and_then(|s| s.apply_stalled)
            .is_some_and(|st| st.index == stuck && st.attempts >= 2)
    })
    .await?;
    let st = c.status(follower, shard).unwrap();
    assert_eq!(st.applied_index, stuck - 1);
    assert!(st.apply_stalled.unwrap().error.contains("injected failure"));
    // A flush now cannot pass the entry: nothing after it was applied.
    c.sms[&follower].flush(shard);
    assert!(c.sms[&follower].flushed_index(shard) < stuck);
    // Writes keep committing on the other two replicas meanwhile.
    let d = payload("a", 10);
    c.propose(shard, d.clone(), &c.ids).await?;
    expected.push(d);
    // The failure passes: everything is applied once, in order.
    *c.sms[&follower].fail_at.lock() = None;
    c.wait_applied(shard, &c.ids, &expected).await?;
    wait_for("the stall to clear", || {
        c.status(follower, shard).unwrap().apply_stalled.is_none()
    })
    .await?;
    // Retries backed off: a few attempts, not a busy loop.
    let failures = c.sms[&follower].failures.load(Ordering::Relaxed);
    assert!((2..50).contains(&failures), "{failures} attempts");
    Ok(())
}

/// On the leader, a proposal is answered only once its entry is applied:
/// a stalled apply holds the answer back instead of acknowledging a write
/// whose fate (stored or rejected) is not decided yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_is_answered_after_its_apply() -> anyhow::Result<()> {
    let c = Cluster::new(1)?;
    let shard = 2;
    c.bootstrap(shard, &c.ids)?;
    c.leader(shard, &c.ids).await?;
    let next = c.propose(shard, payload("b", 0), &c.ids).await?.index + 1;
    *c.sms[&1].fail_at.lock() = Some((shard, next));
    let wal = c.wals[&1].clone();
    let pending = tokio::spawn(async move { wal.propose(shard, payload("b", 1)).await });
    wait_for("the apply to stall", || {
        c.status(1, shard).unwrap().apply_stalled.is_some()
    })
    .await?;
    assert!(
        !pending.is_finished(),
        "answered before the entry was applied"
    );
    *c.sms[&1].fail_at.lock() = None;
    let committed = pending.await??;
    assert_eq!(committed.index, next);
    assert_eq!(c.sms[&1].payloads(shard).len(), 2);
    Ok(())
}

/// An entry the state machine rejects is answered with `Rejected`, and
/// every replica skips it alike; the entries around it are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_entries_are_answered_and_skipped_on_every_replica() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 3;
    c.bootstrap(shard, &c.ids)?;
    let leader = c.leader(shard, &c.ids).await?;
    let ok1 = payload("c", 1);
    c.propose(shard, ok1.clone(), &c.ids).await?;
    let mut bad = REJECT.to_vec();
    bad.extend_from_slice(b"field g conflicts");
    match c.wals[&leader].propose(shard, bad).await {
        Err(WalError::Rejected(reason)) => assert!(reason.contains("asks for it"), "{reason}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    let ok2 = payload("c", 2);
    c.propose(shard, ok2.clone(), &c.ids).await?;
    c.wait_applied(shard, &c.ids, &[ok1, ok2]).await?;
    Ok(())
}

/// A read index covers every acknowledged write, on the leader and on a
/// follower: once a replica has applied up to it, it holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_index_covers_every_acknowledged_write() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 4;
    c.bootstrap(shard, &c.ids)?;
    c.leader(shard, &c.ids).await?;
    let mut acked = Vec::new();
    let mut last = 0;
    for i in 0..20 {
        let d = payload("d", i);
        last = c.propose(shard, d.clone(), &c.ids).await?.index;
        acked.push(d);
    }
    for id in c.ids.clone() {
        let wal = &c.wals[&id];
        let idx = wal.read_index(shard).await?;
        assert!(
            idx >= last,
            "node {id}: read index {idx} < acknowledged {last}"
        );
        wal.wait_applied(shard, idx, Duration::from_secs(10))
            .await?;
        let got = c.sms[&id].payloads(shard);
        assert_eq!(got, acked, "node {id} misses acknowledged writes");
    }
    // An isolated replica cannot confirm a read index.
    let leader = c.leader(shard, &c.ids).await?;
    let follower = *c.ids.iter().find(|id| **id != leader).unwrap();
    c.net.isolate(follower, &c.ids);
    let r =
        tokio::time::timeout(Duration::from_secs(10), c.wals[&follower].read_index(shard)).await;
    assert!(
        matches!(r, Ok(Err(_))),
        "an isolated replica answered a read index: {r:?}"
    );
    c.net.heal();
    Ok(())
}
