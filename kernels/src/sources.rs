//! Device code of the kernels, embedded at build time: OpenCL C sources and Vulkan SPIR-V modules.
//!
//! They live in this crate, next to the catalog that defines what each kernel computes, so a change
//! of semantics and the device code that implements it are reviewed together, and every agent binary
//! carries the exact sources whose hash keys its program cache. The files are plain OpenCL C 1.1
//! (`kernels/opencl/*.cl`) that build on any conformant driver; which `-D` parameters each kernel
//! takes is documented at the top of its file, and the agent's OpenCL planner sets them.
//!
//! The Vulkan shaders are GLSL 4.50 (`kernels/vulkan/*.comp`, one entry point `main` each) compiled
//! to SPIR-V 1.3 by `kernels/vulkan/build_spv.sh`; the `.spv` files are committed, so a build needs
//! no shader compiler, and CI's `kernels/vulkan/check_spv.sh` fails when one no longer matches its
//! source. Each shader's bindings, push constants and specialization constants are documented at
//! its top, and the agent's Vulkan planner sets them.

/// The OpenCL C files, one constant per file.
pub mod opencl {
    /// `gemm.cl`: `gemm_naive`, `gemm_tiled`, `gemm_blocked` (f32, or f16 storage with
    /// `-DGPUFLEET_HALF`), batched through their last four arguments.
    pub const GEMM: &str = include_str!("../opencl/gemm.cl");
    /// `elementwise.cl`: `<stem>_f32` for each element-wise kernel's stem
    /// (`ElementwiseKernel::stem`; debug_wrong is `vec_add_f32` with `-DGPUFLEET_WRONG`).
    pub const ELEMENTWISE: &str = include_str!("../opencl/elementwise.cl");
    /// `rows.cl`: `<stem>_rows` for each row kernel's stem (`RowKernel::stem`), and the split-row
    /// kernels `split_stats` and `<stem>_split_apply`.
    pub const ROWS: &str = include_str!("../opencl/rows.cl");
    /// `conv.cl`: `conv2d_direct` and `im2col` (whose GEMM comes from [`GEMM`]).
    pub const CONV: &str = include_str!("../opencl/conv.cl");
    /// `model.cl`: a CNN's layers, `model_conv` (dense convolutions and linear layers as an
    /// implicit GEMM) and `model_layer` (the rest).
    pub const MODEL: &str = include_str!("../opencl/model.cl");
    /// `llm.cl`: the transformer's steps (`llm_embed`, `llm_rmsnorm`, `llm_gemv`,
    /// `llm_gemv_team`, `llm_gemv_rows`, `llm_matmul`, `llm_matmul_64`, `llm_rope`,
    /// `llm_attention`, `llm_attention_tiled`, `llm_swiglu`, `llm_add`, `llm_copy`; `llm_qembed`,
    /// `llm_qgemv` and `llm_qgemv_team` for q8_0 / q4_0 weights), fp16 weights
    /// with `-DW_HALF`.
    pub const LLM: &str = include_str!("../opencl/llm.cl");
    /// `peak.cl`: `compute_peak_<variant>` (fp16 with `-DGPUFLEET_HAS_FP16`, fp64 with
    /// `-DGPUFLEET_HAS_FP64`) and `roofline`.
    pub const PEAK: &str = include_str!("../opencl/peak.cl");

    /// Every file as `(file name, source)`.
    pub const ALL: [(&str, &str); 7] = [
        ("gemm.cl", GEMM),
        ("elementwise.cl", ELEMENTWISE),
        ("rows.cl", ROWS),
        ("conv.cl", CONV),
        ("model.cl", MODEL),
        ("llm.cl", LLM),
        ("peak.cl", PEAK),
    ];
}

/// The Vulkan SPIR-V modules, one constant per shader (`GEMM_BLOCKED` for `gemm_blocked`) and
/// [`ALL`](vulkan::ALL), a table `build.rs` generates from the files: `kernels/vulkan/NAME.comp`
/// compiled by glslc at build time when it is installed, else the committed
/// `kernels/vulkan/spv/NAME.spv` (CI checks the two agree). The bytes are little-endian 32-bit
/// words but only byte-aligned here: copy them into `u32`s (`ash::util::read_spv`) before handing
/// them to the driver.
pub mod vulkan {
    include!(concat!(env!("OUT_DIR"), "/spirv.rs"));

    /// The SPIR-V of shader `name` (`"gemm_blocked"`), or `None` for a shader that does not exist.
    pub fn spirv(name: &str) -> Option<&'static [u8]> {
        ALL.iter()
            .find(|(shader, _)| *shader == name)
            .map(|(_, words)| *words)
    }
}

