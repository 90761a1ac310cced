//! Compiles `proto/oxia/*.proto` into Rust messages without a `protoc` binary: protox parses
//! the files into a FileDescriptorSet, which tonic-prost-build turns into prost structs.
//! No gRPC stubs are generated: the client builds each method's HTTP/2 path from the
//! configured service name (see `src/rpc.rs`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    // Inside the crate, so that the published package builds.
    let proto_root = manifest_dir.join("proto");
    let files = [proto_root.join("oxia/client.proto"), proto_root.join("oxia/rpc_status.proto")];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [&proto_root])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .bytes(".io.streamnative.oxia.proto.PutRequest.value")
        .bytes(".io.streamnative.oxia.proto.GetResponse.value")
        .compile_fds(descriptors)?;
    Ok(())
}
