//! Forwarding a request's shard batches: one queue per shard coalesces
//! requests into one Node.Write, which goes through the node's call queue
//! to the shard leader, following `NotLeader` hints and trying other
//! replicas (`request_path::LeaderRetry`) until the request deadline.
//! Stages 3 ([`reserve`]) and 4 ([`forward`]) of a write (`write::stages`
//! has 1 and 2).

use super::request_path::{Next, Retarget};
use super::Cluster;
use crate::error::{Error, Result};
use crate::metrics;
use crate::write::batch::{self, BatchSummary, ShardBatch};
use crate::write::coalesce::{self, Pending};
use crate::write::node_mux;
use crate::write::stages::Split;
use shardhouse_common::proto::{TableBatch, WriteRequest};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;
use tracing::Instrument;

impl Cluster {
    /// Writes table batches of one shard as ONE Node.Write (one Raft
    /// entry; the batches of one table as one, `batch::wire_tables`) to the
    /// shard leader, following `NotLeader` hints and trying
    /// other replicas until `deadline`.
    async fn write_tables(
        &self,
        shard: u32,
        batches: &[&ShardBatch],
        request_id: &str,
        deadline: Instant,
    ) -> Result<()> {
        let _t = metrics::FORWARD_SECONDS.start_timer();
        let tables = batch::wire_tables(batches)?;
        let mut map = self.shard_map()?;
        let mut target = self.first_target(&map, shard)?;
        let mut attempt: u32 = 0;
        let mut last_reason = String::from("no attempt finished");
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Unavailable {
                    shard,
                    reason: format!(
                        "request deadline passed after {attempt} attempts; last: {last_reason}"
                    ),
                });
            }
            attempt += 1;
            let req = write_request(shard, tables.clone(), request_id, map.epoch);
            let answer = self.call_write(&target.1, req, deadline).await;
            let backoff = match self.retry.after_answer(shard, attempt, &target, answer) {
                Next::Committed => {
                    self.leaders.lock().insert(shard, target.clone());
                    self.last_failure.lock().remove(&shard);
                    return Ok(());
                }
                Next::Fail(e) => return Err(e),
                Next::Retry {
                    to,
                    backoff,
                    reason,
                } => {
                    tracing::debug!(shard, node = target.0, %reason, "write attempt failed");
                    self.last_failure.lock().insert(shard, reason.clone());
                    last_reason = reason;
                    match to {
                        Retarget::Same => {}
                        Retarget::Leader(hint) => {
                            target = hint;
                            self.leaders.lock().insert(shard, target.clone());
                        }
                        Retarget::NextReplica => {
                            self.leaders.lock().remove(&shard);
                            target = self.next_replica(&map, shard, target.0).unwrap_or(target);
                        }
                    }
                    backoff
                }
            };
            if backoff {
                let pause = self.retry.pause(attempt);
                tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
                // A new map may have arrived while we waited.
                if let Ok(m) = self.shard_map() {
                    map = m;
                }
            }
        }
    }

    /// Sends one shard write to the node at `addr`: through the node's
    /// batching queue, or as its own Node.Write when batching is off.
    async fn call_write(
        &self,
        addr: &str,
        req: WriteRequest,
        deadline: Instant,
    ) -> node_mux::Answer {
        let mut client = self
            .node_client(addr)
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        if self.max_node_rpcs == 0 {
            let timeout = deadline.saturating_duration_since(Instant::now());
            return node_mux::call_one(&mut client, req, timeout).await;
        }
        let (done, rx) = oneshot::channel();
        let queued = node_mux::Queued {
            req,
            deadline,
            done,
        };
        let spawn = |client| {
            node_mux::spawn(
                client,
                self.max_node_rpcs,
                self.max_coalesce_bytes,
                self.node_waiting.clone(),
            )
        };
        self.node_waiting.fetch_add(1, Ordering::AcqRel);
        let sent = {
            let mut queues = self.node_queues.lock();
            let q = queues
                .entry(addr.to_owned())
                .or_insert_with(|| spawn(client.clone()));
            match q.send(queued) {
                Ok(()) => Ok(()),
                Err(mpsc::error::SendError(back)) => {
                    // The queue task is gone (its runtime stopped): start a
                    // new one for this and later writes.
                    let fresh = spawn(client);
                    let r = fresh.send(back).map_err(|_| ());
                    *q = fresh;
                    r
                }
            }
        };
        if sent.is_err() {
            self.node_waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(tonic::Status::unavailable(format!(
                "the write queue of node {addr} is closed"
            )));
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(tonic::Status::internal(format!(
                "the write queue of node {addr} stopped before answering"
            ))),
            Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                "no answer from node {addr} before the request deadline"
            ))),
        }
    }

    /// Forwards every batch, one coalesced write per shard, all shards in
    /// parallel; Ok only when all committed.
    pub async fn write_all(
        self: &Arc<Self>,
        batches: &[ShardBatch],
        request_id: &str,
        deadline: Instant,
    ) -> Result<()> {
        let mut per_shard: BTreeMap<u32, Vec<ShardBatch>> = BTreeMap::new();
        for b in batches {
            per_shard.entry(b.shard).or_default().push(b.clone());
        }
        let results = futures::future::join_all(per_shard.into_iter().map(|(shard, batches)| {
            self.submit(shard, batches, format!("{request_id}-{shard}"), deadline)
        }))
        .await;
        // Report the most actionable failure: a permanent rejection first,
        // then overload (retry later), then unavailability.
        let mut worst: Option<Error> = None;
        for r in results {
            if let Err(e) = r {
                let rank = |e: &Error| match e {
                    Error::Rejected { .. } => 3,
                    Error::Overloaded(..) => 2,
                    _ => 1,
                };
                if worst.as_ref().is_none_or(|w| rank(&e) > rank(w)) {
                    worst = Some(e);
                }
            }
        }
        worst.map_or(Ok(()), Err)
    }

    /// Queues one request's batches for `shard` and waits for the write
    /// that carries them to commit (or for `deadline`).
    async fn submit(
        self: &Arc<Self>,
        shard: u32,
        batches: Vec<ShardBatch>,
        request_id: String,
        deadline: Instant,
    ) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.queued.fetch_add(1, Ordering::AcqRel);
        let pending = Pending {
            batches,
            request_id,
            deadline,
            done,
            queued_at: Instant::now(),
        };
        // A closed queue or a writer gone before answering means this
        // router is shutting down (a pod replaced in a rolling upgrade):
        // the write was not acknowledged and another router will take it,
        // so it is a 503 that clients retry, not a 500.
        if self.queue(shard).send(pending).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Unavailable {
                shard,
                reason: "this router is shutting down (its shard write queue is closed); retry"
                    .into(),
            });
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Error::Unavailable {
                shard,
                reason: "this router's shard writer stopped before the write was acknowledged (shutting down); retry".into(),
            }),
            Err(_) => Err(Error::Unavailable {
                shard,
                reason: deadline_reason(self.last_failure.lock().get(&shard).map(String::as_str)),
            }),
        }
    }

    fn queue(self: &Arc<Self>, shard: u32) -> mpsc::UnboundedSender<Pending> {
        let mut queues = self.queues.lock();
        if let Some(q) = queues.get(&shard) {
            if !q.is_closed() {
                return q.clone();
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let cluster = Arc::downgrade(self);
        tokio::spawn(coalesce::drive_queue(
            rx,
            self.max_shard_rpcs,
            self.max_coalesce_bytes,
            Pending::bytes,
            self.queued.clone(),
            false,
            move |group| {
                let cluster = cluster.upgrade()?;
                Some(async move { cluster.write_group(shard, group).await })
            },
        ));
        queues.insert(shard, tx.clone());
        tx
    }

    /// Sends one coalesced group and answers each member.
    async fn write_group(&self, shard: u32, group: Vec<Pending>) {
        let now = Instant::now();
        let (live, expired): (Vec<Pending>, Vec<Pending>) =
            group.into_iter().partition(|p| p.deadline > now);
        for p in expired {
            let _ = p.done.send(Err(Error::Unavailable {
                shard,
                reason: "request deadline passed while queued for the shard".into(),
            }));
        }
        let Some(deadline) = live.iter().map(|p| p.deadline).max() else {
            return;
        };
        for p in &live {
            metrics::QUEUE_WAIT_SECONDS
                .observe(now.saturating_duration_since(p.queued_at).as_secs_f64());
        }
        metrics::COALESCED_REQUESTS.observe(live.len() as f64);
        let refs: Vec<&ShardBatch> = live.iter().flat_map(|p| p.batches.iter()).collect();
        let id = coalesce::group_request_id(live.iter().map(|p| p.request_id.as_str()));
        let r = self.write_tables(shard, &refs, &id, deadline).await;
        match r {
            Err(Error::Rejected { .. }) if live.len() > 1 => {
                // One member's batch was refused (e.g. a field type
                // conflict): send each alone so the others still commit and
                // only the offender gets the rejection.
                for p in live {
                    let refs: Vec<&ShardBatch> = p.batches.iter().collect();
                    let r = self
                        .write_tables(shard, &refs, &p.request_id, p.deadline)
                        .await;
                    let _ = p.done.send(r);
                }
            }
            r => {
                for p in live {
                    let _ = p.done.send(r.as_ref().map(|_| ()).map_err(Error::shared));
                }
            }
        }
    }
}

/// What a request that timed out waiting for its shard is told: the last
/// failed attempt's reason when there is one (a node refusing for a full
/// WAL disk is retried until the deadline, and the client should learn
/// that, not only that time ran out).
fn deadline_reason(last_failure: Option<&str>) -> String {
    match last_failure {
        Some(why) => {
            format!(
                "request deadline passed before the shard's write committed; last attempt: {why}"
            )
        }
        None => "request deadline passed before the shard's write committed".into(),
    }
}

/// The write of `tables` to `shard`, each table with its database.
fn write_request(
    shard: u32,
    tables: Vec<TableBatch>,
    request_id: &str,
    shard_map_epoch: u64,
) -> WriteRequest {
    WriteRequest {
        shard,
        request_id: request_id.to_owned(),
        shard_map_epoch,
        tables,
        ..WriteRequest::default()
    }
}

/// Shard batches whose bytes are held from their shards' budgets until
/// this is dropped (after the ack).
pub struct Reserved {
    pub split: Split,
    _shard_permits: Vec<OwnedSemaphorePermit>,
}

/// Stage 3: takes every shard's in-flight budget for its batches or none
/// (a saturated shard answers 429 at once instead of queueing).
pub fn reserve(cluster: &Cluster, split: Split) -> Result<Reserved> {
    let permits = cluster.reserve(&split.batches)?;
    Ok(Reserved {
        split,
        _shard_permits: permits,
    })
}

/// Stage 4: forwards every shard's batches (one coalesced write per shard,
/// all shards in parallel) and answers once all committed, or with the
/// most actionable failure by `deadline`.
pub async fn forward(
    cluster: &Arc<Cluster>,
    reserved: Reserved,
    request_id: &str,
    deadline: Instant,
) -> Result<BatchSummary> {
    // The shard budgets are held until every shard answered.
    let Reserved {
        split,
        _shard_permits,
    } = reserved;
    let span =
        tracing::debug_span!("forward", request_id = %request_id, batches = split.batches.len());
    cluster
        .write_all(&split.batches, request_id, deadline)
        .instrument(span)
        .await?;
    Ok(split.summary)
}

#[cfg(test)]
#[path = "stages_tests.rs"]
mod stages_tests;

#[cfg(test)]
mod tests {
    use super::deadline_reason;

    #[test]
    fn a_timed_out_write_says_why_its_shard_did_not_take_it() {
        let why = "node 2 answered unavailable: WAL disk full on node 2: 10 MiB free";
        let r = deadline_reason(Some(why));
        assert!(r.starts_with("request deadline passed"), "{r}");
        assert!(r.ends_with(why), "{r}");
        assert_eq!(
            deadline_reason(None),
            "request deadline passed before the shard's write committed"
        );
    }
}
