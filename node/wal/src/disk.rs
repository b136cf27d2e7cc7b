//! The WAL's disk (docs/operations.md, "Disk faults"):
//!
//! - A full disk refuses writes before RocksDB hits it: proposals fail with
//!   [`WalError::DiskFull`] while the WAL filesystem has less than
//!   `disk_reserve_bytes` free, and are admitted again by themselves once
//!   space returns.
//! - A write that still meets ENOSPC (a follower's append, a hard state) is
//!   retried, the poll thread waiting, until RocksDB recovers from its
//!   background error (it does when space returns); nothing it carried was
//!   acknowledged, since raft only hears of a write once it succeeded.
//! - Any other failed write, above all a failed fsync, stops the node: the
//!   kernel may have dropped the dirty pages, so a retried fsync that
//!   "succeeds" proves nothing (the PostgreSQL fsync lesson). The node exits
//!   with [`FAIL_STOP_EXIT_CODE`] and recovers at restart from what is
//!   really on disk, its peers filling in the rest.
//!
//! Test faults of the write path ([`DiskFaults`]) are compiled in and off
//! unless the node's environment asks (`SHARDHOUSE_TEST_FAULT_DISK`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocksdb::{WriteBatch, WriteOptions, DB};

use crate::error::{Result, WalError};
use crate::{NodeId, ShardId};

/// Exit code of a node that stopped on a failed WAL write or sync.
pub const FAIL_STOP_EXIT_CODE: i32 = 75;

/// Faults injected into the WAL's write path, for tests only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// Every WAL write batch sleeps this long first (a slow disk).
    pub write_delay: Duration,
    /// The synced write after this many succeeds fails its fsync (0 = never).
    pub fail_sync_after: u64,
}

/// What the poll threads and proposers share about the WAL's disk.
pub(crate) struct WalDisk {
    node_id: NodeId,
    dir: PathBuf,
    reserve_bytes: u64,
    faults: DiskFaults,
    /// The WAL was set aside as damaged at this start: every replica
    /// created since lost the log its leader believes it has, and must be
    /// rebuilt from a snapshot.
    pub(crate) rebuild_created: bool,
    /// Why proposals are refused now (a full disk), if they are.
    refused: Mutex<Option<String>>,
    checked_at: Mutex<Option<Instant>>,
    synced_writes: AtomicU64,
}

/// How often a proposer looks at the filesystem's free space.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Whether a RocksDB error is an out-of-space one (RocksDB keeps it as its
/// background error until it recovers, so later writes report it too).
pub fn is_no_space(e: &rocksdb::Error) -> bool {
    let s = e.to_string();
    s.contains("No space left") || s.contains("NoSpace") || s.contains("no space")
}

/// Free bytes for unprivileged writers on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string; `st` is a properly sized out buffer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Why writes must be refused with `free` bytes left (pure, for tests).
pub fn full_reason(node_id: NodeId, dir: &Path, free: u64, reserve: u64) -> Option<String> {
    (free < reserve).then(|| {
        format!(
            "WAL disk full on node {node_id}: {} free on {} below the reserve of {}; free space there (the node takes writes again by itself)",
            mib(free),
            dir.display(),
            mib(reserve)
        )
    })
}

