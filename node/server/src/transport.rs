//! Raft traffic between nodes: one long-lived client-streaming `Raft.Send`
//! call per peer, fed by a bounded queue. Everything queued for a peer while
//! a batch was being sent goes out as the next `RaftBatch`es (each at most
//! `MAX_BATCH_BYTES` unless one message is larger), so many shards'
//! messages share one gRPC message. When a peer is down, messages
//! are dropped (Raft retransmits) and the WAL is told the peer is unreachable
//! so its leaders probe instead of streaming appends into the void.
//!
//! Snapshots do not go on that stream: a shard's snapshot is its whole
//! data (hundreds of MB after a few minutes of load, more than any gRPC
//! message may be), so each is streamed on its own `Raft.InstallSnapshot`
//! call in `SNAPSHOT_CHUNK_BYTES` chunks, and the WAL is told whether it
//! arrived (`Wal::report_snapshot`): until then the leader sends that
//! follower nothing else, instead of probing it, finding it behind and
//! generating the snapshot again while the first is still in transit.

use crate::directory::PeerDirectory;
use parking_lot::Mutex;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use shardhouse_common::credential::{with_credential, ClusterToken};
use shardhouse_common::proto::raft_client::RaftClient;
use shardhouse_common::proto::{RaftBatch, RaftEnvelope, SnapshotChunk};
use shardhouse_wal::{NodeId, ShardId, Transport, Wal};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

/// Pending message groups per peer before `send` starts dropping.
const PEER_QUEUE: usize = 4096;
/// Cap of one RaftBatch so a burst cannot build a giant gRPC message.
const MAX_BATCH_BYTES: usize = 32 << 20;
/// gRPC message size limit for Raft traffic (appends carry Arrow batches).
pub const MAX_RAFT_MESSAGE_BYTES: usize = 512 << 20;
/// Snapshot data per `InstallSnapshot` chunk.
const SNAPSHOT_CHUNK_BYTES: usize = 4 << 20;

type Outbox = Vec<(ShardId, Message)>;

pub struct GrpcTransport {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: NodeId,
    directory: Arc<PeerDirectory>,
    runtime: tokio::runtime::Handle,
    peers: Mutex<HashMap<NodeId, mpsc::Sender<Outbox>>>,
    wal: OnceLock<Weak<Wal>>,
    /// Presented on every Raft stream (peers require it when configured).
    cluster_token: Option<ClusterToken>,
}

impl GrpcTransport {
    /// Must be created inside a Tokio runtime: peer tasks run on it.
    pub fn new(
        node_id: NodeId,
        directory: Arc<PeerDirectory>,
        cluster_token: Option<ClusterToken>,
    ) -> Arc<GrpcTransport> {
        Arc::new(GrpcTransport {
            inner: Arc::new(Inner {
                node_id,
                directory,
                runtime: tokio::runtime::Handle::current(),
                peers: Mutex::new(HashMap::new()),
                wal: OnceLock::new(),
                cluster_token,
            }),
        })
    }

    /// The WAL is opened with this transport, so it is attached afterwards;
    /// until then unreachable reports are skipped.
    pub fn attach_wal(&self, wal: &Arc<Wal>) {
        let _ = self.inner.wal.set(Arc::downgrade(wal));
    }
}

impl Transport for GrpcTransport {
    fn send(&self, to: NodeId, mut msgs: Vec<(ShardId, Message)>) {
        if msgs
            .iter()
            .any(|(_, m)| m.get_msg_type() == MessageType::MsgSnapshot)
        {
            let (snapshots, rest): (Vec<_>, Vec<_>) = msgs
                .into_iter()
                .partition(|(_, m)| m.get_msg_type() == MessageType::MsgSnapshot);
            for (shard, msg) in snapshots {
                let inner = Arc::clone(&self.inner);
                self.inner
                    .runtime
                    .spawn(send_snapshot(inner, to, shard, msg));
            }
            msgs = rest;
        }
        if msgs.is_empty() {
            return;
        }
        let queue = {
            let mut peers = self.inner.peers.lock();
            peers
                .entry(to)
                .or_insert_with(|| {
                    let (tx, rx) = mpsc::channel(PEER_QUEUE);
                    let inner = Arc::clone(&self.inner);
                    self.inner.runtime.spawn(run_peer(inner, to, rx));
                    tx
                })
                .clone()
        };
        if let Err(e) = queue.try_send(msgs) {
            let dropped = match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => m,
            };
            // Called from WAL threads: report from the runtime, never re-enter
            // the WAL synchronously from inside its own send path.
            let inner = Arc::clone(&self.inner);
            self.inner.runtime.spawn(async move {
                inner.report_unreachable(to, &dropped);
            });
        }
    }

    fn reports_snapshots(&self) -> bool {
        true
    }
}

impl Inner {
    fn report_unreachable(&self, to: NodeId, msgs: &[(ShardId, Message)]) {
        let Some(wal) = self.wal.get().and_then(Weak::upgrade) else {
            return;
        };
        let shards: BTreeSet<ShardId> = msgs.iter().map(|(s, _)| *s).collect();
        for shard in shards {
            wal.report_unreachable(shard, to);
        }
    }

