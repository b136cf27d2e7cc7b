//! `shardhouse-loadtest`: see `shardhouse-loadtest --help` and
//! docs/benchmarks.md for the methodology.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use shardhouse_loadtest::ack::{self, AckLoadOptions};
use shardhouse_loadtest::dataset::{DatasetKind, Generator};
use shardhouse_loadtest::encode::{self, Paths, Protocol};
use shardhouse_loadtest::report::{self, RunReport, StepReport};
use shardhouse_loadtest::resources::{parse_pid_arg, ResourceSpec};
use shardhouse_loadtest::runner::{self, Pool};
use shardhouse_loadtest::sink;
use shardhouse_loadtest::target::{Target, TargetOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

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
    Ramp(RampArgs),
    /// Closed model: N virtual users per step, for contrast.
    Closed(ClosedArgs),
    /// Every protocol at several batch sizes, fixed work, 5 workers.
    Protocols(ProtocolArgs),
    /// Hundreds of clients each sending 1-10 points per request.
    SmallWrites(SmallArgs),
    /// Steady open-model load recording every acknowledged point (chaos).
    AckLoad(AckLoadArgs),
    /// Check that every point in an ack log is stored exactly once.
    Verify(VerifyArgs),
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

#[derive(Args, Clone)]
struct TargetArgs {
    /// HTTP base URL of the server under test.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    url: String,
    /// gRPC URL (gRPC protocols only).
    #[arg(long, default_value = "http://127.0.0.1:8087")]
    grpc_url: String,
    #[arg(long, env = "SHARDHOUSE_TOKEN")]
    auth_token: Option<String>,
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Database (InfluxDB `db`).
    #[arg(long, default_value = "shardhouse")]
    db: String,
    /// Path (and query) for line protocol writes; QuestDB: `/write`.
    #[arg(long)]
    line_path: Option<String>,
}

impl TargetArgs {
    fn paths(&self) -> Paths {
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

    async fn connect(&self, max_connections: usize, grpc: bool) -> Result<Target> {
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
struct LoadArgs {
    /// line, msgpack, prom, grpc-unary
    #[arg(long, default_value = "line")]
    protocol: String,
    /// low, 100k or 1m
    #[arg(long, default_value = "low")]
    dataset: String,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Points per request.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Distinct pre-encoded requests cycled through.
    #[arg(long, default_value_t = 64)]
    pool: usize,
    /// Seconds per step.
    #[arg(long, default_value_t = 10.0)]
    step_secs: f64,
    /// Directory of <component>.pid files to sample CPU and RSS from.
    #[arg(long)]
    pid_dir: Option<PathBuf>,
    /// Extra component to sample, name=pid (repeatable).
    #[arg(long)]
    pid: Vec<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Name of the run in the report (e.g. rf3, questdb).
    #[arg(long, default_value = "run")]
    name: String,
}

impl LoadArgs {
    fn resources(&self) -> Result<ResourceSpec> {
        Ok(ResourceSpec {
            pid_dir: self.pid_dir.clone(),
            pids: self
                .pid
                .iter()
                .map(|p| parse_pid_arg(p))
                .collect::<Result<_, _>>()?,
        })
    }

    fn pool(&self, paths: &Paths) -> Result<(Arc<Pool>, Protocol, DatasetKind)> {
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

#[derive(Args)]
struct RampArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    load: LoadArgs,
    /// Offered request rates per step (req/s), comma separated.
    #[arg(long, value_delimiter = ',', conflicts_with = "point_rates")]
    rates: Vec<f64>,
    /// Offered point rates per step (points/s), converted with --batch.
    #[arg(long, value_delimiter = ',')]
    point_rates: Vec<f64>,
    /// Requests allowed in flight; a request due while all are busy is dropped.
    #[arg(long, default_value_t = 256)]
    max_inflight: usize,
    /// Stop after the first step below this % of offered (saves time past
    /// the knee); 0 runs every step.
    #[arg(long, default_value_t = 0.0)]
    stop_below_pct: f64,
    /// Seconds of idle between steps so queues drain.
    #[arg(long, default_value_t = 2.0)]
    pause_secs: f64,
    /// Unrecorded warm-up at the first rate (JIT, caches, table creation).
    #[arg(long, default_value_t = 0.0)]
    warmup_secs: f64,
    /// Print `<KEY>_sustainable_points_per_sec=<N>` as the last line.
    #[arg(long)]
    summary_key: Option<String>,
}

#[derive(Args)]
struct ClosedArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    load: LoadArgs,
    /// Virtual users per step, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "4,16,64")]
    vus: Vec<usize>,
}

#[derive(Args)]
struct ProtocolArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "line,msgpack,prom,grpc-unary,grpc-stream"
    )]
    protocols: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "50,200,1000,2000")]
    batches: Vec<usize>,
    /// Series sets, comma separated (1m, 100k).
    #[arg(long, value_delimiter = ',', default_value = "1m")]
    series: Vec<String>,
    #[arg(long, default_value_t = 5)]
    workers: usize,
    /// Rows per (protocol, batch) cell before --scale (the study's 10M).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Fraction of --rows actually sent (this 2-core box shares its cores
    /// with the server; 0.01 = 100k rows per cell).
    #[arg(long, default_value_t = 0.01)]
    scale: f64,
    /// Distinct pre-encoded points per cell (cycled beyond that).
    #[arg(long, default_value_t = 200_000)]
    pool_points: usize,
    /// Batches per gRPC stream.
    #[arg(long, default_value_t = 20)]
    stream_batches: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct SmallArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Concurrent clients per step, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "100,200,400")]
    clients: Vec<usize>,
    #[arg(long, default_value_t = 1)]
    min_points: usize,
    #[arg(long, default_value_t = 10)]
    max_points: usize,
    #[arg(long, default_value_t = 10.0)]
    step_secs: f64,
    #[arg(long, default_value = "1m")]
    dataset: String,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long)]
    pid_dir: Option<PathBuf>,
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct AckLoadArgs {
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
struct VerifyArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long)]
    ack_log: PathBuf,
    /// Keep re-reading this long while points are missing (apply/flush lag).
    #[arg(long, default_value_t = 60.0)]
    wait_secs: f64,
}

