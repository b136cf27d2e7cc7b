//! Fuzzes what arrives over the wire as protobuf: Prometheus remote_write
//! bodies (snappy, then WriteRequest) and the node's gRPC requests
//! (Write, WriteMany, Query, Raft batches, storage ops) and the router's
//! gRPC ingest request. Decoding must succeed or fail, never panic.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run wire_messages`
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use shardhouse_common::{ingest_proto, prom_proto, proto};

fuzz_target!(|data: &[u8]| {
    if let Ok(raw) = snap::raw::Decoder::new().decompress_vec(data) {
        let _ = prom_proto::WriteRequest::decode(&raw[..]);
    }
    let _ = prom_proto::WriteRequest::decode(data);
    let _ = proto::WriteRequest::decode(data);
    let _ = proto::WriteManyRequest::decode(data);
    let _ = proto::QueryRequest::decode(data);
    let _ = proto::RaftBatch::decode(data);
    let _ = proto::StorageRequest::decode(data);
    let _ = ingest_proto::WriteRequest::decode(data);
});
