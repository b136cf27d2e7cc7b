//! Real parts for the router's end-to-end tests: etcd, `shardhouse-node`
//! processes (RocksDB WAL + chDB) and the `shardhouse-router` binary.
//!
//! Needs: `etcd` on the PATH, chDB at `$SHARDHOUSE_CHDB_DIR` (default
//! `.deps/chdb`), and the node binary (`cargo build --release -p
//! shardhouse-node`). Missing pieces fail the test with a clear message.
#![allow(dead_code)]

use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // kill -9: tests must not depend on graceful shutdown.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.name;
    }
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub fn chdb_dir() -> Result<PathBuf> {
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

pub fn node_binary() -> Result<PathBuf> {
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
pub fn spawn_ready(mut cmd: Command, name: &'static str, log: PathBuf) -> Result<(Proc, String)> {
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

pub fn field(line: &str, key: &str) -> Result<String> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_owned))
        .ok_or_else(|| anyhow!("READY line without {key}: {line}"))
}

pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
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

/// Starts etcd on free loopback ports and waits until it serves.
pub async fn start_etcd(dir: &Path) -> Result<(Proc, String)> {
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    let etcd_log = std::fs::File::create(dir.join("etcd.log"))?;
    let etcd = Command::new("etcd")
        .args([
            "--data-dir",
            dir.join("etcd").to_str().unwrap(),
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
    let proc = Proc {
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
    Ok((proc, etcd_url))
}

/// A node process that can be killed with SIGKILL and started again on
/// its data directory and ports.
pub struct Node {
    pub id: u64,
    pub proc: Option<Proc>,
    pub grpc: String,
    /// The node's HTTP listener (`/metrics`, `/health`).
    pub http: String,
    args: Vec<String>,
    dir: PathBuf,
    starts: u32,
}

impl Node {
    pub fn start(
        id: u64,
        dir: &Path,
        etcd_url: &str,
        cluster: &str,
        init: &str,
        extra: &[&str],
    ) -> Result<Node> {
        let chdb = chdb_dir()?;
        let (grpc, http) = (free_port()?, free_port()?);
        let mut args: Vec<String> = [
            "--node-id",
            &id.to_string(),
            "--data-dir",
            dir.join(format!("node-{id}")).to_str().unwrap(),
            "--grpc-listen",
            &format!("127.0.0.1:{grpc}"),
            "--http-listen",
            &format!("127.0.0.1:{http}"),
            "--etcd-endpoints",
            etcd_url,
            "--cluster",
            cluster,
            "--chdb-dir",
            chdb.to_str().unwrap(),
            "--init-cluster",
            init,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut n = Node {
            id,
            proc: None,
            grpc: format!("127.0.0.1:{grpc}"),
            http: format!("127.0.0.1:{http}"),
            args,
            dir: dir.to_path_buf(),
            starts: 0,
        };
        n.spawn()?;
        Ok(n)
    }

    fn spawn(&mut self) -> Result<()> {
        let mut cmd = Command::new(node_binary()?);
        cmd.args(&self.args);
        self.starts += 1;
        let log = self
            .dir
            .join(format!("node-{}.{}.log", self.id, self.starts));
        let (p, _) = spawn_ready(cmd, "shardhouse-node", log)?;
        self.proc = Some(p);
        Ok(())
    }

    /// SIGKILL (no shutdown, no final flush), then start again.
    pub fn kill9_and_restart(&mut self) -> Result<()> {
        self.proc.take();
        self.spawn()
    }
}

/// Starts the router binary; returns it and its HTTP base URL.
pub fn start_router(dir: &Path, etcd_url: &str, cluster: &str) -> Result<(Proc, String)> {
    let mut router = Command::new(env!("CARGO_BIN_EXE_shardhouse-router"));
    router.args([
        "--http-listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
        "--etcd-endpoints",
        etcd_url,
        "--cluster",
        cluster,
    ]);
    let (proc, ready) = spawn_ready(router, "shardhouse-router", dir.join("router.log"))?;
    Ok((proc, format!("http://{}", field(&ready, "http")?)))
}

/// xorshift64: deterministic test data from a printed seed (no extra
/// dependency).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Wall-clock now, Unix nanoseconds.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Waits until a write through the router at `base` commits (every shard
/// has a leader), writing into the database `warmup`.
pub async fn wait_writable(http: &reqwest::Client, base: &str) -> Result<()> {
    poll(
        "a committed warm-up write",
        Duration::from_secs(90),
        || async {
            let r = http
                .post(format!("{base}/write?db=warmup"))
                .body("w v=1 1\n")
                .send()
                .await?;
            Ok((r.status().as_u16() == 204).then_some(()))
        },
    )
    .await
}
