//! Background work yields the CPU to the write path.
//!
//! A write is acknowledged once its entry is committed, so only the threads
//! that receive, log and replicate entries are on the latency path (tokio
//! workers, WAL poll and apply threads). Flushes into chDB, chDB's own query
//! and merge pools and RocksDB's compactions can run a little later without
//! any write waiting for them, yet they took about half of a node's CPU in
//! bursts. Left at the same priority they queued acknowledgements behind
//! them: at RF=3 on 2 cores, 150k points/s had p95 1.02 s; with the
//! background threads at nice 10 it was 0.31 s (docs/benchmarks.md).
//!
//! chDB starts its threads itself, so a sweeper thread renices every thread
//! of the process that is not on the write path, and does it again for
//! threads started later. Raising nice needs no privilege.

use std::collections::HashSet;
use std::time::Duration;

/// Thread names (prefixes) that stay at normal priority: the write path.
const WRITE_PATH: &[&str] = &[
    "tokio-rt-worker",
    "wal-poll",
    "wal-apply",
    "shardhouse-node",
    // RocksDB's memtable flushes: a stalled flush stalls WAL appends.
    "rocksdb:high",
    "priority-sweep",
];

/// Whether a thread called `name` does background work that may wait.
pub fn is_background(name: &str) -> bool {
    !WRITE_PATH.iter().any(|p| name.starts_with(p))
}

/// Lowers the priority of every background thread of this process to
/// `nice` now and every `every` from now on (0 turns it off).
pub fn spawn_sweeper(nice: i32, every: Duration) -> std::io::Result<()> {
    if nice == 0 {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("priority-sweep".into())
        .spawn(move || {
            let mut done = HashSet::new();
            loop {
                sweep(nice, &mut done);
                std::thread::sleep(every);
            }
        })?;
    Ok(())
}

/// One pass over /proc/self/task; returns how many threads it reniced.
pub fn sweep(nice: i32, done: &mut HashSet<i32>) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut live = HashSet::new();
    let mut changed = 0;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        live.insert(tid);
        if done.contains(&tid) {
            continue;
        }
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if is_background(name.trim_end()) && set_nice(tid, nice) {
            changed += 1;
        }
        // Write-path threads are remembered too, so each thread is looked at once.
        done.insert(tid);
    }
    // Thread ids are reused; forget the ones that exited.
    done.retain(|tid| live.contains(tid));
    changed
}

fn set_nice(tid: i32, nice: i32) -> bool {
    let Ok(id) = libc::id_t::try_from(tid) else {
        return false;
    };
    // SAFETY: setpriority only reads its integer arguments; on Linux
    // PRIO_PROCESS with a thread id applies to that thread alone.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, id, nice) == 0 }
}

/// The nice value of a thread of this process (tests, diagnostics).
pub fn nice_of(tid: i32) -> Option<i32> {
    // Field 19 of /proc/<pid>/task/<tid>/stat, counted after the
    // parenthesised name (which may contain spaces).
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(16)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_path_keeps_its_priority_and_everything_else_yields() {
        for name in [
            "tokio-rt-worker",
            "wal-poll-0",
            "wal-apply-1",
            "rocksdb:high",
        ] {
            assert!(!is_background(name), "{name}");
        }
        for name in [
            "engine-flush-0",
            "QueryPipelineEx",
            "MergeMutate",
            "BgSchPool",
            "rocksdb:low",
        ] {
            assert!(is_background(name), "{name}");
        }
    }

    #[test]
    fn a_sweep_renices_background_threads_once() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let bg = std::thread::Builder::new()
            .name("engine-flush-9".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() }).unwrap();
                let _ = stop_rx.recv();
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        let path = std::thread::Builder::new()
            .name("wal-poll-9".into())
            .spawn(|| {
                // SAFETY: gettid has no preconditions.
                let me = unsafe { libc::gettid() };
                let mut done = HashSet::new();
                sweep(7, &mut done);
                (me, nice_of(me), done)
            })
            .unwrap();
        let (me, my_nice, done) = path.join().unwrap();
        assert_eq!(nice_of(tid), Some(7));
        assert_eq!(my_nice, Some(0), "a write-path thread keeps nice 0");
        assert!(done.contains(&tid) && done.contains(&me));
        stop_tx.send(()).unwrap();
        bg.join().unwrap();
    }
}
