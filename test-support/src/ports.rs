//! Loopback ports for processes that cannot report a port they picked
//! themselves (etcd, kube-apiserver): reserve one, release it, pass it on.

use std::net::TcpListener;

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_again() {
        let p = free_port();
        assert_ne!(p, 0);
        TcpListener::bind(("127.0.0.1", p)).expect("the port is free again");
    }
}
