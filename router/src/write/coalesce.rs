//! Per-shard write coalescing.
//!
//! Every client request fans out into one piece per shard it touches. Sent
//! one by one, N concurrent requests become N Node.Write calls and N Raft
//! entries per shard, each paying a gRPC round trip, a proposal, an fsync
//! turn and an apply. Instead each shard has a queue: at most
//! `max_rpcs` writes to the shard are in flight from this router, and
//! whatever queued up while they were in flight leaves together as one
//! write (one Raft entry). An idle shard sends at once (no added wait); a
//! busy shard batches more, which is exactly when batching pays.
//!
//! The grouping decision ([`take_group`]) is a pure function over the queue
//! so it is unit tested; the queue task and the RPC live in `cluster.rs`.

use crate::error::Result;
use crate::write::batch::ShardBatch;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

/// One request's share of a shard: its table batches and where to answer.
pub struct Pending {
    pub batches: Vec<ShardBatch>,
    pub request_id: String,
    pub deadline: Instant,
    pub done: oneshot::Sender<Result<()>>,
    /// When it entered the shard's queue (for the queue-wait histogram).
    pub queued_at: Instant,
}

impl Pending {
    pub fn bytes(&self) -> usize {
        self.batches.iter().map(|b| b.bytes).sum()
    }
}

/// Takes requests from the front of `queue` for one write: always the
/// first, then more while the group stays within `max_bytes` (a request
/// that would overflow it waits for the next write, keeping order).
pub fn take_group<T>(
    queue: &mut VecDeque<T>,
    max_bytes: usize,
    bytes_of: impl Fn(&T) -> usize,
) -> Vec<T> {
    let mut group = Vec::new();
    let mut bytes = 0usize;
    while let Some(next) = queue.front() {
        let b = bytes_of(next);
        if !group.is_empty() && bytes + b > max_bytes {
            break;
        }
        bytes += b;
        group.push(queue.pop_front().expect("front exists"));
    }
    group
}

/// The queue task behind both the per-shard and the per-node queues: with a
/// free slot (at most `max_rpcs` sends in flight), takes everything queued
/// that fits in `max_bytes` and starts `send` on it as one group; the slot
/// is free again when that send finishes. `waiting` counts items put in the
/// queue and not yet in a group (the caller increments it). With `gather`,
/// the task yields once before taking a group, so items queued by other
/// tasks at the same moment join it. Ends when every sender is dropped, or
/// when `send` returns None (its owner is gone).
pub async fn drive_queue<T, S, F>(
    mut rx: mpsc::UnboundedReceiver<T>,
    max_rpcs: usize,
    max_bytes: usize,
    bytes_of: fn(&T) -> usize,
    waiting: Arc<AtomicUsize>,
    gather: bool,
    mut send: S,
) where
    T: Send + 'static,
    S: FnMut(Vec<T>) -> Option<F>,
    F: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(max_rpcs.max(1)));
    let mut queued: VecDeque<T> = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if queued.is_empty() {
            match rx.recv().await {
                Some(item) => queued.push_back(item),
                None => return,
            }
        }
        if gather {
            tokio::task::yield_now().await;
        }
        while let Ok(item) = rx.try_recv() {
            queued.push_back(item);
        }
        let group = take_group(&mut queued, max_bytes.max(1), bytes_of);
        waiting.fetch_sub(group.len(), Ordering::AcqRel);
        let Some(sending) = send(group) else {
            return;
        };
        tokio::spawn(async move {
            sending.await;
            drop(slot);
        });
    }
}

/// The request id of a coalesced write: the members' ids, so a Raft entry
/// can still be tied to the client requests in it.
pub fn group_request_id<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for id in ids {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_everything_that_fits() {
        let mut q: VecDeque<usize> = [10, 20, 30].into();
        assert_eq!(take_group(&mut q, 100, |x| *x), vec![10, 20, 30]);
        assert!(q.is_empty());
    }

    #[test]
    fn stops_before_overflow_and_keeps_order() {
        let mut q: VecDeque<usize> = [40, 40, 40, 5].into();
        assert_eq!(take_group(&mut q, 100, |x| *x), vec![40, 40]);
        assert_eq!(q, VecDeque::from([40, 5]));
        assert_eq!(take_group(&mut q, 100, |x| *x), vec![40, 5]);
    }

    #[test]
    fn an_oversized_request_still_goes_alone() {
        let mut q: VecDeque<usize> = [500, 1].into();
        assert_eq!(take_group(&mut q, 100, |x| *x), vec![500]);
        assert_eq!(take_group(&mut q, 100, |x| *x), vec![1]);
        assert!(take_group(&mut q, 100, |x| *x).is_empty());
    }

    #[test]
    fn request_ids_are_joined() {
        assert_eq!(group_request_id(["a-1", "b-2"].into_iter()), "a-1,b-2");
        assert_eq!(group_request_id(["a-1"].into_iter()), "a-1");
    }
}
