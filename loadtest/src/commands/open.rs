//! Open-model subcommands: the point ramp behind `make bench-e2e` and the
//! small-write ramp behind `make bench-small-writes` (and the closed-loop
//! small-write profile of `make bench-protocols`).

use super::{base_ns, new_report, new_report_with, out, write_json, LoadArgs, TargetArgs};
use anyhow::Result;
use clap::Args;
use shardhouse_loadtest::dataset::{DatasetKind, Generator, SplitMix64};
use shardhouse_loadtest::encode::{self, Protocol};
use shardhouse_loadtest::ramp::{self, RampPlan, StepSettings};
use shardhouse_loadtest::report::{self, RunReport, StepReport, SMALL_WRITES_BUDGET};
use shardhouse_loadtest::resources::{parse_pid_arg, ResourceSpec};
use shardhouse_loadtest::runner::{self, Pool};
use std::path::PathBuf;
use std::time::Duration;

/// How an open-model ramp steps and stops (shared by both ramps).
#[derive(Args, Clone)]
pub struct RampShape {
    /// After the listed rates, multiply the offered rate by this factor per
    /// step until a step falls below --stop-below-pct (no fixed ceiling);
    /// 0 or 1 offers the listed rates only.
    #[arg(long, default_value_t = 0.0)]
    pub grow: f64,
    /// Stop after the first step below this % of offered (saves time past
    /// the knee); 0 runs every step.
    #[arg(long, default_value_t = 0.0)]
    pub stop_below_pct: f64,
    /// Safety limit on the number of steps of a growing ramp.
    #[arg(long, default_value_t = 60)]
    pub max_steps: usize,
    /// Requests allowed in flight; a request due while all are busy is dropped.
    #[arg(long, default_value_t = 256)]
    pub max_inflight: usize,
    /// Seconds of idle between steps so queues drain.
    #[arg(long, default_value_t = 2.0)]
    pub pause_secs: f64,
    /// Unrecorded warm-up at the first rate (JIT, caches, table creation).
    #[arg(long, default_value_t = 0.0)]
    pub warmup_secs: f64,
}

impl RampShape {
    fn plan(&self, listed: Vec<f64>) -> Result<RampPlan> {
        Ok(RampPlan::new(
            listed,
            self.grow,
            self.stop_below_pct,
            self.max_steps,
        )?)
    }

    fn settings(&self, step_secs: f64) -> StepSettings {
        StepSettings {
            step: Duration::from_secs_f64(step_secs),
            pause: Duration::from_secs_f64(self.pause_secs),
            warmup: Duration::from_secs_f64(self.warmup_secs),
            max_inflight: self.max_inflight,
        }
    }
}

#[derive(Args)]
pub struct RampArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    shape: RampShape,
    /// Offered request rates per step (req/s), comma separated.
    #[arg(long, value_delimiter = ',', conflicts_with = "point_rates")]
    rates: Vec<f64>,
    /// Offered point rates per step (points/s), converted with --batch.
    #[arg(long, value_delimiter = ',')]
    point_rates: Vec<f64>,
    /// Print `<KEY>_sustainable_points_per_sec=<N>` as the last line.
    #[arg(long)]
    summary_key: Option<String>,
}

pub async fn ramp(a: RampArgs) -> Result<()> {
    let paths = a.target.paths();
    let (pool, protocol, kind) = a.load.pool(&paths)?;
    let pts = pool.avg_points();
    let mut rates = a.rates.clone();
    if rates.is_empty() {
        rates = a.point_rates.iter().map(|p| p / pts).collect();
    }
    let plan = a.shape.plan(rates)?;
    let target = a
        .target
        .connect(a.shape.max_inflight, protocol.is_grpc())
        .await?;
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
        "{} points/request, {:.0} bytes/request, {} pre-encoded requests, {} s/step, max {} in flight{}",
        pts,
        pool.avg_bytes(),
        a.load.pool,
        a.load.step_secs,
        a.shape.max_inflight,
        growth_note(&plan)
    ));
    tracing::info!(name = %a.load.name, ?plan, "open-model ramp");
    let (steps, notes) = ramp::run(
        &target,
        &pool,
        &plan,
        &a.shape.settings(a.load.step_secs),
        &res,
    )
    .await;
    rep.steps = steps;
    rep.notes.extend(notes);
    let rep = rep.finish();
    print_ramp(&rep);
    write_json(&a.load.json, &rep)?;
    if let Some(k) = a.summary_key {
        out(&format!(
            "{k}_sustainable_points_per_sec={:.0}",
            rep.sustainable_points_per_sec
        ));
    }
    Ok(())
}

