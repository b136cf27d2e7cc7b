//! `shardhouse-node` binary: parse options, run the node, exit on
//! SIGTERM/SIGINT after flushing.

use clap::Parser;
use shardhouse_node::{server, Cli, NodeOptions};
use std::io::{IsTerminal, Write};

// jemalloc rather than glibc malloc: apply threads allocate the columns that
// flush threads free, and glibc's arenas fragmented under that pattern
// (_int_malloc was ~6% of the node's CPU at RF=3; see docs/benchmarks.md).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[allow(clippy::print_stdout)]
fn print_ready(l: &server::Listening) {
    // Exactly one line on stdout: tests and scripts wait for it.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "READY shardhouse-node node_id={} grpc={} http={}",
        l.node_id, l.grpc, l.http
    );
    let _ = out.flush();
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

fn main() -> anyhow::Result<()> {
    // Before any other thread exists: the engine's zone is UTC whatever
    // the machine's (see shardhouse_engine::pin_utc).
    shardhouse_engine::pin_utc();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let opts = NodeOptions::load(Cli::parse())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.effective_cores().max(2) as usize)
        .enable_all()
        .build()?;
    runtime.block_on(server::run(opts, print_ready, shutdown_signal()))?;
    Ok(())
}
