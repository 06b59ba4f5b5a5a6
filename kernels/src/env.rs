//! The allowlist for per-run environment overrides.
//!
//! A run may set driver knobs (`HSA_OVERRIDE_GFX_VERSION`, `RADV_PERFTEST`,
//! ...) for its worker process only. Anything else (`LD_PRELOAD`, `PATH`)
//! could make the worker run code the request chose, so it is refused.

use crate::quote;

/// Prefixes a run's environment override keys may start with.
pub const ALLOWED_PREFIXES: &[&str] = &[
    "HSA_",
    "HIP_",
    "ROC",
    "AMD_",
    "MIOPEN_",
    "RADV_",
    "MESA_",
    "CLOVER_",
    "RUSTICL_",
    "POCL_",
    "GPU_",
    "CUDA_",
    "VK_",
    "OCL_",
    "GPUFLEET_CPU_",
    "GPUFLEET_DEBUG_",
];

/// Why an override was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvError {
    /// A key outside the allowlist (`LD_PRELOAD`, `PATH`).
    #[error("env key {} is not allowed: it must start with one of {}", quote(key), ALLOWED_PREFIXES.join(", "))]
    NotAllowed {
        /// The key.
        key: String,
    },
    #[error(
        "env key {} is malformed: keys are [A-Z0-9_]+ and values have no NUL byte",
        quote(key)
    )]
    /// A key with other characters than `[A-Z0-9_]`, or a value with a NUL byte.
    Malformed {
        /// The key.
        key: String,
    },
}

/// Checks one override key and value.
///
/// # Errors
/// [`EnvError::NotAllowed`] for a key outside the allowlist,
/// [`EnvError::Malformed`] for a key with other characters or a value with NUL.
pub fn check_override(key: &str, value: &str) -> Result<(), EnvError> {
    let well_formed = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !value.contains('\0');
    if !well_formed {
        return Err(EnvError::Malformed {
            key: key.to_string(),
        });
    }
    if ALLOWED_PREFIXES.iter().any(|p| key.starts_with(p)) {
        Ok(())
    } else {
        Err(EnvError::NotAllowed {
            key: key.to_string(),
        })
    }
}

/// Allowlisted variables that make a driver loader open something by path or name: as much power
/// as `LD_PRELOAD`, so the agent's owner decides which values a run may give them
/// (`gpufleet-agent`'s `[loader] allow`; see the agent's `LoaderPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoaderVar {
    /// Driver manifests (or ICD directories): a value in the system's standard ICD directories is
    /// allowed by default, so a run can still choose RADV, AMDVLK or lavapipe.
    Manifest,
    /// OpenCL ICD libraries (`OCL_ICD_FILENAMES`): a bare name or a path in the system's library
    /// directories is allowed by default.
    IcdLibrary,
    /// Tool libraries, layers, injection paths and toolkit roots: allowed only when listed.
    Tool,
}

/// Loader variables that name driver manifests or ICD directories ([`LoaderVar::Manifest`]).
pub const MANIFEST_VARS: &[&str] = &[
    "VK_ICD_FILENAMES",
    "VK_DRIVER_FILES",
    "VK_ADD_DRIVER_FILES",
    "OCL_ICD_VENDORS",
];

/// Loader variables that name OpenCL ICD libraries ([`LoaderVar::IcdLibrary`]).
pub const ICD_LIBRARY_VARS: &[&str] = &["OCL_ICD_FILENAMES"];

/// Loader variables named one by one that take no value by default ([`LoaderVar::Tool`]): tool
/// libraries, injection paths, layers and toolkit roots. Any other allowlisted key with a word of
/// [`PATH_WORDS`] is one too.
pub const TOOL_VARS: &[&str] = &[
    "HSA_TOOLS_LIB",
    "ROCP_TOOL_LIB",
    "CUDA_INJECTION64_PATH",
    "VK_LAYER_PATH",
    "VK_ADD_LAYER_PATH",
    "VK_IMPLICIT_LAYER_PATH",
    "VK_ADD_IMPLICIT_LAYER_PATH",
    "VK_INSTANCE_LAYERS",
    "VK_LOADER_LAYERS_ENABLE",
    "ROCM_PATH",
    "HIP_PATH",
    "HIP_CLANG_PATH",
    "HIP_DEVICE_LIB_PATH",
    "CUDA_PATH",
    // A driver chosen by name, loaded from Mesa's directory: still the owner's choice.
    "MESA_LOADER_DRIVER_OVERRIDE",
];

