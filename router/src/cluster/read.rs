//! Reads: a statement (or a catalog request) on one replica of a shard,
//! the leader first and the others on failure, waiting out an election.

use std::time::Duration;

use shardhouse_common::proto::QueryRequest;
use shardhouse_common::status::Missing;
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// What a shard's engine said of the tables a planned statement read
/// (node/engine/src/change_marks.rs): an InfluxQL cache of settled buckets
/// reuses them while this reads the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardMark {
    /// The shard has no such table: it answered no rows.
    NoTable,
    /// The answering engine's epoch and mark.
    Seen { epoch: u64, mark: u64 },
    /// The node sent none (an older node): nothing may be cached.
    Unknown,
}

impl ShardMark {
    /// Whether an answer with this mark may be cached.
    pub fn is_known(&self) -> bool {
        !matches!(self, ShardMark::Unknown)
    }
}

/// The request for one SQL statement on `shard`.
fn statement(database: &str, shard: u32, sql: &str, planned: bool) -> QueryRequest {
    QueryRequest {
        shard,
        sql: sql.to_owned(),
        database: database.to_owned(),
        planned,
        ..Default::default()
    }
}

impl Cluster {
    /// Runs the user's `sql` on one replica of every shard (leader
    /// preferred) and returns each shard's Arrow IPC result.
    pub async fn query_all(
        &self,
        database: &str,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        self.read_all(database, sql, false, deadline).await
    }

    /// [`Cluster::query_all`] for a statement the router planned itself
    /// (InfluxQL): the nodes check it on its tokens, which is cheaper than
    /// the engine parse user SQL gets.
    pub async fn planned_all(
        &self,
        database: &str,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        self.read_all(database, sql, true, deadline).await
    }

    /// The field catalog of `database` (of `table` only, if given) on one
    /// replica of every shard: Arrow rows (table, name, type) as
    /// `system.columns` gives them, answered without an engine statement.
    pub async fn catalog_all(
        &self,
        database: &str,
        table: Option<&str>,
        deadline: Instant,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        self.on_every_shard(deadline, |shard| QueryRequest {
            shard,
            database: database.to_owned(),
            catalog: true,
            catalog_table: table.unwrap_or_default().to_owned(),
            ..Default::default()
        })
        .await
    }

    async fn read_all(
        &self,
        database: &str,
        sql: &str,
        planned: bool,
        deadline: Instant,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        self.on_every_shard(deadline, |shard| statement(database, shard, sql, planned))
            .await
    }

    /// `request(shard)` on one replica of every shard, concurrently.
    async fn on_every_shard(
        &self,
        deadline: Instant,
        request: impl Fn(u32) -> QueryRequest,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        let map = self.shard_map()?;
        let futs = (0..map.shard_count).map(|shard| {
            let req = request(shard);
            async move { Ok((shard, self.on_a_replica(req, deadline).await?)) }
        });
        futures::future::join_all(futs).await.into_iter().collect()
    }

    /// Runs the user's `sql` on one replica of `shard` (leader first, the
    /// others on failure). Empty bytes: the shard has no such database or
    /// table yet.
    pub async fn query_shard(
        &self,
        database: &str,
        shard: u32,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<u8>> {
        self.read_shard(database, shard, sql, false, deadline).await
    }

    /// [`Cluster::query_shard`] for a statement the router planned itself.
    pub async fn planned_shard(
        &self,
        database: &str,
        shard: u32,
        sql: &str,
        deadline: Instant,
    ) -> Result<Vec<u8>> {
        self.read_shard(database, shard, sql, true, deadline).await
    }

    /// [`Cluster::planned_shard`], with the shard's change mark of the
    /// tables the statement read.
    pub async fn planned_shard_marked(
        &self,
        database: &str,
        shard: u32,
        sql: &str,
        deadline: Instant,
    ) -> Result<(Vec<u8>, ShardMark)> {
        self.planned_shard_rollup(database, shard, sql, None, deadline)
            .await
    }

    /// [`Cluster::planned_shard_marked`] with the statement's equal over
    /// the rollups of one fact table, `rollup` = (table, SQL): the node
    /// runs it instead where those rollups are exact.
    pub async fn planned_shard_rollup(
        &self,
        database: &str,
        shard: u32,
        sql: &str,
        rollup: Option<(&str, &str)>,
        deadline: Instant,
    ) -> Result<(Vec<u8>, ShardMark)> {
        let mut req = statement(database, shard, sql, true);
        if let Some((table, rolled)) = rollup {
            req.rollup_table = table.to_owned();
            req.rollup_sql = rolled.to_owned();
        }
        self.on_a_replica_marked(req, deadline).await
    }

    async fn read_shard(
        &self,
        database: &str,
        shard: u32,
        sql: &str,
        planned: bool,
        deadline: Instant,
    ) -> Result<Vec<u8>> {
        self.on_a_replica(statement(database, shard, sql, planned), deadline)
            .await
    }

    /// Sends `req` to one replica of its shard (leader first, the others on
    /// failure) and returns the Arrow IPC answer.
    async fn on_a_replica(&self, req: QueryRequest, deadline: Instant) -> Result<Vec<u8>> {
        Ok(self.on_a_replica_marked(req, deadline).await?.0)
    }

    /// [`Cluster::on_a_replica`], with the answer's change mark.
    async fn on_a_replica_marked(
        &self,
        req: QueryRequest,
        deadline: Instant,
    ) -> Result<(Vec<u8>, ShardMark)> {
        let shard = req.shard;
        let map = self.shard_map()?;
        let mut target = self.first_target(&map, shard)?;
        let replicas = map.shard(shard).map_or(1, |p| p.replicas.len().max(1));
        // Every replica, in up to READ_ROUNDS rounds with a growing pause
        // between them: a shard electing a leader (no replica can confirm
        // a read index) answers after the election instead of a 503.
        const READ_ROUNDS: usize = 5;
        let mut last = String::new();
        for attempt in 0..replicas * READ_ROUNDS {
            if attempt > 0 && attempt % replicas == 0 {
                let pause = Duration::from_millis(100 << (attempt / replicas - 1));
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(pause.min(left)).await;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let mut call = tonic::Request::new(req.clone());
            call.set_timeout(deadline - now);
            let s = match self.node_client(&target.1)?.query(call).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let mark = match r.engine_epoch {
                        0 => ShardMark::Unknown,
                        epoch => ShardMark::Seen {
                            epoch,
                            mark: r.change_mark,
                        },
                    };
                    return Ok((r.result_ipc, mark));
                }
                Err(s) => s,
            };
            match (Missing::of(&s), s.code()) {
                // A shard that has not received a point of this
                // measurement yet has no database or table: it
                // contributes no rows (empty bytes), not an error.
                (Some(Missing::Table), _) => return Ok((Vec::new(), ShardMark::NoTable)),
                (Some(Missing::Column), _) => {
                    return Err(Error::UnknownColumn {
                        shard,
                        reason: s.message().to_owned(),
                    })
                }
                (None, tonic::Code::InvalidArgument) => {
                    return Err(Error::BadRequest(format!("shard {shard}: {}", s.message())))
                }
                // Another replica may answer (this node holds none, is
                // not ready, or is out of reach).
                (None, _) => {
                    last = format!("node {}: {}", target.0, s.message());
                    target = self.next_replica(&map, shard, target.0).unwrap_or(target);
                }
            }
        }
        Err(Error::Unavailable {
            shard,
            reason: format!("query failed on every replica; last: {last}"),
        })
    }
}
