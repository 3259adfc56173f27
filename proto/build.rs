//! Compiles the wire contract with `protox` (pure Rust: no system `protoc`), writes the encoded
//! descriptor set for gRPC reflection, and generates prost messages and tonic services from it.

use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "sigx/actors/v1/errors.proto",
        "sigx/actors/v1/types.proto",
        "sigx/actors/v1/app.proto",
        "sigx/actors/v1/mesh.proto",
        // The standard rich error model every sigx error is carried in (vendored).
        "google/rpc/status.proto",
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={file}");
    }
    let fds = protox::compile(files, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("sigx_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".sigx.actors.v1")
        .compile_fds(fds)?;
    Ok(())
}
