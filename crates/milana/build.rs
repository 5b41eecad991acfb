//! Generate the shard primaries' protocol from its schema file,
//! `proto/milliscale/v1/milana.proto`, with protox (no `protoc`).

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let schema = format!("{root}/milliscale/v1/milana.proto");
    println!("cargo:rerun-if-changed={schema}");
    let descriptors = match protox::compile([&schema], [root]) {
        Ok(d) => d,
        Err(e) => panic!("{schema}: {e}"),
    };
    if let Err(e) = tonic_prost_build::configure().compile_fds(descriptors) {
        panic!("generating the gRPC code from {schema}: {e}");
    }
}
