//! The gRPC services of a node: Node (write/query), Raft (peer traffic) and
//! Admin (membership). Thin adapters over the WAL and the engine.

use crate::context::NodeContext;
use crate::metrics::{metrics, result};
use crate::transport::MAX_RAFT_MESSAGE_BYTES;
use prost::Message as _;
use protobuf::Message as _;
use shardhouse_common::proto::{
    self, write_response::Result as WriteResult, AdminReply, ChangeReplicaRequest,
    CreateReplicaRequest, DatabaseInfo, DatabasesReply, DatabasesRequest, Overloaded, Peer,
    QueryRequest, QueryResponse, RaftBatch, RaftDone, RebuildReplicaRequest, Rejected,
    ShardStatesReply, ShardStatesRequest, ShardUnavailable, SnapshotChunk, StorageRequest,
    TransferLeaderRequest, WriteManyRequest, WriteManyResponse, WriteRequest, WriteResponse,
};
use shardhouse_common::status::{self, ErrorExt};
use shardhouse_common::wire;
use shardhouse_wal::{Role, ShardStatus, WalError};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status, Streaming};

/// How long a query waits for this replica to apply up to its read index.
const READ_APPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest Write/Query message accepted (router batches are far smaller).
pub const MAX_CLIENT_MESSAGE_BYTES: usize = 256 << 20;

#[derive(Clone)]
pub struct NodeService {
    ctx: Arc<NodeContext>,
}

impl NodeService {
    pub fn new(ctx: Arc<NodeContext>) -> Self {
        NodeService { ctx }
    }

    async fn write_one(&self, req: WriteRequest) -> WriteResponse {
        let m = metrics();
        let timer = m.write_seconds.start_timer();
        let res = self.write_inner(req).await;
        let label = result_label(&res);
        if label == result::COMMITTED {
            timer.observe_duration();
        } else {
            timer.stop_and_discard();
        }
        m.writes_total.with_label_values(&[label]).inc();
        WriteResponse { result: Some(res) }
    }

    async fn write_inner(&self, mut req: WriteRequest) -> WriteResult {
        let ctx = &self.ctx;
        let shard = req.shard;
        if !ctx.wal.has_replica(shard) {
            if let Some(leader) = ctx.mapped_leader(shard) {
                return WriteResult::NotLeader(ctx.not_leader(Some(leader)));
            }
            return WriteResult::Unavailable(ShardUnavailable {
                reason: format!(
                    "node {} holds no replica of shard {shard}; refresh the shard map and retry",
                    ctx.node_id
                ),
            });
        }
        let tables = wire::write_tables(&mut req);
        for t in &tables {
            if t.database.is_empty() {
                return WriteResult::Rejected(Rejected {
                    reason: format!(
                        "the write to measurement {:?} names no database; set `database`",
                        t.measurement
                    ),
                });
            }
            let schema = match ctx.engine.stream_schema(&t.points_ipc) {
                Ok(Some(schema)) => schema,
                Ok(None) => {
                    return WriteResult::Rejected(Rejected {
                        reason: format!(
                            "points_ipc of measurement {:?} is empty; send an Arrow IPC stream",
                            t.measurement
                        ),
                    })
                }
                Err(e) => {
                    return WriteResult::Rejected(Rejected {
                        reason: format!(
                            "points_ipc of measurement {:?} is not an Arrow IPC stream: {e}",
                            t.measurement
                        ),
                    })
                }
            };
            // In memory and brief: no block_in_place, which handed this
            // worker's core to another thread on every write (that thread
            // churn was ~3% of the machine at RF=3, 250k points/s).
            if let Err(e) = ctx
                .engine
                .admit(shard, &t.database, &t.measurement, &schema)
            {
                return WriteResult::Rejected(Rejected {
                    reason: e.to_string(),
                });
            }
        }
        let size: usize = tables
            .iter()
            .map(|t| t.points_ipc.len() + t.series_ipc.len())
            .sum();
        let Some(_permit) = ctx.admission.try_admit(size) else {
            return WriteResult::Overloaded(Overloaded {
                retry_after_ms: ctx.admission.retry_after_ms(),
                reason: format!(
                    "node {} has {} bytes of writes in flight; retry later",
                    ctx.node_id,
                    ctx.admission.inflight()
                ),
            });
        };
        // Every table of the write, each with its database, in one entry.
        let entry = wire::write_entry(req.request_id, tables).encode_to_vec();
        match ctx.wal.propose(shard, entry).await {
            Ok(c) => WriteResult::Committed(proto::Committed {
                index: c.index,
                term: c.term,
            }),
            Err(e) => wal_error_to_write(ctx, e),
        }
    }
}

