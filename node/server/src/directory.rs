//! Where other nodes are: gRPC addresses learnt from live etcd
//! registrations (preferred: they follow restarts onto new ports), the
//! shard map's node table, and admin requests that name peers.

use parking_lot::RwLock;
use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct PeerDirectory {
    registered: RwLock<HashMap<u64, String>>,
    fallback: RwLock<HashMap<u64, String>>,
}

impl PeerDirectory {
    /// gRPC `host:port` of a node, if known.
    pub fn addr(&self, node: u64) -> Option<String> {
        if let Some(a) = self.registered.read().get(&node) {
            return Some(a.clone());
        }
        self.fallback.read().get(&node).cloned()
    }

    /// Whether the node holds a live etcd registration (its process runs).
    pub fn is_registered(&self, node: u64) -> bool {
        self.registered.read().contains_key(&node)
    }

    /// A live registration appeared or changed.
    pub fn set_registered(&self, node: u64, addr: String) {
        self.registered.write().insert(node, addr);
    }

    /// A registration's lease ended; keep the last address as a fallback.
    pub fn remove_registered(&self, node: u64) {
        if let Some(a) = self.registered.write().remove(&node) {
            self.fallback.write().entry(node).or_insert(a);
        }
    }

    /// Addresses from the shard map or admin requests.
    pub fn set_fallback(&self, node: u64, addr: String) {
        if !addr.is_empty() {
            self.fallback.write().insert(node, addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_wins_over_fallback() {
        let d = PeerDirectory::default();
        assert_eq!(d.addr(2), None);
        d.set_fallback(2, "a:1".into());
        assert_eq!(d.addr(2).as_deref(), Some("a:1"));
        d.set_registered(2, "b:2".into());
        assert_eq!(d.addr(2).as_deref(), Some("b:2"));
        d.remove_registered(2);
        assert_eq!(d.addr(2).as_deref(), Some("a:1"));
    }
}
