//! Coalescing at the router: concurrent requests for a shard sharing one
//! node write, a rejected coalesced write failing only its own request,
//! and shard writes for one node leaving as one WriteMany call.

use crate::fake::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Holds the first write of a one-shard cluster at the node, queues three
/// more requests behind it (one write slot), and returns them unfinished.
/// Polls `queued` until it reaches `want`; fails with `what` after 10 s.
async fn wait_for_queued(what: &str, want: usize, queued: impl Fn() -> usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while queued() < want {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} ({} queued)",
            queued()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Puts node 0 in hold mode and sends a one-point write; returns once the
/// write is held there (with the notify that releases it).
async fn hold_one_write(
    h: &Arc<Harness>,
) -> (Arc<Notify>, tokio::task::JoinHandle<reqwest::Response>) {
    let hold = Arc::new(Notify::new());
    h.nodes[0].set_mode(Mode::Hold(hold.clone())).await;
    let arrived = h.nodes[0].arrived.notified();
    let first = {
        let h = h.clone();
        tokio::spawn(async move { h.post("/write?db=d", "cpu,host=a v=1 1\n").await })
    };
    arrived.await;
    (hold, first)
}

async fn queue_three_behind_a_held_write(
    h: &Arc<Harness>,
    bodies: [&'static str; 3],
) -> (Arc<Notify>, Vec<tokio::task::JoinHandle<reqwest::Response>>) {
    let (hold, first) = hold_one_write(h).await;
    let mut pending = vec![first];
    for body in bodies {
        let h = h.clone();
        pending.push(tokio::spawn(
            async move { h.post("/write?db=d", body).await },
        ));
    }
    wait_for_queued("requests never queued behind the held write", 3, || {
        h.cluster.queued_requests()
    })
    .await;
    (hold, pending)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_a_shard_share_one_node_write() {
    let h = Arc::new(harness(1, 1, |o| o.max_shard_rpcs = 1).await);
    let (hold, pending) = queue_three_behind_a_held_write(
        &h,
        [
            "cpu,host=b v=2 2\n",
            "mem,host=b used=3i 3\n",
            "cpu,host=c v=4 4\n",
        ],
    )
    .await;
    h.nodes[0].set_mode(Mode::Commit).await;
    hold.notify_one();
    for p in pending {
        assert_eq!(p.await.unwrap().status(), 204);
    }
    let st = h.nodes[0].state.lock().await;
    assert_eq!(
        st.rpcs, 2,
        "the held write, then the three queued ones together"
    );
    let last = st.writes.last().unwrap();
    assert_eq!(
        last.request_id.split(',').count(),
        3,
        "a coalesced write names its requests: {}",
        last.request_id
    );
    drop(st);
    assert_eq!(h.total_rows().await, 4, "every point committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_coalesced_write_fails_only_the_offending_request() {
    let h = Arc::new(harness(1, 1, |o| o.max_shard_rpcs = 1).await);
    let (hold, pending) = queue_three_behind_a_held_write(
        &h,
        [
            "cpu,host=b v=2 2\n",
            "bad,host=b v=3 3\n",
            "cpu,host=c v=4 4\n",
        ],
    )
    .await;
    h.nodes[0]
        .set_mode(Mode::RejectMeasurement("bad".into()))
        .await;
    hold.notify_one();
    let mut statuses = Vec::new();
    for p in pending {
        statuses.push(p.await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, vec![204, 204, 400, 204]);
    let writes = h.nodes[0].writes().await;
    assert!(writes.iter().all(|w| w.measurement != "bad"));
    assert_eq!(
        h.total_rows().await,
        3,
        "the good requests' points committed"
    );
}

/// Holds a one-point write at the single fake node (one call in flight per
/// node), then sends a request whose points fall in all four shards and
/// waits until its four shard writes queue behind the held call.
async fn fan_out_behind_a_held_call(
    h: &Arc<Harness>,
) -> (Arc<Notify>, Vec<tokio::task::JoinHandle<reqwest::Response>>) {
    let (hold, first) = hold_one_write(h).await;
    let body: String = (0..40)
        .map(|i| format!("cpu,host=h{i} v={i} {i}\n"))
        .collect();
    let second = {
        let h = h.clone();
        tokio::spawn(async move { h.post("/write?db=d", body).await })
    };
    wait_for_queued("shard writes never queued behind the held call", 4, || {
        h.cluster.queued_node_writes()
    })
    .await;
    (hold, vec![first, second])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_writes_for_one_node_leave_as_one_call() {
    let h = Arc::new(harness(1, 4, |o| o.max_node_rpcs = 1).await);
    let (hold, pending) = fan_out_behind_a_held_call(&h).await;
    h.nodes[0].set_mode(Mode::Commit).await;
    hold.notify_one();
    for p in pending {
        assert_eq!(p.await.unwrap().status(), 204);
    }
    let calls = h.nodes[0].state.lock().await.calls.clone();
    assert_eq!(
        calls,
        vec![1, 4],
        "the held write alone, then the second request's four shard writes in one WriteMany"
    );
    let shards: std::collections::BTreeSet<u32> =
        h.nodes[0].writes().await.iter().map(|w| w.shard).collect();
    assert_eq!(shards.len(), 4, "every shard got its own write: {shards:?}");
    assert_eq!(h.total_rows().await, 41, "every point committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_write_many_gets_single_writes() {
    let h = Arc::new(harness(1, 4, |o| o.max_node_rpcs = 1).await);
    h.nodes[0].state.lock().await.no_write_many = true;
    let (hold, pending) = fan_out_behind_a_held_call(&h).await;
    h.nodes[0].set_mode(Mode::Commit).await;
    hold.notify_one();
    for p in pending {
        assert_eq!(p.await.unwrap().status(), 204);
    }
    let st = h.nodes[0].state.lock().await;
    assert_eq!(st.refused_many, 1, "WriteMany was tried once");
    assert_eq!(st.calls, vec![1, 1, 1, 1, 1], "then each shard write alone");
    drop(st);
    assert_eq!(h.total_rows().await, 41, "every point committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_batching_off_sends_one_write_per_shard() {
    let h = Arc::new(harness(1, 4, |o| o.max_node_rpcs = 0).await);
    let body: String = (0..40)
        .map(|i| format!("cpu,host=h{i} v={i} {i}\n"))
        .collect();
    assert_eq!(h.post("/write?db=d", body).await.status(), 204);
    let st = h.nodes[0].state.lock().await;
    assert_eq!(st.calls, vec![1, 1, 1, 1], "one Node.Write per shard");
    drop(st);
    assert_eq!(h.total_rows().await, 40);
}
