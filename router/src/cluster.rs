//! The router's view of the cluster: the shard map (from etcd, watched),
//! learned shard leaders, gRPC channels to nodes, per-shard in-flight
//! budgets, and forwarding of shard batches with leader retries.

use crate::batch::ShardBatch;
use crate::coalesce::{self, Pending};
use crate::error::{Error, Result};
use crate::metrics;
use crate::node_mux;
use crate::request_path::{LeaderRetry, Next, Retarget};
use parking_lot::{Mutex, RwLock};
use shardhouse_common::credential::{with_credential, ClusterToken, CredentialChannel};
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::proto::{TableBatch, WriteRequest};
use shardhouse_common::shard_map::{keys, ShardMap};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::transport::Endpoint;

/// Largest query result accepted from a node.
const MAX_QUERY_RESULT_BYTES: usize = 512 << 20;

pub struct Cluster {
    cluster_name: String,
    map: RwLock<Option<Arc<ShardMap>>>,
    map_tx: watch::Sender<u64>,
    /// Leaders learned from `NotLeader` answers: shard -> (node id, addr).
    leaders: Mutex<HashMap<u32, (u64, String)>>,
    channels: Mutex<HashMap<String, CredentialChannel>>,
    /// Presented to nodes on every call (they require it when configured).
    cluster_token: Option<ClusterToken>,
    shard_budgets: Mutex<HashMap<u32, Arc<Semaphore>>>,
    max_shard_inflight_bytes: usize,
    retry_after: Duration,
    /// How a shard write follows leaders and backs off (router -> node).
    retry: LeaderRetry,
    /// Per-shard write queues (see `coalesce`), created on first use.
    queues: Mutex<HashMap<u32, mpsc::UnboundedSender<Pending>>>,
    /// Node.Write calls in flight per shard from this router.
    max_shard_rpcs: usize,
    /// Largest coalesced write (a single larger request still goes alone).
    max_coalesce_bytes: usize,
    /// Requests waiting in shard queues for a free write slot.
    queued: Arc<AtomicUsize>,
    /// Per-node call queues (see `node_mux`), created on first use.
    node_queues: Mutex<HashMap<String, mpsc::UnboundedSender<node_mux::Queued>>>,
    /// Node calls in flight per node; 0 sends every shard write as its own
    /// Node.Write.
    max_node_rpcs: usize,
    /// Shard writes waiting in node queues for a call.
    node_waiting: Arc<AtomicUsize>,
}

/// Defaults for [`Cluster::with_write_coalescing`].
pub const DEFAULT_MAX_SHARD_RPCS: usize = 4;
pub const DEFAULT_MAX_COALESCE_BYTES: usize = 16 << 20;
/// Default for [`Cluster::with_node_batching`].
pub const DEFAULT_MAX_NODE_RPCS: usize = 4;

impl Cluster {
    pub fn new(
        cluster_name: &str,
        max_shard_inflight_bytes: usize,
        retry_after: Duration,
    ) -> Cluster {
        let (map_tx, _) = watch::channel(0);
        Cluster {
            cluster_name: cluster_name.to_owned(),
            map: RwLock::new(None),
            map_tx,
            leaders: Mutex::default(),
            channels: Mutex::default(),
            cluster_token: None,
            shard_budgets: Mutex::default(),
            max_shard_inflight_bytes: max_shard_inflight_bytes.min(u32::MAX as usize),
            retry_after,
            retry: LeaderRetry::default(),
            queues: Mutex::default(),
            max_shard_rpcs: DEFAULT_MAX_SHARD_RPCS,
            max_coalesce_bytes: DEFAULT_MAX_COALESCE_BYTES,
            queued: Arc::default(),
            node_queues: Mutex::default(),
            max_node_rpcs: DEFAULT_MAX_NODE_RPCS,
            node_waiting: Arc::default(),
        }
    }

    /// The cluster credential presented to nodes (None: nodes run without).
    pub fn with_cluster_token(mut self, token: Option<ClusterToken>) -> Cluster {
        self.cluster_token = token;
        self
    }

    /// How many calls per node may be in flight from this router; shard
    /// writes queued meanwhile go together as one Node.WriteMany. 0 turns
    /// batching off (one Node.Write per shard write).
    pub fn with_node_batching(mut self, max_node_rpcs: usize) -> Cluster {
        self.max_node_rpcs = max_node_rpcs;
        self
    }

