//! Shared model of Shardhouse: the pieces every component must agree on
//! byte for byte (series_id, shard choice, Arrow schema, wire protocol).

pub mod credential;
pub mod layered;
pub mod lineproto;
pub mod names;
pub mod rollup;
mod scan;
pub mod series;
pub mod shard;
pub mod shard_map;
pub mod sql_check;
pub mod status;
pub mod wire;

/// Generated gRPC types for the node API (`proto/shardhouse/node.proto`).
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("shardhouse.node.v1");
}

/// Generated gRPC types for the router's ingest API
/// (`proto/shardhouse/ingest.proto`).
pub mod ingest_proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("shardhouse.ingest.v1");
}

/// Prometheus remote_write messages (`proto/prometheus/remote.proto`).
pub mod prom_proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("prometheus");
}
