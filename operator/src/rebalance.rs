//! Runs planner moves against a live cluster: reads and rewrites the shard
//! map in etcd and calls the nodes' `Admin` gRPC API. Shared by the operator
//! and `shardhouse-ctl rebalance`.
//!
//! Each move is applied to the cluster first, then to the map, with a
//! compare-and-swap on the map's etcd revision so two rebalancers cannot
//! interleave their writes.

use crate::backoff::{self, Backoff};
use crate::catch_up;
use crate::map_race;
use crate::planner::{self, Move};
use crate::{Error, Result};
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use shardhouse_common::credential::{ClusterToken, CredentialChannel};
use shardhouse_common::proto::admin_client::AdminClient;
use shardhouse_common::proto::{
    AdminReply, ChangeReplicaRequest, CreateReplicaRequest, Peer, ShardStatesReply,
    ShardStatesRequest, TransferLeaderRequest,
};
use shardhouse_common::shard_map::{keys, NodeInfo, ShardMap, ShardPlacement};
use shardhouse_common::status::ErrorExt as _;
use std::collections::BTreeMap;
use std::time::Duration;

const RPC_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(200);
/// Compare-and-swap attempts to record a finished move in the shard map.
const RECORD_TRIES: usize = 5;

/// The cluster's metadata in etcd.
pub struct ClusterMeta {
    client: etcd_client::Client,
    endpoints: String,
    pub cluster: String,
    /// The cluster credential presented on every node call.
    pub node_token: Option<ClusterToken>,
}

impl ClusterMeta {
    pub async fn connect(endpoints: &[String], cluster: &str) -> Result<Self> {
        let joined = endpoints.join(",");
        let opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(5));
        let client = etcd_client::Client::connect(endpoints, Some(opts))
            .await
            .map_err(|source| Error::Etcd {
                endpoints: joined.clone(),
                source,
            })?;
        Ok(ClusterMeta {
            client,
            endpoints: joined,
            cluster: cluster.to_string(),
            node_token: None,
        })
    }

    /// Presents `token` to the nodes (None: they run without a credential).
    pub fn with_node_token(mut self, token: Option<ClusterToken>) -> Self {
        self.node_token = token;
        self
    }

    fn etcd_err(&self, source: etcd_client::Error) -> Error {
        Error::Etcd {
            endpoints: self.endpoints.clone(),
            source,
        }
    }

    /// The shard map and its etcd mod revision (for compare-and-swap).
    pub async fn shard_map(&mut self) -> Result<Option<(ShardMap, i64)>> {
        let key = keys::shard_map(&self.cluster);
        let resp = self
            .client
            .get(key, None)
            .await
            .map_err(|e| self.etcd_err(e))?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(kv) => Ok(Some((
                serde_json::from_slice(kv.value())?,
                kv.mod_revision(),
            ))),
        }
    }

    /// Nodes registered under their leases (alive).
    pub async fn live_nodes(&mut self) -> Result<BTreeMap<u64, NodeInfo>> {
        let prefix = keys::nodes_prefix(&self.cluster);
        let resp = self
            .client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.etcd_err(e))?;
        let mut out = BTreeMap::new();
        for kv in resp.kvs() {
            let n: NodeInfo = serde_json::from_slice(kv.value())?;
            out.insert(n.node_id, n);
        }
        Ok(out)
    }

    /// Writes `map` only if the stored map still has `expected_rev`.
    /// Returns the new revision.
    pub async fn put_shard_map(&mut self, map: &ShardMap, expected_rev: i64) -> Result<i64> {
        let key = keys::shard_map(&self.cluster);
        let value = serde_json::to_vec(map)?;
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected_rev,
            )])
            .and_then([TxnOp::put(key, value, None)]);
        let resp = self.client.txn(txn).await.map_err(|e| self.etcd_err(e))?;
        if !resp.succeeded() {
            return Err(Error::ShardMapConflict { epoch: map.epoch });
        }
        Ok(resp.header().map_or(expected_rev + 1, |h| h.revision()))
    }

    /// Writes a map unconditionally when none exists (tests and bootstrap).
    pub async fn create_shard_map(&mut self, map: &ShardMap) -> Result<bool> {
        let key = keys::shard_map(&self.cluster);
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, serde_json::to_vec(map)?, None)]);
        let resp = self.client.txn(txn).await.map_err(|e| self.etcd_err(e))?;
        Ok(resp.succeeded())
    }
}

