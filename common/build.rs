fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Arrow IPC payloads stay `Bytes`, so decoding a WriteRequest or a
        // WalEntry from a `Bytes` buffer slices it instead of copying the
        // points (the copies were ~5% of a node's CPU at RF=3).
        .bytes(".shardhouse.node.v1.WriteRequest")
        .bytes(".shardhouse.node.v1.WriteManyRequest")
        .bytes(".shardhouse.node.v1.TableBatch")
        .bytes(".shardhouse.node.v1.WalEntry")
        // A snapshot (hundreds of MB) is cut into chunks that slice it.
        .bytes(".shardhouse.node.v1.SnapshotChunk")
        .compile_protos(
            &[
                "proto/shardhouse/node.proto",
                "proto/shardhouse/ingest.proto",
                "proto/shardhouse/backup.proto",
                "proto/prometheus/remote.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