    /// How many writes per shard may be in flight from this router
    /// (`max_rpcs` >= 1; 1 serializes a shard's writes) and how large a
    /// coalesced write may grow.
    pub fn with_write_coalescing(mut self, max_rpcs: usize, max_bytes: usize) -> Cluster {
        self.max_shard_rpcs = max_rpcs.max(1);
        self.max_coalesce_bytes = max_bytes.max(1);
        self
    }

    /// Installs a shard map (from etcd, or directly in tests). Older epochs
    /// than the current one are ignored.
    pub fn set_shard_map(&self, map: ShardMap) {
        let mut cur = self.map.write();
        if let Some(c) = cur.as_ref() {
            if map.epoch < c.epoch {
                tracing::warn!(
                    old = map.epoch,
                    current = c.epoch,
                    "ignoring older shard map"
                );
                return;
            }
        }
        tracing::info!(
            epoch = map.epoch,
            shards = map.shard_count,
            "shard map installed"
        );
        let epoch = map.epoch;
        *cur = Some(Arc::new(map));
        drop(cur);
        // The map's leader hints are fresher than what we learned before.
        self.leaders.lock().clear();
        self.map_tx.send_replace(epoch);
    }

    pub fn shard_map(&self) -> Result<Arc<ShardMap>> {
        self.map
            .read()
            .clone()
            .ok_or_else(|| Error::NoShardMap(keys::shard_map(&self.cluster_name)))
    }