    /// Drops everything queued for a down peer, reporting each shard once.
    fn drop_queued(&self, to: NodeId, first: Outbox, rx: &mut mpsc::Receiver<Outbox>) {
        let mut all = first;
        while let Ok(more) = rx.try_recv() {
            all.extend(more);
        }
        self.report_unreachable(to, &all);
    }
}

/// Batches of encoded Raft messages for one peer, each closed once it holds
/// `limit` bytes: a catching-up follower can be owed hundreds of appends in
/// one Ready (up to `max_inflight_msgs` x `max_size_per_msg`), and one
/// gRPC message that large failed to encode and reset the stream again and
/// again, so the follower never caught up (the soak after log retention).
struct Packer {
    from: NodeId,
    limit: usize,
    /// Full batches, oldest first, and the one being filled with its size.
    full: Vec<RaftBatch>,
    open: RaftBatch,
    open_bytes: usize,
}

impl Packer {
    fn new(from: NodeId, limit: usize) -> Packer {
        Packer {
            from,
            limit,
            full: Vec::new(),
            open: RaftBatch {
                from_node: from,
                ..Default::default()
            },
            open_bytes: 0,
        }
    }

    fn add(&mut self, msgs: Outbox) {
        for (shard, msg) in msgs {
            let b = match msg.write_to_bytes() {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(shard, error = %e, "cannot encode raft message; dropped");
                    continue;
                }
            };
            if self.open_bytes > 0 && self.open_bytes + b.len() > self.limit {
                self.close();
            }
            self.open_bytes += b.len();
            self.open.messages.push(RaftEnvelope { shard, message: b });
        }
    }

    fn close(&mut self) {
        let next = RaftBatch {
            from_node: self.from,
            ..Default::default()
        };
        self.full.push(std::mem::replace(&mut self.open, next));
        self.open_bytes = 0;
    }

    /// Room for more before the current batch is sent.
    fn has_room(&self) -> bool {
        self.full.is_empty() && self.open_bytes < self.limit
    }

    fn finish(mut self) -> Vec<RaftBatch> {
        if !self.open.messages.is_empty() {
            self.close();
        }
        self.full
    }
}

/// A snapshot message as `InstallSnapshot` chunks: the first carries the
/// Raft message without its data, then the data in slices of at most
/// `chunk_bytes` (no copy), the last one marked.
fn snapshot_chunks(
    from: NodeId,
    shard: ShardId,
    mut msg: Message,
    chunk_bytes: usize,
) -> Result<Vec<SnapshotChunk>, String> {
    let data: bytes::Bytes = std::mem::take(&mut msg.mut_snapshot().data);
    let header = msg.write_to_bytes().map_err(|e| e.to_string())?;
    let chunk_bytes = chunk_bytes.max(1);
    let mut chunks = Vec::with_capacity(1 + data.len() / chunk_bytes);
    let mut at = 0;
    loop {
        let end = (at + chunk_bytes).min(data.len());
        chunks.push(SnapshotChunk {
            shard,
            from_node: from,
            raft_message: if at == 0 {
                header.clone().into()
            } else {
                Default::default()
            },
            data: data.slice(at..end),
            last: end == data.len(),
        });
        if end == data.len() {
            return Ok(chunks);
        }
        at = end;
    }
}

/// Streams one snapshot to `to` on its own call and tells the WAL whether
/// the peer has it.
async fn send_snapshot(inner: Arc<Inner>, to: NodeId, shard: ShardId, msg: Message) {
    let index = msg.get_snapshot().get_metadata().index;
    let bytes = msg.get_snapshot().data.len();
    let started = std::time::Instant::now();
    let sent = async {
        let addr = inner
            .directory
            .addr(to)
            .ok_or_else(|| "no address for the peer".to_string())?;
        let chunks = snapshot_chunks(inner.node_id, shard, msg, SNAPSHOT_CHUNK_BYTES)?;
        let channel = connect(&addr).await?;
        let channel = with_credential(channel, inner.cluster_token.as_ref());
        let mut client = RaftClient::new(channel)
            .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES);
        client
            .install_snapshot(tokio_stream::iter(chunks))
            .await
            .map(|_| ())
            .map_err(|s| s.to_string())
    }
    .await;
    let delivered = match sent {
        Ok(()) => {
            tracing::info!(
                peer = to,
                shard,
                index,
                bytes,
                secs = started.elapsed().as_secs_f64(),
                "snapshot sent"
            );
            true
        }
        Err(e) => {
            tracing::warn!(peer = to, shard, index, bytes, error = %e, "snapshot not delivered; the leader probes and sends it again");
            false
        }
    };
    if let Some(wal) = inner.wal.get().and_then(Weak::upgrade) {
        wal.report_snapshot(shard, to, delivered);
    }
}

