fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(
            &[
                "proto/shardhouse/node.proto",
                "proto/shardhouse/ingest.proto",
                "proto/prometheus/remote.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
