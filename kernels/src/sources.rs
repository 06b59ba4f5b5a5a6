//! OpenCL C sources of the kernels, embedded at build time.
//!
//! They live in this crate, next to the catalog that defines what each kernel computes, so a change
//! of semantics and the device code that implements it are reviewed together, and every agent binary
//! carries the exact sources whose hash keys its program cache. The files are plain OpenCL C 1.1
//! (`kernels/opencl/*.cl`) that build on any conformant driver; which `-D` parameters each kernel
//! takes is documented at the top of its file, and the agent's OpenCL planner sets them.

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

    /// Every file as `(file name, source)`.
    pub const ALL: [(&str, &str); 4] = [
        ("gemm.cl", GEMM),
        ("elementwise.cl", ELEMENTWISE),
        ("rows.cl", ROWS),
        ("conv.cl", CONV),
    ];
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
}
