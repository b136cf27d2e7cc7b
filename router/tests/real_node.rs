//! End to end with real parts: a real etcd, a real `shardhouse-node`
//! process (RocksDB WAL + chDB) and the real `shardhouse-router` binary.
//! A partial write answers 400 naming the bad line, and the good points are
//! readable through the router's `/api/v1/sql`.
//!
//! Needs: `etcd` on the PATH, chDB at `$SHARDHOUSE_CHDB_DIR` (default
//! `.deps/chdb`), and the node binary (`cargo build --release -p
//! shardhouse-node`). Missing pieces fail the test with a clear message.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Proc {
    child: Child,
    name: &'static str,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // kill -9: tests must not depend on graceful shutdown.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.name;
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn chdb_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("SHARDHOUSE_CHDB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.deps/chdb")));
    if !dir.join("chdb/_chdb.abi3.so").exists() {
        bail!(
            "chDB engine not found at {} (chdb/_chdb.abi3.so): run `make deps` or set SHARDHOUSE_CHDB_DIR",
            dir.display()
        );
    }
    Ok(dir)
}

fn node_binary() -> Result<PathBuf> {
    let router = PathBuf::from(env!("CARGO_BIN_EXE_shardhouse-router"));
    let p = router
        .parent()
        .ok_or_else(|| anyhow!("router binary has no parent dir"))?
        .join("shardhouse-node");
    if !p.exists() {
        bail!(
            "node binary not found at {}: build it first with `cargo build --release -p shardhouse-node`",
            p.display()
        );
    }
    Ok(p)
}

/// Spawns `cmd` and waits for its READY line (stdout), returning its fields.
fn spawn_ready(mut cmd: Command, name: &'static str, log: PathBuf) -> Result<(Proc, String)> {
    let log_file = std::fs::File::create(&log)?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .with_context(|| format!("spawning {name}"))?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("READY ") {
                let _ = tx.send(line);
            }
        }
    });
    let proc = Proc { child, name };
    let line = rx.recv_timeout(Duration::from_secs(90)).map_err(|_| {
        anyhow!(
            "{name} printed no READY line within 90s; see {}",
            log.display()
        )
    })?;
    Ok((proc, line))
}

fn field(line: &str, key: &str) -> Result<String> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_owned))
        .ok_or_else(|| anyhow!("READY line without {key}: {line}"))
}

async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if start.elapsed() > timeout {
            bail!("{what} not reached within {timeout:?}; last error: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_write_through_real_node_is_readable_via_sql() -> Result<()> {
    let chdb = chdb_dir()?;
    let node_bin = node_binary()?;
    let dir = tempfile::tempdir()?;

    // etcd on free loopback ports.
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    let etcd_log = std::fs::File::create(dir.path().join("etcd.log"))?;
    let etcd = Command::new("etcd")
        .args([
            "--data-dir",
            dir.path().join("etcd").to_str().unwrap(),
            "--listen-client-urls",
            &etcd_url,
            "--advertise-client-urls",
            &etcd_url,
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::from(etcd_log))
        .spawn()
        .context("etcd is not installed (apt-get install etcd-server, or `make deps`)")?;
    let _etcd = Proc {
        child: etcd,
        name: "etcd",
    };
    poll("etcd serving", Duration::from_secs(20), || {
        let url = etcd_url.clone();
        async move {
            let mut c = etcd_client::Client::connect([url], None).await?;
            c.get("probe", None).await?;
            Ok(Some(()))
        }
    })
    .await?;

    let cluster = "itest";
    let mut node = Command::new(node_bin);
    node.args([
        "--node-id",
        "1",
        "--data-dir",
        dir.path().join("node-1").to_str().unwrap(),
        "--grpc-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--etcd-endpoints",
        &etcd_url,
        "--cluster",
        cluster,
        "--chdb-dir",
        chdb.to_str().unwrap(),
        "--init-cluster",
        "shards=2,rf=1,nodes=1",
    ]);
    let (_node, _) = spawn_ready(node, "shardhouse-node", dir.path().join("node.log"))?;

    let mut router = Command::new(env!("CARGO_BIN_EXE_shardhouse-router"));
    router.args([
        "--http-listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
        "--etcd-endpoints",
        &etcd_url,
        "--cluster",
        cluster,
    ]);
    let (_router, ready) = spawn_ready(router, "shardhouse-router", dir.path().join("router.log"))?;
    let base = format!("http://{}", field(&ready, "http")?);
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
    assert!(rows.iter().all(|r| r.get("shard").is_some()));
    Ok(())
}
