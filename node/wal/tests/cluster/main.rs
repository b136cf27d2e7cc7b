//! Deterministic in-process multi-node harness: several real `Wal`s, each
//! with its own RocksDB directory, on manual clocks, connected by a
//! step-driven in-memory network ([`net::Net`]), applying to an in-memory
//! state machine that flags duplicates or reordering ([`sm::MemSm`]).
//!
//! Nothing here waits on the wall clock. The test moves the cluster: a
//! *settle* delivers queued messages and waits ([`Wal::barrier`]) until
//! every node handled them, until no message is left in flight; a *tick*
//! moves every running node's clock by one `tick_interval` and settles.
//! Conditions are awaited for at most [`MAX_TICKS`] ticks, so a test that
//! cannot reach its state fails at once instead of after a wall-clock wait.

mod net;
mod sm;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use anyhow::{bail, Context};
use shardhouse_wal::eraftpb::Message;
use shardhouse_wal::{
    Committed, NodeId, Role, ShardId, ShardStatus, StateMachine, TickSource, Wal, WalConfig,
    WalError,
};

use net::Net;
use sm::{MemSm, REJECT};

/// The most ticks a test waits for a condition: 20 election timeouts.
const MAX_TICKS: u64 = 200;

fn test_config(node_id: NodeId, dir: PathBuf) -> WalConfig {
    WalConfig {
        node_id,
        dir,
        ticks: TickSource::Manual,
        // With a manual clock the interval only scales the deadlines below:
        // compaction every 4 ticks, proposals time out after 100.
        tick_interval: Duration::from_millis(50),
        election_ticks: 10,
        heartbeat_ticks: 2,
        compact_interval: Duration::from_millis(200),
        propose_timeout: Duration::from_secs(5),
        poll_threads: 2,
        apply_threads: 2,
        write_buffer_bytes: 8 << 20,
        ..Default::default()
    }
}

/// A request to a WAL, polled by hand: the WAL answers it from its own
/// threads, so no runtime has to drive it, and the test can tell whether
/// it was answered after each step.
struct InFlight<'a, T> {
    fut: Pin<Box<dyn Future<Output = T> + 'a>>,
    out: Option<T>,
    rt: tokio::runtime::Handle,
}

impl<T> InFlight<'_, T> {
    /// True once answered. The first poll hands the request to the WAL.
    fn poll(&mut self) -> bool {
        if self.out.is_none() {
            // The WAL's futures bound their waits with tokio timers, which
            // need a runtime to exist (never to run: nothing awaits them).
            let _rt = self.rt.enter();
            let mut cx = TaskContext::from_waker(Waker::noop());
            if let Poll::Ready(v) = self.fut.as_mut().poll(&mut cx) {
                self.out = Some(v);
            }
        }
        self.out.is_some()
    }

    fn answer(mut self) -> Option<T> {
        self.poll();
        self.out
    }
}

struct Cluster {
    net: Arc<Net>,
    ids: Vec<NodeId>,
    dirs: HashMap<NodeId, PathBuf>,
    wals: HashMap<NodeId, Arc<Wal>>,
    sms: HashMap<NodeId, Arc<MemSm>>,
    rt: tokio::runtime::Runtime,
    /// Ticks since the cluster started.
    ticks: AtomicU64,
    _tmp: tempfile::TempDir,
    tweak: fn(&mut WalConfig),
}

impl Cluster {
    fn new(n: u64) -> anyhow::Result<Cluster> {
        Self::with(n, |_| {})
    }

