//! CPU and memory cost per step, read from /proc for each component's pid
//! (router, nodes, etcd, the load generator itself).

use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

#[derive(Debug, Clone, Default)]
pub struct ResourceSpec {
    /// A directory of `<name>.pid` files, re-read at every step because
    /// components restart (scripts/lib/cluster.sh writes it).
    pub pid_dir: Option<PathBuf>,
    /// Extra `name=pid` pairs.
    pub pids: Vec<(String, i32)>,
}

impl ResourceSpec {
    pub fn components(&self) -> Vec<(String, i32)> {
        let mut out = self.pids.clone();
        if let Some(dir) = &self.pid_dir {
            if let Ok(rd) = std::fs::read_dir(dir) {
                let mut found: Vec<(String, i32)> = rd
                    .flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().to_string();
                        let comp = name.strip_suffix(".pid")?.to_string();
                        let pid = std::fs::read_to_string(e.path())
                            .ok()?
                            .trim()
                            .parse()
                            .ok()?;
                        Some((comp, pid))
                    })
                    .collect();
                found.sort();
                out.extend(found);
            }
        }
        out.push(("loadtest".into(), std::process::id() as i32));
        out
    }

    pub fn is_empty(&self) -> bool {
        self.pid_dir.is_none() && self.pids.is_empty()
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ComponentUsage {
    pub name: String,
    /// Average cores busy over the step (user + system).
    pub cpu_cores: Option<f64>,
    /// Highest resident set size seen during the step, MiB.
    pub peak_rss_mib: Option<f64>,
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime in clock ticks from /proc/<pid>/stat.
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ticks(&s)
}

fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces; fields restart after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11, 12.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

pub fn rss_kib(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vmrss(&s)
}

fn parse_vmrss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Samples RSS in the background while a step runs.
pub struct Sampler {
    start: Instant,
    comps: Vec<(String, i32, Option<u64>)>,
    peaks: Arc<Mutex<Vec<Option<u64>>>>,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub fn start(spec: &ResourceSpec) -> Sampler {
        let comps: Vec<(String, i32, Option<u64>)> = spec
            .components()
            .into_iter()
            .map(|(n, p)| {
                let t = cpu_ticks(p);
                (n, p, t)
            })
            .collect();
        let peaks = Arc::new(Mutex::new(vec![None; comps.len()]));
        let stop = Arc::new(Notify::new());
        let pids: Vec<i32> = comps.iter().map(|c| c.1).collect();
        let (p2, s2) = (peaks.clone(), stop.clone());
        let task = tokio::spawn(async move {
            loop {
                {
                    let mut g = p2.lock().unwrap_or_else(|e| e.into_inner());
                    for (i, pid) in pids.iter().enumerate() {
                        if let Some(r) = rss_kib(*pid) {
                            g[i] = Some(g[i].map_or(r, |m: u64| m.max(r)));
                        }
                    }
                }
                tokio::select! {
                    _ = s2.notified() => break,
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        });
        Sampler {
            start: Instant::now(),
            comps,
            peaks,
            stop,
            task,
        }
    }

    pub async fn finish(self) -> Vec<ComponentUsage> {
        let wall = self.start.elapsed().as_secs_f64().max(1e-3);
        self.stop.notify_one();
        let _ = self.task.await;
        let hz = clock_ticks();
        let peaks = self.peaks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.comps
            .iter()
            .enumerate()
            .map(|(i, (name, pid, t0))| {
                let cpu = match (t0, cpu_ticks(*pid)) {
                    (Some(a), Some(b)) if b >= *a => Some((b - a) as f64 / hz / wall),
                    _ => None,
                };
                ComponentUsage {
                    name: name.clone(),
                    cpu_cores: cpu,
                    peak_rss_mib: peaks[i].map(|k| k as f64 / 1024.0),
                }
            })
            .collect()
    }
}

pub fn parse_pid_arg(s: &str) -> crate::Result<(String, i32)> {
    let (n, p) = s
        .split_once('=')
        .ok_or_else(|| crate::Error::InvalidArgument(format!("--pid {s:?}: expected name=pid")))?;
    let pid = p
        .parse()
        .map_err(|_| crate::Error::InvalidArgument(format!("--pid {s:?}: pid is not a number")))?;
    Ok((n.to_string(), pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_name() {
        let stat = "1234 (my proc) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0 1 0";
        assert_eq!(parse_stat_ticks(stat), Some(333));
    }

    #[test]
    fn parses_vmrss() {
        assert_eq!(parse_vmrss("Name:\tx\nVmRSS:\t  2048 kB\n"), Some(2048));
        assert_eq!(parse_vmrss("Name:\tx\n"), None);
    }

    #[tokio::test]
    async fn samples_own_process() {
        let s = Sampler::start(&ResourceSpec::default());
        // burn a little CPU so the counter moves
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let u = s.finish().await;
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].name, "loadtest");
        assert!(u[0].peak_rss_mib.unwrap() > 1.0);
        assert!(u[0].cpu_cores.is_some());
    }
}