/// Applies moves one by one against the live cluster.
pub struct Executor {
    pub meta: ClusterMeta,
    pub catch_up_timeout: Duration,
    /// How a step the nodes refused for now (a leader transfer, a
    /// membership change while the previous one applies) is tried again.
    pub backoff: Backoff,
    /// Steps tried again so far (each failed try counts once).
    pub retries: u64,
    channels: BTreeMap<u64, (String, AdminClient<CredentialChannel>)>,
}

impl Executor {
    pub fn new(meta: ClusterMeta) -> Self {
        Executor {
            meta,
            catch_up_timeout: Duration::from_secs(300),
            backoff: Backoff::MOVE_STEP,
            retries: 0,
            channels: BTreeMap::new(),
        }
    }

    async fn admin(
        &mut self,
        node_id: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<(String, AdminClient<CredentialChannel>)> {
        let info = nodes.get(&node_id).ok_or(Error::UnknownNode { node_id })?;
        if let Some((addr, c)) = self.channels.get(&node_id) {
            if *addr == info.grpc_addr {
                return Ok((addr.clone(), c.clone()));
            }
        }
        let addr = info.grpc_addr.clone();
        let client =
            crate::node_client::admin_client(&addr, self.meta.node_token.as_ref(), RPC_TIMEOUT)
                .await
                .map_err(|e| Error::NodeUnreachable {
                    node_id,
                    addr: addr.clone(),
                    message: e.to_string(),
                })?;
        self.channels
            .insert(node_id, (addr.clone(), client.clone()));
        Ok((addr, client))
    }

    async fn shard_states(
        &mut self,
        node_id: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<ShardStatesReply> {
        let (addr, mut c) = self.admin(node_id, nodes).await?;
        c.shard_states(ShardStatesRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|s| Error::NodeUnreachable {
                node_id,
                addr,
                message: s.to_string(),
            })
    }

    /// Sends a change to the shard's leader, following `not_leader` hints.
    async fn send_to_leader(
        &mut self,
        call: &'static str,
        shard: u32,
        mut leader: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
        req: ChangeOrTransfer,
    ) -> Result<()> {
        let mut last = String::new();
        let (mut hops, mut refused) = (0, 0u32);
        while hops < 8 {
            if leader == 0 {
                tokio::time::sleep(POLL).await;
                leader = *nodes
                    .keys()
                    .next()
                    .ok_or(Error::UnknownNode { node_id: 0 })?;
            }
            let (addr, mut c) = self.admin(leader, nodes).await?;
            let reply: std::result::Result<tonic::Response<AdminReply>, tonic::Status> = match &req
            {
                ChangeOrTransfer::AddLearner(r) => c.add_learner(r.clone()).await,
                ChangeOrTransfer::Promote(r) => c.promote_learner(r.clone()).await,
                ChangeOrTransfer::Remove(r) => c.remove_replica(r.clone()).await,
                ChangeOrTransfer::Transfer(r) => c.transfer_leader(*r).await,
            };
            let reply = reply
                .map_err(|s| Error::NodeUnreachable {
                    node_id: leader,
                    addr: addr.clone(),
                    message: s.to_string(),
                })?
                .into_inner();
            if reply.ok {
                return Ok(());
            }
            if let Some(nl) = reply.not_leader {
                last = format!("not leader (hint {})", nl.leader_hint);
                if nl.leader_hint == 0 {
                    // No leader known: an election (after a kill, a
                    // partition or an overloaded leader). Ask the same
                    // replica again once it may know the new one.
                    refused += 1;
                    let Some(pause) = self.backoff.delay(refused) else {
                        break;
                    };
                    self.retries += 1;
                    tracing::warn!(
                        shard,
                        call,
                        pause_ms = pause.as_millis() as u64,
                        "no leader known; asking again"
                    );
                    tokio::time::sleep(pause).await;
                    continue;
                }
                leader = nl.leader_hint;
                hops += 1;
                continue;
            }
            // A membership change refused while the previous one is still
            // being applied (right after a promotion) was not carried out:
            // wait and send it again. Transfers have their own loop.
            let transfer = matches!(req, ChangeOrTransfer::Transfer(_));
            if !transfer && backoff::refused_for_now(&reply.message) {
                refused += 1;
                if let Some(pause) = self.backoff.delay(refused) {
                    self.retries += 1;
                    tracing::warn!(shard, call, refused, pause_ms = pause.as_millis() as u64,
                        message = %reply.message, "membership change refused for now; trying again");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            }
            return Err(Error::Admin {
                node_id: leader,
                addr,
                call,
                shard,
                message: reply.message,
            });
        }
        Err(Error::Timeout {
            what: format!("the leader of shard {shard} for {call} ({last})"),
            secs: RPC_TIMEOUT.as_secs(),
        })
    }

    /// Runs one move and records it in the shard map.
    pub async fn execute(&mut self, mv: &Move) -> Result<()> {
        let (map, rev) = self.load().await?;
        let nodes = self.nodes_for(&map).await?;
        let shard = mv.shard();
        let placement = map.shard(shard).cloned().ok_or(Error::NoShardMap {
            key: format!("{} shard {shard}", keys::shard_map(&self.meta.cluster)),
        })?;
        match *mv {
            Move::AddLearner { node, .. } => {
                self.add_learner(shard, node, &placement, &nodes).await?;
            }
            Move::PromoteLearner { node, .. } => {
                self.wait_caught_up(shard, node, placement.leader_hint, &nodes)
                    .await?;
                let req = ChangeReplicaRequest {
                    shard,
                    target: Some(peer(&nodes, node)?),
                };
                self.send_to_leader(
                    "PromoteLearner",
                    shard,
                    placement.leader_hint,
                    &nodes,
                    ChangeOrTransfer::Promote(req),
                )
                .await?;
            }
            Move::TransferLeader { from, to, .. } => {
                self.transfer_leader(shard, from, to, &nodes).await?;
            }
            Move::RemoveReplica { node, .. } => {
                let req = ChangeReplicaRequest {
                    shard,
                    target: Some(peer(&nodes, node)?),
                };
                self.send_to_leader(
                    "RemoveReplica",
                    shard,
                    placement.leader_hint,
                    &nodes,
                    ChangeOrTransfer::Remove(req),
                )
                .await?;
            }
        }
        self.record_move(mv, map, rev, &nodes).await
    }

    /// `AddLearner`: creates the empty replica on `node`, then asks the
    /// shard's leader to add it as a learner.
    async fn add_learner(
        &mut self,
        shard: u32,
        node: u64,
        placement: &ShardPlacement,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<()> {
        let mut peers: Vec<Peer> = placement
            .replicas
            .iter()
            .chain(&placement.learners)
            .map(|&id| peer(nodes, id))
            .collect::<Result<_>>()?;
        peers.push(peer(nodes, node)?);
        let (addr, mut c) = self.admin(node, nodes).await?;
        let reply = c
            .create_replica(CreateReplicaRequest {
                shard,
                voters: vec![],
                peers,
            })
            .await
            .map_err(|s| Error::NodeUnreachable {
                node_id: node,
                addr: addr.clone(),
                message: s.to_string(),
            })?
            .into_inner();
        // A node that saw the map already may have created it.
        if !reply.ok && !reply.message.contains("exist") {
            return Err(Error::Admin {
                node_id: node,
                addr,
                call: "CreateReplica",
                shard,
                message: reply.message,
            });
        }
        let req = ChangeReplicaRequest {
            shard,
            target: Some(peer(nodes, node)?),
        };
        self.send_to_leader(
            "AddLearner",
            shard,
            placement.leader_hint,
            nodes,
            ChangeOrTransfer::AddLearner(req),
        )
        .await?;
        Ok(())
    }

    /// Applies the move, done on the nodes, to the shard map in etcd
    /// (`map` at revision `rev` is the map the move was planned on).
    async fn record_move(
        &mut self,
        mv: &Move,
        mut map: ShardMap,
        mut rev: i64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<()> {
        let seen = map.clone();
        // Nodes publish leader hints into the same key; under load they
        // often win the race while a move waits on a learner.
        for _ in 0..RECORD_TRIES {
            planner::apply_move(&mut map, mv);
            planner::record_node_addresses(&mut map, nodes);
            match self.meta.put_shard_map(&map, rev).await {
                Ok(_) => {
                    crate::metrics::REBALANCE_MOVES.inc();
                    tracing::info!(?mv, epoch = map.epoch, "shard move applied");
                    return Ok(());
                }
                Err(Error::ShardMapConflict { epoch }) => {
                    let (fresh, fresh_rev) = self.load().await?;
                    if !map_race::only_hints_changed(&seen, &fresh) {
                        return Err(Error::ShardMapConflict { epoch });
                    }
                    tracing::info!(
                        ?mv,
                        "leader hints changed the map meanwhile; recording the move on the new map"
                    );
                    (map, rev) = (fresh, fresh_rev);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::ShardMapConflict { epoch: map.epoch })
    }

    /// Moves the shard's leadership to `to`, trying again with
    /// `backoff` while the failure is one that passes (`to` not yet
    /// a voter in its own view, a transfer timed out, a node briefly
    /// unreachable): a transfer right after a promotion used to abort the
    /// whole rebalance.
    async fn transfer_leader(
        &mut self,
        shard: u32,
        from: u64,
        to: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<()> {
        let mut failures = 0u32;
        loop {
            let res = self.transfer_once(shard, from, to, nodes).await;
            let err = match res {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            failures += 1;
            let pause = err
                .status_code()
                .is_retryable()
                .then(|| self.backoff.delay(failures))
                .flatten();
            let Some(pause) = pause else {
                return Err(err);
            };
            self.retries += 1;
            tracing::warn!(
                shard,
                to,
                failures,
                pause_ms = pause.as_millis() as u64,
                error = %err,
                "leader transfer failed; trying again"
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// One try: `to` must see itself as a voter (a learner ignores the
    /// transfer and the leader holds writes back until it times out), then
    /// the leader (starting at `from`, following hints) hands over, and `to`
    /// reports itself leading.
    async fn transfer_once(
        &mut self,
        shard: u32,
        from: u64,
        to: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<()> {
        let role = self
            .shard_states(to, nodes)
            .await?
            .shards
            .into_iter()
            .find(|s| s.shard == shard)
            .map(|s| s.role);
        match role.as_deref() {
            Some("leader") => return Ok(()),
            Some("follower") => {}
            other => {
                return Err(Error::Admin {
                    node_id: to,
                    addr: nodes
                        .get(&to)
                        .map_or_else(String::new, |n| n.grpc_addr.clone()),
                    call: "TransferLeader",
                    shard,
                    message: format!(
                        "the target is not a voter yet in its own view (role {})",
                        other.unwrap_or("none: no replica")
                    ),
                })
            }
        }
        let req = TransferLeaderRequest { shard, to_node: to };
        self.send_to_leader(
            "TransferLeader",
            shard,
            from,
            nodes,
            ChangeOrTransfer::Transfer(req),
        )
        .await?;
        self.wait_leader(shard, to, nodes).await
    }

    async fn load(&mut self) -> Result<(ShardMap, i64)> {
        self.meta
            .shard_map()
            .await?
            .ok_or_else(|| Error::NoShardMap {
                key: keys::shard_map(&self.meta.cluster),
            })
    }

    /// Addresses of live nodes, falling back to the map's own node table.
    async fn nodes_for(&mut self, map: &ShardMap) -> Result<BTreeMap<u64, NodeInfo>> {
        let mut nodes = map.nodes.clone();
        nodes.extend(self.meta.live_nodes().await?);
        Ok(nodes)
    }

    async fn wait_caught_up(
        &mut self,
        shard: u32,
        learner: u64,
        leader: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<()> {
        let started = tokio::time::Instant::now();
        let deadline = started + self.catch_up_timeout;
        let mut history = catch_up::CommitHistory::default();
        loop {
            let commit = self
                .shard_states(leader, nodes)
                .await?
                .shards
                .into_iter()
                .find(|s| s.shard == shard)
                .map_or(u64::MAX, |s| s.commit_index);
            let applied = self
                .shard_states(learner, nodes)
                .await?
                .shards
                .into_iter()
                .find(|s| s.shard == shard)
                .map_or(0, |s| s.applied_index.max(s.commit_index));
            let now = started.elapsed().as_secs_f64();
            history.record(now, commit);
            if history.caught_up(now, applied, catch_up::LAG_ALLOWED) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "learner {learner} of shard {shard} to catch up ({applied}/{commit})"
                    ),
                    secs: self.catch_up_timeout.as_secs(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn wait_leader(
        &mut self,
        shard: u32,
        to: u64,
        nodes: &BTreeMap<u64, NodeInfo>,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let st = self.shard_states(to, nodes).await?;
            if st
                .shards
                .iter()
                .any(|s| s.shard == shard && s.role == "leader")
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("node {to} to lead shard {shard}"),
                    secs: 30,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Node `id` as a Raft peer, at its gRPC address in `nodes`.
fn peer(nodes: &BTreeMap<u64, NodeInfo>, id: u64) -> Result<Peer> {
    Ok(Peer {
        node_id: id,
        addr: nodes
            .get(&id)
            .ok_or(Error::UnknownNode { node_id: id })?
            .grpc_addr
            .clone(),
    })
}

enum ChangeOrTransfer {
    AddLearner(ChangeReplicaRequest),
    Promote(ChangeReplicaRequest),
    Remove(ChangeReplicaRequest),
    Transfer(TransferLeaderRequest),
}