async fn connect(addr: &str) -> Result<tonic::transport::Channel, String> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(3))
        .keep_alive_while_idle(true)
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(32 << 20));
    endpoint.connect().await.map_err(|e| e.to_string())
}

async fn run_peer(inner: Arc<Inner>, to: NodeId, mut rx: mpsc::Receiver<Outbox>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(first) = rx.recv().await else {
            return;
        };
        let Some(addr) = inner.directory.addr(to) else {
            tracing::debug!(peer = to, "no address for peer yet; dropping raft messages");
            inner.drop_queued(to, first, &mut rx);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
            continue;
        };
        let channel = match connect(&addr).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(peer = to, %addr, error = %e, "peer unreachable; dropping raft messages");
                inner.drop_queued(to, first, &mut rx);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        tracing::info!(peer = to, %addr, "raft stream connected");
        backoff = Duration::from_millis(50);

        let (batch_tx, batch_rx) = mpsc::channel::<RaftBatch>(8);
        let channel = with_credential(channel, inner.cluster_token.as_ref());
        let mut client = RaftClient::new(channel)
            .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES);
        let mut call =
            tokio::spawn(async move { client.send(ReceiverStream::new(batch_rx)).await });

        let mut pending = Some(first);
        loop {
            let msgs = match pending.take() {
                Some(m) => m,
                None => tokio::select! {
                    m = rx.recv() => match m {
                        Some(m) => m,
                        None => return,
                    },
                    res = &mut call => {
                        tracing::info!(peer = to, result = ?res.map(|r| r.map(|_| ())), "raft stream ended; reconnecting");
                        break;
                    }
                },
            };
            let mut packer = Packer::new(inner.node_id, MAX_BATCH_BYTES);
            packer.add(msgs);
            while packer.has_room() {
                match rx.try_recv() {
                    Ok(more) => packer.add(more),
                    Err(_) => break,
                }
            }
            let mut closed = false;
            for batch in packer.finish() {
                if batch_tx.send(batch).await.is_err() {
                    closed = true;
                    break;
                }
            }
            if closed {
                tracing::info!(peer = to, "raft stream closed; reconnecting");
                break;
            }
        }
        call.abort();
        tokio::time::sleep(backoff).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(bytes: usize) -> Message {
        let mut m = Message::default();
        m.set_context(vec![7u8; bytes].into());
        m
    }

    #[test]
    fn a_large_outbox_is_cut_into_bounded_batches_in_order() {
        let mut p = Packer::new(9, 1000);
        // 10 messages of ~300 bytes: 3 per batch.
        p.add((0..10).map(|i| (i, msg(300))).collect());
        assert!(!p.has_room());
        let batches = p.finish();
        assert_eq!(batches.len(), 4);
        let shards: Vec<ShardId> = batches
            .iter()
            .flat_map(|b| b.messages.iter().map(|e| e.shard))
            .collect();
        assert_eq!(shards, (0..10).collect::<Vec<_>>());
        for b in &batches {
            assert_eq!(b.from_node, 9);
            let bytes: usize = b.messages.iter().map(|e| e.message.len()).sum();
            assert!(bytes <= 1000, "batch of {bytes} bytes");
        }
    }

    #[test]
    fn a_snapshot_is_cut_into_chunks_that_reassemble_it() {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.to = 3;
        m.mut_snapshot().mut_metadata().index = 42;
        let data: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
        m.mut_snapshot().data = data.clone().into();
        let chunks = snapshot_chunks(7, 5, m, 1000).unwrap();
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.shard == 5 && c.from_node == 7));
        let lasts: Vec<bool> = chunks.iter().map(|c| c.last).collect();
        assert_eq!(lasts, [false, false, true]);
        // The header is only in the first chunk, and without the data.
        let header = Message::parse_from_bytes(&chunks[0].raft_message).unwrap();
        assert_eq!(header.get_snapshot().get_metadata().index, 42);
        assert_eq!(header.to, 3);
        assert!(header.get_snapshot().data.is_empty());
        assert!(chunks[1..].iter().all(|c| c.raft_message.is_empty()));
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.data.iter().copied()).collect();
        assert_eq!(joined, data);
        // A snapshot without data is one chunk, marked last.
        let mut empty = Message::default();
        empty.set_msg_type(MessageType::MsgSnapshot);
        let chunks = snapshot_chunks(1, 1, empty, 1000).unwrap();
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].last && chunks[0].data.is_empty());
    }

    #[test]
    fn a_message_over_the_limit_goes_alone_and_small_ones_share() {
        let mut p = Packer::new(1, 1000);
        p.add(vec![(1, msg(10)), (2, msg(5000)), (3, msg(10))]);
        let batches = p.finish();
        let sizes: Vec<usize> = batches.iter().map(|b| b.messages.len()).collect();
        assert_eq!(sizes, vec![1, 1, 1]);
        let mut p = Packer::new(1, 1000);
        p.add(vec![(1, msg(10)), (2, msg(10))]);
        assert!(p.has_room());
        assert_eq!(p.finish().len(), 1);
        assert!(Packer::new(1, 1000).finish().is_empty());
    }
}
