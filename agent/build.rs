//! Build script of the agent: with the `hip` feature, compiles `kernels/hip/gpufleet.hip` into one
//! AMDGPU code object per target and generates the table that embeds them
//! (`$OUT_DIR/hip_code_objects.rs`, included by `src/backend/hip/code_objects.rs`). Without the
//! feature it does nothing, so the default build needs no ROCm and no clang.
//!
//! Why ahead of time: the legacy cards (gfx803, gfx1010) get no kernels from ROCm, and a run must
//! not depend on hipRTC or on the host's device libraries. The sources use compiler builtins only,
//! so `-nogpulib -nogpuinc` builds them for any target with a plain upstream clang.
//!
//! - Targets: `GPUFLEET_HIP_TARGETS` (comma or space separated, e.g. `gfx1030,gfx942`), else
//!   [`DEFAULT_TARGETS`].
//! - Compiler: `GPUFLEET_HIP_CLANG` when set, else the first of clang-19 … clang-15, ROCm's own
//!   clang (`$ROCM_PATH/llvm/bin/clang`, `$HIP_PATH/llvm/bin/clang`, `/opt/rocm/llvm/bin/clang`)
//!   and `clang` that compiles the target: gfx942 needs clang 17 or later, the others 15. Device
//!   linking needs the matching `ld.lld` (lld-19 next to clang-19).
//! - Code object version 4: the newest that ROCm 5.x loads, and ROCm 6 still loads it.
//!
//! A target that no compiler can build fails the build with what to install: the `hip` feature
//! was asked for explicitly, and an agent without its code objects could not run anything.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The archs the fleet has or that ROCm users commonly run: RX 580 (gfx803), Vega (gfx900),
/// MI50/Radeon VII (gfx906), MI100 (gfx908), MI210/MI250 (gfx90a), RX 5600/5700 (gfx1010),
/// RX 6800/6900 (gfx1030, also what HSA_OVERRIDE_GFX_VERSION=10.3.0 asks for), RX 7900
/// (gfx1100), MI300X (gfx942).
const DEFAULT_TARGETS: &[&str] = &[
    "gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx1010", "gfx1030", "gfx1100", "gfx942",
];

