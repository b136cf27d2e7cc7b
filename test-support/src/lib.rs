//! Real parts for Shardhouse's tests and benchmarks, in one place instead
//! of a copy per crate: free loopback ports, a real etcd, `shardhouse-node`
//! and `shardhouse-router` processes (kill -9 and restart on the same data
//! dir and ports), a local-cluster builder, polling with deadlines, Arrow
//! batch builders and a leader-following Write client for the node API.
//!
//! Only tests and benchmark binaries depend on this crate. A missing part
//! (etcd, chDB, a binary) fails with the command that installs or builds
//! it: the tests never skip.

pub mod arrow;
pub mod cluster;
pub mod dirs;
pub mod etcd;
pub mod measure;
pub mod node;
pub mod node_client;
pub mod ports;
pub mod process;
pub mod roles;
pub mod router;
pub mod wait;

pub use cluster::{LocalCluster, LocalClusterBuilder};
pub use dirs::{chdb_dir, temp_dir};
pub use etcd::Etcd;
pub use node::NodeProc;
pub use ports::free_port;
pub use process::{ready_field, spawn_ready, Proc};
pub use router::RouterProc;
pub use wait::{eventually, wait_for};