/// The node's in-band answer for a failed proposal: the status model's one
/// mapping ([`status::write_result`]), with this node's leader hint.
fn wal_error_to_write(ctx: &NodeContext, e: WalError) -> WriteResult {
    let hint = match e {
        WalError::NotLeader { leader_hint } => leader_hint,
        _ => None,
    };
    status::write_result(&e, || ctx.not_leader(hint))
}

fn result_label(r: &WriteResult) -> &'static str {
    match r {
        WriteResult::Committed(_) => result::COMMITTED,
        WriteResult::NotLeader(_) => result::NOT_LEADER,
        WriteResult::Overloaded(_) => result::OVERLOADED,
        WriteResult::Unavailable(_) => result::UNAVAILABLE,
        WriteResult::Rejected(_) => result::REJECTED,
    }
}

#[tonic::async_trait]
impl proto::node_server::Node for NodeService {
    #[tracing::instrument(level = "debug", skip_all, fields(shard = request.get_ref().shard))]
    async fn write(
        &self,
        request: Request<WriteRequest>,
    ) -> Result<Response<WriteResponse>, Status> {
        Ok(Response::new(self.write_one(request.into_inner()).await))
    }

    async fn write_many(
        &self,
        request: Request<WriteManyRequest>,
    ) -> Result<Response<WriteManyResponse>, Status> {
        let writes = request.into_inner().writes;
        // Concurrently: the shards' proposals reach the poll threads
        // together and share their fsyncs.
        let results =
            futures::future::join_all(writes.into_iter().map(|w| self.write_one(w))).await;
        Ok(Response::new(WriteManyResponse { results }))
    }

    async fn query(
        &self,
        request: Request<QueryRequest>,
    ) -> Result<Response<QueryResponse>, Status> {
        let req = request.into_inner();
        if !self.ctx.wal.has_replica(req.shard) {
            return Err(Status::not_found(format!(
                "node {} holds no replica of shard {}; query a replica from the shard map",
                self.ctx.node_id, req.shard
            )));
        }
        // Read-after-write: wait until this replica has applied everything
        // committed when the query arrived (a Raft read index, confirmed by
        // the leader), so the answer includes every acknowledged write.
        let wal = &self.ctx.wal;
        let read_index = wal
            .read_index(req.shard)
            .await
            .map_err(|e| status::to_tonic_status(&e))?;
        wal.wait_applied(req.shard, read_index, READ_APPLY_TIMEOUT)
            .await
            .map_err(|e| status::to_tonic_status(&e))?;
        let engine = Arc::clone(&self.ctx.engine);
        // Planned statements carry their tables' change mark (routers'
        // caches of settled buckets check it); the others none.
        let (batches, mark) = tokio::task::spawn_blocking(move || {
            if req.catalog {
                let table = Some(req.catalog_table.as_str()).filter(|t| !t.is_empty());
                Ok::<_, shardhouse_engine::EngineError>((
                    engine.catalog_fields(req.shard, &req.database, table)?,
                    None,
                ))
            } else if req.planned {
                let rollup = (!req.rollup_sql.is_empty())
                    .then_some((req.rollup_table.as_str(), req.rollup_sql.as_str()));
                let (rows, mark) =
                    engine.query_planned_rollup(req.shard, &req.database, &req.sql, rollup)?;
                Ok((rows, Some(mark)))
            } else {
                Ok((engine.query(req.shard, &req.database, &req.sql)?, None))
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| read_status(&e))?;
        // An empty schema when there are no rows to answer with.
        let schema = batches
            .first()
            .map_or_else(|| Arc::new(arrow_schema::Schema::empty()), |b| b.schema());
        let result_ipc =
            wire::encode_stream(&schema, &batches).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(QueryResponse {
            result_ipc,
            change_mark: mark.map_or(0, |m| m.mark),
            engine_epoch: mark.map_or(0, |m| m.epoch),
        }))
    }
}

/// The status of a read that failed with `e`: what the shard lacks is a
/// `NotFound` saying what ([`status::Missing`]: the router counts a
/// missing table as no rows and asks again without a missing column);
/// a table that cannot flush here is `Unavailable` (another replica may
/// store it fine); the rest as the engine classifies it.
fn read_status(e: &shardhouse_engine::EngineError) -> Status {
    match e.missing() {
        Some(missing) => missing.status(e.output_msg()),
        None => status::to_tonic_status(e),
    }
}

#[derive(Clone)]
pub struct RaftService {
    ctx: Arc<NodeContext>,
}

impl RaftService {
    pub fn new(ctx: Arc<NodeContext>) -> Self {
        RaftService { ctx }
    }