    /// Waits until a shard map is installed.
    pub async fn wait_for_shard_map(&self) {
        let mut rx = self.map_tx.subscribe();
        while self.map.read().is_none() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    pub(crate) fn channel(&self, addr: &str) -> Result<CredentialChannel> {
        let mut channels = self.channels.lock();
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let ep = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Error::Internal(format!("bad node address {addr:?}: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true);
        let c = with_credential(ep.connect_lazy(), self.cluster_token.as_ref());
        channels.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    pub(crate) fn node_client(&self, addr: &str) -> Result<NodeClient<CredentialChannel>> {
        Ok(NodeClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_QUERY_RESULT_BYTES)
            .max_encoding_message_size(usize::MAX))
    }

    fn budget(&self, shard: u32) -> Arc<Semaphore> {
        self.shard_budgets
            .lock()
            .entry(shard)
            .or_insert_with(|| Arc::new(Semaphore::new(self.max_shard_inflight_bytes)))
            .clone()
    }

    /// Takes in-flight budget for every batch or none: a saturated shard
    /// answers 429 at once instead of queueing.
    pub fn reserve(&self, batches: &[ShardBatch]) -> Result<Vec<OwnedSemaphorePermit>> {
        let mut per_shard: HashMap<u32, usize> = HashMap::new();
        for b in batches {
            *per_shard.entry(b.shard).or_default() += b.points_ipc.len() + b.series_ipc.len();
        }
        let mut permits = Vec::with_capacity(per_shard.len());
        for (shard, bytes) in per_shard {
            // A batch bigger than the whole budget still goes alone.
            let n = bytes.clamp(1, self.max_shard_inflight_bytes) as u32;
            match self.budget(shard).try_acquire_many_owned(n) {
                Ok(p) => permits.push(p),
                Err(_) => {
                    return Err(Error::Overloaded(
                        format!("shard {shard} has too many bytes in flight"),
                        self.retry_after,
                    ))
                }
            }
        }
        Ok(permits)
    }

    /// Where to send a write for `shard` first: a learned leader, else the
    /// map's hint, else the first replica.
    pub(crate) fn first_target(&self, map: &ShardMap, shard: u32) -> Result<(u64, String)> {
        if let Some(l) = self.leaders.lock().get(&shard) {
            return Ok(l.clone());
        }
        let p = map.shard(shard).ok_or_else(|| Error::Unavailable {
            shard,
            reason: format!("shard map epoch {} has no placement for it", map.epoch),
        })?;
        let node = if p.leader_hint != 0 {
            p.leader_hint
        } else {
            *p.replicas.first().ok_or_else(|| Error::Unavailable {
                shard,
                reason: "no replicas placed".into(),
            })?
        };
        let addr = map.addr_of(node).ok_or_else(|| Error::Unavailable {
            shard,
            reason: format!("node {node} has no registered address"),
        })?;
        Ok((node, addr.to_owned()))
    }

    /// The replica after `node` in the shard's placement (round robin).
    pub(crate) fn next_replica(
        &self,
        map: &ShardMap,
        shard: u32,
        node: u64,
    ) -> Option<(u64, String)> {
        let p = map.shard(shard)?;
        if p.replicas.is_empty() {
            return None;
        }
        let i = p
            .replicas
            .iter()
            .position(|&r| r == node)
            .map_or(0, |i| i + 1);
        let next = p.replicas[i % p.replicas.len()];
        Some((next, map.addr_of(next)?.to_owned()))
    }

    /// Writes table batches of one shard as ONE Node.Write (one Raft
    /// entry) to the shard leader, following `NotLeader` hints and trying
    /// other replicas until `deadline`.
    async fn write_tables(
        &self,
        shard: u32,
        batches: &[&ShardBatch],
        request_id: &str,
        deadline: Instant,
    ) -> Result<()> {
        let _t = metrics::FORWARD_SECONDS.start_timer();
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
            let req = write_request(shard, batches, request_id, map.epoch);
            let answer = self.call_write(&target.1, req, deadline).await;
            let backoff = match self.retry.after_answer(shard, attempt, &target, answer) {
                Next::Committed => {
                    self.leaders.lock().insert(shard, target.clone());
                    return Ok(());
                }
                Next::Fail(e) => return Err(e),
                Next::Retry {
                    to,
                    backoff,
                    reason,
                } => {
                    tracing::debug!(shard, node = target.0, %reason, "write attempt failed");
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
                reason: "request deadline passed before the shard's write committed".into(),
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

    /// Shard requests waiting for a write slot right now (all shards).
    pub fn queued_requests(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Shard writes waiting in node queues for a call right now.
    pub fn queued_node_writes(&self) -> usize {
        self.node_waiting.load(Ordering::Acquire)
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

/// Keeps the cluster's shard map in sync with etcd: initial get, then a
/// watch from the next revision; reconnects with backoff on any error.
pub async fn watch_shard_map(cluster: Arc<Cluster>, endpoints: Vec<String>) {
    let key = keys::shard_map(&cluster.cluster_name);
    let mut backoff = Duration::from_millis(100);
    loop {
        match watch_once(&cluster, &endpoints, &key).await {
            Ok(()) => tracing::warn!("etcd watch ended; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "etcd shard map watch failed; retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn watch_once(cluster: &Cluster, endpoints: &[String], key: &str) -> Result<()> {
    let mut client = etcd_client::Client::connect(endpoints, None).await?;
    let resp = client.get(key, None).await?;
    if let Some(kv) = resp.kvs().first() {
        install(cluster, kv.value());
    } else {
        tracing::info!(key, "no shard map in etcd yet; waiting for it");
    }
    let rev = resp.header().map_or(0, |h| h.revision());
    let mut stream = client
        .watch(
            key,
            Some(etcd_client::WatchOptions::new().with_start_revision(rev + 1)),
        )
        .await?;
    while let Some(resp) = stream.message().await? {
        for ev in resp.events() {
            if ev.event_type() == etcd_client::EventType::Put {
                if let Some(kv) = ev.kv() {
                    install(cluster, kv.value());
                }
            }
        }
    }
    Ok(())
}

fn install(cluster: &Cluster, value: &[u8]) {
    match serde_json::from_slice::<ShardMap>(value) {
        Ok(map) => cluster.set_shard_map(map),
        Err(e) => {
            tracing::error!(error = %e, "shard map in etcd is not valid JSON ShardMap; keeping the old one")
        }
    }
}

/// The write of `batches` to `shard`: every table in `tables`, each with
/// its database.
fn write_request(
    shard: u32,
    batches: &[&ShardBatch],
    request_id: &str,
    shard_map_epoch: u64,
) -> WriteRequest {
    WriteRequest {
        shard,
        request_id: request_id.to_owned(),
        shard_map_epoch,
        tables: batches
            .iter()
            .map(|b| TableBatch {
                measurement: b.measurement.clone(),
                points_ipc: b.points_ipc.clone(),
                series_ipc: b.series_ipc.clone(),
                database: b.database.clone(),
            })
            .collect(),
        ..WriteRequest::default()
    }
}