fn base_ns() -> i64 {
    // Whole seconds so every timestamp precision keeps the points apart.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    now * 1_000_000_000
}

fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

fn write_json(path: &Option<PathBuf>, v: &impl serde::Serialize) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(p, serde_json::to_vec_pretty(v)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
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
        Cmd::Ramp(a) => ramp(a).await,
        Cmd::Closed(a) => closed(a).await,
        Cmd::Protocols(a) => protocols(a).await,
        Cmd::SmallWrites(a) => small_writes(a).await,
        Cmd::AckLoad(a) => ack_load(a).await,
        Cmd::Verify(a) => verify(a).await,
        Cmd::Payload {
            dataset,
            protocol,
            batch,
            seed,
            out: path,
        } => {
            let kind: DatasetKind = dataset.parse()?;
            let protocol: Protocol = protocol.parse()?;
            let pts = Generator::new(kind, seed, base_ns()).batch(batch.max(1));
            match encode::prepare(protocol, &pts, &Paths::default()).body {
                encode::Body::Http { body, .. } => std::fs::write(&path, &body)
                    .with_context(|| format!("writing {}", path.display()))?,
                encode::Body::Grpc(_) => bail!("payload files are for HTTP protocols"),
            }
            Ok(())
        }
        Cmd::Sink { listen } => {
            let (addr, h) = sink::serve(&listen, Arc::default()).await?;
            out(&format!("READY shardhouse-loadtest-sink http={addr}"));
            h.await?;
            Ok(())
        }
    }
}

fn new_report(
    name: &str,
    mode: &str,
    target: &str,
    protocol: &str,
    dataset: &str,
    seed: u64,
) -> RunReport {
    RunReport {
        name: name.into(),
        mode: mode.into(),
        target: target.into(),
        protocol: protocol.into(),
        dataset: dataset.into(),
        seed,
        steps: vec![],
        sustainable_points_per_sec: 0.0,
        peak_points_per_sec: 0.0,
        notes: vec![],
    }
}