/// Words of a key (between underscores) that make its value a place a runtime loads, writes or
/// redirects code or data to, or a name it resolves somewhere else than the worker's working
/// directory: a cache directory (PoCL loads the kernels it finds in `POCL_CACHE_DIR`), a library
/// (by path or by name: `ROCP_TOOL_LIBRARIES`), a toolkit root (`CUDA_HOME`), a log, a file, a
/// pipe or socket to talk to (`CUDA_MPS_PIPE_DIRECTORY`, `CUDA_COREDUMP_PIPE`), a trigger file a
/// driver deletes (`RADV_THREAD_TRACE_TRIGGER`), databases of compiled shaders
/// (`MESA_DISK_CACHE_READ_ONLY_FOZ_DBS`, named relative to Mesa's cache), a program to run.
/// `MESA_SHADER_CACHE_DISABLE` or `AMD_LOG_LEVEL` have none of them and stay values.
pub const PATH_WORDS: &[&str] = &[
    "DIR",
    "DIRS",
    "DIRECTORY",
    "PATH",
    "PATHS",
    "LIBPATH",
    "LIB",
    "LIBS",
    "LIBRARY",
    "LIBRARIES",
    "HOME",
    "ROOT",
    "PREFIX",
    "FILE",
    "FILES",
    "FILENAME",
    "FILENAMES",
    "OUTPUT",
    "LOGS",
    "PIPE",
    "SOCKET",
    "TRIGGER",
    "DB",
    "DBS",
    "LAYERS",
    "PLUGIN",
    "PLUGINS",
    "PRELOAD",
    "EXE",
    "EXECUTABLE",
    "BIN",
    "COMMAND",
    "CMD",
    "SCRIPT",
];

/// Which kind of loader variable `key` is, if it is one. The explicit lists ([`MANIFEST_VARS`],
/// [`ICD_LIBRARY_VARS`], [`TOOL_VARS`]), then any allowlisted key with a word of [`PATH_WORDS`]
/// (`POCL_CACHE_DIR`, `ROCBLAS_TENSILE_LIBPATH`, `AMD_COMGR_REDIRECT_LOGS`): a driver knob added
/// later is treated as loading code until someone says otherwise.
pub fn loader_var(key: &str) -> Option<LoaderVar> {
    if MANIFEST_VARS.contains(&key) {
        Some(LoaderVar::Manifest)
    } else if ICD_LIBRARY_VARS.contains(&key) {
        Some(LoaderVar::IcdLibrary)
    } else if TOOL_VARS.contains(&key) || key.split('_').any(|w| PATH_WORDS.contains(&w)) {
        Some(LoaderVar::Tool)
    } else {
        None
    }
}

/// The items of a knob's value that name a place rather than being a value: those with a `/` or
/// `..` (an absolute path, or a way out of the worker's working directory), or starting with `~`
/// (a home directory); items are split at `:`, `,`, `;`, `=` and whitespace, so compiler options
/// (`-I /opt/x`) and lists are looked into. None for a plain value (`gpl`, `10.3.0`,
/// `-cl-mad-enable`): a relative name without them can only name something in the worker's own
/// working directory (see `docs/install.md`, "What a run may load").
pub fn places(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| matches!(c, ':' | ',' | ';' | '=') || c.is_whitespace())
        .filter(|i| i.contains('/') || i.contains("..") || i.starts_with('~'))
}

