//! Generate the wire protocol's Rust types, client and server from the
//! one schema file, `proto/milliscale/v1/milliscale.proto`, with a
//! protobuf compiler written in Rust (protox): no `protoc` to install.

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let schema = format!("{root}/milliscale/v1/milliscale.proto");
    println!("cargo:rerun-if-changed={schema}");
    let descriptors = match protox::compile([&schema], [root]) {
        Ok(d) => d,
        Err(e) => panic!("{schema}: {e}"),
    };
    if let Err(e) = tonic_prost_build::configure()
        // Malformed requests are INVALID_ARGUMENT (src/codec.rs).
        .codec_path("crate::codec::WireCodec")
        // Keys and values as `bytes::Bytes`: decoded as slices of the
        // receive buffer, not copied into an allocation each.
        .bytes(".milliscale.v1")
        .compile_fds(descriptors)
    {
        panic!("generating the gRPC code from {schema}: {e}");
    }
}
