//! shardhouse-node: one storage node process. It accepts routers' batches
//! (`Node.Write`), replicates them through the multi-Raft WAL, applies
//! committed entries to the embedded chDB engine, and serves admin and
//! Raft traffic. See docs/node.md.

pub mod admission;
pub mod auth;
pub mod backup;
pub mod cluster;
pub mod context;
pub mod directory;
pub mod engine_damage;
pub mod error;
pub mod faults;
pub mod http;
pub mod leadership;
pub mod memory;
pub mod metrics;
pub mod options;
pub mod preload;
pub mod priority;
pub mod server;
pub mod services;
pub mod state_machine;
pub mod transport;

pub use error::{NodeError, Result};
pub use options::{Cli, NodeOptions};
