//! `shardhouse-router`: flags/env/config as in docs/contracts.md; prints the
//! READY line once both listeners serve.

use anyhow::Context;
use clap::Parser;
use shardhouse_common::credential::ClusterToken;
use shardhouse_router::cluster::{watch_shard_map, Cluster};
use shardhouse_router::config::{Flags, RouterOptions};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

// jemalloc rather than glibc malloc: glibc's allocator paths were ~20% of the
// router's CPU under load (request bodies, column builders and IPC buffers of
// every size allocated on one worker and freed on another).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = RouterOptions::load(Flags::parse()).context("loading router options")?;
    let cluster = Arc::new(
        Cluster::new(
            &options.cluster,
            options.max_shard_inflight_bytes,
            Duration::from_secs(options.retry_after_secs.max(1)),
        )
        .with_write_coalescing(options.max_shard_rpcs, options.max_coalesce_bytes)
        .with_node_batching(options.max_node_rpcs)
        .with_cluster_token(
            ClusterToken::load(options.cluster_token_file.as_deref())
                .context("loading the cluster credential")?,
        ),
    );
    tokio::spawn(watch_shard_map(
        cluster.clone(),
        options.etcd_endpoints.clone(),
    ));
    let mut running = shardhouse_router::start(options, cluster)
        .await
        .context("starting listeners")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", running.ready_line())?;
        out.flush()?;
    }
    tracing::info!(http = %running.http_addr, grpc = %running.grpc_addr, "router serving");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = running.wait() => anyhow::bail!("a listener stopped unexpectedly"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; exiting"),
        _ = term.recv() => tracing::info!("terminated; exiting"),
    }
    Ok(())
}