/// The first of [`places`], if any.
pub fn place_in(value: &str) -> Option<&str> {
    places(value).next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_driver_knobs() {
        for k in [
            "HSA_OVERRIDE_GFX_VERSION",
            "RADV_PERFTEST",
            "ROCR_VISIBLE_DEVICES",
            "VK_ICD_FILENAMES",
        ] {
            assert_eq!(check_override(k, "1"), Ok(()), "{k}");
        }
    }

    #[test]
    fn loader_variables_are_named_by_kind() {
        assert_eq!(loader_var("VK_DRIVER_FILES"), Some(LoaderVar::Manifest));
        assert_eq!(loader_var("OCL_ICD_FILENAMES"), Some(LoaderVar::IcdLibrary));
        for k in [
            "HSA_TOOLS_LIB",
            "VK_LAYER_PATH",
            "CUDA_INJECTION64_PATH",
            "VK_INSTANCE_LAYERS",
        ] {
            assert_eq!(loader_var(k), Some(LoaderVar::Tool), "{k}");
        }
        assert_eq!(loader_var("RADV_SOME_NEW_LIB"), Some(LoaderVar::Tool));
        // Caches, library paths, logs and driver overrides the runtimes read or write code in.
        for k in [
            "POCL_CACHE_DIR",
            "MESA_SHADER_CACHE_DIR",
            "MESA_GLSL_CACHE_DIR",
            "ROCBLAS_TENSILE_LIBPATH",
            "HIP_LIBPATH",
            "AMD_COMGR_REDIRECT_LOGS",
            "MESA_LOADER_DRIVER_OVERRIDE",
            "POCL_DEBUG_LLVM_PASSES_FILE",
            // Libraries by name, toolkit roots, pipes, trigger files a driver deletes, shader
            // databases named relative to Mesa's cache.
            "ROCP_TOOL_LIBRARIES",
            "CUDA_HOME",
            "CUDA_MPS_PIPE_DIRECTORY",
            "CUDA_COREDUMP_PIPE",
            "RADV_THREAD_TRACE_TRIGGER",
            "MESA_VK_TRACE_TRIGGER",
            "MESA_DISK_CACHE_READ_ONLY_FOZ_DBS",
        ] {
            assert_eq!(loader_var(k), Some(LoaderVar::Tool), "{k}");
        }
        for k in TOOL_VARS {
            assert_eq!(loader_var(k), Some(LoaderVar::Tool), "{k}");
            assert_eq!(check_override(k, "x"), Ok(()), "{k} is allowlisted");
        }
        for k in [
            "HSA_OVERRIDE_GFX_VERSION",
            "RADV_PERFTEST",
            "AMD_VULKAN_ICD",
            "GPU_TEST_MARKER",
            "MESA_SHADER_CACHE_DISABLE",
            "AMD_LOG_LEVEL",
            "POCL_KERNEL_CACHE",
        ] {
            assert_eq!(loader_var(k), None, "{k}");
        }
    }

    #[test]
    fn a_value_names_a_place_with_a_slash_a_way_up_or_a_home() {
        for v in [
            "gpl",
            "10.3.0",
            "-cl-mad-enable -DX=1",
            "rgp",
            "1",
            "",
            "radv,llvmpipe",
            ".",
        ] {
            assert_eq!(place_in(v), None, "{v}");
        }
        for (v, item) in [
            ("/tmp/x", "/tmp/x"),
            ("a:/b", "/b"),
            ("..", ".."),
            ("-I.. -O2", "-I.."),
            ("-I /opt/inc", "/opt/inc"),
            ("x=~/cache", "~/cache"),
            ("~gpufleet", "~gpufleet"),
            ("a,b/c", "b/c"),
        ] {
            assert_eq!(place_in(v), Some(item), "{v}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        for k in ["LD_PRELOAD", "PATH", "HOME", "XHSA_"] {
            let e = check_override(k, "x").unwrap_err();
            assert!(e.to_string().contains(k), "{e}");
            assert!(matches!(e, EnvError::NotAllowed { .. }));
        }
    }

    #[test]
    fn refuses_malformed_keys_and_values() {
        assert!(matches!(
            check_override("hsa_x", "1"),
            Err(EnvError::Malformed { .. })
        ));
        assert!(matches!(
            check_override("", "1"),
            Err(EnvError::Malformed { .. })
        ));
        assert!(matches!(
            check_override("HSA_X", "a\0b"),
            Err(EnvError::Malformed { .. })
        ));
        assert!(matches!(
            check_override("HSA-X", "1"),
            Err(EnvError::Malformed { .. })
        ));
    }
}
