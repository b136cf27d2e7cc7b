//! A damaged engine part on real `shardhouse-node` processes, etcd and chDB
//! (issue 16, "disk faults"; docs/operations.md "A damaged engine part"):
//! acknowledged points are flushed into parts, one node is killed with
//! SIGKILL, a column file of one of its parts is truncated (chDB sets the
//! part aside at start and would serve fewer rows) or has bytes changed in
//! place (found by the checksum check at start), and the node restarts. It
//! must say which part is damaged, rebuild its replica from the leader's
//! snapshot, and then hold every acknowledged point; with no other replica
//! (RF=1) it must refuse the shard's reads and say it cannot rebuild it.

#[path = "disk_faults/support.rs"]
#[allow(dead_code)]
mod support;

use anyhow::{bail, ensure, Context, Result};
use shardhouse_test_support::node_client::query_i64;
use shardhouse_test_support::{eventually, LocalCluster};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

const WRITE: Duration = Duration::from_secs(10);
/// Flush often, so acknowledged points are in parts within a second.
const ARGS: [&str; 2] = ["--flush-max-age-ms", "200"];

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Cut the file to half its size (a lost tail).
    Truncate,
    /// Overwrite bytes in the middle, keeping the size (a bad sector).
    Corrupt,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_engine_part_is_detected_and_the_replica_rebuilt_from_its_leader() -> Result<()>
{
    damaged_replica_is_rebuilt("enginetrunc", Damage::Truncate, "broken-on-start").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_engine_part_is_detected_and_the_replica_rebuilt_from_its_leader() -> Result<()>
{
    damaged_replica_is_rebuilt("enginecorrupt", Damage::Corrupt, "Checksum").await
}

async fn damaged_replica_is_rebuilt(name: &str, damage: Damage, reason: &str) -> Result<()> {
    const DAMAGED: u64 = 3;
    let mut c = cluster(name, None, &ARGS).await?;
    lead_elsewhere(&mut c, DAMAGED).await?;
    let mut ledger = Ledger::new(&c);
    for _ in 0..20 {
        ensure!(
            ledger.write(300, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
    }
    every_replica_has(&c, &ledger.acked, Duration::from_secs(20)).await?;
    let engine = c.node(DAMAGED).data_dir.join("engine");
    let file = part_file(&engine, Duration::from_secs(10)).await?;
    c.node(DAMAGED).kill9();
    let part = damage_file(&file, damage)?;
    let started = Instant::now();
    with_faults(None, || c.node(DAMAGED).restart())?;
    let dir = c.node(DAMAGED).data_dir.clone();
    let said = log_lines(&dir, &["engine part damaged"]);
    ensure!(
        said.contains(&part) && said.contains(reason),
        "{damage:?} part {part} ({}) but the restart did not report it with `{reason}`:\n{said}\n{}",
        file.display(),
        log_lines(&dir, &["ERROR", "WARN"])
    );
    eprintln!(
        "{damage:?}: {}",
        said.lines().next().unwrap_or_default().trim()
    );
    // Writes go on while the replica is rebuilt.
    for _ in 0..5 {
        ensure!(
            ledger.write(100, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
    }
    let http = c.node(DAMAGED).http.clone();
    eventually("the replica rebuilt", Duration::from_secs(30), || async {
        let rebuilt = log_lines(&dir, &["replica rebuilt from its leader's snapshot"]);
        let damaged = metric(&http, "shardhouse_engine_damaged_shards", "").await?;
        Ok((!rebuilt.is_empty() && damaged == 0.0).then_some(()))
    })
    .await
    .with_context(|| {
        format!(
            "node {DAMAGED} was not rebuilt; its log:\n{}",
            log_lines(&dir, &["ERROR", "WARN", "rebuil", "snapshot"])
        )
    })?;
    let rebuilds = metric(&http, "shardhouse_wal_replica_rebuilds_total", "damaged").await?;
    ensure!(rebuilds >= 1.0, "no rebuild counted as `damaged`");
    let h = health(&http).await?;
    ensure!(!h.contains("engine data"), "health still fails: {h}");
    every_replica_has(&c, &ledger.acked, Duration::from_secs(20)).await?;
    eprintln!(
        "{damage:?}: {} acknowledged points on every replica, {:.1} s from restart to rebuilt and checked",
        ledger.acked.len(),
        started.elapsed().as_secs_f64()
    );
    drop(c.nodes.drain(..));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_other_replica_a_damaged_shard_is_refused_and_health_says_why() -> Result<()> {
    const NODE: u64 = 1;
    let mut c = with_faults(None, || {
        LocalCluster::builder("enginerf1")
            .nodes(1)
            .shards(1)
            .rf(1)
            .node_args(&ARGS)
            .start()
    })?;
    c.wait_leaders(Duration::from_secs(60)).await?;
    let mut ledger = Ledger::new(&c);
    for _ in 0..10 {
        ensure!(
            ledger.write(300, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
    }
    let engine = c.node(NODE).data_dir.join("engine");
    let file = part_file(&engine, Duration::from_secs(10)).await?;
    c.node(NODE).kill9();
    let part = damage_file(&file, Damage::Truncate)?;
    with_faults(None, || c.node(NODE).restart())?;
    c.wait_leaders(Duration::from_secs(60)).await?;
    let (http, grpc) = (c.node(NODE).http.clone(), c.node(NODE).grpc.clone());
    let h = health(&http).await?;
    ensure!(
        h.contains("shard 0 engine data")
            && h.contains("\"fail\"")
            && h.contains(&part)
            && h.contains("cannot be rebuilt"),
        "health does not say the shard is damaged for good: {h}"
    );
    let damaged = metric(&http, "shardhouse_engine_damaged_shards", "").await?;
    ensure!(
        damaged == 1.0,
        "shardhouse_engine_damaged_shards = {damaged}"
    );
    match query_i64(&grpc, SHARD, "SELECT v FROM m FINAL ORDER BY v").await {
        Ok(rows) => bail!(
            "the damaged shard answered {} of {} points instead of refusing",
            rows.len(),
            ledger.acked.len()
        ),
        Err(e) => {
            let e = format!("{e:#}");
            ensure!(
                e.contains("damaged") && e.contains("another replica"),
                "refused, but not for the damage: {e}"
            );
        }
    }
    let dir = c.node(NODE).data_dir.clone();
    eventually("the log line", Duration::from_secs(5), || async {
        Ok((!log_lines(&dir, &["cannot be rebuilt"]).is_empty()).then_some(()))
    })
    .await
    .context("the log does not say the shard cannot be rebuilt")?;
    drop(c.nodes.drain(..));
    Ok(())
}

/// The data file of the first part of measurement `m` of shard `SHARD` in
/// the engine directory `engine`, once one is flushed.
async fn part_file(engine: &Path, timeout: Duration) -> Result<PathBuf> {
    eventually("a flushed part", timeout, || async {
        Ok(first_part_file(engine))
    })
    .await
    .with_context(|| format!("no part of `m` flushed under {}", engine.display()))
}

/// `<engine>/data/shard_0000_<key>/m/<part>/data.bin` (compact parts; a
/// wide part has one `<column>.bin` per column instead).
fn first_part_file(engine: &Path) -> Option<PathBuf> {
    let prefix = format!("shard_{SHARD:04}_");
    let mut parts = Vec::new();
    for db in std::fs::read_dir(engine.join("data")).ok()?.flatten() {
        if !db.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        for p in std::fs::read_dir(db.path().join("m")).ok()?.flatten() {
            let name = p.file_name().to_string_lossy().to_string();
            if name.starts_with(|c: char| c.is_ascii_digit()) {
                parts.push(p.path());
            }
        }
    }
    parts.sort();
    parts.into_iter().find_map(|p| {
        let compact = p.join("data.bin");
        if compact.is_file() {
            return Some(compact);
        }
        let mut bins: Vec<PathBuf> = std::fs::read_dir(&p)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|f| f.extension().is_some_and(|x| x == "bin"))
            .collect();
        bins.sort();
        bins.into_iter().next()
    })
}

/// Damages `file`; returns its part's name.
fn damage_file(file: &Path, damage: Damage) -> Result<String> {
    use std::io::{Seek, SeekFrom, Write};
    let len = std::fs::metadata(file)?.len();
    ensure!(len >= 64, "{} is too small to damage", file.display());
    let mut f = std::fs::OpenOptions::new().write(true).open(file)?;
    match damage {
        Damage::Truncate => f.set_len(len / 2)?,
        Damage::Corrupt => {
            f.seek(SeekFrom::Start(len / 2))?;
            f.write_all(&[0x5A; 16])?;
        }
    }
    f.sync_all()?;
    Ok(file
        .parent()
        .and_then(|p| p.file_name())
        .context("a part directory")?
        .to_string_lossy()
        .to_string())
}
