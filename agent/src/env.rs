//! The allowlist for per-run environment overrides: [`gpufleet_kernels::env`], shared with the
//! coordinator, which checks suites and `--env` before it makes a campaign; and what only the
//! agent can decide, the [`LoaderPolicy`]: which values a run may give the variables that make a
//! driver loader open a file by path (its owner's configuration, `[loader] allow`).

pub use gpufleet_kernels::env::*;

use gpufleet_kernels::quote;
use std::path::{Path, PathBuf};

/// The system's standard ICD manifest directories: a Vulkan driver manifest or an OpenCL vendors
/// directory in them was installed by the host's owner, so a run may choose it.
pub const MANIFEST_DIRS: &[&str] = &[
    "/usr/share/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/etc/vulkan/icd.d",
    "/etc/OpenCL/vendors",
];

/// The system's library directories, where an OpenCL ICD library named by path may live.
pub const LIBRARY_DIRS: &[&str] = &["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib"];

/// The default configuration file, named in refusals.
pub const DEFAULT_CONFIG: &str = "/etc/gpufleet/agent.toml";

/// What a run may give the loader variables ([`loader_var`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoaderPolicy {
    /// Values the owner allows beyond the defaults (`[loader] allow`): paths (compared after
    /// resolving links) or names (a Vulkan layer).
    pub allowed: Vec<String>,
    /// The configuration file they came from, for the refusal's hint.
    pub config: Option<PathBuf>,
}

fn canonical(p: &str) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok()
}

fn under(path: &Path, dirs: &[&str]) -> bool {
    dirs.iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .any(|d| path.starts_with(&d))
}

impl LoaderPolicy {
    /// The configuration file a refusal points at.
    fn config_path(&self) -> String {
        self.config
            .as_ref()
            .map_or_else(|| DEFAULT_CONFIG.to_string(), |p| p.display().to_string())
    }

    fn listed(&self, item: &str) -> bool {
        let resolved = canonical(item);
        self.allowed
            .iter()
            .any(|a| a == item || resolved.is_some() && canonical(a) == resolved)
    }

    /// Checks the override `key=value`.
    ///
    /// # Errors
    /// A message naming the variable and the value it refuses, and where to allow it.
    pub fn check(&self, key: &str, value: &str) -> Result<(), String> {
        let Some(kind) = loader_var(key) else {
            // A knob's value is a value: one that names a place (`/…`, `./…`, `~/…`) may be a
            // directory some runtime reads code from under a name nobody listed yet.
            let item = value
                .split(':')
                .find(|i| i.contains('/') || i.starts_with('~'));
            return match item {
                Some(item) if !self.listed(item) => Err(format!(
                    "{key}={} is refused: its value is a path, and this agent lets a run give a \
                     path only to the variables its owner allows a value of (a runtime may load \
                     code from a directory it names); allow it with `[loader] allow = [{}]` in \
                     the agent's configuration ({})",
                    quote(item),
                    serde_json::to_string(gpufleet_kernels::prefix(item, 200)).unwrap_or_default(),
                    self.config_path()
                )),
                _ => Ok(()),
            };
        };
        for item in value.split(':').filter(|i| !i.is_empty()) {
            if self.listed(item) {
                continue;
            }
            let by_default = match kind {
                LoaderVar::Manifest => canonical(item).is_some_and(|p| under(&p, MANIFEST_DIRS)),
                LoaderVar::IcdLibrary => {
                    !item.contains('/') || canonical(item).is_some_and(|p| under(&p, LIBRARY_DIRS))
                }
                LoaderVar::Tool => false,
            };
            if by_default {
                continue;
            }
            let rule = match kind {
                LoaderVar::Manifest => format!(
                    "manifests in the standard ICD directories ({})",
                    MANIFEST_DIRS.join(", ")
                ),
                LoaderVar::IcdLibrary => format!(
                    "ICD libraries by name or in the system's library directories ({})",
                    LIBRARY_DIRS.join(", ")
                ),
                LoaderVar::Tool => "no value of it unless its owner lists that value".to_string(),
            };
            let config = self.config_path();
            return Err(format!(
                "{key}={} is refused: it makes a driver loader open that file, which is the host owner's decision, and this agent allows {rule}; allow it with `[loader] allow = [{}]` in the agent's configuration ({config})",
                quote(item),
                serde_json::to_string(gpufleet_kernels::prefix(item, 200)).unwrap_or_default()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_libraries_need_the_owner_and_system_manifests_do_not() {
        let policy = LoaderPolicy::default();
        for (k, v) in [
            ("HSA_TOOLS_LIB", "/tmp/x.so"),
            ("VK_LAYER_PATH", "/tmp"),
            ("CUDA_INJECTION64_PATH", "/tmp/inject.so"),
            ("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation"),
        ] {
            let e = policy.check(k, v).unwrap_err();
            assert!(e.starts_with(&format!("{k}=")), "{e}");
            assert!(
                e.contains("[loader] allow") && e.contains(DEFAULT_CONFIG),
                "{e}"
            );
        }
        // Not a loader variable: a value is fine, a path is not (unless listed).
        assert_eq!(policy.check("RADV_PERFTEST", "gpl"), Ok(()));
        assert_eq!(policy.check("HSA_OVERRIDE_GFX_VERSION", "10.3.0"), Ok(()));
        let e = policy.check("RADV_SOMETHING", "/tmp/x").unwrap_err();
        assert!(
            e.contains("its value is a path") && e.contains("[loader] allow"),
            "{e}"
        );
        // A cache directory a runtime loads kernels from: only where the owner allows it.
        let e = policy.check("POCL_CACHE_DIR", "/tmp/x").unwrap_err();
        assert!(e.starts_with("POCL_CACHE_DIR=`/tmp/x`"), "{e}");
        assert!(policy.check("POCL_CACHE_DIR", "cache").is_err());
        // A manifest outside the standard directories, even through `..`.
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("icd.json");
        std::fs::write(&mine, "{}").unwrap();
        let mine = mine.display().to_string();
        assert!(policy.check("VK_DRIVER_FILES", &mine).is_err());
        assert!(
            policy
                .check(
                    "VK_DRIVER_FILES",
                    &format!("/usr/share/vulkan/icd.d/../../..{mine}")
                )
                .is_err()
        );
        assert!(policy.check("OCL_ICD_FILENAMES", "libpocl.so.2").is_ok());
        assert!(policy.check("OCL_ICD_FILENAMES", &mine).is_err());
        // Listed by the owner: allowed, and only what is listed.
        let owner = LoaderPolicy {
            allowed: vec![mine.clone(), "VK_LAYER_KHRONOS_validation".into()],
            config: Some("/etc/gpufleet/agent.toml".into()),
        };
        assert_eq!(owner.check("VK_DRIVER_FILES", &mine), Ok(()));
        assert_eq!(
            owner.check("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation"),
            Ok(())
        );
        assert!(
            owner
                .check("VK_DRIVER_FILES", &format!("{mine}:/tmp/other.json"))
                .is_err()
        );
    }

    #[test]
    fn a_manifest_in_the_standard_directory_is_allowed_where_it_exists() {
        let lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
        if !Path::new(lvp).exists() {
            eprintln!("skipped: {lvp} is not installed");
            return;
        }
        assert_eq!(
            LoaderPolicy::default().check("VK_DRIVER_FILES", lvp),
            Ok(())
        );
        assert!(
            LoaderPolicy::default()
                .check("VK_DRIVER_FILES", "/usr/share/vulkan/icd.d/none.json")
                .is_err()
        );
    }
}