async fn ramp(a: RampArgs) -> Result<()> {
    let paths = a.target.paths();
    let (pool, protocol, kind) = a.load.pool(&paths)?;
    let pts = pool.avg_points();
    let mut rates = a.rates.clone();
    if rates.is_empty() {
        rates = a.point_rates.iter().map(|p| p / pts).collect();
    }
    if rates.is_empty() || rates.iter().any(|r| *r <= 0.0) {
        bail!("give positive --rates (req/s) or --point-rates (points/s)");
    }
    let target = a.target.connect(a.max_inflight, protocol.is_grpc()).await?;
    let res = a.load.resources()?;
    let mut rep = new_report(
        &a.load.name,
        "open",
        &a.target.url,
        protocol.name(),
        kind.name(),
        a.load.seed,
    );
    rep.notes.push(format!(
        "{} points/request, {:.0} bytes/request, {} pre-encoded requests, {} s/step, max {} in flight",
        pts,
        pool.avg_bytes(),
        a.load.pool,
        a.load.step_secs,
        a.max_inflight
    ));
    tracing::info!(name = %a.load.name, ?rates, "open-model ramp");
    if a.warmup_secs > 0.0 {
        let w = runner::open_step(
            &target,
            &pool,
            rates[0],
            Duration::from_secs_f64(a.warmup_secs),
            a.max_inflight,
            &ResourceSpec::default(),
        )
        .await;
        rep.notes.push(format!(
            "{} s warm-up at {:.1} req/s not recorded ({} acked)",
            a.warmup_secs, rates[0], w.stats.acked_requests
        ));
        tokio::time::sleep(Duration::from_secs_f64(a.pause_secs)).await;
    }
    for (i, rate) in rates.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs_f64(a.pause_secs)).await;
        }
        let o = runner::open_step(
            &target,
            &pool,
            *rate,
            Duration::from_secs_f64(a.load.step_secs),
            a.max_inflight,
            &res,
        )
        .await;
        let step = StepReport::from_outcome(format!("{rate:.1} req/s"), Some(*rate), None, pts, o);
        tracing::info!(
            step = %step.label,
            achieved_pps = step.achieved_pps as u64,
            pct = step.pct_of_offered.unwrap_or(0.0),
            p95_ms = step.p95_ms.unwrap_or(0.0),
            errors = ?step.errors,
            "step done"
        );
        let below = step.pct_of_offered.unwrap_or(100.0) < a.stop_below_pct;
        rep.steps.push(step);
        if below {
            rep.notes.push(format!(
                "stopped after the step below {}% of offered",
                a.stop_below_pct
            ));
            break;
        }
    }
    let rep = rep.finish();
    out(&format!(
        "### {} (open model, {} protocol, {} dataset)\n",
        rep.name, rep.protocol, rep.dataset
    ));
    out(&report::ramp_table(&rep));
    for n in &rep.notes {
        out(&format!("note: {n}"));
    }
    write_json(&a.load.json, &rep)?;
    if let Some(k) = a.summary_key {
        out(&format!(
            "{k}_sustainable_points_per_sec={:.0}",
            rep.sustainable_points_per_sec
        ));
    }
    Ok(())
}

