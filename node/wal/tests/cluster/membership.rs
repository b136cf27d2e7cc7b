//! Membership changes, leader transfer, admission and request errors.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_add_learner_promote_remove() -> anyhow::Result<()> {
    let c = Cluster::new(4)?;
    let initial = [1, 2, 3];
    c.bootstrap(1, &initial)?;
    let mut expected = Vec::new();
    for i in 0..10 {
        let d = payload("m", i);
        c.propose(1, d.clone(), &initial).await?;
        expected.push(d);
    }
    c.wals[&4].create_replica(1, &[])?;
    let l = c.leader(1, &initial).await?;
    c.wals[&l].add_learner(1, 4).await?;
    c.wait_applied(1, &[4], &expected).await?;
    let st = c.status(l, 1).unwrap();
    assert_eq!(st.learners, vec![4]);
    assert_eq!(st.voters, vec![1, 2, 3]);

    // A second change while the first is applied is fine.
    let l = c.leader(1, &initial).await?;
    c.wals[&l].promote_learner(1, 4).await?;
    wait_for("node 4 to see itself as voter", || {
        c.status(4, 1)
            .is_some_and(|s| s.voters == vec![1, 2, 3, 4] && s.learners.is_empty())
    })
    .await?;

    let all = [1, 2, 3, 4];
    let l = c.leader(1, &all).await?;
    let victim = if l == 3 { 2 } else { 3 };
    c.wals[&l].remove_replica(1, victim).await?;
    let remaining: Vec<NodeId> = all.iter().copied().filter(|i| *i != victim).collect();
    wait_for("voters without the removed replica", || {
        remaining.iter().all(|id| {
            c.status(*id, 1)
                .is_some_and(|s| s.voters == remaining && s.learners.is_empty())
        })
    })
    .await?;
    let d = payload("m", 100);
    c.propose(1, d.clone(), &remaining).await?;
    expected.push(d);
    c.wait_applied(1, &remaining, &expected).await?;
    // Removing and deleting the local copy.
    c.wals[&victim].destroy_replica(1)?;
    assert!(!c.wals[&victim].has_replica(1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_leader_moves_leadership() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.propose(1, b"x".to_vec(), &c.ids).await?;
    let l = c.leader(1, &c.ids).await?;
    let target = *c.ids.iter().find(|i| **i != l).unwrap();
    // Let the target catch up so the transfer is not refused.
    c.wait_applied(1, &c.ids, &[b"x".to_vec()]).await?;
    c.wals[&l].transfer_leader(1, target).await?;
    wait_for("target to lead", || {
        c.leaders(1, &c.ids).iter().any(|(id, _)| *id == target)
    })
    .await?;
    // The old leader now refuses proposals with a hint.
    wait_for("old leader to know the new one", || {
        c.status(l, 1).is_some_and(|s| s.leader_id == Some(target))
    })
    .await?;
    match c.wals[&l].propose(1, b"y".to_vec()).await {
        Err(WalError::NotLeader { leader_hint }) => assert_eq!(leader_hint, Some(target)),
        other => bail!("expected NotLeader, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_shard_rejects_instead_of_queueing() -> anyhow::Result<()> {
    // A long election timeout keeps the isolated leader leading while the
    // test looks at its admission state.
    let c = Cluster::with(3, |cfg| {
        cfg.max_inflight_bytes_per_shard = 1000;
        cfg.election_ticks = 60;
    })?;
    c.bootstrap(1, &c.ids)?;
    let l = c.leader(1, &c.ids).await?;
    c.propose(1, vec![1; 10], &c.ids).await?;
    // Cut the leader off so nothing commits and bytes stay in flight.
    c.net.isolate(l, &c.ids);
    let w = c.wals[&l].clone();
    let pending = tokio::spawn(async move { w.propose(1, vec![2; 600]).await });
    wait_for("first proposal in flight", || {
        c.status(l, 1).is_some_and(|s| s.inflight_bytes == 600)
    })
    .await?;
    match c.wals[&l].propose(1, vec![3; 600]).await {
        Err(WalError::Overloaded { retry_after_ms }) => assert!(retry_after_ms >= 10),
        other => bail!("expected Overloaded, got {other:?}"),
    }
    // The stuck proposal fails (no quorum) and releases its bytes.
    assert!(pending.await?.is_err());
    wait_for("in-flight bytes released", || {
        c.status(l, 1).is_some_and(|s| s.inflight_bytes == 0)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_shard_and_not_leader_errors() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    assert!(matches!(
        c.wals[&1].propose(9, b"x".to_vec()).await,
        Err(WalError::ShardNotFound(9))
    ));
    assert!(matches!(
        c.wals[&1].step(9, Message::default()),
        Err(WalError::ShardNotFound(9))
    ));
    c.bootstrap(9, &c.ids)?;
    // Idempotent.
    c.bootstrap(9, &c.ids)?;
    let l = c.leader(9, &c.ids).await?;
    let f = *c.ids.iter().find(|i| **i != l).unwrap();
    wait_for("follower knows leader", || {
        c.status(f, 9).and_then(|s| s.leader_id) == Some(l)
    })
    .await?;
    match c.wals[&f].propose(9, b"x".to_vec()).await {
        Err(WalError::NotLeader { leader_hint }) => assert_eq!(leader_hint, Some(l)),
        other => bail!("expected NotLeader, got {other:?}"),
    }
    Ok(())
}
