//! End to end with real parts: a real etcd, a real `shardhouse-node`
//! process (RocksDB WAL + chDB) and the real `shardhouse-router` binary.
//! A partial write answers 400 naming the bad line, and the good points are
//! readable through the router's `/api/v1/sql`.
//!
//! Needs: `etcd` on the PATH, chDB at `$SHARDHOUSE_CHDB_DIR` (default
//! `.deps/chdb`), and the node binary (`cargo build --release -p
//! shardhouse-node`). Missing pieces fail the test with a clear message.

mod support;

use anyhow::{bail, Result};
use std::time::Duration;
use support::{poll, start_etcd, start_router, Node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_write_through_real_node_is_readable_via_sql() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (_etcd, etcd_url) = start_etcd(dir.path()).await?;
    let cluster = "itest";
    let _node = Node::start(
        1,
        dir.path(),
        &etcd_url,
        cluster,
        "shards=2,rf=1,nodes=1",
        &[],
    )?;
    let (_router, base) = start_router(dir.path(), &etcd_url, cluster)?;
    let http = reqwest::Client::new();

    // Wait until writes commit (shard map known, shard leaders elected).
    poll("a committed warm-up write", Duration::from_secs(60), || {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .post(format!("{base}/write?db=itest"))
                .body("warmup,host=w v=1 1\n")
                .send()
                .await?;
            Ok((r.status() == 204).then_some(()))
        }
    })
    .await?;

    let body = "cpu,host=a usage=1.5 1000000000\n\
                cpu,host=b usage=bad 1000000000\n\
                cpu,host=c usage=2.5 2000000000\n\
                cpu,host=d usage=3.5 3000000000\n";
    let r = http
        .post(format!("{base}/write?db=itest"))
        .body(body)
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = serde_json::from_str(&r.text().await?)?;
    let msg = v["message"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("line 2"), "{msg}");

    // The three good points are readable (flushes are asynchronous: poll).
    let rows = poll(
        "3 cpu rows readable via /api/v1/sql",
        Duration::from_secs(60),
        || {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let r = http
                    .get(format!("{base}/api/v1/sql"))
                    .query(&[
                        ("q", "SELECT series_id, usage FROM cpu FINAL"),
                        ("db", "itest"),
                    ])
                    .send()
                    .await?;
                if r.status() != 200 {
                    bail!("sql answered {}: {}", r.status(), r.text().await?);
                }
                let rows: Vec<serde_json::Value> = serde_json::from_str(&r.text().await?)?;
                Ok((rows.len() == 3).then_some(rows))
            }
        },
    )
    .await?;
    let mut usages: Vec<f64> = rows.iter().map(|r| r["usage"].as_f64().unwrap()).collect();
    usages.sort_by(f64::total_cmp);
    assert_eq!(usages, vec![1.5, 2.5, 3.5]);
    // One merged answer across shards: no per-shard `shard` column unless
    // `per_shard=true` asks for it.
    assert!(rows.iter().all(|r| r.get("shard").is_none()));
    Ok(())
}
