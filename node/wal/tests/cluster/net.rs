//! A step-driven in-memory network. A node's transport only queues its
//! messages; they reach other nodes when the test calls [`Net::deliver`],
//! in an order that does not depend on thread timing, through the faults
//! the test set: links dropping a share of messages (from a seeded
//! generator, so a run repeats), cut links, isolated nodes, ignored message
//! types. [`Net::recover`] lifts them all.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use shardhouse_wal::eraftpb::{Message, MessageType};
use shardhouse_wal::{NodeId, ShardId, Transport, Wal};

/// One message on its way.
struct Envelope {
    from: NodeId,
    to: NodeId,
    shard: ShardId,
    msg: Message,
}

/// The faults in force.
#[derive(Default)]
struct Faults {
    /// Share of messages lost on a directed link (1.0 = the link is cut).
    drop: HashMap<(NodeId, NodeId), f64>,
    ignore: HashSet<MessageType>,
}

impl Faults {
    fn loses(&self, e: &Envelope, rng: &mut SplitMix) -> bool {
        if self.ignore.contains(&e.msg.get_msg_type()) {
            return true;
        }
        match self.drop.get(&(e.from, e.to)) {
            Some(&rate) if rate >= 1.0 => true,
            Some(&rate) => rng.next_unit() < rate,
            None => false,
        }
    }
}

/// splitmix64: a tiny seeded generator, so lossy runs repeat exactly.
struct SplitMix(u64);

impl SplitMix {
    fn next_unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub struct Net {
    members: Vec<NodeId>,
    /// Running nodes; a message to any other node is lost.
    nodes: Mutex<HashMap<NodeId, Arc<Wal>>>,
    queue: Mutex<Vec<Envelope>>,
    faults: Mutex<Faults>,
    rng: Mutex<SplitMix>,
    delivered: Mutex<u64>,
    dropped: Mutex<u64>,
}

impl Net {
    pub fn new(members: Vec<NodeId>, seed: u64) -> Net {
        Net {
            members,
            nodes: Mutex::new(HashMap::new()),
            queue: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            rng: Mutex::new(SplitMix(seed)),
            delivered: Mutex::new(0),
            dropped: Mutex::new(0),
        }
    }

    /// The transport a node's WAL sends through.
    pub fn port(self: &Arc<Self>, from: NodeId) -> Arc<dyn Transport> {
        Arc::new(Port {
            from,
            net: self.clone(),
        })
    }

    pub fn attach(&self, id: NodeId, wal: Arc<Wal>) {
        self.nodes.lock().insert(id, wal);
    }

    pub fn detach(&self, id: NodeId) {
        self.nodes.lock().remove(&id);
    }

    /// Loses `rate` (0..=1) of the messages from `from` to `to`.
    pub fn drop(&self, from: NodeId, to: NodeId, rate: f64) {
        self.faults.lock().drop.insert((from, to), rate);
    }

    /// Loses `rate` of the messages on every link.
    pub fn drop_all(&self, rate: f64) {
        for &a in &self.members {
            for &b in &self.members {
                if a != b {
                    self.drop(a, b, rate);
                }
            }
        }
    }

    /// Cuts the link between `a` and `b`, both ways.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        self.drop(a, b, 1.0);
        self.drop(b, a, 1.0);
    }

    /// Cuts every link of `id`.
    pub fn isolate(&self, id: NodeId) {
        for &o in &self.members {
            if o != id {
                self.cut(id, o);
            }
        }
    }

    /// Loses every message of type `t`.
    pub fn ignore(&self, t: MessageType) {
        self.faults.lock().ignore.insert(t);
    }

    /// Lifts every fault.
    pub fn recover(&self) {
        *self.faults.lock() = Faults::default();
    }

    /// (delivered, dropped) message counts so far.
    pub fn counts(&self) -> (u64, u64) {
        (*self.delivered.lock(), *self.dropped.lock())
    }

    /// Hands every queued message to its node, unless a fault loses it.
    /// Returns how many messages left the queue. The order is by link and
    /// shard, keeping each sender's order per shard: poll threads queue
    /// concurrently, so the queue's own order varies from run to run.
    pub fn deliver(&self) -> usize {
        let mut batch = std::mem::take(&mut *self.queue.lock());
        batch.sort_by_key(|e| (e.from, e.to, e.shard));
        let n = batch.len();
        let nodes = self.nodes.lock().clone();
        let faults = self.faults.lock();
        let mut rng = self.rng.lock();
        let (mut delivered, mut dropped) = (0, 0);
        for e in batch {
            let target = nodes.get(&e.to);
            if target.is_none() || faults.loses(&e, &mut rng) {
                dropped += 1;
                continue;
            }
            // A replica destroyed meanwhile refuses it, as over the wire.
            let _ = target.expect("checked").step(e.shard, e.msg);
            delivered += 1;
        }
        *self.delivered.lock() += delivered;
        *self.dropped.lock() += dropped;
        n
    }
}

struct Port {
    from: NodeId,
    net: Arc<Net>,
}

impl Transport for Port {
    fn send(&self, to: NodeId, msgs: Vec<(ShardId, Message)>) {
        let mut q = self.net.queue.lock();
        for (shard, msg) in msgs {
            q.push(Envelope {
                from: self.from,
                to,
                shard,
                msg,
            });
        }
    }
}
