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
    // The encoded descriptors, which the server offers through gRPC
    // reflection (`proto::FILE_DESCRIPTOR_SET`).
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
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
