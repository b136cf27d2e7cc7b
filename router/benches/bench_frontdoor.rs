//! `make bench-frontdoor`: CPU cost per point of the front door on one
//! thread: parse + series_id + shard split (column build) + Arrow IPC
//! encode, for a low-cardinality cpu/mem/disk set and a 1M-series set.
//!
//! Stages are measured as cumulative passes over the same bodies (parse
//! only; + series_id; + shard split and column build; + IPC encode) and
//! reported as differences; each pass is the best of several runs, timed
//! in thread CPU time (CLOCK_THREAD_CPUTIME_ID). Passes 3 and 4 admit
//! every series under the database's cardinality limit as the router does
//! by default (`--max-series-per-db` 10,000,000), with the router-wide
//! series cache at its default size (`series_cache_entries`); after the
//! first run every series is known and cached, as in steady traffic (the
//! first run alone is printed as `cold_ns_per_point`). The last lines are
//! `frontdoor_ns_per_point=<N>` for the low-cardinality set and
//! `frontdoor_1m_ns_per_point=<N>` for the 1M-series set.

#![allow(clippy::print_stdout)] // a benchmark prints its figures

use shardhouse_common::lineproto::{self, FieldParser, Precision, SeriesParser};
use shardhouse_common::series::series_id_of_key;
use shardhouse_router::config::RouterOptions;
use shardhouse_router::write::batch::{wire_tables, RequestBatch};
use shardhouse_router::write::cardinality::{Cardinality, DbSeries};
use shardhouse_router::write::series_cache::{DbCache, SeriesCache};
use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;

const LINES_PER_BODY: usize = 5_000;
const SHARDS: u32 = 64;
const RUNS: usize = 5;

/// A tiny deterministic generator so the bench needs no dependency.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn value(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1000.0
    }
}

fn push_fields(out: &mut Vec<u8>, names: &[&str; 5], rng: &mut Lcg, ts: i64) {
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write!(out, "{n}={}", rng.value()).unwrap();
    }
    writeln!(out, " {ts}").unwrap();
}

/// cpu/mem/disk for 4 hosts (12 series), 5 float fields each, like Telegraf.
fn low_cardinality(points: usize) -> Vec<Vec<u8>> {
    let sets: [(&str, [&str; 5]); 3] = [
        (
            "cpu",
            [
                "usage_user",
                "usage_system",
                "usage_idle",
                "usage_iowait",
                "usage_steal",
            ],
        ),
        (
            "mem",
            ["used_percent", "available", "free", "cached", "buffered"],
        ),
        (
            "disk",
            ["used_percent", "free", "used", "inodes_free", "inodes_used"],
        ),
    ];
    let mut rng = Lcg(42);
    let mut bodies = Vec::new();
    let mut body = Vec::new();
    let mut ts = 1_700_000_000_000_000_000i64;
    for i in 0..points {
        let (m, names) = &sets[i % 3];
        let host = (i / 3) % 4;
        write!(
            body,
            "{m},dc=eu-west-1a,host=server-{host:02},region=eu-west "
        )
        .unwrap();
        push_fields(&mut body, names, &mut rng, ts);
        ts += 1_000;
        if (i + 1).is_multiple_of(LINES_PER_BODY) {
            bodies.push(std::mem::take(&mut body));
        }
    }
    if !body.is_empty() {
        bodies.push(body);
    }
    bodies
}

/// hosts x regions x datacenters x services = 250 x 4 x 10 x 100 = 1M
/// series, one point each, 5 float fields.
fn high_cardinality() -> Vec<Vec<u8>> {
    let names = [
        "latency_p50",
        "latency_p99",
        "requests",
        "errors",
        "saturation",
    ];
    let mut rng = Lcg(7);
    let mut bodies = Vec::new();
    let mut body = Vec::new();
    let mut n = 0usize;
    let ts = 1_700_000_000_000_000_000i64;
    for host in 0..250 {
        for region in 0..4 {
            for dc in 0..10 {
                for service in 0..100 {
                    write!(
                        body,
                        "app,datacenter=dc-{dc},host=host-{host:04},region=region-{region},service=svc-{service:03} "
                    )
                    .unwrap();
                    push_fields(&mut body, &names, &mut rng, ts + n as i64);
                    n += 1;
                    if n.is_multiple_of(LINES_PER_BODY) {
                        bodies.push(std::mem::take(&mut body));
                    }
                }
            }
        }
    }
    if !body.is_empty() {
        bodies.push(body);
    }
    bodies
}

/// CPU time of the calling thread: the cost on one core, unaffected by
/// other processes competing for the machine (wall time is not).
fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

fn best_of<F: FnMut() -> usize>(mut f: F) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut points = 0;
    for _ in 0..RUNS {
        let t = thread_cpu_ns();
        points = f();
        best = best.min(thread_cpu_ns() - t);
    }
    (best, points)
}

