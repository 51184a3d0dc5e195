//! Generates the protobuf and gRPC code of `proto/` with a vendored protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Read at run time: `env!` would bake in the directory the build script was compiled in,
    // which breaks when one target directory serves clones at different paths.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = std::path::Path::new(&manifest_dir).join("../../proto");
    let files = [
        "fabrx/v1/tx.proto",
        "fabrx/v1/committer.proto",
        "fabrx/v1/orderer.proto",
        "fabrx/v1/consensus.proto",
        "fabrx/v1/token.proto",
        // Fabric's messages and ordering API (docs/fabric.md).
        "fabric/common.proto",
        "fabric/orderer.proto",
    ];
    let paths: Vec<_> = files.iter().map(|f| root.join(f)).collect();
    for p in &paths {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        // Every service and client decodes through the bounded codec (docs/limits.md).
        .codec_path("crate::codec::BoundedCodec")
        // A Fabric envelope is kept as the bytes the client sent (`wire::fabric::RawEnvelope`):
        // routers forward them unchanged, so a block's data hash is the one Fabric computes.
        .extern_path(".common.Envelope", "crate::fabric::RawEnvelope")
        // Config maps in key order: a genesis block encodes the same on every node.
        .btree_map(".common")
        .compile_with_config(config, &paths, &[root])?;
    Ok(())
}
