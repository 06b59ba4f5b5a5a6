//! Compiles the Vulkan shaders `vulkan/*.comp` to SPIR-V with glslc when it
//! is installed, into OUT_DIR, with the same command as
//! `vulkan/build_spv.sh`; without glslc (or if it fails on a shader) the
//! committed `vulkan/spv/NAME.spv` is used, so a build never needs a shader
//! compiler. CI runs `vulkan/check_spv.sh` so the committed modules always
//! match their sources.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = Path::new("vulkan");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("spv");
    std::fs::create_dir_all(&out).expect("creating OUT_DIR/spv");
    println!("cargo:rerun-if-changed=vulkan");
    let glslc = Command::new("glslc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "comp"))
                .collect()
        })
        .unwrap_or_default();
    sources.sort();
    for src in sources {
        let name = src
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        println!("cargo:rerun-if-changed={}", src.display());
        let target = out.join(format!("{name}.spv"));
        let committed = dir.join("spv").join(format!("{name}.spv"));
        let compiled = glslc
            && Command::new("glslc")
                .args(["--target-env=vulkan1.1", "-O", "-o"])
                .arg(&target)
                .arg(&src)
                .status()
                .is_ok_and(|s| s.success());
        if !compiled {
            if glslc {
                println!(
                    "cargo:warning=glslc failed on {}; using the committed SPIR-V",
                    src.display()
                );
            }
            std::fs::copy(&committed, &target)
                .unwrap_or_else(|e| panic!("{}: no committed SPIR-V ({e})", committed.display()));
        }
    }
    // Include files changing must rebuild too.
    println!("cargo:rerun-if-changed=vulkan/include");
}
