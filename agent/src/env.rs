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

/// `p` with links and `..` resolved, when it is an absolute path that exists. A relative one is
/// never resolved: the agent would resolve it from its own working directory, the worker from its
/// own (see [`crate::isolation`]), so what was checked would not be what is opened.
fn canonical(p: &str) -> Option<PathBuf> {
    p.starts_with('/')
        .then(|| std::fs::canonicalize(p).ok())
        .flatten()
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
            // A knob's value is a value: one that names a place (`/…`, `../…`, `~/…`) may be a
            // directory some runtime reads code from under a name nobody listed yet. A relative
            // name is left to the worker's working directory, which is its own and empty.
            return match places(value).find(|item| !self.listed(item)) {
                Some(item) => Err(format!(
                    "{key}={} is refused: its value is a path, and this agent lets a run give a \
                     path only to the variables its owner allows a value of (a runtime may load \
                     code from a directory it names); allow it with `[loader] allow = [{}]` in \
                     the agent's configuration ({})",
                    quote(item),
                    serde_json::to_string(gpufleet_kernels::prefix(item, 200)).unwrap_or_default(),
                    self.config_path()
                )),
                None => Ok(()),
            };
        };
        for item in value.split(':').filter(|i| !i.is_empty()) {
            if self.listed(item) {
                continue;
            }
            let by_default = match kind {
                LoaderVar::Manifest => canonical(item).is_some_and(|p| under(&p, MANIFEST_DIRS)),
                // A bare name is looked up by the dynamic loader in the system's directories
                // only (never in the working directory).
                LoaderVar::IcdLibrary => {
                    place_in(item).is_none()
                        || canonical(item).is_some_and(|p| under(&p, LIBRARY_DIRS))
                }
                LoaderVar::Tool => false,
            };
            if by_default {
                continue;
            }
            let rule = match kind {
                LoaderVar::Manifest => format!(
                    "manifests by absolute path in the standard ICD directories ({})",
                    MANIFEST_DIRS.join(", ")
                ),
                LoaderVar::IcdLibrary => format!(
                    "ICD libraries by name or by absolute path in the system's library directories ({})",
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
    fn relative_places_and_ways_up_are_refused_and_every_place_must_be_listed() {
        let policy = LoaderPolicy::default();
        // The worker resolves a relative manifest from its own working directory, not the agent's.
        assert!(policy.check("VK_DRIVER_FILES", "icd.d/lvp.json").is_err());
        assert!(policy.check("OCL_ICD_FILENAMES", "../lib/libx.so").is_err());
        assert!(policy.check("OCL_ICD_FILENAMES", "lib/libx.so").is_err());
        for v in ["..", "-I.. -O2", "-I /opt/inc", "a,~/x"] {
            let e = policy.check("AMD_OCL_BUILD_OPTIONS_APPEND", v).unwrap_err();
            assert!(e.contains("its value is a path"), "{v}: {e}");
        }
        assert_eq!(
            policy.check("AMD_OCL_BUILD_OPTIONS_APPEND", "-cl-mad-enable -DN=4"),
            Ok(())
        );
        // A listed place does not let an unlisted one through after it.
        let owner = LoaderPolicy {
            allowed: vec!["/opt/inc".into()],
            config: None,
        };
        assert_eq!(owner.check("AMD_OCL_BUILD_OPTIONS", "-I /opt/inc"), Ok(()));
        let e = owner
            .check("AMD_OCL_BUILD_OPTIONS", "-I /opt/inc -I /tmp/evil")
            .unwrap_err();
        assert!(e.contains("`/tmp/evil`"), "{e}");
    }

    /// The cells of `docs/install.md`'s table whose header row starts with `header`: per row, the
    /// backticked words of each cell.
    fn docs_table(header: &str) -> Vec<Vec<Vec<String>>> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/install.md");
        let text = std::fs::read_to_string(path).expect("docs/install.md");
        let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
        assert!(lines.next().is_some(), "no table `{header}` in {path}");
        lines
            .take_while(|l| l.starts_with('|'))
            .filter(|l| !l.starts_with("| ---"))
            .map(|l| {
                l.trim()
                    .trim_matches('|')
                    .split('|')
                    .map(|cell| {
                        cell.split('`')
                            .skip(1)
                            .step_by(2)
                            .map(String::from)
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    /// A variable's name (`HSA_XNACK`), not a value or an option in backticks.
    fn is_key(word: &str) -> bool {
        word.contains('_')
            && word
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    }

    #[test]
    fn the_docs_table_lists_exactly_what_a_default_agent_accepts() {
        use std::collections::BTreeSet;
        let rows = docs_table("| accepted by default |");
        let policy = LoaderPolicy::default();
        let (mut families, mut named) = (BTreeSet::new(), BTreeSet::new());
        for row in &rows {
            let [first, what, why] = &row[..] else {
                panic!("a row of the table has {} cells, not 3: {row:?}", row.len())
            };
            assert!(!first.is_empty(), "a row names nothing: {row:?}");
            for name in first {
                match name.strip_suffix('*') {
                    Some(prefix) => families.insert(prefix.to_string()),
                    None => named.insert(name.clone()),
                };
            }
            // The examples of what a row accepts are accepted, with a plain value...
            for k in what.iter().filter(|k| is_key(k)) {
                assert_eq!(check_override(k, "1"), Ok(()), "{k} (docs: accepted)");
                assert_eq!(loader_var(k), None, "{k} (docs: accepted)");
                assert_eq!(policy.check(k, "1"), Ok(()), "{k} (docs: accepted)");
            }
            // ... and the loader variables it names take nothing by default.
            for k in why.iter().filter(|k| is_key(k)) {
                assert_eq!(
                    check_override(k, "x"),
                    Ok(()),
                    "{k} (docs: a loader variable)"
                );
                assert_eq!(
                    loader_var(k),
                    Some(LoaderVar::Tool),
                    "{k} (docs: loader variable)"
                );
                assert!(policy.check(k, "x").is_err(), "{k} (docs: loader variable)");
            }
        }
        // Every family the code allows, and no other.
        let allowed: BTreeSet<String> = ALLOWED_PREFIXES.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            families, allowed,
            "the families of docs/install.md's table (left) and ALLOWED_PREFIXES (right) differ"
        );
        for prefix in ALLOWED_PREFIXES {
            let knob = format!("{prefix}SOME_KNOB");
            assert_eq!(check_override(&knob, "1"), Ok(()), "{knob}");
            assert_eq!(policy.check(&knob, "1"), Ok(()), "{knob}");
        }
        // Every loader variable that takes a value by default, and no other: the others take
        // nothing unless the owner lists it.
        let by_default: BTreeSet<String> = MANIFEST_VARS
            .iter()
            .chain(ICD_LIBRARY_VARS)
            .map(|k| k.to_string())
            .collect();
        assert_eq!(
            named, by_default,
            "the variables of docs/install.md's table (left) and those the code lets take a \
             value by default (right) differ"
        );
        for k in &named {
            assert_eq!(check_override(k, "x"), Ok(()), "{k}");
            assert!(
                matches!(
                    loader_var(k),
                    Some(LoaderVar::Manifest | LoaderVar::IcdLibrary)
                ),
                "{k}"
            );
        }
        assert_eq!(policy.check("OCL_ICD_FILENAMES", "libpocl.so.2"), Ok(()));
        for k in TOOL_VARS {
            assert!(policy.check(k, "x").is_err(), "{k}");
        }
    }

    #[test]
    fn the_docs_table_of_loader_variables_names_each_one_and_each_word() {
        let named: Vec<String> = docs_table("| variables | allowed by default |")
            .into_iter()
            .flat_map(|row| row.into_iter().next().unwrap_or_default())
            .collect();
        for k in MANIFEST_VARS
            .iter()
            .chain(ICD_LIBRARY_VARS)
            .chain(TOOL_VARS)
        {
            assert!(
                named.iter().any(|n| n == k),
                "docs/install.md does not name {k}"
            );
        }
        for w in PATH_WORDS {
            assert!(
                named.iter().any(|n| n == w),
                "docs/install.md does not name the word {w}"
            );
        }
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
