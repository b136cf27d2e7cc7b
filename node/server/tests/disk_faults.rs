//! Disk faults on real `shardhouse-node` processes, etcd, RocksDB and chDB
//! (issue 16, "disk faults"; docs/operations.md "Disk faults"). Full disks
//! are real: a size-limited tmpfs under one node's WAL or engine directory
//! (root only: elsewhere those tests print SKIPPED and why). fsync failures
//! and a slow disk are injected (`SHARDHOUSE_TEST_FAULT_DISK`). Every test
//! records each acknowledged write and finds every one afterwards on every
//! replica.

#[path = "disk_faults/support.rs"]
mod support;

use anyhow::{ensure, Result};
use std::time::{Duration, Instant};
use support::*;

const WRITE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_wal_disk_refuses_writes_with_the_reason_and_recovers_by_itself() -> Result<()> {
    const FULL: u64 = 1;
    let spec = format!("node={FULL},wal_reserve_mb=16");
    let mut c = cluster(
        "diskwal",
        Some(&spec),
        &["--wal-write-buffer-bytes", "1048576"],
    )
    .await?;
    c.node(FULL).kill9();
    let fs = match Tmpfs::take_over(&c.node(FULL).data_dir.join("wal"), 64) {
        Ok(fs) => fs,
        Err(e) => {
            skip("full WAL disk", &e);
            return Ok(());
        }
    };
    with_faults(Some(&spec), || c.node(FULL).restart())?;
    make_leader(&mut c, FULL).await?;
    let mut ledger = Ledger::new(&c);
    for _ in 0..20 {
        ensure!(
            ledger.write(50, WRITE).await,
            "before: {:?}",
            ledger.failures
        );
    }
    let addr = c.node(FULL).grpc.clone();
    let http = c.node(FULL).http.clone();
    let ballast = fs.fill(8 << 20)?;
    // Refused, with the node and the reason, nothing proposed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let a = write_at(&addr, &ledger.take(10)).await?;
        if a.contains("WAL disk full on node 1") || Instant::now() > deadline {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ensure!(
        answer.starts_with("unavailable: WAL disk full on node 1"),
        "a write on the full node answered {answer:?}"
    );
    eprintln!("full WAL disk answers: {answer}");
    ensure!(metric(&http, "shardhouse_wal_disk_full", "").await? == 1.0);
    for _ in 0..5 {
        ledger.write(10, Duration::from_millis(500)).await;
    }
    // Space returns: the same process takes writes again.
    std::fs::remove_file(ballast)?;
    let freed = Instant::now();
    while !ledger.write(10, Duration::from_secs(1)).await {
        ensure!(
            freed.elapsed() < Duration::from_secs(20),
            "no write taken 20 s after space returned: {:?}",
            ledger.failures.last()
        );
    }
    eprintln!(
        "writes taken again {:?} after space returned",
        freed.elapsed()
    );
    ensure!(c.node(FULL).running(), "the node restarted or died");
    ensure!(metric(&http, "shardhouse_wal_disk_full", "").await? == 0.0);
    for _ in 0..10 {
        ensure!(
            ledger.write(50, WRITE).await,
            "after: {:?}",
            ledger.failures
        );
    }
    every_replica_has(&c, &ledger.acked, Duration::from_secs(20)).await?;
    drop(c.nodes.drain(..));
    drop(fs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_engine_disk_keeps_rows_in_the_wal_reports_and_backpressures() -> Result<()> {
    const FULL: u64 = 1;
    let spec = "node=*,max_log_mb=1";
    let args = ["--flush-max-age-ms", "200"];
    let mut c = cluster("diskengine", Some(spec), &args).await?;
    c.node(FULL).kill9();
    let fs = match Tmpfs::take_over(&c.node(FULL).data_dir.join("engine"), 512) {
        Ok(fs) => fs,
        Err(e) => {
            skip("full engine disk", &e);
            return Ok(());
        }
    };
    with_faults(Some(spec), || c.node(FULL).restart())?;
    make_leader(&mut c, FULL).await?;
    let mut ledger = Ledger::new(&c);
    for _ in 0..5 {
        ensure!(
            ledger.write(100, WRITE).await,
            "before: {:?}",
            ledger.failures
        );
    }
    let addr = c.node(FULL).grpc.clone();
    let http = c.node(FULL).http.clone();
    let ballast = fs.fill(0)?;
    // Writes go on into the WAL until its bound, then are refused (429).
    let mut answer = String::new();
    for _ in 0..400 {
        let values = ledger.take(500);
        answer = write_at(&addr, &values).await?;
        if answer != "committed" {
            break;
        }
        ledger.acked.extend(values);
    }
    ensure!(
        answer.contains("WAL of shard 0 on node 1 holds") && answer.contains("not yet flushed"),
        "the full engine never backpressured writes: {answer:?}"
    );
    eprintln!("full engine disk answers: {answer}");
    // The WAL bound can be reached before the first flush of the filled
    // disk has failed (a flush runs every 200 ms here): give it a few.
    let reported = Instant::now();
    loop {
        let health = health(&http).await?;
        let failing = metric(&http, "shardhouse_engine_flush_failing_shards", "").await?;
        if health.contains("shard 0 flush") && health.contains("\"fail\"") && failing >= 1.0 {
            break;
        }
        ensure!(
            reported.elapsed() < Duration::from_secs(10),
            "/health or the metric does not say the flush fails (failing shards {failing}): {health}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The rows are only in memory and the WAL: kill -9, free space, start.
    c.node(FULL).kill9();
    std::fs::remove_file(ballast)?;
    with_faults(Some(spec), || c.node(FULL).restart())?;
    c.wait_leaders(Duration::from_secs(30)).await?;
    let freed = Instant::now();
    while !ledger.write(10, Duration::from_secs(1)).await {
        ensure!(
            freed.elapsed() < Duration::from_secs(30),
            "no write taken 30 s after space returned: {:?}",
            ledger.failures.last()
        );
    }
    every_replica_has(&c, &ledger.acked, Duration::from_secs(30)).await?;
    eprintln!(
        "engine disk full: {} points acknowledged, all on every replica",
        ledger.acked.len()
    );
    drop(c.nodes.drain(..));
    drop(fs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_node_and_nothing_acknowledged_is_lost() -> Result<()> {
    const FAILING: u64 = 2;
    let spec = format!("node={FAILING},fail_wal_sync_after=60");
    let mut c = cluster("diskfsync", Some(&spec), &[]).await?;
    let mut ledger = Ledger::new(&c);
    let dir = c.node(FAILING).data_dir.clone();
    let mut stopped = false;
    for _ in 0..300 {
        ledger.write(20, WRITE).await;
        if !log_lines(&dir, &["FATAL: node 2 stops"]).is_empty() {
            stopped = true;
            break;
        }
    }
    ensure!(stopped, "node 2 never failed its fsync");
    let status = c.node(FAILING).terminate()?;
    ensure!(
        status.code() == Some(shardhouse_wal::FAIL_STOP_EXIT_CODE),
        "node 2 exited with {status}"
    );
    eprintln!(
        "failed fsync: node 2 exited with {status}: {}",
        log_lines(&dir, &["FATAL"])
    );
    // The other two go on.
    for _ in 0..20 {
        ensure!(
            ledger.write(20, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
    }
    with_faults(None, || c.node(FAILING).restart())?;
    every_replica_has(&c, &ledger.acked, Duration::from_secs(30)).await?;
    drop(c.nodes.drain(..));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_wal_is_detected_at_start_and_the_replica_rebuilt_from_peers() -> Result<()> {
    const DAMAGED: u64 = 3;
    let args = ["--wal-write-buffer-bytes", "1048576"];
    let mut c = cluster("diskcorrupt", None, &args).await?;
    lead_elsewhere(&mut c, DAMAGED).await?;
    let mut ledger = Ledger::new(&c);
    for _ in 0..60 {
        ensure!(
            ledger.write(300, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
    }
    c.node(DAMAGED).kill9();
    let wal = c.node(DAMAGED).data_dir.join("wal");
    let damaged = corrupt_rocksdb_files(&wal)?;
    ensure!(
        !damaged.is_empty(),
        "no RocksDB file to damage in {}",
        wal.display()
    );
    with_faults(None, || c.node(DAMAGED).restart())?;
    let dir = c.node(DAMAGED).data_dir.clone();
    let said = log_lines(&dir, &["WAL damaged at start"]);
    ensure!(
        !said.is_empty(),
        "damaged {damaged:?} but the restart did not detect it:\n{}",
        log_lines(&dir, &["ERROR", "WARN"])
    );
    eprintln!("corrupted WAL: {}", said.lines().next().unwrap_or_default());
    for _ in 0..10 {
        ensure!(
            ledger.write(100, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
    }
    every_replica_has(&c, &ledger.acked, Duration::from_secs(40)).await?;
    let http = c.node(DAMAGED).http.clone();
    let rebuilds = metric(&http, "shardhouse_wal_replica_rebuilds_total", "auto").await?;
    ensure!(
        rebuilds >= 1.0,
        "node {DAMAGED} was not rebuilt from a snapshot"
    );
    drop(c.nodes.drain(..));
    Ok(())
}

/// Overwrites 4 KiB in the middle of every RocksDB log and table file over
/// 64 KiB (as a bad sector would); returns their names.
fn corrupt_rocksdb_files(dir: &std::path::Path) -> Result<Vec<String>> {
    use std::io::{Seek, SeekFrom, Write};
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let len = std::fs::metadata(&p)?.len();
        if !(name.ends_with(".log") || name.ends_with(".sst")) || len < 64 << 10 {
            continue;
        }
        let mut f = std::fs::OpenOptions::new().write(true).open(&p)?;
        f.seek(SeekFrom::Start(len / 2))?;
        f.write_all(&[0x5Au8; 4096])?;
        out.push(format!("{name} ({len} bytes)"));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slow_replica_leaves_the_write_p95_to_the_other_two() -> Result<()> {
    const SLOW: u64 = 3;
    const DELAY_MS: u64 = 200;
    let mut c = cluster("diskslow", None, &[]).await?;
    lead_elsewhere(&mut c, SLOW).await?;
    let mut ledger = Ledger::new(&c);
    let base = measure(&mut ledger, 80).await?;
    c.node(SLOW).kill9();
    let spec = format!("node={SLOW},wal_write_delay_ms={DELAY_MS}");
    with_faults(Some(&spec), || c.node(SLOW).restart())?;
    lead_elsewhere(&mut c, SLOW).await?;
    let slow = measure(&mut ledger, 80).await?;
    // The slow replica has everything too (later), and was really slow.
    every_replica_has(&c, &ledger.acked, Duration::from_secs(60)).await?;
    let http = c.node(SLOW).http.clone();
    let (sum, n) = (
        metric(&http, "shardhouse_wal_append_seconds_sum", "").await?,
        metric(&http, "shardhouse_wal_append_seconds_count", "").await?,
    );
    eprintln!(
        "slow replica: RF=3 write p95 {base:?} with 3 healthy replicas, {slow:?} with node {SLOW}'s WAL writes {DELAY_MS} ms slower (its mean append {:.0} ms)",
        sum / n.max(1.0) * 1000.0
    );
    ensure!(
        sum / n.max(1.0) >= DELAY_MS as f64 / 1000.0 * 0.9,
        "the delay was not on: mean append {sum}/{n}; node {SLOW}'s log:\n{}",
        log_lines(
            &c.node(SLOW).data_dir,
            &["ERROR", "WARN", "fault", "panicked"]
        )
    );
    ensure!(
        slow < base + Duration::from_millis(DELAY_MS / 2),
        "p95 followed the slow replica: {base:?} -> {slow:?}"
    );
    drop(c.nodes.drain(..));
    Ok(())
}

/// p95 of `n` sequential one-request writes.
async fn measure(ledger: &mut Ledger, n: usize) -> Result<Duration> {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        ensure!(
            ledger.write(20, WRITE).await,
            "{:?}",
            ledger.failures.last()
        );
        took.push(t.elapsed());
    }
    Ok(p95(&mut took))
}