/// Pass 1: split lines, parse fields and timestamps.
fn pass_parse(bodies: &[Vec<u8>]) -> usize {
    let mut fp = FieldParser::default();
    let mut n = 0;
    for body in bodies {
        // As RequestBatch::add_line_protocol: one UTF-8 check per body.
        let ok = lineproto::is_utf8(body);
        for (_, line) in lineproto::lines(body) {
            let (raw, rest) = lineproto::split_series(line).unwrap();
            let f = fp.parse(rest).unwrap();
            black_box((ok, raw, f.timestamp, f.iter().count()));
            n += 1;
        }
    }
    n
}

/// Pass 2: pass 1 + series_id (memo of raw series bytes per body; tags
/// parsed, sorted and hashed on a miss).
fn pass_series(bodies: &[Vec<u8>]) -> usize {
    let mut fp = FieldParser::default();
    let mut sp = SeriesParser::default();
    let mut key = Vec::new();
    let mut n = 0;
    for body in bodies {
        let mut memo: HashMap<&[u8], u64> = HashMap::new();
        let ok = lineproto::is_utf8(body);
        for (_, line) in lineproto::lines(body) {
            let (raw, rest) = lineproto::split_series(line).unwrap();
            let f = fp.parse(rest).unwrap();
            let id = match memo.get(raw) {
                Some(&id) => id,
                None => {
                    let s = sp.parse(raw).unwrap();
                    s.canonical_key_into(&mut key);
                    let id = series_id_of_key(&key);
                    memo.insert(raw, id);
                    id
                }
            };
            black_box((ok, id, f.timestamp, f.iter().count()));
            n += 1;
        }
    }
    n
}

/// Pass 3: the router's request batch (parse, series_id, admission, shard
/// split, column build), without encoding.
fn pass_columns(bodies: &[Vec<u8>], db: &DbSeries, cache: Option<DbCache<'_>>) -> usize {
    let mut n = 0;
    for body in bodies {
        let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(db));
        if let Some(c) = cache {
            b.use_series_cache(c);
        }
        b.add_line_protocol(body);
        n += b.points();
        black_box(&b);
    }
    n
}

/// Pass 4: pass 3 + Arrow IPC encode of every (shard, measurement) batch.
fn pass_full(bodies: &[Vec<u8>], db: &DbSeries, cache: Option<DbCache<'_>>) -> usize {
    let mut n = 0;
    for body in bodies {
        let mut b = RequestBatch::new(SHARDS, Precision::Nanosecond, 0, Some(db));
        if let Some(c) = cache {
            b.use_series_cache(c);
        }
        b.add_line_protocol(body);
        let (batches, summary) = b.finish().unwrap();
        assert_eq!(summary.rejected, 0);
        n += summary.points;
        // Each table as its own write, as a request alone on its shards
        // is sent (the router encodes when the shard's write leaves).
        for sb in &batches {
            black_box(wire_tables(&[sb]).unwrap());
        }
    }
    n
}

fn measure(name: &str, bodies: &[Vec<u8>]) -> f64 {
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let defaults = RouterOptions::default();
    let limits = Cardinality::new(defaults.max_series_per_db);
    let db = limits.db(name).expect("a limit is set");
    // Made with `limits`, as the router does (its entries say "admitted").
    let cache = SeriesCache::new(defaults.series_cache_entries);
    let cache_db = cache.db(name);
    let (parse, points) = best_of(|| pass_parse(bodies));
    let (series, _) = best_of(|| pass_series(bodies));
    // The first pass meets every series for the first time.
    let t = thread_cpu_ns();
    pass_full(bodies, &db, cache_db);
    let cold = thread_cpu_ns() - t;
    let (columns, _) = best_of(|| pass_columns(bodies, &db, cache_db));
    let (full, p4) = best_of(|| pass_full(bodies, &db, cache_db));
    assert_eq!(points, p4, "every point parsed");
    let per = |ns: f64| ns / points as f64;
    let total = per(full);
    println!(
        "dataset={name} points={points} bytes_per_point={:.0} shards={SHARDS} lines_per_body={LINES_PER_BODY}",
        bytes as f64 / points as f64
    );
    println!(
        "  parse_ns_per_point={:.1} series_id_ns_per_point={:.1} shard_split_ns_per_point={:.1} ipc_encode_ns_per_point={:.1} total_ns_per_point={:.1} points_per_sec_one_core={:.0} cold_ns_per_point={:.1}",
        per(parse),
        per(series - parse).max(0.0),
        per(columns - series).max(0.0),
        per(full - columns).max(0.0),
        total,
        1e9 / total,
        per(cold)
    );
    total
}

fn main() {
    // `bench-frontdoor low` skips the 1M-series set, `bench-frontdoor 1m`
    // the low one (quicker iterations, a profile of one set).
    let only = std::env::args().nth(1);
    let low_ns = (only.as_deref() != Some("1m")).then(|| {
        measure(
            "low_cardinality_cpu_mem_disk_12_series",
            &low_cardinality(1_000_000),
        )
    });
    let high_ns = (only.as_deref() != Some("low"))
        .then(|| measure("high_cardinality_1m_series", &high_cardinality()));
    if let Some(ns) = low_ns {
        println!("frontdoor_ns_per_point={}", ns.round() as u64);
    }
    if let Some(ns) = high_ns {
        println!("frontdoor_1m_ns_per_point={}", ns.round() as u64);
    }
}
