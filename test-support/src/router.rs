//! One `shardhouse-router` process on ports it picks itself.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::process::{ready_field, spawn_ready, workspace_binary, Proc};

pub struct RouterProc {
    proc: Option<Proc>,
    /// HTTP listen address (`127.0.0.1:<port>`).
    pub http: String,
    /// gRPC listen address.
    pub grpc: String,
}

impl RouterProc {
    /// Starts the router against `etcd` for `cluster`, with `extra` flags;
    /// its log is `<dir>/<log_name>`.
    pub fn start(
        dir: &Path,
        log_name: &str,
        etcd: &str,
        cluster: &str,
        extra: &[String],
        bin_dir: Option<&Path>,
    ) -> Result<RouterProc> {
        let mut cmd = Command::new(workspace_binary("shardhouse-router", bin_dir)?);
        cmd.args([
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .args(["--etcd-endpoints", etcd, "--cluster", cluster])
        .args(extra);
        let (proc, ready) = spawn_ready(cmd, "shardhouse-router", dir.join(log_name))?;
        Ok(RouterProc {
            http: ready_field(&ready, "http")?,
            grpc: ready_field(&ready, "grpc")?,
            proc: Some(proc),
        })
    }

    /// The HTTP base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        self.proc.take();
    }

    /// Takes the process (it dies when the caller drops it).
    pub fn into_proc(mut self) -> Proc {
        self.proc.take().expect("router running")
    }
}
