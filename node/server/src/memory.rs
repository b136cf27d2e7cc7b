//! Where the node's memory is, and giving back what glibc keeps.
//!
//! A node's memory has three holders: the Rust side (jemalloc, the global
//! allocator), the embedded engine (chDB, which allocates through glibc's
//! malloc) and the WAL's RocksDB (also glibc's malloc; its memtables are the
//! largest single holder, up to 4 x `--wal-write-buffer-bytes`).
//!
//! glibc keeps what is freed inside its arenas and hands it back to the
//! system only from the top of a heap. Memtables are freed 1 MiB block by
//! block once flushed, interleaved with the engine's allocations, so that
//! memory stayed in the process: in a soak at 140k points/s (RF=3), each
//! node's glibc arenas held 230-340 MB while its memtables held ~50-150 MB,
//! and one `malloc_trim(0)` brought a node from 624 to 436 MB RSS
//! (docs/benchmarks.md, "Soak"). RSS then climbed by 0.4-0.65 GB/h as more
//! arenas filled with freed blocks. A `malloc-trim` thread calls
//! `malloc_trim(0)` every `--malloc-trim-secs`, which releases the free
//! pages of every arena (glibc >= 2.8 also releases whole free pages in the
//! middle of a heap).

use crate::context::NodeContext;
use crate::metrics::{memory_part as part, metrics};
use std::time::{Duration, Instant};

/// Samples the memory gauges a scrape reports (cheap: a jemalloc epoch and
/// two RocksDB properties; the engine's own gauge is sampled by its ticker).
pub fn refresh_gauges(ctx: &NodeContext) {
    let g = &metrics().memory_bytes;
    // jemalloc's statistics are a snapshot taken at each epoch advance.
    if tikv_jemalloc_ctl::epoch::advance().is_ok() {
        if let Ok(n) = tikv_jemalloc_ctl::stats::allocated::read() {
            g.with_label_values(&[part::HEAP]).set(n as i64);
        }
        if let Ok(n) = tikv_jemalloc_ctl::stats::resident::read() {
            g.with_label_values(&[part::HEAP_RESIDENT]).set(n as i64);
        }
    }
    let wal = ctx.wal.memory();
    g.with_label_values(&[part::WAL_MEMTABLES])
        .set(wal.memtables as i64);
    g.with_label_values(&[part::WAL_SST_READERS])
        .set(wal.sst_readers as i64);
}

/// Calls `malloc_trim(0)` every `every` on a thread of its own (a
/// background thread: the priority sweeper renices it). Zero turns it off.
pub fn spawn_trimmer(every: Duration) -> std::io::Result<()> {
    if every.is_zero() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("malloc-trim".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            trim_once();
        })?;
    Ok(())
}

/// One trim; returns the bytes of resident memory it gave back (as far as
/// the RSS before and after tells: other threads allocate meanwhile).
pub fn trim_once() -> u64 {
    let before = resident_bytes();
    let started = Instant::now();
    trim();
    let m = metrics();
    m.malloc_trim_seconds
        .observe(started.elapsed().as_secs_f64());
    let released = before.saturating_sub(resident_bytes());
    m.malloc_trim_released_bytes.inc_by(released);
    released
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks;
    // it takes no pointers from us and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// The process's resident memory (`/proc/self/statm`), 0 where unknown.
pub fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * page_size()
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_gives_back_what_glibc_kept_after_a_free() {
        // The memtable pattern under glibc (tests run without jemalloc):
        // 1 MiB blocks freed while smaller allocations made between them
        // (the engine's) live on, so no heap can shrink from its top. One
        // freed 4 MiB mapping first raises glibc's mmap threshold above
        // 1 MiB, as a long-running process's has been.
        drop(std::hint::black_box(vec![1u8; 4 << 20]));
        let mut blocks = Vec::new();
        let mut pins = Vec::new();
        for _ in 0..256 {
            blocks.push(std::hint::black_box(vec![1u8; 1 << 20]));
            pins.push(std::hint::black_box(vec![1u8; 4 << 10]));
        }
        let grown = resident_bytes();
        drop(blocks);
        let kept = resident_bytes();
        assert!(
            kept + (128 << 20) > grown,
            "glibc gave back the blocks by itself ({grown} -> {kept}): nothing here needs a trim"
        );
        let released = trim_once();
        let after = resident_bytes();
        assert!(
            after + (128 << 20) < kept,
            "the trim should give back most of 256 MiB: {kept} -> {after} (released {released})"
        );
        assert!(released > 0);
        drop(pins);
    }
}