    fn step(&self, shard: u32, bytes: &[u8]) {
        match raft::eraftpb::Message::parse_from_bytes(bytes) {
            Ok(msg) => {
                if let Err(e) = self.ctx.wal.step(shard, msg) {
                    // Normal while a replica is still being created from the shard map.
                    tracing::debug!(shard, error = %e, "raft message not stepped");
                }
            }
            Err(e) => tracing::warn!(shard, error = %e, "undecodable raft message dropped"),
        }
    }
}

#[tonic::async_trait]
impl proto::raft_server::Raft for RaftService {
    async fn send(
        &self,
        request: Request<Streaming<RaftBatch>>,
    ) -> Result<Response<RaftDone>, Status> {
        let mut stream = request.into_inner();
        while let Some(batch) = stream.message().await? {
            for env in batch.messages {
                self.step(env.shard, &env.message);
            }
        }
        Ok(Response::new(RaftDone {}))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftDone>, Status> {
        // Reassemble the chunks into the snapshot message's data and step it.
        let mut stream = request.into_inner();
        let mut shard = None;
        let mut msg: Option<raft::eraftpb::Message> = None;
        let mut data = Vec::new();
        while let Some(chunk) = stream.message().await? {
            if msg.is_none() {
                shard = Some(chunk.shard);
                msg = Some(
                    raft::eraftpb::Message::parse_from_bytes(&chunk.raft_message).map_err(|e| {
                        Status::invalid_argument(format!("bad snapshot header: {e}"))
                    })?,
                );
            }
            data.extend_from_slice(&chunk.data);
            if chunk.last {
                break;
            }
        }
        let (Some(shard), Some(mut msg)) = (shard, msg) else {
            return Err(Status::invalid_argument("empty snapshot stream"));
        };
        if !data.is_empty() {
            msg.mut_snapshot().set_data(data.into());
        }
        self.ctx
            .wal
            .step(shard, msg)
            .map_err(|e| status::to_tonic_status(&e))?;
        Ok(Response::new(RaftDone {}))
    }
}

#[derive(Clone)]
pub struct AdminService {
    ctx: Arc<NodeContext>,
}

impl AdminService {
    pub fn new(ctx: Arc<NodeContext>) -> Self {
        AdminService { ctx }
    }

    fn remember(&self, peers: &[Peer]) {
        for p in peers {
            self.ctx.directory.set_fallback(p.node_id, p.addr.clone());
        }
    }

