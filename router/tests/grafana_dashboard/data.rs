//! The points the test writes: Telegraf's `cpu` (inputs.cpu, per core and
//! `cpu-total`) and `mem` (inputs.mem) measurements, as Telegraf writes them.

use std::ops::Range;

pub const HOSTS: [&str; 4] = ["api.example.com", "db-1", "web-1", "web-2"];
pub const CPUS: [&str; 3] = ["cpu-total", "cpu0", "cpu1"];
pub const MS: i64 = 1_000_000;

#[derive(Debug, Clone)]
pub struct Cpu {
    pub host: &'static str,
    pub cpu: &'static str,
    pub t: i64,
    pub user: f64,
    pub system: f64,
    pub iowait: f64,
}

#[derive(Debug, Clone)]
pub struct Mem {
    pub host: &'static str,
    pub t: i64,
    pub used: i64,
    pub available: i64,
    pub used_percent: f64,
}

/// xorshift: deterministic data without an extra dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Two hours of points every 10 s per host, ending at `end_ms`: jittered
/// times with sub-millisecond parts, 3% of samples missing, a 7-minute
/// outage of web-2, and no host reporting during `quiet` (ms), so a relative
/// range whose bound falls there answers the same whatever the router's
/// `now()`. `usage_user` values are distinct (a tiny per-point offset): the
/// percentile's point, and its time, is unique.
pub fn telegraf_points(end_ms: i64, quiet: Range<i64>) -> (Vec<Cpu>, Vec<Mem>) {
    let mut rng = Rng(0x6a7f_a11a_5eed);
    let (mut cpu, mut mem) = (Vec::new(), Vec::new());
    let start = end_ms - 2 * 3_600_000;
    let outage = (end_ms - 40 * 60_000)..(end_ms - 33 * 60_000);
    let mut k = 0u32;
    for host in HOSTS {
        let mut t_ms = start;
        while t_ms < end_ms {
            let t = (t_ms + rng.below(2_000) as i64) * MS + rng.below(1_000_000) as i64;
            t_ms += 10_000;
            if rng.below(100) < 3
                || quiet.contains(&(t / MS))
                || (host == "web-2" && outage.contains(&(t / MS)))
            {
                continue;
            }
            for c in CPUS {
                k += 1;
                cpu.push(Cpu {
                    host,
                    cpu: c,
                    t,
                    user: rng.below(60_000) as f64 / 1000.0 + f64::from(k) * 1e-9,
                    system: rng.below(20_000) as f64 / 1000.0,
                    iowait: rng.below(5_000) as f64 / 1000.0,
                });
            }
            let total: i64 = 16 << 30;
            let used = (1 << 30) + rng.below(7 << 30) as i64;
            mem.push(Mem {
                host,
                t,
                used,
                available: total - used,
                used_percent: used as f64 / total as f64 * 100.0,
            });
        }
    }
    (cpu, mem)
}

pub fn line_protocol(cpu: &[Cpu], mem: &[Mem], host: &str) -> String {
    let mut out = String::new();
    for p in cpu.iter().filter(|p| p.host == host) {
        let idle = 100.0 - p.user - p.system - p.iowait;
        out.push_str(&format!(
            "cpu,cpu={},host={} usage_user={},usage_system={},usage_iowait={},usage_idle={idle} {}\n",
            p.cpu, p.host, p.user, p.system, p.iowait, p.t
        ));
    }
    for p in mem.iter().filter(|p| p.host == host) {
        out.push_str(&format!(
            "mem,host={} used={}i,available={}i,total={}i,used_percent={} {}\n",
            p.host,
            p.used,
            p.available,
            p.used + p.available,
            p.used_percent,
            p.t
        ));
    }
    out
}
