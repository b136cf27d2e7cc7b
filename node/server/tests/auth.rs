//! The cluster credential on real node processes: without it every node
//! service answers UNAUTHENTICATED naming what is missing; with it, peers
//! elect leaders and replicate (their Raft traffic presents it too).

use anyhow::{ensure, Context, Result};
use shardhouse_common::credential::{with_credential, ClusterToken, CredentialChannel};
use shardhouse_common::proto::admin_client::AdminClient;
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::proto::raft_client::RaftClient;
use shardhouse_common::proto::{
    write_response::Result as WriteResult, QueryRequest, RaftBatch, ShardStatesRequest,
    WriteRequest,
};
use shardhouse_test_support::arrow::{decode_ipc, points_ipc, scalar_u64};
use shardhouse_test_support::node_client::TEST_DATABASE;
use shardhouse_test_support::LocalCluster;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

const TOKEN: &str = "test-cluster-token-0123456789";

async fn channel(addr: &str) -> Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .connect()
        .await?)
}

async fn authed(addr: &str, token: &str) -> Result<CredentialChannel> {
    let t = ClusterToken::new(token, "test")?;
    Ok(with_credential(channel(addr).await?, Some(&t)))
}

fn assert_unauthenticated<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, tonic::Status>,
    says: &str,
) -> Result<()> {
    let status = match r {
        Ok(v) => anyhow::bail!("{what} was served without the credential: {v:?}"),
        Err(s) => s,
    };
    ensure!(
        status.code() == tonic::Code::Unauthenticated,
        "{what}: want UNAUTHENTICATED, got {status:?}"
    );
    ensure!(
        status.message().contains(says),
        "{what}: the message should say {says:?}: {}",
        status.message()
    );
    Ok(())
}

/// shard -> leader, asked with the credential.
async fn leaders(c: &LocalCluster) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for (id, addr) in c.live_addrs() {
        let Ok(ch) = authed(&addr, TOKEN).await else {
            continue;
        };
        if let Ok(r) = AdminClient::new(ch)
            .shard_states(ShardStatesRequest {})
            .await
        {
            for s in r.into_inner().shards {
                if s.role == "leader" {
                    out.insert(s.shard, id);
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_grpc_requires_the_cluster_credential() -> Result<()> {
    let started = Instant::now();
    let secrets = tempfile::tempdir()?;
    let token_file = secrets.path().join("cluster-token");
    std::fs::write(&token_file, format!("{TOKEN}\n"))?;
    let cluster = LocalCluster::builder("auth")
        .nodes(2)
        .shards(2)
        .rf(2)
        .node_args(&["--cluster-token-file", &token_file.display().to_string()])
        .start()?;
    let addr = cluster.nodes[0].grpc.clone();

    // No credential: every service refuses, naming the metadata to send.
    let plain = channel(&addr).await?;
    let missing = "x-shardhouse-cluster-token";
    assert_unauthenticated(
        "Admin.ShardStates",
        AdminClient::new(plain.clone())
            .shard_states(ShardStatesRequest {})
            .await,
        missing,
    )?;
    let write = WriteRequest {
        shard: 0,
        measurement: "m".into(),
        points_ipc: points_ipc(&[1]).into(),
        database: TEST_DATABASE.into(),
        ..Default::default()
    };
    assert_unauthenticated(
        "Node.Write",
        NodeClient::new(plain.clone()).write(write.clone()).await,
        missing,
    )?;
    assert_unauthenticated(
        "Node.Query",
        NodeClient::new(plain.clone())
            .query(QueryRequest {
                shard: 0,
                sql: "SELECT 1".into(),
                database: TEST_DATABASE.into(),
                ..Default::default()
            })
            .await,
        missing,
    )?;
    assert_unauthenticated(
        "Raft.Send",
        RaftClient::new(plain.clone())
            .send(tokio_stream::iter(vec![RaftBatch::default()]))
            .await,
        missing,
    )?;
    // A wrong credential is refused the same way, saying it does not match.
    assert_unauthenticated(
        "Admin.ShardStates with a wrong token",
        AdminClient::new(authed(&addr, "some-other-token-0123456789").await?)
            .shard_states(ShardStatesRequest {})
            .await,
        "does not match",
    )?;

    // With it: the nodes elected leaders (votes went over credentialed Raft
    // streams), and a write commits on both replicas.
    let deadline = Instant::now() + Duration::from_secs(60);
    let leader_map = loop {
        let l = leaders(&cluster).await;
        if l.len() == 2 {
            break l;
        }
        ensure!(
            Instant::now() < deadline,
            "shards without a leader after 60 s: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let leader = leader_map[&0];
    let leader_addr = cluster
        .nodes
        .iter()
        .find(|n| n.id == leader)
        .context("leader node")?
        .grpc
        .clone();
    let values: Vec<i64> = (1..=50).collect();
    let reply = NodeClient::new(authed(&leader_addr, TOKEN).await?)
        .write(WriteRequest {
            points_ipc: points_ipc(&values).into(),
            ..write
        })
        .await?
        .into_inner();
    ensure!(
        matches!(reply.result, Some(WriteResult::Committed(_))),
        "write with the credential: {reply:?}"
    );
    for node in &cluster.nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = NodeClient::new(authed(&node.grpc, TOKEN).await?)
                .query(QueryRequest {
                    shard: 0,
                    sql: "SELECT count() FROM m FINAL".into(),
                    database: TEST_DATABASE.into(),
                    ..Default::default()
                })
                .await;
            let n = match r {
                Ok(r) => count(&r.into_inner().result_ipc),
                Err(s) if s.code() == tonic::Code::Unauthenticated => {
                    anyhow::bail!("node {} refused the credential: {s:?}", node.id)
                }
                Err(_) => 0,
            };
            if n == 50 {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "node {} holds {n} of 50 points after 30 s",
                node.id
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!("credential test took {:?}", started.elapsed());
    Ok(())
}

fn count(ipc: &[u8]) -> u64 {
    if ipc.is_empty() {
        return 0;
    }
    scalar_u64(&decode_ipc(ipc))
}