    fn with(n: u64, tweak: fn(&mut WalConfig)) -> anyhow::Result<Cluster> {
        let ids: Vec<NodeId> = (1..=n).collect();
        let mut c = Cluster {
            net: Arc::new(Net::new(ids.clone(), 0x5eed)),
            ids,
            dirs: HashMap::new(),
            wals: HashMap::new(),
            sms: HashMap::new(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?,
            ticks: AtomicU64::new(0),
            _tmp: tempfile::tempdir()?,
            tweak,
        };
        for id in c.ids.clone() {
            let dir = c._tmp.path().join(format!("node{id}"));
            c.dirs.insert(id, dir);
            c.start(id, Arc::new(MemSm::default()))?;
        }
        Ok(c)
    }

    fn start(&mut self, id: NodeId, sm: Arc<MemSm>) -> anyhow::Result<()> {
        let mut cfg = test_config(id, self.dirs[&id].clone());
        (self.tweak)(&mut cfg);
        let wal = Wal::open(cfg, self.net.port(id), sm.clone()).context("open wal")?;
        self.net.attach(id, wal.clone());
        self.wals.insert(id, wal);
        self.sms.insert(id, sm);
        Ok(())
    }

    fn stop(&mut self, id: NodeId) {
        self.net.detach(id);
        if let Some(w) = self.wals.remove(&id) {
            w.shutdown();
        }
    }

    /// Running nodes in id order.
    fn running(&self) -> Vec<&Arc<Wal>> {
        let mut v: Vec<_> = self.wals.iter().collect();
        v.sort_by_key(|(id, _)| **id);
        v.into_iter().map(|(_, w)| w).collect()
    }

    /// Delivers messages until none is in flight and every node handled
    /// all it was given.
    fn settle(&self) {
        for _ in 0..100_000 {
            for w in self.running() {
                w.barrier().expect("barrier on a running WAL");
            }
            if self.net.deliver() == 0 {
                return;
            }
        }
        panic!("the network never went quiet");
    }

    /// One tick of every running node, then settle.
    fn tick(&self) {
        self.settle();
        for w in self.running() {
            w.tick().expect("manual tick");
        }
        self.settle();
        self.ticks.fetch_add(1, Ordering::Relaxed);
    }

    fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Ticks until `cond` holds, at most [`MAX_TICKS`] times; returns the
    /// ticks it took.
    fn until(&self, what: &str, mut cond: impl FnMut(&Cluster) -> bool) -> anyhow::Result<u64> {
        self.settle();
        for t in 0..=MAX_TICKS {
            if cond(self) {
                return Ok(t);
            }
            self.tick();
        }
        bail!("not reached within {MAX_TICKS} ticks: {what}")
    }

    /// Hands a request to its WAL (without waiting for the answer).
    fn start_request<'a, T>(&self, fut: impl Future<Output = T> + 'a) -> InFlight<'a, T> {
        let mut call = InFlight {
            fut: Box::pin(fut),
            out: None,
            rt: self.rt.handle().clone(),
        };
        call.poll();
        call
    }

    /// Runs a request to its answer, ticking at most [`MAX_TICKS`] times.
    fn run<T>(&self, what: &str, fut: impl Future<Output = T>) -> anyhow::Result<T> {
        let mut call = self.start_request(fut);
        self.until(what, |_| call.poll())?;
        Ok(call.answer().expect("answered"))
    }

    fn bootstrap(&self, shard: ShardId, on: &[NodeId]) -> anyhow::Result<()> {
        for id in on {
            self.wals[id].create_replica(shard, on)?;
        }
        Ok(())
    }

    fn status(&self, id: NodeId, shard: ShardId) -> Option<ShardStatus> {
        self.wals
            .get(&id)?
            .shard_states()
            .into_iter()
            .find(|s| s.shard == shard)
    }

    fn leaders(&self, shard: ShardId, among: &[NodeId]) -> Vec<(NodeId, u64)> {
        among
            .iter()
            .filter_map(|id| {
                let s = self.status(*id, shard)?;
                (s.role == Role::Leader).then_some((*id, s.term))
            })
            .collect()
    }

    /// Ticks until exactly one of `among` leads `shard` and returns it.
    fn leader(&self, shard: ShardId, among: &[NodeId]) -> anyhow::Result<NodeId> {
        self.until(&format!("a single leader of shard {shard}"), |c| {
            c.leaders(shard, among).len() == 1
        })?;
        Ok(self.leaders(shard, among)[0].0)
    }

    /// Proposes on whichever replica leads, retrying on leader changes.
    fn propose(
        &self,
        shard: ShardId,
        data: Vec<u8>,
        among: &[NodeId],
    ) -> anyhow::Result<Committed> {
        let mut last = None;
        for _ in 0..20 {
            let l = self.leader(shard, among)?;
            match self.run(
                "a proposal's answer",
                self.wals[&l].propose(shard, data.clone()),
            )? {
                Ok(c) => return Ok(c),
                Err(e @ (WalError::NotLeader { .. } | WalError::Unavailable(_))) => {
                    last = Some(e);
                    self.tick();
                }
                Err(e) => bail!("propose failed: {e}"),
            }
        }
        bail!("propose kept failing: {last:?}")
    }

    /// Ticks until each of `nodes` applied `expected.len()` entries of
    /// `shard`, then checks they are `expected`, each applied once in order.
    fn wait_applied(
        &self,
        shard: ShardId,
        nodes: &[NodeId],
        expected: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        for id in nodes {
            let sm = self.sms[id].clone();
            self.until(
                &format!("node {id} to apply {} entries", expected.len()),
                |_| sm.payloads(shard).len() >= expected.len(),
            )?;
            let got = sm.payloads(shard);
            if got != expected {
                bail!(
                    "node {id} applied {} entries that differ from the {} committed ones",
                    got.len(),
                    expected.len()
                );
            }
            sm.check()?;
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in self.ids.clone() {
            self.stop(id);
        }
    }
}

fn payload(tag: &str, i: usize) -> Vec<u8> {
    let mut v = format!("{tag}-{i}-").into_bytes();
    v.resize(v.len() + 100 + i % 50, i as u8);
    v
}

// ------------------------------------------------------------------ tests

mod apply_outcomes;
mod log_and_restarts;
mod membership;
mod network_faults;
mod stuck_replicas;
mod wall_clock;
