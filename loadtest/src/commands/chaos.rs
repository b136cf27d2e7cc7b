//! Chaos subcommands: steady load recording every acknowledged point, and
//! the check that every such point is stored exactly once.

use super::{out, write_json, TargetArgs};
use anyhow::{bail, Result};
use clap::Args;
use shardhouse_loadtest::ack::{self, AckLoadOptions};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct AckLoadArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long)]
    ack_log: PathBuf,
    /// Measurement the points go to; unique per run keeps runs apart.
    #[arg(long, default_value = "chaos")]
    measurement: String,
    #[arg(long, default_value_t = 64)]
    series: u64,
    /// Requests per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    #[arg(long, default_value_t = 100)]
    batch: u64,
    #[arg(long, default_value_t = 3600.0)]
    secs: f64,
    #[arg(long)]
    stop_file: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    max_inflight: usize,
    /// Send a request answered 429/503, or whose connection failed, again
    /// (backoff 50 ms doubling to 1 s) up to this many times before it
    /// counts as failed (never after a timeout).
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// Write the summary (counts, retries, latency percentiles) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long)]
    ack_log: PathBuf,
    /// Keep re-reading this long while points are missing (apply/flush lag).
    #[arg(long, default_value_t = 60.0)]
    wait_secs: f64,
}

pub async fn ack_load(a: AckLoadArgs) -> Result<()> {
    let target = a.target.connect(a.max_inflight, false).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
        s2.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let opts = AckLoadOptions {
        measurement: a.measurement.clone(),
        series: a.series.max(1),
        rate: a.rate,
        batch: a.batch.max(1),
        duration: Duration::from_secs_f64(a.secs),
        stop_file: a.stop_file.clone(),
        max_inflight: a.max_inflight,
        ack_log: a.ack_log.clone(),
        write_path: a.target.paths().line,
        retries: a.retries,
    };
    let s = ack::ack_load(&target, &opts, stop).await?;
    let ms = |q| s.percentile_ms(q).map_or("-".into(), |v| format!("{v:.1}"));
    out(&format!(
        "ack_load sent={} acked_requests={} acked_points={} dropped={} failed={} errors={:?} retried={:?} p50_ms={} p95_ms={} p99_ms={} max_ms={}",
        s.sent,
        s.acked_requests,
        s.acked_points,
        s.dropped,
        s.failed(),
        s.errors,
        s.retried,
        ms(50.0),
        ms(95.0),
        ms(99.0),
        ms(100.0)
    ));
    write_json(
        &a.json,
        &serde_json::json!({
            "offered_requests": s.sent + s.dropped,
            "offered_points": (s.sent + s.dropped) * a.batch.max(1),
            "sent": s.sent,
            "acked_requests": s.acked_requests,
            "acked_points": s.acked_points,
            "dropped": s.dropped,
            "failed": s.failed(),
            "errors": s.errors,
            "retried": s.retried,
            "p50_ms": s.percentile_ms(50.0),
            "p95_ms": s.percentile_ms(95.0),
            "p99_ms": s.percentile_ms(99.0),
            "max_ms": s.percentile_ms(100.0),
        }),
    )?;
    Ok(())
}

pub async fn verify(a: VerifyArgs) -> Result<()> {
    let target = a.target.connect(4, false).await?;
    let v = ack::verify(
        &target,
        &a.target.db,
        &a.ack_log,
        Duration::from_secs_f64(a.wait_secs),
    )
    .await?;
    out(&ack::verdict_line(&v));
    out(&format!("acked_points_lost={}", v.lost));
    if !v.ok() {
        bail!(
            "{} acknowledged points lost, {} duplicated",
            v.lost,
            v.duplicated
        );
    }
    Ok(())
}
