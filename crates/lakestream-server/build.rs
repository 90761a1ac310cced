//! Compiles `proto/lakestream/v1/lakestream.proto` into prost messages and tonic server and
//! client stubs without a `protoc` binary: protox parses the files into a FileDescriptorSet,
//! which tonic-prost-build turns into Rust. The CloudEvents messages it imports
//! (`io.cloudevents.v1`) are generated here too, in their own module; they have the same wire
//! format as the hand-written prost types of `lakestream-cloudevents`, so a batch converts by
//! re-encoding, or by mapping the package with `extern_path` once this crate depends on it.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    let files = [
        proto_root.join("lakestream/v1/lakestream.proto"),
        proto_root.join("io/cloudevents/v1/cloudevents.proto"),
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files[..1], [&proto_root])?;
    // Served by gRPC server reflection (with its imports), so grpcurl needs no .proto files.
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("lakestream_descriptor.bin"), prost::Message::encode_to_vec(&descriptors))?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".lakestream.v1")
        // Encodes into a buffer reserved at the message's size (src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::LakestreamCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