    fn reply(&self, res: Result<(), WalError>, what: &str) -> AdminReply {
        match res {
            Ok(()) => AdminReply {
                ok: true,
                message: format!("{what}: done"),
                not_leader: None,
            },
            Err(WalError::NotLeader { leader_hint }) => AdminReply {
                ok: false,
                message: format!("{what}: this node is not the leader; retry at the leader"),
                not_leader: Some(self.ctx.not_leader(leader_hint)),
            },
            Err(e) => AdminReply {
                ok: false,
                message: format!("{what}: {e}"),
                not_leader: None,
            },
        }
    }
}

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminService {
    async fn create_replica(
        &self,
        request: Request<CreateReplicaRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let req = request.into_inner();
        self.remember(&req.voters);
        self.remember(&req.peers);
        let voters: Vec<u64> = req.voters.iter().map(|p| p.node_id).collect();
        let res = self.ctx.wal.create_replica(req.shard, &voters);
        Ok(Response::new(self.reply(
            res,
            &format!("create replica of shard {}", req.shard),
        )))
    }

    async fn add_learner(
        &self,
        request: Request<ChangeReplicaRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let req = request.into_inner();
        let target = required_target(req.target)?;
        self.remember(std::slice::from_ref(&target));
        // The learner must exist as an empty replica before the leader sends
        // it appends; ask the target node to create it.
        if target.node_id != self.ctx.node_id && !target.addr.is_empty() {
            let mut peers = vec![Peer {
                node_id: self.ctx.node_id,
                addr: self.ctx.addr_of(self.ctx.node_id).unwrap_or_default(),
            }];
            if let Some(status) = self
                .ctx
                .wal
                .shard_states()
                .into_iter()
                .find(|s| s.shard == req.shard)
            {
                for n in status.voters.iter().chain(status.learners.iter()) {
                    if let Some(addr) = self.ctx.addr_of(*n) {
                        peers.push(Peer { node_id: *n, addr });
                    }
                }
            }
            let created = async {
                let mut client =
                    crate::auth::peer_admin_client(self.ctx.cluster_token.as_ref(), &target.addr)
                        .await?;
                let reply = client
                    .create_replica(CreateReplicaRequest {
                        shard: req.shard,
                        voters: vec![],
                        peers,
                    })
                    .await?
                    .into_inner();
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(reply)
            };
            match tokio::time::timeout(Duration::from_secs(5), created).await {
                Ok(Ok(r)) if r.ok => {}
                Ok(Ok(r)) => {
                    return Ok(Response::new(AdminReply {
                        ok: false,
                        message: format!(
                            "target node refused to create the replica: {}",
                            r.message
                        ),
                        not_leader: None,
                    }))
                }
                Ok(Err(e)) => {
                    return Ok(Response::new(AdminReply {
                        ok: false,
                        message: format!(
                            "cannot reach target node {} at {}: {e}; retry",
                            target.node_id, target.addr
                        ),
                        not_leader: None,
                    }))
                }
                Err(_) => {
                    return Ok(Response::new(AdminReply {
                        ok: false,
                        message: format!(
                            "target node {} did not answer in 5s; retry",
                            target.node_id
                        ),
                        not_leader: None,
                    }))
                }
            }
        }
        let res = self.ctx.wal.add_learner(req.shard, target.node_id).await;
        Ok(Response::new(self.reply(
            res,
            &format!("add learner {} to shard {}", target.node_id, req.shard),
        )))
    }

    async fn promote_learner(
        &self,
        request: Request<ChangeReplicaRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let req = request.into_inner();
        let target = required_target(req.target)?;
        let res = self
            .ctx
            .wal
            .promote_learner(req.shard, target.node_id)
            .await;
        Ok(Response::new(self.reply(
            res,
            &format!("promote learner {} of shard {}", target.node_id, req.shard),
        )))
    }

    async fn remove_replica(
        &self,
        request: Request<ChangeReplicaRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let req = request.into_inner();
        let target = required_target(req.target)?;
        let res = self.ctx.wal.remove_replica(req.shard, target.node_id).await;
        Ok(Response::new(self.reply(
            res,
            &format!("remove replica {} of shard {}", target.node_id, req.shard),
        )))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let req = request.into_inner();
        let res = self.ctx.wal.transfer_leader(req.shard, req.to_node).await;
        Ok(Response::new(self.reply(
            res,
            &format!(
                "transfer leadership of shard {} to {}",
                req.shard, req.to_node
            ),
        )))
    }

    async fn rebuild_replica(
        &self,
        request: Request<RebuildReplicaRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let shard = request.into_inner().shard;
        let res = self.ctx.wal.rebuild_replica(shard).await;
        Ok(Response::new(self.reply(
            res,
            &format!("rebuild shard {shard}'s replica from its leader's snapshot"),
        )))
    }

    async fn storage(
        &self,
        request: Request<StorageRequest>,
    ) -> Result<Response<AdminReply>, Status> {
        let req = request.into_inner();
        let Some(op) = req.op else {
            return Err(Status::invalid_argument("`op` is required"));
        };
        if let Err(e) = shardhouse_engine::ops::validate_op(&op) {
            return Err(Status::invalid_argument(e));
        }
        let what = format!("shard {}: {:?}", req.shard, op.op);
        let entry = wire::op_entry(op).encode_to_vec();
        let res = self.ctx.wal.propose(req.shard, entry).await.map(|_| ());
        if let Err(e @ WalError::Rejected(_)) = &res {
            return Err(status::to_tonic_status(e));
        }
        Ok(Response::new(self.reply(res, &what)))
    }

    async fn databases(
        &self,
        _request: Request<DatabasesRequest>,
    ) -> Result<Response<DatabasesReply>, Status> {
        let engine = Arc::clone(&self.ctx.engine);
        let databases = engine
            .databases()
            .into_iter()
            .map(|d| DatabaseInfo {
                name: d.name,
                retention_ns: d.retention_ns,
                shards: d.shards,
            })
            .collect();
        Ok(Response::new(DatabasesReply { databases }))
    }

    async fn shard_states(
        &self,
        _request: Request<ShardStatesRequest>,
    ) -> Result<Response<ShardStatesReply>, Status> {
        let shards = self
            .ctx
            .wal
            .shard_states()
            .into_iter()
            .map(|s| proto::ShardState {
                shard: s.shard,
                role: role_name(&s, self.ctx.node_id).to_owned(),
                term: s.term,
                leader_id: s.leader_id.unwrap_or(0),
                commit_index: s.commit_index,
                applied_index: s.applied_index,
                flushed_index: s.flushed_index,
                voters: s.voters,
                learners: s.learners,
                max_follower_lag: s.max_follower_lag,
                apply_stalled: s.apply_stalled.as_ref().map_or_else(String::new, |st| {
                    format!("index {}, {} attempts: {}", st.index, st.attempts, st.error)
                }),
                rebuilding: s
                    .rebuilding
                    .map_or_else(String::new, |r| r.as_str().to_owned()),
            })
            .collect();
        Ok(Response::new(ShardStatesReply {
            node_id: self.ctx.node_id,
            shards,
        }))
    }
}

/// `leader | follower | learner | candidate` as in the proto.
pub fn role_name(s: &ShardStatus, me: u64) -> &'static str {
    match s.role {
        Role::Leader => "leader",
        Role::Candidate | Role::PreCandidate => "candidate",
        Role::Follower if s.learners.contains(&me) => "learner",
        Role::Follower => "follower",
    }
}

/// Server wrappers with message limits sized for Arrow batches.
pub fn node_server(ctx: Arc<NodeContext>) -> proto::node_server::NodeServer<NodeService> {
    proto::node_server::NodeServer::new(NodeService::new(ctx))
        .max_decoding_message_size(MAX_CLIENT_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_CLIENT_MESSAGE_BYTES)
}

pub fn raft_server(ctx: Arc<NodeContext>) -> proto::raft_server::RaftServer<RaftService> {
    proto::raft_server::RaftServer::new(RaftService::new(ctx))
        .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES)
}

pub fn admin_server(ctx: Arc<NodeContext>) -> proto::admin_server::AdminServer<AdminService> {
    proto::admin_server::AdminServer::new(AdminService::new(ctx))
}

/// The peer an admin change acts on; every change names one.
fn required_target(target: Option<Peer>) -> Result<Peer, Status> {
    target.ok_or_else(|| Status::invalid_argument("target peer is required"))
}
