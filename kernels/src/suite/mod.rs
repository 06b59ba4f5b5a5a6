//! Suites: named lists of runs in TOML, four built in (`smoke`, `standard`, `perf`, `models`) and any
//! number in users' files.
//!
//! A suite is validated completely when it is loaded: every run, for every variant and parameter point,
//! goes through [`crate::Problem::new`], so a typo or an impossible size is reported with its file and
//! line before a campaign schedules anything. The file format is described in `file.rs`; this module
//! holds the resulting types and where suites come from.

mod file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::SpecError;
use crate::run::{Mode, PartialSettings};
use crate::types::Dtype;

/// Names of the suites embedded in the crate.
pub const BUILTIN_SUITES: &[&str] = &["smoke", "standard", "perf", "models", "llm", "ceilings"];

const SMOKE: &str = include_str!("../../suites/smoke.toml");
const STANDARD: &str = include_str!("../../suites/standard.toml");
const PERF: &str = include_str!("../../suites/perf.toml");
const MODELS: &str = include_str!("../../suites/models.toml");
const LLM: &str = include_str!("../../suites/llm.toml");
const CEILINGS: &str = include_str!("../../suites/ceilings.toml");

/// A named, validated list of runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    /// Suite name (the file's `name`, else the file name without extension).
    pub name: String,
    /// What the suite is for, shown by the CLI.
    pub description: String,
    /// One entry per parameter point of every `[[run]]`, in file order.
    pub runs: Vec<SuiteRun>,
}

/// One kernel spec plus how to measure it; each parameter point of a `[[run]]` becomes one.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SuiteRun {
    /// Kernel name (validated against the catalog).
    pub kernel: String,
    /// Variants to run; `None` means every variant the backend implements.
    pub variants: Option<Vec<String>>,
    /// Parameters as written for this point; omitted ones take the catalog defaults.
    pub params: BTreeMap<String, i64>,
    /// Element type (f32 unless the file says otherwise).
    pub dtype: Dtype,
    /// Device time only, or host copies included.
    pub mode: Mode,
    /// How to measure, as the file gives it (its `[defaults]` under the run's own settings); what
    /// the file leaves out is decided when a campaign plans the run
    /// ([`PartialSettings::resolve`]). Stored with a campaign at the run's top level.
    #[serde(flatten, deserialize_with = "crate::json::flattened")]
    pub settings: PartialSettings,
    /// Environment overrides for the worker (the agent checks them against its allowlist).
    pub env: BTreeMap<String, String>,
}

