//! Shared model of Shardhouse: the pieces every component must agree on
//! byte for byte (series_id, shard choice, Arrow schema, wire protocol).

pub mod series;
pub mod shard;
pub mod shard_map;

/// Generated gRPC types for the node API (`proto/shardhouse/node.proto`).
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("shardhouse.node.v1");
}