/// Why a shard's proposals must wait for the engine (pure, for tests).
pub fn log_reason(node_id: NodeId, shard: ShardId, log_bytes: u64, max: u64) -> Option<String> {
    (log_bytes > max).then(|| {
        format!(
            "WAL of shard {shard} on node {node_id} holds {} not yet flushed to the engine, over its bound of {}: the engine is not storing this shard's rows (see /health and shardhouse_engine_flush_failing_shards); writes are taken again once it flushes",
            mib(log_bytes),
            mib(max)
        )
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

impl WalDisk {
    pub(crate) fn new(
        node_id: NodeId,
        dir: &Path,
        reserve_bytes: u64,
        faults: DiskFaults,
        rebuild_created: bool,
    ) -> WalDisk {
        if faults != DiskFaults::default() {
            tracing::warn!(?faults, "test disk faults on in the WAL write path");
        }
        WalDisk {
            node_id,
            dir: dir.to_path_buf(),
            reserve_bytes,
            faults,
            rebuild_created,
            refused: Mutex::new(None),
            checked_at: Mutex::new(None),
            synced_writes: AtomicU64::new(0),
        }
    }

    /// Err while the WAL disk is (nearly) full, or while `shard`'s log
    /// (`log_bytes`) is over `max_log_bytes`.
    pub(crate) fn admit(&self, shard: ShardId, log_bytes: u64, max_log_bytes: u64) -> Result<()> {
        let r = self.admit_disk().and_then(|()| {
            match log_reason(self.node_id, shard, log_bytes, max_log_bytes) {
                Some(why) => Err(WalError::LogOverBound(why)),
                None => Ok(()),
            }
        });
        if let Err(e) = &r {
            let reason = match e {
                WalError::DiskFull(_) => "disk_full",
                _ => "log_bound",
            };
            crate::metrics::WRITES_REFUSED
                .with_label_values(&[reason])
                .inc();
        }
        r
    }

    /// Err while the WAL disk is (nearly) full; looks at the filesystem at
    /// most every [`CHECK_EVERY`].
    fn admit_disk(&self) -> Result<()> {
        self.check_space_if_due();
        match &*self.refused.lock() {
            Some(why) => Err(WalError::DiskFull(why.clone())),
            None => Ok(()),
        }
    }

    /// Looks at the filesystem if the last look is [`CHECK_EVERY`] old.
    fn check_space_if_due(&self) {
        let due = {
            let mut at = self.checked_at.lock();
            let due = at.is_none_or(|t| t.elapsed() >= CHECK_EVERY);
            if due {
                *at = Some(Instant::now());
            }
            due
        };
        if due {
            self.check_space();
        }
    }

    fn check_space(&self) {
        let Ok(free) = free_bytes(&self.dir) else {
            return;
        };
        let why = full_reason(self.node_id, &self.dir, free, self.reserve_bytes);
        self.set_refused(why);
    }

    fn set_refused(&self, why: Option<String>) {
        let mut slot = self.refused.lock();
        match (&*slot, &why) {
            (None, Some(w)) => {
                tracing::error!(reason = %w, "refusing writes: the WAL disk is full");
                crate::metrics::DISK_FULL.set(1);
            }
            (Some(_), None) => {
                tracing::info!("the WAL disk has space again: taking writes");
                crate::metrics::DISK_FULL.set(0);
            }
            _ => {}
        }
        *slot = why;
    }

    /// Writes one round's batch. Returns only once it is in RocksDB (synced
    /// when `sync`): out of space it waits and retries; any other failure
    /// stops the process (see the module doc).
    pub(crate) fn write(&self, db: &DB, wb: WriteBatch, sync: bool) {
        // Every node writes (a follower's appends too), so a node that
        // leads nothing still reports a full disk (`/health`,
        // `shardhouse_wal_disk_full`) before a write fails on it.
        self.check_space_if_due();
        if !self.faults.write_delay.is_zero() {
            std::thread::sleep(self.faults.write_delay);
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        let n = if sync {
            self.synced_writes.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            0
        };
        if self.faults.fail_sync_after > 0 && n > self.faults.fail_sync_after {
            // The data reaches the OS, the "fsync" fails: what a dying disk
            // or a lost writeback page looks like to the process.
            wo.set_sync(false);
            let _ = db.write_opt(wb, &wo);
            fail_stop(
                self.node_id,
                "injected fsync failure (SHARDHOUSE_TEST_FAULT_DISK fail_wal_sync_after)",
            );
        }
        let retry = (!wb.is_empty()).then(|| wb.data().to_vec());
        let mut wb = wb;
        let mut backoff = Duration::from_millis(50);
        loop {
            match db.write_opt(wb, &wo) {
                Ok(()) => {
                    if self.refused.lock().is_some() {
                        // The reserve check clears it once space is back.
                        *self.checked_at.lock() = None;
                    }
                    return;
                }
                Err(e) if is_no_space(&e) => {
                    self.set_refused(Some(format!(
                        "WAL disk full on node {}: {e}; free space on {} (the node takes writes again by itself)",
                        self.node_id,
                        self.dir.display()
                    )));
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    wb = WriteBatch::from_data(retry.as_deref().unwrap_or_default());
                }
                Err(e) => fail_stop(self.node_id, &format!("WAL write failed: {e}")),
            }
        }
    }
}

/// Whether opening the WAL failed on damaged data (not on a busy lock, a
/// missing permission or a full disk, which moving it aside would not fix).
pub(crate) fn is_damage(e: &WalError) -> bool {
    match e {
        WalError::Corrupt(_) => true,
        WalError::Storage { source, .. } => source.kind() == rocksdb::ErrorKind::Corruption,
        _ => false,
    }
}

/// Moves a damaged WAL directory aside (kept for inspection, never read
/// again), so the node starts with an empty WAL.
pub(crate) fn set_aside(dir: &Path, why: &WalError) -> Result<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut name = dir.as_os_str().to_owned();
    name.push(format!(".damaged-{secs}"));
    let aside = PathBuf::from(name);
    std::fs::rename(dir, &aside).map_err(|e| {
        WalError::Unavailable(format!(
            "the WAL at {} is damaged ({why}) and cannot be moved aside to {}: {e}; move it away by hand and restart",
            dir.display(),
            aside.display()
        ))
    })?;
    tracing::error!(
        damage = %why,
        moved_to = %aside.display(),
        "WAL damaged at start: moved aside; starting with an empty WAL, this node's replicas are created again from the shard map and rebuilt from their leaders"
    );
    eprintln!(
        "WAL damaged at start ({why}): moved aside to {}; replicas are rebuilt from their peers",
        aside.display()
    );
    Ok(aside)
}

/// Stops the node: nothing after a failed write or sync can be trusted.
pub fn fail_stop(node_id: NodeId, why: &str) -> ! {
    let line = format!(
        "FATAL: node {node_id} stops: {why}; a failed WAL write or fsync is not retried (the kernel may have dropped the data, so a later success would prove nothing). Nothing it carried was acknowledged. Check the disk (dmesg), then restart the node: it recovers from what is on disk and its peers"
    );
    tracing::error!("{line}");
    // stderr is unbuffered: the line is there even if the log writer is not.
    eprintln!("{line}");
    std::process::exit(FAIL_STOP_EXIT_CODE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_refused_below_the_reserve_with_the_node_and_sizes() {
        let dir = Path::new("/data/wal");
        assert_eq!(full_reason(3, dir, 100 << 20, 64 << 20), None);
        let why = full_reason(3, dir, 10 << 20, 64 << 20).unwrap();
        assert!(why.starts_with("WAL disk full on node 3: 10.0 MiB free on /data/wal"));
        assert!(why.contains("reserve of 64.0 MiB"), "{why}");
    }

    #[test]
    fn a_shard_waits_for_the_engine_past_its_log_bound() {
        assert_eq!(log_reason(1, 4, 10 << 20, 10 << 20), None);
        let why = log_reason(1, 4, 11 << 20, 10 << 20).unwrap();
        assert!(
            why.starts_with("WAL of shard 4 on node 1 holds 11.0 MiB"),
            "{why}"
        );
        assert!(why.contains("bound of 10.0 MiB"), "{why}");
    }

    #[test]
    fn free_space_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }

    /// A node that leads nothing only writes (a follower's appends): it
    /// must still notice its disk is below the reserve and say so.
    #[test]
    fn a_write_notices_a_full_disk_on_a_node_that_proposes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = DB::open_default(dir.path().join("db")).unwrap();
        // A reserve larger than any disk: the disk counts as full.
        let disk = WalDisk::new(2, dir.path(), u64::MAX, DiskFaults::default(), false);
        assert!(disk.refused.lock().is_none());
        let mut wb = WriteBatch::default();
        wb.put(b"k", b"v");
        disk.write(&db, wb, true);
        let why = disk
            .refused
            .lock()
            .clone()
            .expect("the write looked at the disk");
        assert!(why.starts_with("WAL disk full on node 2"), "{why}");
    }

    #[test]
    fn out_of_space_errors_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        // A real RocksDB error that is not about space.
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = DB::open_default(file.join("db")).err().unwrap();
        assert!(!is_no_space(&e), "{e}");
    }

    /// A size-limited tmpfs, unmounted on drop; None (with the reason
    /// printed) where this process may not mount.
    struct Tmpfs(tempfile::TempDir);

    impl Tmpfs {
        fn mount(mib: u64) -> Option<Tmpfs> {
            let dir = tempfile::tempdir().unwrap();
            let out = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                .arg(dir.path())
                .output();
            match out {
                Ok(o) if o.status.success() => Some(Tmpfs(dir)),
                Ok(o) => {
                    eprintln!(
                        "SKIPPED: cannot mount a tmpfs (needs root): {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    );
                    None
                }
                Err(e) => {
                    eprintln!("SKIPPED: cannot run mount: {e}");
                    None
                }
            }
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.0.path())
                .status();
        }
    }

    #[test]
    fn a_write_on_a_full_disk_waits_and_completes_once_space_returns() {
        let Some(fs) = Tmpfs::mount(16) else { return };
        let dir = fs.0.path().join("wal");
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.set_write_buffer_size(1 << 20);
        let db = std::sync::Arc::new(DB::open(&o, &dir).unwrap());
        // The reserve is above what RocksDB can leave free once a write
        // fails: it gives back its WAL preallocation (~1.1x the write
        // buffer) on the error, so a 1 MiB reserve made this test flaky.
        let disk =
            std::sync::Arc::new(WalDisk::new(1, &dir, 3 << 20, DiskFaults::default(), false));
        // Fill the filesystem with a ballast file, then RocksDB to the end.
        let ballast = fs.0.path().join("ballast");
        let free = free_bytes(&dir).unwrap();
        std::fs::write(&ballast, vec![7u8; free.saturating_sub(2 << 20) as usize]).unwrap();
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        let mut err = None;
        for i in 0..10_000u32 {
            let mut wb = WriteBatch::default();
            wb.put(i.to_be_bytes(), vec![1u8; 64 << 10]);
            if let Err(e) = db.write_opt(wb, &wo) {
                err = Some(e);
                break;
            }
        }
        let err = err.expect("the disk never filled");
        assert!(is_no_space(&err), "not an out-of-space error: {err}");
        assert!(matches!(
            disk.admit(0, 0, u64::MAX),
            Err(WalError::DiskFull(_))
        ));
        // A poll thread's write now waits...
        let (db2, disk2) = (db.clone(), disk.clone());
        let writer = std::thread::spawn(move || {
            let mut wb = WriteBatch::default();
            wb.put(b"after", b"space returned");
            disk2.write(&db2, wb, true);
        });
        std::thread::sleep(Duration::from_millis(500));
        assert!(!writer.is_finished(), "wrote on a full disk");
        // ...until space returns, without reopening the database.
        std::fs::remove_file(&ballast).unwrap();
        let t = Instant::now();
        while !writer.is_finished() {
            assert!(t.elapsed() < Duration::from_secs(60), "no recovery in 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        writer.join().unwrap();
        eprintln!("recovered {:?} after space returned", t.elapsed());
        assert_eq!(
            db.get(b"after").unwrap().as_deref(),
            Some(&b"space returned"[..])
        );
        std::thread::sleep(CHECK_EVERY);
        assert!(disk.admit(0, 0, u64::MAX).is_ok());
        drop(db);
    }
}