/// Why a suite could not be found, read or accepted. Messages start with `file:line:` where a line
/// is known and name the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// Neither a builtin suite name nor an existing file.
    #[error(
        "unknown suite `{name}`: not a builtin suite ({}) and no file at that path",
        builtins.join(", ")
    )]
    UnknownSuite {
        /// The name asked for.
        name: String,
        /// The builtin suite names.
        builtins: Vec<String>,
    },
    /// The suite file could not be read.
    #[error("cannot read suite file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Not valid TOML, or a field of the wrong type or name (the message names it).
    #[error("{}: {message}", location(origin, *line))]
    Parse {
        /// File name.
        origin: String,
        /// 1-based line, 0 when unknown.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A field with a value the suite format does not accept (mode, iteration counts, arrays).
    #[error("{}: field `{field}`: {message}", location(origin, *line))]
    Invalid {
        /// File name.
        origin: String,
        /// 1-based line.
        line: usize,
        /// Field path, e.g. `params.m` or `min_iterations`.
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// A run that is not a valid kernel spec.
    #[error("{}: field `{field}`: {source}", location(origin, *line))]
    Spec {
        /// File name.
        origin: String,
        /// 1-based line.
        line: usize,
        /// Field path (`kernel`, `variant`, `params.n`, `dtype`).
        field: String,
        /// The catalog's verdict (boxed to keep the error small).
        source: Box<SpecError>,
    },
}

fn location(origin: &str, line: usize) -> String {
    if line == 0 {
        origin.to_string()
    } else {
        format!("{origin}:{line}")
    }
}

impl Suite {
    /// A suite embedded in the crate, by name (see [`BUILTIN_SUITES`]).
    ///
    /// # Errors
    /// [`SuiteError::UnknownSuite`] listing the builtin names.
    pub fn builtin(name: &str) -> Result<Suite, SuiteError> {
        let text = match name {
            "smoke" => SMOKE,
            "standard" => STANDARD,
            "llm" => LLM,
            "perf" => PERF,
            "models" => MODELS,
            "ceilings" => CEILINGS,
            _ => {
                return Err(SuiteError::UnknownSuite {
                    name: name.to_string(),
                    builtins: BUILTIN_SUITES.iter().map(|s| s.to_string()).collect(),
                });
            }
        };
        Suite::parse(text, &format!("{name}.toml"))
    }

    /// Reads and validates a user's suite file.
    ///
    /// # Errors
    /// [`SuiteError::Io`] naming the path, or any error of [`Suite::parse`].
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Suite::parse(&text, &path.display().to_string())
    }

    /// Parses and validates suite text; `origin` (a file name) prefixes every message.
    ///
    /// # Errors
    /// [`SuiteError::Parse`] for bad TOML, unknown or mistyped fields; [`SuiteError::Invalid`] for
    /// unaccepted values; [`SuiteError::Spec`] for runs the catalog refuses. All carry the line.
    pub fn parse(text: &str, origin: &str) -> Result<Suite, SuiteError> {
        file::parse(text, origin)
    }

    /// A builtin suite by name, else a suite file by path.
    ///
    /// # Errors
    /// [`SuiteError::UnknownSuite`] when `name_or_path` is neither a builtin nor an existing path and
    /// does not look like a path; otherwise the errors of [`Suite::load`].
    pub fn resolve(name_or_path: &str) -> Result<Suite, SuiteError> {
        if BUILTIN_SUITES.contains(&name_or_path) {
            return Suite::builtin(name_or_path);
        }
        let path = Path::new(name_or_path);
        let looks_like_path = name_or_path.contains(std::path::MAIN_SEPARATOR)
            || name_or_path.contains('/')
            || name_or_path.ends_with(".toml");
        if path.exists() || looks_like_path {
            Suite::load(path)
        } else {
            Suite::builtin(name_or_path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problem;

    #[test]
    fn every_builtin_suite_parses_and_validates() {
        for name in BUILTIN_SUITES {
            let suite = Suite::builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(suite.name, *name);
            assert!(
                !suite.description.is_empty() && !suite.runs.is_empty(),
                "{name}"
            );
            for run in &suite.runs {
                let variants = run.variants.clone().unwrap_or_else(|| vec![String::new()]);
                for v in variants {
                    Problem::new(&run.kernel, &v, &run.params, run.dtype.name(), false)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                }
                let s = run
                    .settings
                    .resolve()
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(s.min_iterations >= 1 && s.max_iterations >= s.min_iterations);
            }
        }
    }

    #[test]
    fn smoke_covers_every_non_debug_kernel_and_stays_small() {
        let suite = Suite::builtin("smoke").unwrap();
        let models = Suite::builtin("models").unwrap();
        for k in crate::catalog().iter().filter(|k| !k.debug) {
            // The 224×224 networks are too big for smoke; the models suite runs them.
            let home = if matches!(k.name, "resnet18" | "mobilenet_v2") {
                &models
            } else {
                &suite
            };
            assert!(
                home.runs.iter().any(|r| r.kernel == k.name),
                "{} misses {}",
                home.name,
                k.name
            );
        }
        for net in ["simple_cnn", "resnet18", "mobilenet_v2"] {
            assert!(
                models.runs.iter().any(|r| r.kernel == net),
                "models misses {net}"
            );
        }
        let flops: f64 = suite
            .runs
            .iter()
            .map(|r| Problem::new(&r.kernel, "", &r.params, r.dtype.name(), false).unwrap())
            .map(|p| p.flops())
            .sum();
        assert!(flops < 1e9, "smoke does {flops} FLOP per iteration set");
        let gemm = suite.runs.iter().find(|r| r.kernel == "gemm").unwrap();
        assert_eq!(
            gemm.variants.as_deref(),
            Some(
                &[
                    "naive".to_string(),
                    "tiled".to_string(),
                    "blocked".to_string()
                ][..]
            )
        );
    }

    #[test]
    fn perf_reaches_the_large_sizes() {
        let suite = Suite::builtin("perf").unwrap();
        assert!(
            suite
                .runs
                .iter()
                .any(|r| r.kernel == "gemm" && r.params.get("m") == Some(&4096))
        );
        assert!(
            suite
                .runs
                .iter()
                .any(|r| r.kernel == "softmax" && r.params.get("cols") == Some(&4096))
        );
        assert!(
            suite
                .runs
                .iter()
                .any(|r| r.kernel == "triad" && r.params.get("n") == Some(&(1 << 26)))
        );
    }

    #[test]
    fn resolve_finds_builtins_files_and_reports_unknowns() {
        assert_eq!(Suite::resolve("smoke").unwrap().name, "smoke");
        let e = Suite::resolve("smok").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown suite `smok`: not a builtin suite (smoke, standard, perf, models, llm, ceilings) and no file at that path"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.toml");
        std::fs::write(&path, "[[run]]\nkernel = \"noop\"\n").unwrap();
        let suite = Suite::resolve(path.to_str().unwrap()).unwrap();
        assert_eq!(suite.name, "mine");
        assert_eq!(suite.runs.len(), 1);

        let missing = dir.path().join("missing.toml");
        let e = Suite::resolve(missing.to_str().unwrap()).unwrap_err();
        assert!(matches!(e, SuiteError::Io { .. }));
        assert!(e.to_string().contains("missing.toml"), "{e}");
    }
}
