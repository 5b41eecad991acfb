//! Generate the Rust code of every wire protocol from its schema under
//! `proto/`, with a protobuf compiler written in Rust (protox): no `protoc`
//! to install. This crate is the schemas' only generator; the server, the
//! client and the shards use what it generates.

use std::path::PathBuf;

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // `milliscale serve`'s protocol.
    let schema = format!("{root}/milliscale/v1/milliscale.proto");
    let descriptors = compile(root, &schema);
    // The encoded descriptors, which the server offers through gRPC
    // reflection (`v1::FILE_DESCRIPTOR_SET`).
    let encoded = prost::Message::encode_to_vec(&descriptors);
    if let Err(e) = std::fs::write(out.join("milliscale_v1_descriptors.bin"), encoded) {
        panic!("writing the schema's descriptors: {e}");
    }
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

/// The schema's descriptors, compiled by protox.
fn compile(root: &str, schema: &str) -> prost_types::FileDescriptorSet {
    println!("cargo:rerun-if-changed={schema}");
    match protox::compile([schema], [root]) {
        Ok(d) => d,
        Err(e) => panic!("{schema}: {e}"),
    }
}
