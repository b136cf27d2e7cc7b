//! `shardhouse-loadtest`: see `shardhouse-loadtest --help` and
//! docs/benchmarks.md for the methodology. The subcommands live in
//! `commands/` (this binary's own modules, not the library's).

mod commands;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use commands::{chaos, closed, open};
use shardhouse_loadtest::dataset::{DatasetKind, Generator};
use shardhouse_loadtest::encode::{self, Paths, Protocol};
use shardhouse_loadtest::sink;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "shardhouse-loadtest",
    version,
    about = "Open/closed-model load generator for Shardhouse and any InfluxDB line protocol server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open model: step over offered request rates (constant arrival rate).
    Ramp(open::RampArgs),
    /// Closed model: N virtual users per step, for contrast.
    Closed(closed::ClosedArgs),
    /// Every protocol at several batch sizes, fixed work, 5 workers.
    Protocols(closed::ProtocolArgs),
    /// Requests of 1-10 points: an open-model ramp of request rates
    /// (--rates), or hundreds of closed-loop clients (--clients).
    SmallWrites(open::SmallArgs),
    /// Steady open-model load recording every acknowledged point (chaos).
    AckLoad(chaos::AckLoadArgs),
    /// Check that every point in an ack log is stored exactly once.
    Verify(chaos::VerifyArgs),
    /// Figures from a finished run: latency in time windows, RSS slopes.
    Analyze(shardhouse_loadtest::analyze::AnalyzeArgs),
    /// Write one pre-encoded request body to a file (for k6 and curl).
    Payload {
        #[arg(long, default_value = "low")]
        dataset: String,
        #[arg(long, default_value = "line")]
        protocol: String,
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// A tiny HTTP sink for developing the load generator without a cluster.
    Sink {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Cli::parse().cmd {
        Cmd::Ramp(a) => open::ramp(a).await,
        Cmd::Closed(a) => closed::closed(a).await,
        Cmd::Protocols(a) => closed::protocols(a).await,
        Cmd::SmallWrites(a) => open::small_writes(a).await,
        Cmd::AckLoad(a) => chaos::ack_load(a).await,
        Cmd::Verify(a) => chaos::verify(a).await,
        Cmd::Analyze(a) => Ok(shardhouse_loadtest::analyze::run(a)?),
        Cmd::Payload {
            dataset,
            protocol,
            batch,
            seed,
            out: path,
        } => {
            let kind: DatasetKind = dataset.parse()?;
            let protocol: Protocol = protocol.parse()?;
            let pts = Generator::new(kind, seed, commands::base_ns()).batch(batch.max(1));
            match encode::prepare(protocol, &pts, &Paths::default()).body {
                encode::Body::Http { body, .. } => std::fs::write(&path, &body)
                    .with_context(|| format!("writing {}", path.display()))?,
                encode::Body::Grpc(_) => bail!("payload files are for HTTP protocols"),
            }
            Ok(())
        }
        Cmd::Sink { listen } => {
            let (addr, h) = sink::serve(&listen, Arc::default()).await?;
            commands::out(&format!("READY shardhouse-loadtest-sink http={addr}"));
            h.await?;
            Ok(())
        }
    }
}
