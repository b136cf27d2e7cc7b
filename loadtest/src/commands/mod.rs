//! The binary's subcommands, one module per family, and what they share:
//! the target and load arguments, the report header and output helpers.

pub mod chaos;
pub mod closed;
pub mod open;

use anyhow::{bail, Context, Result};
use clap::Args;
use shardhouse_loadtest::dataset::{DatasetKind, Generator};
use shardhouse_loadtest::encode::{self, Paths, Protocol};
use shardhouse_loadtest::report::{Budget, RunReport, RAMP_BUDGET};
use shardhouse_loadtest::resources::{parse_pid_arg, ResourceSpec};
use shardhouse_loadtest::runner::Pool;
use shardhouse_loadtest::target::{Target, TargetOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Clone)]
pub struct TargetArgs {
    /// HTTP base URL of the server under test.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    pub url: String,
    /// gRPC URL (gRPC protocols only).
    #[arg(long, default_value = "http://127.0.0.1:8087")]
    pub grpc_url: String,
    #[arg(long, env = "SHARDHOUSE_TOKEN")]
    pub auth_token: Option<String>,
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Database (InfluxDB `db`).
    #[arg(long, default_value = "shardhouse")]
    pub db: String,
    /// Path (and query) for line protocol writes; QuestDB: `/write`.
    #[arg(long)]
    pub line_path: Option<String>,
}

impl TargetArgs {
    pub fn paths(&self) -> Paths {
        Paths {
            line: self
                .line_path
                .clone()
                .unwrap_or_else(|| format!("/write?db={}", self.db)),
            msgpack: format!("/api/v1/write/msgpack?db={}", self.db),
            prom: format!("/api/v1/prom/write?db={}", self.db),
            database: self.db.clone(),
        }
    }

    pub async fn connect(&self, max_connections: usize, grpc: bool) -> Result<Target> {
        Ok(Target::connect(&TargetOptions {
            url: self.url.clone(),
            grpc_url: grpc.then(|| self.grpc_url.clone()),
            timeout: Duration::from_millis(self.timeout_ms),
            auth_token: self.auth_token.clone(),
            max_connections,
        })
        .await?)
    }
}

#[derive(Args, Clone)]
pub struct LoadArgs {
    /// line, msgpack, prom, grpc-unary
    #[arg(long, default_value = "line")]
    pub protocol: String,
    /// low, 100k or 1m
    #[arg(long, default_value = "low")]
    pub dataset: String,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Points per request.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Distinct pre-encoded requests cycled through.
    #[arg(long, default_value_t = 64)]
    pub pool: usize,
    /// Seconds per step.
    #[arg(long, default_value_t = 10.0)]
    pub step_secs: f64,
    /// Directory of <component>.pid files to sample CPU and RSS from.
    #[arg(long)]
    pub pid_dir: Option<PathBuf>,
    /// Extra component to sample, name=pid (repeatable).
    #[arg(long)]
    pub pid: Vec<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Name of the run in the report (e.g. rf3, questdb).
    #[arg(long, default_value = "run")]
    pub name: String,
}

impl LoadArgs {
    pub fn resources(&self) -> Result<ResourceSpec> {
        Ok(ResourceSpec {
            pid_dir: self.pid_dir.clone(),
            pids: self
                .pid
                .iter()
                .map(|p| parse_pid_arg(p))
                .collect::<Result<_, _>>()?,
        })
    }

    pub fn pool(&self, paths: &Paths) -> Result<(Arc<Pool>, Protocol, DatasetKind)> {
        let protocol: Protocol = self.protocol.parse()?;
        let kind: DatasetKind = self.dataset.parse()?;
        if protocol == Protocol::GrpcStream {
            bail!(
                "grpc-stream has no per-request answer; use it in `protocols`, or grpc-unary here"
            );
        }
        let mut g = Generator::new(kind, self.seed, base_ns());
        let reqs = (0..self.pool.max(1))
            .map(|_| encode::prepare(protocol, &g.batch(self.batch.max(1)), paths))
            .collect();
        Ok((Pool::new(reqs), protocol, kind))
    }
}

pub fn base_ns() -> i64 {
    // Whole seconds so every timestamp precision keeps the points apart.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    now * 1_000_000_000
}

pub fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

pub fn write_json(path: &Option<PathBuf>, v: &impl serde::Serialize) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(p, serde_json::to_vec_pretty(v)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

pub fn new_report(
    name: &str,
    mode: &str,
    target: &str,
    protocol: &str,
    dataset: &str,
    seed: u64,
) -> RunReport {
    new_report_with(name, mode, target, protocol, dataset, seed, RAMP_BUDGET)
}

pub fn new_report_with(
    name: &str,
    mode: &str,
    target: &str,
    protocol: &str,
    dataset: &str,
    seed: u64,
    budget: Budget,
) -> RunReport {
    RunReport {
        name: name.into(),
        mode: mode.into(),
        target: target.into(),
        protocol: protocol.into(),
        dataset: dataset.into(),
        seed,
        budget,
        steps: vec![],
        sustainable_points_per_sec: 0.0,
        sustainable_requests_per_sec: 0.0,
        peak_points_per_sec: 0.0,
        notes: vec![],
    }
}
