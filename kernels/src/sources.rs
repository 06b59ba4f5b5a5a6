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
    /// `elementwise.cl`: `vec_add_f32` (and debug_wrong with `-DGPUFLEET_WRONG`), `copy_f32`,
    /// `triad_f32`, `relu_f32`, `sigmoid_f32`, `tanh_f32`, `noop_f32`.
    pub const ELEMENTWISE: &str = include_str!("../opencl/elementwise.cl");
    /// `rows.cl`: `softmax_rows`, `layernorm_rows`, `rmsnorm_rows`, `layernorm_rmsnorm_rows`.
    pub const ROWS: &str = include_str!("../opencl/rows.cl");
    /// `conv.cl`: `conv2d_direct` and `im2col` (whose GEMM comes from [`GEMM`]).
    pub const CONV: &str = include_str!("../opencl/conv.cl");
    /// `model.cl`: a CNN's layers, `model_conv` (dense convolutions and linear layers as an
    /// implicit GEMM) and `model_layer` (the rest).
    pub const MODEL: &str = include_str!("../opencl/model.cl");

    /// Every file as `(file name, source)`.
    pub const ALL: [(&str, &str); 5] = [
        ("gemm.cl", GEMM),
        ("elementwise.cl", ELEMENTWISE),
        ("rows.cl", ROWS),
        ("conv.cl", CONV),
        ("model.cl", MODEL),
    ];
}

/// The Vulkan SPIR-V modules, one constant per shader: `kernels/vulkan/NAME.comp` compiled by
/// glslc at build time when it is installed (`build.rs`), else the committed
/// `kernels/vulkan/spv/NAME.spv` (CI checks the two agree). The bytes are little-endian 32-bit words but only byte-aligned
/// here: copy them into `u32`s (`ash::util::read_spv`) before handing them to the driver.
pub mod vulkan {
    /// `gemm_naive.comp`: one invocation per element of C, f32.
    pub const GEMM_NAIVE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/gemm_naive.spv"));
    /// `gemm_naive_f16.comp`: `gemm_naive` on half buffers (16-bit storage), f32 arithmetic.
    pub const GEMM_NAIVE_F16: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/gemm_naive_f16.spv"));
    /// `gemm_tiled.comp`: TS×TS shared-memory tiles, f32.
    pub const GEMM_TILED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/gemm_tiled.spv"));
    /// `gemm_tiled_f16.comp`: `gemm_tiled` on half buffers, f32 arithmetic.
    pub const GEMM_TILED_F16: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/gemm_tiled_f16.spv"));
    /// `gemm_blocked.comp`: register-blocked GEMM tuned by specialization constants, f32.
    pub const GEMM_BLOCKED: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/gemm_blocked.spv"));
    /// `gemm_f16acc32.comp`: `gemm_blocked` on half buffers with f32 accumulation.
    pub const GEMM_F16ACC32: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/gemm_f16acc32.spv"));
    /// `vec_add.comp`: c = a + b; debug_wrong through specialization constant 2.
    pub const VEC_ADD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/vec_add.spv"));
    /// `copy.comp`: b = a.
    pub const COPY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/copy.spv"));
    /// `triad.comp`: a = b + scalar·c.
    pub const TRIAD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/triad.spv"));
    /// `relu.comp`: y = max(x, 0).
    pub const RELU: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/relu.spv"));
    /// `sigmoid.comp`: y = 1 / (1 + e^-x).
    pub const SIGMOID: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/sigmoid.spv"));
    /// `tanh.comp`: y = tanh(x) from exp.
    pub const TANH: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/tanh.spv"));
    /// `noop.comp`: out[0] = in[0].
    pub const NOOP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/noop.spv"));
    /// `softmax.comp`: row softmax, shared-memory reductions.
    pub const SOFTMAX: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/softmax.spv"));
    /// `softmax_subgroup.comp`: row softmax, subgroup reductions.
    pub const SOFTMAX_SUBGROUP: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/softmax_subgroup.spv"));
    /// `layernorm.comp`: row layer normalisation, shared-memory reductions.
    pub const LAYERNORM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/layernorm.spv"));
    /// `layernorm_subgroup.comp`: row layer normalisation, subgroup reductions.
    pub const LAYERNORM_SUBGROUP: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/layernorm_subgroup.spv"));
    /// `rmsnorm.comp`: row RMS normalisation, shared-memory reductions.
    pub const RMSNORM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/rmsnorm.spv"));
    /// `rmsnorm_subgroup.comp`: row RMS normalisation, subgroup reductions.
    pub const RMSNORM_SUBGROUP: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/rmsnorm_subgroup.spv"));
    /// `layernorm_rmsnorm.comp`: layernorm then rmsnorm per row, shared-memory reductions.
    pub const LAYERNORM_RMSNORM: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/layernorm_rmsnorm.spv"));
    /// `layernorm_rmsnorm_subgroup.comp`: layernorm then rmsnorm per row, subgroup reductions.
    pub const LAYERNORM_RMSNORM_SUBGROUP: &[u8] = include_bytes!(concat!(
        env!("OUT_DIR"),
        "/spv/layernorm_rmsnorm_subgroup.spv"
    ));
    /// `conv2d_direct.comp`: one output element per invocation.
    pub const CONV2D_DIRECT: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/conv2d_direct.spv"));
    /// `im2col.comp`: images unfolded into column matrices for `gemm_blocked`.
    pub const IM2COL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/im2col.spv"));
    /// `split_stats.comp`: partials of one chunk of a split row, shared-memory reductions.
    pub const SPLIT_STATS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/split_stats.spv"));
    /// `split_stats_subgroup.comp`: partials of one chunk of a split row, subgroup reductions.
    pub const SPLIT_STATS_SUBGROUP: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/split_stats_subgroup.spv"));
    /// `softmax_split_apply.comp`: softmax of one chunk of a split row from the row's partials.
    pub const SOFTMAX_SPLIT_APPLY: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/softmax_split_apply.spv"));
    /// `layernorm_split_apply.comp`: layernorm of one chunk of a split row from the row's partials.
    pub const LAYERNORM_SPLIT_APPLY: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/spv/layernorm_split_apply.spv"));

