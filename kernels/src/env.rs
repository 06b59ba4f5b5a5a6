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