async fn closed(a: ClosedArgs) -> Result<()> {
    let paths = a.target.paths();
    let (pool, protocol, kind) = a.load.pool(&paths)?;
    let pts = pool.avg_points();
    let maxv = a.vus.iter().copied().max().unwrap_or(1);
    let target = a.target.connect(maxv, protocol.is_grpc()).await?;
    let res = a.load.resources()?;
    let mut rep = new_report(
        &a.load.name,
        "closed",
        &a.target.url,
        protocol.name(),
        kind.name(),
        a.load.seed,
    );
    for v in &a.vus {
        let o = runner::closed_step(
            &target,
            &pool,
            *v,
            Duration::from_secs_f64(a.load.step_secs),
            &res,
        )
        .await;
        rep.steps.push(StepReport::from_outcome(
            format!("{v} VUs"),
            None,
            Some(*v as u64),
            pts,
            o,
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let rep = rep.finish();
    out(&format!(
        "### {} (closed model, {} protocol, {} dataset)\n",
        rep.name, rep.protocol, rep.dataset
    ));
    out(&report::closed_table(&rep));
    write_json(&a.load.json, &rep)?;
    Ok(())
}

async fn protocols(a: ProtocolArgs) -> Result<()> {
    let paths = a.target.paths();
    let protos: Vec<Protocol> = a
        .protocols
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let kinds: Vec<DatasetKind> = a
        .series
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let grpc = protos.iter().any(|p| p.is_grpc());
    let target = a.target.connect(a.workers * 2, grpc).await?;
    let rows = ((a.rows as f64) * a.scale).max(1.0) as u64;
    let mut steps = Vec::new();
    for kind in &kinds {
        for p in &protos {
            for b in &a.batches {
                let b = (*b).max(1);
                let requests = rows.div_ceil(b as u64);
                let pool_reqs = (a.pool_points / b).clamp(1, requests as usize);
                let mut g = Generator::new(*kind, a.seed, base_ns());
                let pool = Pool::new(
                    (0..pool_reqs)
                        .map(|_| encode::prepare(*p, &g.batch(b), &paths))
                        .collect(),
                );
                let o = runner::fixed_work(
                    &target,
                    &pool,
                    requests,
                    a.workers,
                    a.stream_batches,
                    *p == Protocol::GrpcStream,
                )
                .await;
                let st = StepReport::from_outcome(
                    format!("{} / {} / {b}", p.name(), kind.name()),
                    None,
                    None,
                    b as f64,
                    o,
                );
                tracing::info!(cell = %st.label, rows_per_sec = st.achieved_pps as u64, errors = ?st.errors, "protocol cell done");
                steps.push(st);
            }
        }
    }
    out(&format!(
        "### Protocol table ({} workers, {} rows per cell = {} x {}, fixed seed {})\n",
        a.workers,
        report::fmt_int(rows as f64),
        report::fmt_int(a.rows as f64),
        a.scale,
        a.seed
    ));
    out(&report::protocol_table(&steps));
    out("note: grpc-stream latency is per stream call divided by the batches it carried.");
    write_json(&a.json, &steps)?;
    Ok(())
}

async fn small_writes(a: SmallArgs) -> Result<()> {
    let paths = a.target.paths();
    let kind: DatasetKind = a.dataset.parse()?;
    let maxc = a.clients.iter().copied().max().unwrap_or(1);
    let target = a.target.connect(maxc, false).await?;
    let mut g = Generator::new(kind, a.seed, base_ns());
    let mut rng = shardhouse_loadtest::dataset::SplitMix64::new(a.seed ^ 0x5eed);
    let span = (a.max_points.max(a.min_points) - a.min_points + 1) as u64;
    let pool = Pool::new(
        (0..4096)
            .map(|_| {
                let n = a.min_points + rng.below(span) as usize;
                encode::prepare(Protocol::Line, &g.batch(n.max(1)), &paths)
            })
            .collect(),
    );
    let res = ResourceSpec {
        pid_dir: a.pid_dir.clone(),
        pids: vec![],
    };
    let mut rep = new_report(
        "small-writes",
        "closed",
        &a.target.url,
        "line",
        kind.name(),
        a.seed,
    );
    for c in &a.clients {
        let o = runner::closed_step(
            &target,
            &pool,
            *c,
            Duration::from_secs_f64(a.step_secs),
            &res,
        )
        .await;
        rep.steps.push(StepReport::from_outcome(
            format!("{c}"),
            None,
            Some(*c as u64),
            pool.avg_points(),
            o,
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let rep = rep.finish();
    out(&format!(
        "### Small writes ({}-{} points per request, closed loop per client)\n",
        a.min_points, a.max_points
    ));
    out(&report::closed_table(&rep));
    write_json(&a.json, &rep)?;
    Ok(())
}

async fn ack_load(a: AckLoadArgs) -> Result<()> {
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

async fn verify(a: VerifyArgs) -> Result<()> {
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
