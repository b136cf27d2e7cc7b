//! One `shardhouse-node` process: it listens on ports it picks itself the
//! first time (reported on its READY line) and keeps them across restarts,
//! so peers and the shard map find it again; its data dir survives kill -9.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, Result};

use crate::process::{ready_field, spawn_ready, workspace_binary, Proc};

pub struct NodeProc {
    pub id: u64,
    proc: Option<Proc>,
    /// gRPC listen address (`127.0.0.1:<port>`).
    pub grpc: String,
    /// HTTP listen address (`/metrics`, `/health`).
    pub http: String,
    binary: PathBuf,
    args: Vec<String>,
    pub data_dir: PathBuf,
    /// SIGSTOPped (still alive, answering nothing).
    pub stopped: bool,
}

/// The flags every test node gets: identity, data dir, etcd, cluster name
/// and the chDB engine.
pub fn node_args(id: u64, data_dir: &Path, etcd: &str, cluster: &str) -> Result<Vec<String>> {
    Ok(vec![
        "--node-id".into(),
        id.to_string(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--etcd-endpoints".into(),
        etcd.into(),
        "--cluster".into(),
        cluster.into(),
        "--chdb-dir".into(),
        crate::dirs::chdb_dir()?.display().to_string(),
    ])
}

impl NodeProc {
    /// Starts `shardhouse-node` (found in `bin_dir`, see
    /// [`workspace_binary`]) with `args` plus the listen flags, and waits
    /// for its READY line. Its log is `<data_dir>/node.log`.
    pub fn start(
        id: u64,
        data_dir: &Path,
        args: Vec<String>,
        bin_dir: Option<&Path>,
    ) -> Result<NodeProc> {
        let mut n = NodeProc {
            id,
            proc: None,
            grpc: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            binary: workspace_binary("shardhouse-node", bin_dir)?,
            args,
            data_dir: data_dir.to_path_buf(),
            stopped: false,
        };
        n.spawn()?;
        Ok(n)
    }

    fn spawn(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.data_dir)?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(&self.args)
            .args(["--grpc-listen", &self.grpc, "--http-listen", &self.http])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            );
        let (proc, line) = spawn_ready(cmd, "shardhouse-node", self.data_dir.join("node.log"))
            .map_err(|e| anyhow!("node {}: {e}", self.id))?;
        self.grpc = ready_field(&line, "grpc")?;
        self.http = ready_field(&line, "http")?;
        self.proc = Some(proc);
        self.stopped = false;
        Ok(())
    }

    /// SIGKILL: no shutdown, no final flush.
    pub fn kill9(&mut self) {
        self.proc.take();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        self.proc
            .take()
            .ok_or_else(|| anyhow!("node {} not running", self.id))?
            .terminate()
    }

    /// kill -9 (when running), then starts again on the same data dir and
    /// ports.
    pub fn restart(&mut self) -> Result<()> {
        self.kill9();
        self.spawn()
    }

    /// Restarts with some flags replaced (or added).
    pub fn restart_with(&mut self, flags: &[(&str, &str)]) -> Result<()> {
        for (flag, value) in flags {
            match self.args.iter().position(|a| a == flag) {
                Some(i) => self.args[i + 1] = (*value).to_owned(),
                None => {
                    self.args.push((*flag).to_owned());
                    self.args.push((*value).to_owned());
                }
            }
        }
        self.restart()
    }

    pub fn sigstop(&mut self) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGSTOP);
            self.stopped = true;
        }
    }

    pub fn sigcont(&mut self) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGCONT);
            self.stopped = false;
        }
    }

    /// Alive and not stopped.
    pub fn running(&self) -> bool {
        self.proc.is_some() && !self.stopped
    }
}
