//! Quorum commit under network faults the step-driven network injects:
//! one cut link, lost acknowledgements.

use shardhouse_wal::eraftpb::MessageType;

use super::*;

/// With the link between the leader and one follower cut, writes still
/// commit through the other follower; the cut-off follower cannot unseat
/// the leader (pre-vote, and the other follower still hears the leader),
/// and it catches up once the link is back.
#[test]
fn commits_through_a_quorum_while_one_link_is_cut() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    let l = c.leader(1, &c.ids)?;
    let term = c.status(l, 1).unwrap().term;
    let others: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != l).collect();
    let (cut_off, linked) = (others[0], others[1]);
    c.net.cut(l, cut_off);
    let mut expected = Vec::new();
    for i in 0..10 {
        let d = payload("cut", i);
        c.propose(1, d.clone(), &c.ids)?;
        expected.push(d);
    }
    c.wait_applied(1, &[l, linked], &expected)?;
    // Five election timeouts later: same leader, same term, and the
    // cut-off follower has nothing new.
    for _ in 0..50 {
        c.tick();
    }
    assert_eq!(c.leaders(1, &c.ids), vec![(l, term)]);
    assert!(c.sms[&cut_off].payloads(1).is_empty());
    c.net.recover();
    c.wait_applied(1, &c.ids, &expected)?;
    assert_eq!(c.leaders(1, &c.ids), vec![(l, term)]);
    Ok(())
}

/// An entry every replica has durably is still not committed, applied or
/// acknowledged until the leader hears a quorum has it: while every append
/// acknowledgement is lost, the proposal waits; once they flow, it commits.
#[test]
fn an_entry_commits_only_when_a_quorum_acknowledges_it() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.propose(1, payload("acked", 0), &c.ids)?;
    let l = c.leader(1, &c.ids)?;
    let before = c.status(l, 1).unwrap();
    c.net.ignore(MessageType::MsgAppendResponse);
    let mut pending = c.start_request(c.wals[&l].propose(1, payload("acked", 1)));
    for _ in 0..20 {
        c.tick();
    }
    let now = c.status(l, 1).unwrap();
    assert!(
        !pending.poll(),
        "answered without a quorum's acknowledgement"
    );
    assert_eq!(now.commit_index, before.commit_index);
    assert!(now.last_index > before.last_index);
    for id in &c.ids {
        // Every replica holds the entry in its log, none applied it.
        assert!(c.status(*id, 1).unwrap().last_index >= now.last_index);
        assert_eq!(c.sms[id].payloads(1).len(), 1);
    }
    assert_eq!(c.leaders(1, &c.ids), vec![(l, before.term)]);
    c.net.recover();
    c.until("the proposal to commit", |_| pending.poll())?;
    let committed = pending.answer().expect("answered")?;
    assert_eq!(committed.index, now.last_index);
    c.wait_applied(1, &c.ids, &[payload("acked", 0), payload("acked", 1)])?;
    Ok(())
}
