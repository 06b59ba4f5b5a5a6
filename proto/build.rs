//! Compiles `gpufleet/v1/*.proto` with protox (pure Rust, no system `protoc`)
//! and writes the encoded descriptor set for server reflection.

use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["gpufleet/v1/agent.proto", "gpufleet/v1/fleet.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("gpufleet_v1_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // JSON output of Describe and results for scripts; read back by the
        // coordinator (stored job specs and device descriptions). Messages
        // default missing fields, so JSON stored by an older gpufleet loads.
        .type_attribute(
            ".gpufleet.v1",
            "#[derive(serde::Serialize, serde::Deserialize)]",
        )
        .message_attribute(".gpufleet.v1", "#[serde(default)]")
        // The measurement settings are one Rust type in every layer: the kernels crate's, which
        // carries this message's tags (see `gpufleet_kernels::run`).
        .extern_path(
            ".gpufleet.v1.RunSettings",
            "::gpufleet_kernels::PartialSettings",
        )
        .compile_fds(fds)?;
    Ok(())
}
