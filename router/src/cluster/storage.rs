//! Databases, retention and deletes on the cluster: a storage operation
//! (`storage_op` builds them) proposed to every shard's log, and the
//! databases every node holds (docs/api.md, "Databases, retention and
//! deletes"; the endpoints are `http::admin`).
//!
//! An operation is idempotent on a shard, so a request that failed on some
//! shards is simply sent again; until then the shards that applied it and
//! the ones that did not differ, and the answer (503) says which failed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shardhouse_common::proto::admin_client::AdminClient;
use shardhouse_common::proto::{DatabasesRequest, StorageOp, StorageRequest};

use super::Cluster;
use crate::error::{Error, Result};

/// How long one admin request may take across every shard.
const ADMIN_DEADLINE: Duration = Duration::from_secs(30);

impl Cluster {
    /// Proposes `op` to every shard's leader; Ok once every shard applied it.
    pub async fn storage_all(&self, op: &StorageOp) -> Result<()> {
        let map = self.shard_map()?;
        let deadline = Instant::now() + ADMIN_DEADLINE;
        let futs = (0..map.shard_count).map(|shard| {
            let map = map.clone();
            async move {
                let mut target = self.first_target(&map, shard)?;
                let mut last = String::new();
                while Instant::now() < deadline {
                    let mut client = AdminClient::new(self.channel(&target.1)?);
                    let mut req = tonic::Request::new(StorageRequest {
                        shard,
                        op: Some(op.clone()),
                    });
                    req.set_timeout(deadline.saturating_duration_since(Instant::now()));
                    match client.storage(req).await {
                        Ok(r) => {
                            let r = r.into_inner();
                            if r.ok {
                                return Ok(());
                            }
                            last = r.message;
                            match r.not_leader {
                                Some(nl) if !nl.leader_addr.is_empty() => {
                                    target = (nl.leader_hint, nl.leader_addr);
                                    continue;
                                }
                                _ => {
                                    target = self
                                        .next_replica(&map, shard, target.0)
                                        .unwrap_or(target)
                                }
                            }
                        }
                        Err(s) if s.code() == tonic::Code::InvalidArgument => {
                            return Err(Error::BadRequest(s.message().to_owned()))
                        }
                        Err(s) => {
                            last = format!("node {}: {}", target.0, s.message());
                            target = self.next_replica(&map, shard, target.0).unwrap_or(target);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(Error::Unavailable {
                    shard,
                    reason: format!(
                        "the storage operation was not applied on this shard (the others may have it; sending the request again is safe); last: {last}"
                    ),
                })
            }
        });
        futures::future::join_all(futs)
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    }

    /// The databases every node holds, merged.
    pub async fn databases_all(&self) -> Result<Vec<DatabaseView>> {
        let map = self.shard_map()?;
        let mut by_name: BTreeMap<String, DatabaseView> = BTreeMap::new();
        let nodes: Vec<(u64, String)> = map
            .nodes
            .iter()
            .map(|(id, n)| (*id, n.grpc_addr.clone()))
            .collect();
        for (id, addr) in nodes {
            let mut client = AdminClient::new(self.channel(&addr)?);
            let mut req = tonic::Request::new(DatabasesRequest {});
            req.set_timeout(Duration::from_secs(5));
            let reply = client
                .databases(req)
                .await
                .map_err(|s| Error::Unavailable {
                    shard: 0,
                    reason: format!(
                        "node {id} at {addr} did not list its databases: {}",
                        s.message()
                    ),
                })?;
            for d in reply.into_inner().databases {
                let v = by_name
                    .entry(d.name.clone())
                    .or_insert_with(|| DatabaseView {
                        name: d.name.clone(),
                        retention_ns: d.retention_ns,
                        shards: Vec::new(),
                    });
                v.retention_ns = v.retention_ns.max(d.retention_ns);
                v.shards.extend(d.shards);
            }
        }
        Ok(by_name
            .into_values()
            .map(|mut v| {
                v.shards.sort_unstable();
                v.shards.dedup();
                v
            })
            .collect())
    }
}

/// One database across the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseView {
    pub name: String,
    pub retention_ns: i64,
    pub shards: Vec<u32>,
}
