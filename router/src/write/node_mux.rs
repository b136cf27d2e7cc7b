//! Per-node write batching.
//!
//! A client request fans out into one write per shard; with many shards per
//! node, sending each as its own Node.Write made a request cost one gRPC
//! call per shard on the router and on the node, and spread its proposals
//! over separate poll rounds (separate fsyncs). Each node address has a
//! queue instead: at most `max_rpcs` calls to the node are in flight, and
//! the shard writes that queued meanwhile (typically all of one request's
//! writes for that node, and more under load) leave together as one
//! Node.WriteMany. An idle node is called at once; nothing waits on a timer.
//!
//! Each write keeps its own answer (`results[i]` for `writes[i]`), so leader
//! retries, rejections and overload stay per shard in `cluster.rs`. A node
//! that does not know WriteMany yet (a rolling upgrade) answers
//! `Unimplemented`, and the batch is resent as single writes.

use crate::metrics;
use crate::write::coalesce;
use shardhouse_common::credential::CredentialChannel;
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::proto::{WriteManyRequest, WriteRequest, WriteResponse};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What a node answered for one write, or why the call failed.
pub type Answer = std::result::Result<WriteResponse, tonic::Status>;

/// One shard write waiting for a call to its node.
pub struct Queued {
    pub req: WriteRequest,
    pub deadline: Instant,
    pub done: oneshot::Sender<Answer>,
}

impl Queued {
    fn bytes(&self) -> usize {
        let tables: usize = self
            .req
            .tables
            .iter()
            .map(|t| t.points_ipc.len() + t.series_ipc.len())
            .sum();
        tables + self.req.points_ipc.len() + self.req.series_ipc.len()
    }
}

/// Starts the queue task of one node and returns its sender. The task ends
/// when every sender is dropped.
/// `waiting` counts writes sent to the queue and not yet in a call; the
/// caller increments it before sending.
pub fn spawn(
    client: NodeClient<CredentialChannel>,
    max_rpcs: usize,
    max_bytes: usize,
    waiting: Arc<AtomicUsize>,
) -> mpsc::UnboundedSender<Queued> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(coalesce::drive_queue(
        rx,
        max_rpcs,
        max_bytes,
        Queued::bytes,
        waiting,
        // A request's writes for this node are queued by its shard tasks
        // within microseconds of each other: let them join one call.
        true,
        move |group| Some(send_group(client.clone(), group)),
    ));
    tx
}

async fn send_group(mut client: NodeClient<CredentialChannel>, group: Vec<Queued>) {
    metrics::NODE_CALL_WRITES.observe(group.len() as f64);
    let Some(deadline) = group.iter().map(|q| q.deadline).max() else {
        return;
    };
    let timeout = deadline.saturating_duration_since(Instant::now());
    if group.len() == 1 {
        let q = group.into_iter().next().expect("one write");
        let _ = q.done.send(call_one(&mut client, q.req, timeout).await);
        return;
    }
    let (reqs, dones): (Vec<WriteRequest>, Vec<oneshot::Sender<Answer>>) =
        group.into_iter().map(|q| (q.req, q.done)).unzip();
    // Cheap: the Arrow payloads are refcounted `Bytes`.
    let fallback = reqs.clone();
    let mut call = tonic::Request::new(WriteManyRequest { writes: reqs });
    call.set_timeout(timeout);
    match client.write_many(call).await {
        Ok(resp) => {
            let results = resp.into_inner().results;
            if results.len() == dones.len() {
                for (done, r) in dones.into_iter().zip(results) {
                    let _ = done.send(Ok(r));
                }
            } else {
                let status = tonic::Status::internal(format!(
                    "node answered {} results for {} writes",
                    results.len(),
                    dones.len()
                ));
                for done in dones {
                    let _ = done.send(Err(status.clone()));
                }
            }
        }
        Err(s) if s.code() == tonic::Code::Unimplemented => {
            let answers = futures::future::join_all(fallback.into_iter().map(|req| {
                let mut client = client.clone();
                async move { call_one(&mut client, req, timeout).await }
            }))
            .await;
            for (done, a) in dones.into_iter().zip(answers) {
                let _ = done.send(a);
            }
        }
        Err(s) => {
            for done in dones {
                let _ = done.send(Err(s.clone()));
            }
        }
    }
}

/// One shard write as its own Node.Write.
pub(crate) async fn call_one(
    client: &mut NodeClient<CredentialChannel>,
    req: WriteRequest,
    timeout: std::time::Duration,
) -> Answer {
    let mut call = tonic::Request::new(req);
    call.set_timeout(timeout);
    client.write(call).await.map(tonic::Response::into_inner)
}