/// The OpenCL C source of `file` (`"gemm.cl"`), or `None` for a file that does not exist.
pub fn opencl_source(file: &str) -> Option<&'static str> {
    opencl::ALL
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, source)| *source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_found_by_name_and_unknown_names_are_not() {
        for (name, source) in opencl::ALL {
            assert_eq!(opencl_source(name), Some(source));
            assert!(source.contains("__kernel"), "{name} defines no kernel");
        }
        assert_eq!(opencl_source("gemm"), None);
        assert_eq!(opencl_source(""), None);
        assert_eq!(opencl_source("../opencl/gemm.cl"), None);
    }

    /// The identifiers of `source` outside comments.
    fn code_tokens(source: &str) -> Vec<String> {
        let mut code = String::new();
        let mut rest = source;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("/*") {
                rest = after.find("*/").map_or("", |end| &after[end + 2..]);
            } else if let Some(after) = rest.strip_prefix("//") {
                rest = after.find('\n').map_or("", |end| &after[end..]);
            } else {
                let ch = rest.chars().next().unwrap_or(' ');
                code.push(ch);
                rest = &rest[ch.len_utf8()..];
            }
        }
        code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn sources_avoid_what_opencl_c_1_1_lacks() {
        // Clover only compiles OpenCL C 1.1: no `inline`/`static` functions, no 2.0 built-ins;
        // and validation needs full-precision math, so no native_* functions.
        for (name, source) in opencl::ALL {
            for token in code_tokens(source) {
                let forbidden = matches!(
                    token.as_str(),
                    "inline" | "static" | "__generic" | "generic"
                ) || token.starts_with("native_")
                    || token.starts_with("work_group_")
                    || token.starts_with("sub_group_");
                assert!(!forbidden, "{name} uses `{token}`");
            }
        }
        // The stripper itself: a forbidden word in a comment is not code.
        let tokens = code_tokens("/* inline */ x // static\n y");
        assert_eq!(tokens, ["x", "y"]);
        assert!(code_tokens("/* a */ inline b").contains(&"inline".to_string()));
    }

    #[test]
    fn each_file_defines_the_kernels_its_docs_name() {
        let expect: [(&str, &[&str]); 4] = [
            ("gemm.cl", &["gemm_naive", "gemm_tiled", "gemm_blocked"]),
            (
                "elementwise.cl",
                &[
                    "vec_add_f32",
                    "copy_f32",
                    "triad_f32",
                    "relu_f32",
                    "sigmoid_f32",
                    "tanh_f32",
                    "gelu_f32",
                    "noop_f32",
                ],
            ),
            (
                "rows.cl",
                &[
                    "softmax_rows",
                    "log_softmax_rows",
                    "layernorm_rows",
                    "rmsnorm_rows",
                    "layernorm_rmsnorm_rows",
                ],
            ),
            ("conv.cl", &["conv2d_direct", "im2col"]),
        ];
        for (file, kernels) in expect {
            let source = opencl_source(file).unwrap();
            for kernel in kernels {
                assert!(
                    source.contains(&format!("{kernel}(")),
                    "{file} lacks kernel {kernel}"
                );
            }
        }
    }

    /// The first word of every SPIR-V module, little-endian.
    const SPIRV_MAGIC: u32 = 0x0723_0203;

    #[test]
    fn every_vulkan_module_is_spirv_and_found_by_name() {
        assert!(!vulkan::ALL.is_empty());
        for (name, words) in vulkan::ALL {
            assert!(
                words.len() >= 20 && words.len().is_multiple_of(4),
                "{name}: {} bytes is not a whole number of words with a header",
                words.len()
            );
            let magic = u32::from_le_bytes([words[0], words[1], words[2], words[3]]);
            assert_eq!(
                magic, SPIRV_MAGIC,
                "{name} does not start with the SPIR-V magic"
            );
            assert_eq!(vulkan::spirv(name), Some(*words));
        }
        let mut names: Vec<&str> = vulkan::ALL.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), vulkan::ALL.len(), "a shader is listed twice");
        assert_eq!(vulkan::spirv("gemm_blocked"), Some(vulkan::GEMM_BLOCKED));
        assert_eq!(vulkan::spirv("gemm_blocked.spv"), None);
        assert_eq!(vulkan::spirv(""), None);
    }

    #[test]
    fn every_vulkan_source_has_its_module_listed() {
        // The constants embed the committed .spv files; a .comp without an entry in ALL would
        // never reach a device.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("vulkan");
        let mut sources = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) == Some("comp") {
                let stem = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap()
                    .to_string();
                assert!(
                    vulkan::spirv(&stem).is_some(),
                    "{stem}.comp is not in vulkan::ALL"
                );
                sources += 1;
            }
        }
        assert_eq!(
            sources,
            vulkan::ALL.len(),
            "a module in vulkan::ALL has no source"
        );
    }
}
