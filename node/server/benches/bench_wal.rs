//! `make bench-wal`: committed points/s through `Node.Write` (no router) for
//! RF=1 (one node) and RF=3 (three nodes on loopback), fsync on, with
//! pre-built Arrow batches of 10k points x 5 fields from several concurrent
//! writers across several shards. Prints a table, the mean group-commit
//! batch size from the WAL's histogram, and last `wal_rf3_points_per_sec=N`.
//!
//! Knobs (env): BENCH_SECONDS (10), BENCH_WRITERS (16), BENCH_SHARDS (8).

#![allow(clippy::print_stdout)]

use anyhow::{Context, Result};
use arrow_array::{ArrayRef, Float64Array, RecordBatch, TimestampNanosecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use shardhouse_test_support::arrow::ipc_bytes;
use shardhouse_test_support::node_client::{LeaderClient, Outcome};
use shardhouse_test_support::LocalCluster;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POINTS_PER_BATCH: usize = 10_000;
const FIELDS: usize = 5;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A 10k-point batch with 5 Float64 fields; `seed` varies series and times.
fn batch_ipc(seed: u64) -> Vec<u8> {
    let mut fields = vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
        Field::new("series_id", DataType::UInt64, false),
    ];
    for f in 0..FIELDS {
        fields.push(Field::new(format!("f{f}"), DataType::Float64, true));
    }
    let schema = Arc::new(Schema::new(fields));
    let base = 1_700_000_000_000_000_000i64 + (seed as i64) * 1_000_000_000;
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(TimestampNanosecondArray::from_iter_values(
            (0..POINTS_PER_BATCH as i64).map(|i| base + i * 1_000),
        )),
        Arc::new(UInt64Array::from_iter_values(
            (0..POINTS_PER_BATCH as u64).map(|i| seed.wrapping_mul(7919) ^ (i % 1000)),
        )),
    ];
    for f in 0..FIELDS {
        cols.push(Arc::new(Float64Array::from_iter_values(
            (0..POINTS_PER_BATCH).map(|i| (i * (f + 1)) as f64 * 0.5),
        )));
    }
    let batch = RecordBatch::try_new(Arc::clone(&schema), cols).expect("batch");
    ipc_bytes(&schema, &[batch])
}

/// Sum and count of a histogram over all nodes' /metrics.
async fn histogram_totals(http: &[String], name: &str) -> (f64, f64) {
    let client = reqwest::Client::new();
    let (mut sum, mut count) = (0.0, 0.0);
    for addr in http {
        let Ok(resp) = client.get(format!("http://{addr}/metrics")).send().await else {
            continue;
        };
        let Ok(text) = resp.text().await else {
            continue;
        };
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(key), Some(v)) = (parts.next(), parts.next()) else {
                continue;
            };
            let v: f64 = v.parse().unwrap_or(0.0);
            if key == format!("{name}_sum") {
                sum += v;
            } else if key == format!("{name}_count") {
                count += v;
            }
        }
    }
    (sum, count)
}

struct Figures {
    points_per_sec: f64,
    writes: u64,
    failed: u64,
    mean_group_commit: f64,
    mean_write_ms: f64,
}

async fn run(nodes: u64, rf: u32, shards: u32, writers: u64, seconds: u64) -> Result<Figures> {
    let c = LocalCluster::builder("test")
        .nodes(nodes)
        .shards(shards)
        .rf(rf)
        .node_args(&["--pool-size", "1"])
        .start()?;
    c.wait_leaders(Duration::from_secs(60)).await?;
    let addrs: Vec<String> = c.nodes.iter().map(|n| n.grpc.clone()).collect();
    let http: Vec<String> = c.nodes.iter().map(|n| n.http.clone()).collect();
    let batches: Arc<Vec<Vec<u8>>> = Arc::new((0..16).map(batch_ipc).collect());

    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (addrs, batches, measuring, stop, committed, failed) = (
                addrs.clone(),
                batches.clone(),
                measuring.clone(),
                stop.clone(),
                committed.clone(),
                failed.clone(),
            );
            tokio::spawn(async move {
                let mut router = LeaderClient::new(addrs);
                let shard = (w % u64::from(shards)) as u32;
                let mut i = w as usize;
                while !stop.load(Ordering::Relaxed) {
                    let ipc = batches[i % batches.len()].clone();
                    i += 1;
                    let ok = matches!(
                        router
                            .write(shard, "bench", ipc, Duration::from_secs(10))
                            .await,
                        Outcome::Acked
                    );
                    if measuring.load(Ordering::Relaxed) {
                        if ok {
                            committed.fetch_add(1, Ordering::Relaxed);
                        } else {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await; // warm-up
    let (gs0, gc0) = histogram_totals(&http, "shardhouse_wal_group_commit_entries").await;
    let (ws0, wc0) = histogram_totals(&http, "shardhouse_node_write_seconds").await;
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let (gs1, gc1) = histogram_totals(&http, "shardhouse_wal_group_commit_entries").await;
    let (ws1, wc1) = histogram_totals(&http, "shardhouse_node_write_seconds").await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let writes = committed.load(Ordering::Relaxed);
    Ok(Figures {
        points_per_sec: (writes as f64 * POINTS_PER_BATCH as f64) / elapsed,
        writes,
        failed: failed.load(Ordering::Relaxed),
        mean_group_commit: if gc1 > gc0 {
            (gs1 - gs0) / (gc1 - gc0)
        } else {
            0.0
        },
        mean_write_ms: if wc1 > wc0 {
            1000.0 * (ws1 - ws0) / (wc1 - wc0)
        } else {
            0.0
        },
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    shardhouse_test_support::chdb_dir()?;
    let seconds = env_or("BENCH_SECONDS", 10);
    let writers = env_or("BENCH_WRITERS", 16);
    let shards = env_or("BENCH_SHARDS", 8) as u32;
    println!(
        "bench-wal: {POINTS_PER_BATCH} points x {FIELDS} fields per batch, {writers} writers, {shards} shards, {seconds}s measured, fsync on"
    );
    let rf1 = run(1, 1, shards, writers, seconds)
        .await
        .context("RF=1 run")?;
    let rf3 = run(3, 3, shards, writers, seconds)
        .await
        .context("RF=3 run")?;
    println!("| setup | committed points/s | writes ok | writes failed | mean group commit (entries/fsync) | mean write latency ms |");
    println!("|---|---|---|---|---|---|");
    for (name, f) in [("RF=1, 1 node", &rf1), ("RF=3, 3 nodes", &rf3)] {
        println!(
            "| {name} | {:.0} | {} | {} | {:.2} | {:.1} |",
            f.points_per_sec, f.writes, f.failed, f.mean_group_commit, f.mean_write_ms
        );
    }
    println!("wal_rf1_points_per_sec={:.0}", rf1.points_per_sec);
    println!("wal_rf3_points_per_sec={:.0}", rf3.points_per_sec);
    Ok(())
}
