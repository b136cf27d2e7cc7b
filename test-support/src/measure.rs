//! What the benchmarks measure besides wall time: process and per-thread
//! CPU, the load average they ran under, and numbers printed for people.

/// Process CPU (user + system of every thread, also exited ones), seconds.
pub fn process_cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The 1, 5 and 15 minute load averages, space-separated ("" when
/// unreadable): a figure taken on a busy machine says so.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The 1 minute load average ("?" when unreadable).
pub fn loadavg1() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split(' ').next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// CPU time of this process's threads, split into chDB's background merges
/// (threads named `MergeMutate`) and everything else (the insert pipeline
/// and the calling threads), from /proc/self/task. On a 2-core machine the
/// merges of earlier inserts compete with the next insert for the cores,
/// so the split tells what limits the wall-clock figure.
#[derive(Clone, Copy, Default)]
pub struct CpuSplit {
    pub inserts_s: f64,
    pub merges_s: f64,
}

impl CpuSplit {
    pub fn now() -> CpuSplit {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let mut out = CpuSplit::default();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return out;
        };
        for task in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ... utime stime ..." (fields 14 and 15).
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
            let t = |i: usize| {
                rest.get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let secs = (t(11) + t(12)) / ticks;
            if stat[open + 1..close].starts_with("MergeMutate") {
                out.merges_s += secs;
            } else {
                out.inserts_s += secs;
            }
        }
        out
    }

    pub fn since(self, earlier: CpuSplit) -> CpuSplit {
        CpuSplit {
            inserts_s: self.inserts_s - earlier.inserts_s,
            merges_s: self.merges_s - earlier.merges_s,
        }
    }
}

/// `n` rounded, with thousands separators: 12,800,000.
pub fn fmt_int(n: f64) -> String {
    let s = format!("{:.0}", n);
    let bytes = s.as_bytes();
    let mut out = String::new();
    for (i, c) in bytes.iter().enumerate() {
        if i > 0 && (bytes.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(*c as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated() {
        assert_eq!(fmt_int(12_800_000.0), "12,800,000");
        assert_eq!(fmt_int(999.4), "999");
        assert_eq!(fmt_int(1000.0), "1,000");
    }

    #[test]
    fn cpu_is_counted_for_this_process() {
        let before = process_cpu_s();
        // Burn at least 50 ms of CPU (/proc counts in clock ticks).
        let mut x = 0u64;
        while process_cpu_s() - before < 0.05 {
            for i in 0..1_000_000u64 {
                x = x.wrapping_add(std::hint::black_box(i));
            }
        }
        std::hint::black_box(x);
        assert!(CpuSplit::now().inserts_s > 0.0);
    }
}
