//! Closed-model subcommands: N virtual users per step (for contrast with
//! the open model) and the fixed-work protocol table.

use super::{base_ns, new_report, out, write_json, LoadArgs, TargetArgs};
use anyhow::Result;
use clap::Args;
use shardhouse_loadtest::dataset::{DatasetKind, Generator};
use shardhouse_loadtest::encode::{self, Protocol};
use shardhouse_loadtest::report::{self, StepReport};
use shardhouse_loadtest::runner::{self, Pool};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct ClosedArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    load: LoadArgs,
    /// Virtual users per step, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "4,16,64")]
    vus: Vec<usize>,
}

#[derive(Args)]
pub struct ProtocolArgs {
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

pub async fn closed(a: ClosedArgs) -> Result<()> {
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

pub async fn protocols(a: ProtocolArgs) -> Result<()> {
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
