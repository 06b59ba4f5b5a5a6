//! The `hip` build: the embedded code objects are AMDGPU ELF files for exactly the configured
//! targets (read from each header's machine flags) with every kernel the planner launches, and
//! `gpufleet-agent describe` from a hip build lists HIP (unavailable with the HIP error name on a
//! host without an AMD GPU) next to the other backends.
//!
//! Without the feature these tests do not exist, and `GPUFLEET_REQUIRE=hip-build` makes that a
//! failure instead of a silent skip.

mod common;

/// Whether this test binary was built with `--features hip`.
const HIP_BUILT: bool = cfg!(feature = "hip");

#[test]
fn hip_build_is_required_only_where_the_feature_is_on() {
    let required = common::required("hip-build");
    if required && !HIP_BUILT {
        panic!(
            "GPUFLEET_REQUIRE names hip-build but this test binary was built without \
             `--features hip`: run `cargo test -p gpufleet-agent --features hip`"
        );
    }
    if !HIP_BUILT {
        eprintln!("skipping: the hip build tests need `--features hip`");
    }
}

#[cfg(feature = "hip")]
mod hip {
    use gpufleet_agent::backend::hip::{code_objects, plan};
    use object::{Object, ObjectSymbol, SymbolKind};
    use std::collections::BTreeSet;

    /// `EF_AMDGPU_MACH_AMDGCN_*` of the default targets, as in llvm/BinaryFormat/ELF.h (LLVM 19).
    const MACH: &[(&str, u32)] = &[
        ("gfx803", 0x2a),
        ("gfx900", 0x2c),
        ("gfx906", 0x2f),
        ("gfx908", 0x30),
        ("gfx90a", 0x3f),
        ("gfx1010", 0x33),
        ("gfx1030", 0x36),
        ("gfx1100", 0x41),
        ("gfx942", 0x4c),
    ];
    const EM_AMDGPU: u16 = 224;

    /// The targets the build was configured with: GPUFLEET_HIP_TARGETS when this test was
    /// compiled (cargo rebuilds it when that changes), else the default list.
    fn expected_targets() -> BTreeSet<String> {
        match option_env!("GPUFLEET_HIP_TARGETS") {
            Some(v) if !v.trim().is_empty() => v
                .split([',', ' ', ';'])
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_ascii_lowercase)
                .collect(),
            _ => MACH.iter().map(|(t, _)| t.to_string()).collect(),
        }
    }

    /// The target named by `e_flags & EF_AMDGPU_MACH`.
    fn target_of(flags: u32) -> String {
        let mach = flags & 0xff;
        MACH.iter()
            .find(|(_, m)| *m == mach)
            .map(|(t, _)| t.to_string())
            .or_else(|| gpufleet_agent::backend::hip::elf::mach_name(mach).map(str::to_string))
            .unwrap_or_else(|| format!("unknown mach {mach:#x}"))
    }

    #[test]
    fn code_objects_are_amdgpu_elf_for_exactly_the_configured_targets() {
        let embedded = code_objects::embedded();
        let mut from_headers = BTreeSet::new();
        for e in &embedded {
            let file = object::read::elf::ElfFile64::<object::Endianness>::parse(e.bytes)
                .unwrap_or_else(|err| panic!("{}: not an ELF64 file: {err}", e.target));
            let header = file.elf_header();
            let endian = file.endian();
            assert_eq!(
                header.e_machine.get(endian),
                EM_AMDGPU,
                "{}: e_machine is not EM_AMDGPU",
                e.target
            );
            let flags = header.e_flags.get(endian);
            let target = target_of(flags);
            assert_eq!(target, e.target, "{}: e_flags {flags:#x}", e.target);
            assert!(
                from_headers.insert(target.clone()),
                "two code objects for {target}"
            );
            // Code object v4 (EI_ABIVERSION 2): what ROCm 5.x loads.
            assert_eq!(header.e_ident.abi_version, 2, "{}", e.target);
            assert!(
                !e.compiler.is_empty(),
                "{}: compiler not recorded",
                e.target
            );
        }
        assert_eq!(from_headers, expected_targets());
        let configured: BTreeSet<String> = code_objects::configured_targets()
            .iter()
            .map(|t| t.to_string())
            .collect();
        assert_eq!(configured, expected_targets());
    }

    #[test]
    fn every_kernel_is_in_every_code_object() {
        let wanted = plan::kernel_symbols();
        assert!(wanted.len() >= 40, "{} kernels", wanted.len());
        for e in code_objects::embedded() {
            let file = object::File::parse(e.bytes).unwrap();
            let mut functions = BTreeSet::new();
            let mut descriptors = BTreeSet::new();
            for sym in file.symbols().chain(file.dynamic_symbols()) {
                let Ok(name) = sym.name() else { continue };
                if sym.kind() == SymbolKind::Text && sym.is_definition() {
                    functions.insert(name.to_string());
                } else if let Some(k) = name.strip_suffix(".kd") {
                    descriptors.insert(k.to_string());
                }
            }
            for k in &wanted {
                assert!(functions.contains(k), "{}: no function {k}", e.target);
                assert!(
                    descriptors.contains(k),
                    "{}: no kernel descriptor {k}.kd",
                    e.target
                );
            }
            // The agent's own reader agrees with `object`.
            let own = gpufleet_agent::backend::hip::elf::parse(e.bytes).unwrap();
            assert_eq!(own.target(), Some(e.target));
            for k in &wanted {
                assert!(own.kernels.contains(k), "{}: elf.rs misses {k}", e.target);
            }
        }
    }

    #[test]
    fn describe_lists_hip_next_to_the_other_backends() {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpufleet-agent"))
            .args(["describe", "--json"])
            .env(
                "GPUFLEET_CACHE_DIR",
                std::env::temp_dir().join("gpufleet-hip-test"),
            )
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "describe failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let backends = info["backends"].as_array().unwrap();
        let devices: Vec<&str> = info["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["id"].as_str())
            .collect();
        let backend = |name: &str| {
            backends
                .iter()
                .find(|b| b["name"] == name)
                .unwrap_or_else(|| panic!("{name} not listed: {backends:?}"))
        };
        let hip = backend("hip");
        if hip["available"] == true {
            // A host with an AMD GPU: its devices are listed.
            assert!(devices.iter().any(|d| d.starts_with("hip:")), "{devices:?}");
        } else {
            let reason = hip["reason"].as_str().unwrap();
            assert!(
                reason.contains("hipError"),
                "the reason names the HIP error: {reason}"
            );
            if !std::path::Path::new("/dev/kfd").exists() {
                assert_eq!(reason, "no HIP device (hipErrorNoDevice)");
            }
            assert!(!devices.iter().any(|d| d.starts_with("hip:")));
        }
        // The kernels HIP implements are listed even when it is unavailable.
        assert!(!hip["kernels"].as_array().unwrap().is_empty());
        // The other backends are still served.
        assert_eq!(backend("cpu")["available"], true);
        assert!(devices.contains(&"cpu:0"), "{devices:?}");
        for other in ["opencl", "vulkan"] {
            let b = backend(other);
            if b["available"] == true {
                let prefix = format!("{other}:");
                assert!(
                    devices.iter().any(|d| d.starts_with(&prefix)),
                    "{other} is available but lists no device: {devices:?}"
                );
            } else {
                assert!(
                    !super::common::required(other),
                    "GPUFLEET_REQUIRE names {other} but it is unavailable: {}",
                    b["reason"]
                );
            }
        }
    }
}
