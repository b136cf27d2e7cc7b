//! Loopback ports for processes that cannot report a port they picked
//! themselves (etcd, kube-apiserver): reserve one, release it, pass it on.
//!
//! Why not port 0: the kernel hands out port-0 binds and the source ports
//! of outgoing connections from one range (`ip_local_port_range`), so a
//! port it gave us a moment ago can be some other test's client socket by
//! the time etcd binds it (CI saw `bind: address already in use`). Ports
//! are therefore picked below that range, where the kernel never hands
//! any out on its own; only another picker like this one can collide,
//! and [`spawn_etcd`](crate::etcd::spawn_etcd) retries on that.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port tests pick from: above the well-known and most
/// registered services' ports.
const PICK_LOW: u16 = 10_000;

/// A loopback port that was free a moment ago, outside the kernel's
/// ephemeral range.
pub fn free_port() -> u16 {
    let high = ephemeral_low().saturating_sub(1).max(PICK_LOW + 1);
    let span = u32::from(high - PICK_LOW);
    for _ in 0..span {
        let candidate = PICK_LOW + (next_seed() % span) as u16;
        if TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            return candidate;
        }
    }
    // Every port below the range is taken: fall back to the kernel's pick.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

/// The low end of the kernel's ephemeral port range (Linux's default when
/// it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| parse_range_low(&s))
        .unwrap_or(32_768)
}

/// `"32768\t60999\n"` -> 32768.
fn parse_range_low(text: &str) -> Option<u16> {
    text.split_whitespace().next()?.parse().ok()
}

/// Differs between test processes (pid, clock) and between calls in one
/// (a counter), so parallel test binaries walk different ports.
fn next_seed() -> u32 {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // A multiplicative hash spreads consecutive calls over the range.
    (std::process::id() ^ nanos ^ call.wrapping_mul(0x9E37_79B9)).wrapping_mul(2_654_435_761) >> 7
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

    #[test]
    fn picked_ports_are_below_the_ephemeral_range() {
        let low = ephemeral_low();
        for _ in 0..50 {
            let p = free_port();
            assert!((PICK_LOW..low).contains(&p), "{p} not in {PICK_LOW}..{low}");
        }
    }

    #[test]
    fn the_range_file_is_parsed() {
        assert_eq!(parse_range_low("32768\t60999\n"), Some(32768));
        assert_eq!(parse_range_low("1024 65000"), Some(1024));
        assert_eq!(parse_range_low(""), None);
        assert_eq!(parse_range_low("x 1"), None);
    }
}
