//! The load models: open (constant arrival rate, drops instead of queueing),
//! closed (N virtual users), and the fixed-work runs behind the protocol
//! table and the small-write profile.

use crate::encode::{Body, Prepared};
use crate::resources::{ComponentUsage, ResourceSpec, Sampler};
use crate::stats::StepStats;
use crate::target::{Outcome, Target};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Pre-encoded requests, handed out round robin.
pub struct Pool {
    reqs: Vec<Prepared>,
    next: AtomicUsize,
}

impl Pool {
    pub fn new(reqs: Vec<Prepared>) -> Arc<Pool> {
        assert!(
            !reqs.is_empty(),
            "a request pool needs at least one request"
        );
        Arc::new(Pool {
            reqs,
            next: AtomicUsize::new(0),
        })
    }

    pub fn next(&self) -> &Prepared {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.reqs[i % self.reqs.len()]
    }

    pub fn avg_points(&self) -> f64 {
        self.reqs.iter().map(|r| r.points).sum::<u64>() as f64 / self.reqs.len() as f64
    }

    pub fn avg_bytes(&self) -> f64 {
        let total: usize = self
            .reqs
            .iter()
            .map(|r| match &r.body {
                Body::Http { body, .. } => body.len(),
                Body::Grpc(m) => prost::Message::encoded_len(m),
            })
            .sum();
        total as f64 / self.reqs.len() as f64
    }
}

/// What one step measured.
pub struct StepOutcome {
    pub stats: StepStats,
    /// Step duration plus the time it took the last in-flight request to
    /// finish: a server that queues pays for it in achieved throughput.
    pub elapsed: Duration,
    pub resources: Vec<ComponentUsage>,
}

/// Open model: `rate` requests/s for `duration`. A request whose start time
/// comes while `max_inflight` requests are outstanding is dropped, so the
/// offered load never silently turns into a queue in the client.
pub async fn open_step(
    target: &Target,
    pool: &Arc<Pool>,
    rate: f64,
    duration: Duration,
    max_inflight: usize,
    res: &ResourceSpec,
) -> StepOutcome {
    let sampler = Sampler::start(res);
    let stats = Arc::new(Mutex::new(StepStats::default()));
    let sem = Arc::new(Semaphore::new(max_inflight));
    let n = (rate * duration.as_secs_f64()).round().max(1.0) as u64;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = tokio::time::Instant::now();
    let mut dropped = 0u64;
    for i in 0..n {
        tokio::time::sleep_until(start + interval.mul_f64(i as f64)).await;
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            dropped += 1;
            continue;
        };
        let (t, p, st) = (target.clone(), pool.clone(), stats.clone());
        tokio::spawn(async move {
            let req = p.next();
            let t0 = Instant::now();
            let o = t.send(req).await;
            let lat = t0.elapsed();
            st.lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(&o, req.points, lat);
            drop(permit);
        });
    }
    // Wait for stragglers (bounded by the request timeout inside send()).
    let _all = sem.acquire_many(max_inflight as u32).await;
    let elapsed = start.elapsed().max(duration);
    let resources = sampler.finish().await;
    let mut s = std::mem::take(&mut *stats.lock().unwrap_or_else(|e| e.into_inner()));
    s.dropped = dropped;
    StepOutcome {
        stats: s,
        elapsed,
        resources,
    }
}

/// Closed model: `vus` virtual users, each sending its next request as soon
/// as the previous one is answered, for `duration`.
pub async fn closed_step(
    target: &Target,
    pool: &Arc<Pool>,
    vus: usize,
    duration: Duration,
    res: &ResourceSpec,
) -> StepOutcome {
    let sampler = Sampler::start(res);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(vus);
    for _ in 0..vus {
        let (t, p) = (target.clone(), pool.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = StepStats::default();
            while Instant::now() < deadline {
                let req = p.next();
                let t0 = Instant::now();
                let o = t.send(req).await;
                s.record(&o, req.points, t0.elapsed());
                if matches!(o, Outcome::Transport) {
                    // A refused connection returns at once; don't spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            s
        }));
    }
    let mut stats = StepStats::default();
    for t in tasks {
        if let Ok(s) = t.await {
            stats.merge(s);
        }
    }
    let elapsed = start.elapsed();
    let resources = sampler.finish().await;
    StepOutcome {
        stats,
        elapsed,
        resources,
    }
}

/// Fixed work: `total_requests` requests from the pool over `workers`
/// concurrent workers (the protocol study's setup). gRPC streaming sends
/// `stream_batches` requests per stream; its latency is per stream call
/// divided by the batches it carried.
pub async fn fixed_work(
    target: &Target,
    pool: &Arc<Pool>,
    total_requests: u64,
    workers: usize,
    stream_batches: usize,
    streaming: bool,
) -> StepOutcome {
    let start = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (t, p, issued, stop) = (target.clone(), pool.clone(), issued.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = StepStats::default();
            loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let want = if streaming { stream_batches as u64 } else { 1 };
                let first = issued.fetch_add(want, Ordering::Relaxed);
                if first >= total_requests {
                    break;
                }
                let take = want.min(total_requests - first);
                let t0 = Instant::now();
                if streaming {
                    let mut msgs = Vec::with_capacity(take as usize);
                    let mut points = 0;
                    for _ in 0..take {
                        let r = p.next();
                        points += r.points;
                        if let Body::Grpc(m) = &r.body {
                            msgs.push(m.clone());
                        }
                    }
                    let o = t.grpc_write_stream(msgs).await;
                    let per = t0.elapsed() / take as u32;
                    for _ in 0..take {
                        s.record(&o, points / take, per);
                    }
                } else {
                    let r = p.next();
                    let o = t.send(r).await;
                    s.record(&o, r.points, t0.elapsed());
                }
                if s.error_count() > 1000 {
                    // The server is refusing everything; report, don't hammer.
                    stop.store(true, Ordering::Relaxed);
                }
            }
            s
        }));
    }
    let mut stats = StepStats::default();
    for t in tasks {
        if let Ok(s) = t.await {
            stats.merge(s);
        }
    }
    StepOutcome {
        stats,
        elapsed: start.elapsed(),
        resources: vec![],
    }
}