/// Compilers tried in order when `GPUFLEET_HIP_CLANG` is not set.
fn clang_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for v in (15..=19).rev() {
        out.push(PathBuf::from(format!("clang-{v}")));
        out.push(PathBuf::from(format!("/usr/lib/llvm-{v}/bin/clang")));
    }
    for var in ["ROCM_PATH", "HIP_PATH"] {
        if let Ok(root) = std::env::var(var) {
            out.push(Path::new(&root).join("llvm/bin/clang"));
        }
    }
    out.push(PathBuf::from("/opt/rocm/llvm/bin/clang"));
    out.push(PathBuf::from("clang"));
    out
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_HIP").is_none() {
        return;
    }
    for var in [
        "GPUFLEET_HIP_TARGETS",
        "GPUFLEET_HIP_CLANG",
        "ROCM_PATH",
        "HIP_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let src_dir = manifest.join("../kernels/hip");
    let entry = src_dir.join("gpufleet.hip");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&src_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", src_dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    sources.sort();
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    let targets = targets();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("hip");
    std::fs::create_dir_all(&out_dir).expect("create OUT_DIR/hip");

    let candidates: Vec<PathBuf> = match std::env::var_os("GPUFLEET_HIP_CLANG") {
        Some(c) => vec![PathBuf::from(c)],
        None => clang_candidates(),
    };
    let present: Vec<(PathBuf, String)> = candidates
        .iter()
        .filter_map(|c| version(c).map(|v| (c.clone(), v)))
        .collect();
    if present.is_empty() {
        panic!(
            "the `hip` feature compiles kernels/hip with clang, and none was found (tried {}). \
             Install clang-19 and lld-19 (Debian/Ubuntu: `apt-get install clang-19 lld-19`), \
             or point GPUFLEET_HIP_CLANG at a clang with the AMDGPU target.",
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    // One thread per target: each is an independent clang process.
    let results: Vec<(String, Compiled)> = std::thread::scope(|s| {
        let handles: Vec<_> = targets
            .iter()
            .map(|t| {
                let (present, entry, out_dir) = (&present, &entry, &out_dir);
                s.spawn(move || (t.clone(), compile(present, entry, out_dir, t)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("compile thread"))
            .collect()
    });

    // Each object is a static aligned to a page: include_bytes! alone only guarantees byte
    // alignment, and ELF readers (and HSA's loader) expect at least the header's 8.
    let mut statics = String::from(
        "/// A code object's bytes at page alignment.\n\
         #[repr(C, align(4096))]\n\
         pub struct Aligned<T: ?Sized>(pub T);\n\n",
    );
    let mut table = String::from(
        "/// `(target, compiler version, code object)` for each configured target, in the order of\n\
         /// GPUFLEET_HIP_TARGETS (or the default list).\n\
         pub static CODE_OBJECTS: &[(&str, &str, &[u8])] = &[\n",
    );
    let mut failures = Vec::new();
    for (target, result) in results {
        match result {
            Ok((compiler, path)) => {
                let len = std::fs::metadata(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                    .len();
                let name = format!("CODE_OBJECT_{}", target.to_ascii_uppercase());
                statics.push_str(&format!(
                    "static {name}: Aligned<[u8; {len}]> = Aligned(*include_bytes!({:?}));\n",
                    path.display().to_string()
                ));
                table.push_str(&format!("    ({target:?}, {compiler:?}, &{name}.0),\n"));
            }
            Err(why) => failures.push(format!("{target}: {why}")),
        }
    }
    table.push_str("];\n");
    if !failures.is_empty() {
        panic!(
            "the `hip` feature could not build its code objects:\n{}\n\
             gfx942 needs clang 17 or later; install clang-19 and lld-19 (Debian/Ubuntu: \
             `apt-get install clang-19 lld-19`), or leave the target out with \
             GPUFLEET_HIP_TARGETS.",
            failures.join("\n")
        );
    }
    let configured = format!(
        "/// The targets this build was configured for.\npub const TARGETS: &[&str] = &{targets:?};\n"
    );
    std::fs::write(
        out_dir.join("../hip_code_objects.rs"),
        format!("{statics}\n{table}\n{configured}"),
    )
    .expect("write hip_code_objects.rs");
}

/// The configured targets, validated as `gfx` followed by hex digits, without duplicates.
fn targets() -> Vec<String> {
    let list: Vec<String> = match std::env::var("GPUFLEET_HIP_TARGETS") {
        Ok(v) if !v.trim().is_empty() => v
            .split([',', ' ', ';'])
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_ascii_lowercase)
            .collect(),
        _ => DEFAULT_TARGETS.iter().map(|t| t.to_string()).collect(),
    };
    let mut out: Vec<String> = Vec::new();
    for t in list {
        let valid = t
            .strip_prefix("gfx")
            .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_hexdigit()));
        if !valid {
            panic!(
                "GPUFLEET_HIP_TARGETS: `{t}` is not an AMDGPU target name like gfx1030 \
                 (features such as :xnack- are not accepted: the code objects are built for \
                 xnack and sramecc `any`)"
            );
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// A target's compiler version and code object path, or why no compiler built it.
type Compiled = Result<(String, PathBuf), String>;

/// `clang --version`'s first line, or `None` when `clang` does not run.
fn version(clang: &Path) -> Option<String> {
    let out = Command::new(clang).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
}

/// Compiles `entry` for `target` with the first compiler that manages; returns that compiler's
/// version and the code object's path, or every compiler's error.
fn compile(present: &[(PathBuf, String)], entry: &Path, out_dir: &Path, target: &str) -> Compiled {
    let out = out_dir.join(format!("{target}.co"));
    let mut errors = Vec::new();
    for (clang, version) in present {
        let result = Command::new(clang)
            .args(["-x", "hip", "-std=c++17"])
            .arg(format!("--offload-arch={target}"))
            .args([
                "-nogpulib",
                "-nogpuinc",
                "--cuda-device-only",
                "--no-gpu-bundle-output",
                "-O3",
                "-mcode-object-version=4",
                "-Wall",
            ])
            .arg(entry)
            .arg("-o")
            .arg(&out)
            .output();
        match result {
            Ok(o) if o.status.success() => return Ok((version.clone(), out)),
            Ok(o) => {
                let stderr = String::from_utf8_lossy(&o.stderr);
                let first: Vec<&str> = stderr.lines().take(4).collect();
                errors.push(format!(
                    "{} ({version}): {}",
                    clang.display(),
                    first.join(" | ")
                ));
            }
            Err(e) => errors.push(format!("{}: {e}", clang.display())),
        }
    }
    Err(errors.join("; "))
}