fn growth_note(plan: &RampPlan) -> String {
    if plan.grow > 1.0 {
        format!(
            "; after the listed rates x{} per step until below {}% of offered",
            plan.grow, plan.stop_below_pct
        )
    } else {
        String::new()
    }
}

fn print_ramp(rep: &RunReport) {
    out(&format!(
        "### {} (open model, {} protocol, {} dataset)\n",
        rep.name, rep.protocol, rep.dataset
    ));
    out(&report::ramp_table(rep));
    for n in &rep.notes {
        out(&format!("note: {n}"));
    }
}

#[derive(Args)]
pub struct SmallArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    shape: RampShape,
    /// Open model: offered requests/s per step, comma separated (with
    /// --grow the ramp goes on past the last one). Without it, the closed
    /// loop of --clients runs instead.
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
    /// Closed model: concurrent clients per step, comma separated.
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
    /// Extra component to sample, name=pid (repeatable).
    #[arg(long)]
    pid: Vec<String>,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Name of the run in the report.
    #[arg(long, default_value = "small-writes")]
    name: String,
    /// Print `<KEY>_requests_per_sec=<N>` (sustainable) as the last line.
    #[arg(long)]
    summary_key: Option<String>,
}

/// 4,096 distinct requests of `min..=max` points each, fixed seed.
fn small_pool(a: &SmallArgs, kind: DatasetKind, paths: &encode::Paths) -> std::sync::Arc<Pool> {
    let mut g = Generator::new(kind, a.seed, base_ns());
    let mut rng = SplitMix64::new(a.seed ^ 0x5eed);
    let span = (a.max_points.max(a.min_points) - a.min_points + 1) as u64;
    Pool::new(
        (0..4096)
            .map(|_| {
                let n = a.min_points + rng.below(span) as usize;
                encode::prepare(Protocol::Line, &g.batch(n.max(1)), paths)
            })
            .collect(),
    )
}

pub async fn small_writes(a: SmallArgs) -> Result<()> {
    let paths = a.target.paths();
    let kind: DatasetKind = a.dataset.parse()?;
    let pool = small_pool(&a, kind, &paths);
    let res = ResourceSpec {
        pid_dir: a.pid_dir.clone(),
        pids: a
            .pid
            .iter()
            .map(|p| parse_pid_arg(p))
            .collect::<Result<_, _>>()?,
    };
    if !a.rates.is_empty() {
        return small_writes_open(&a, &pool, kind, &res).await;
    }
    let maxc = a.clients.iter().copied().max().unwrap_or(1);
    let target = a.target.connect(maxc, false).await?;
    let mut rep = new_report(
        &a.name,
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

async fn small_writes_open(
    a: &SmallArgs,
    pool: &std::sync::Arc<Pool>,
    kind: DatasetKind,
    res: &ResourceSpec,
) -> Result<()> {
    let plan = a.shape.plan(a.rates.clone())?;
    let target = a.target.connect(a.shape.max_inflight, false).await?;
    let mut rep = new_report_with(
        &a.name,
        "open",
        &a.target.url,
        "line",
        kind.name(),
        a.seed,
        SMALL_WRITES_BUDGET,
    );
    rep.notes.push(format!(
        "{}-{} points/request ({:.1} on average), {} pre-encoded requests, {} s/step, max {} in flight{}",
        a.min_points,
        a.max_points,
        pool.avg_points(),
        4096,
        a.step_secs,
        a.shape.max_inflight,
        growth_note(&plan)
    ));
    let (steps, notes) = ramp::run(&target, pool, &plan, &a.shape.settings(a.step_secs), res).await;
    rep.steps = steps;
    rep.notes.extend(notes);
    let rep = rep.finish();
    print_ramp(&rep);
    write_json(&a.json, &rep)?;
    if let Some(k) = &a.summary_key {
        out(&format!(
            "{k}_requests_per_sec={:.0}",
            rep.sustainable_requests_per_sec
        ));
    }
    Ok(())
}