    /// `model_layer.comp`: a CNN's depthwise convolutions, pools, residual adds and the sums of
    /// split convolutions.
    pub const MODEL_LAYER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/model_layer.spv"));
    /// `model_conv.comp`: a CNN's dense convolutions and linear layers (implicit GEMM).
    pub const MODEL_CONV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/spv/model_conv.spv"));

    /// Every module as `(shader name, SPIR-V)`; the name is the file stem (`gemm_blocked`).
    pub const ALL: &[(&str, &[u8])] = &[
        ("gemm_naive", GEMM_NAIVE),
        ("gemm_naive_f16", GEMM_NAIVE_F16),
        ("gemm_tiled", GEMM_TILED),
        ("gemm_tiled_f16", GEMM_TILED_F16),
        ("gemm_blocked", GEMM_BLOCKED),
        ("gemm_f16acc32", GEMM_F16ACC32),
        ("vec_add", VEC_ADD),
        ("copy", COPY),
        ("triad", TRIAD),
        ("relu", RELU),
        ("sigmoid", SIGMOID),
        ("tanh", TANH),
        ("noop", NOOP),
        ("softmax", SOFTMAX),
        ("softmax_subgroup", SOFTMAX_SUBGROUP),
        ("layernorm", LAYERNORM),
        ("layernorm_subgroup", LAYERNORM_SUBGROUP),
        ("rmsnorm", RMSNORM),
        ("rmsnorm_subgroup", RMSNORM_SUBGROUP),
        ("layernorm_rmsnorm", LAYERNORM_RMSNORM),
        ("layernorm_rmsnorm_subgroup", LAYERNORM_RMSNORM_SUBGROUP),
        ("conv2d_direct", CONV2D_DIRECT),
        ("im2col", IM2COL),
        ("split_stats", SPLIT_STATS),
        ("split_stats_subgroup", SPLIT_STATS_SUBGROUP),
        ("softmax_split_apply", SOFTMAX_SPLIT_APPLY),
        ("layernorm_split_apply", LAYERNORM_SPLIT_APPLY),
        ("model_layer", MODEL_LAYER),
        ("model_conv", MODEL_CONV),
    ];

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
                    "noop_f32",
                ],
            ),
            (
                "rows.cl",
                &[
                    "softmax_rows",
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
