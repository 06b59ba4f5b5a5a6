//! The tuned-parameter cache shared by the GPU backends: one JSON file per
//! backend under the agent cache dir, keyed by device fingerprint, kernel,
//! dtype and power-of-two size class, written atomically (temp + rename).
//! Fields added later take `#[serde(default)]` so old files still load.

use crate::cache;
use gpufleet_kernels::Problem;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A tuned configuration and how it was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tuned<T> {
    pub tuning: T,
    /// Seconds the search took.
    #[serde(default)]
    pub seconds: f64,
    /// Candidates tried.
    #[serde(default)]
    pub candidates: usize,
}

fn path(backend: &str) -> PathBuf {
    cache::dir().join(backend).join("gemm_tuning.json")
}

/// The key of `problem`'s GEMM class on the device with `fingerprint`.
pub fn key(fingerprint: &str, problem: &Problem) -> String {
    let size = problem
        .param("m")
        .max(problem.param("n"))
        .max(problem.param("k"))
        .max(1);
    let bucket = 1i64 << (64 - (size - 1).leading_zeros()).min(62);
    format!(
        "{:016x}|gemm|{}|{bucket}",
        cache::fnv64(&[fingerprint.as_bytes()]),
        problem.dtype.name()
    )
}

fn load_all<T: DeserializeOwned>(backend: &str) -> BTreeMap<String, Tuned<T>> {
    std::fs::read(path(backend))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The cached tuning for `key`, if any.
pub fn load<T: DeserializeOwned>(backend: &str, key: &str) -> Option<Tuned<T>> {
    load_all::<T>(backend).remove(key)
}

/// Stores `entry` under `key` (best effort: a read-only cache only costs a
/// search next time).
pub fn store<T: Serialize + DeserializeOwned + Clone>(backend: &str, key: &str, entry: &Tuned<T>) {
    let mut all = load_all::<T>(backend);
    all.insert(key.to_string(), entry.clone());
    let path = path(backend);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, serde_json::to_vec_pretty(&all).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// Seconds an autotuner may spend on one problem class
/// (`GPUFLEET_TUNE_BUDGET_S`, default 8).
pub fn budget() -> Duration {
    let s = std::env::var("GPUFLEET_TUNE_BUDGET_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(8.0);
    Duration::from_secs_f64(s.clamp(0.0, 600.0))
}

/// The config line recorded with a result.
pub fn describe<T>(t: &Tuned<T>, searched: bool) -> String {
    if searched {
        format!("searched {} candidates in {:.1} s", t.candidates, t.seconds)
    } else {
        "cached".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_bucket_sizes_by_powers_of_two() {
        let p = |n: i64| {
            Problem::new(
                "gemm",
                "blocked",
                &BTreeMap::from([("m".to_string(), n)]),
                "f32",
                false,
            )
            .unwrap()
        };
        // n and k default to 256, so m below that shares the 256 class.
        assert_eq!(key("d", &p(100)), key("d", &p(256)));
        assert_ne!(key("d", &p(257)), key("d", &p(256)));
        assert_eq!(key("d", &p(300)), key("d", &p(512)));
        assert_ne!(key("d", &p(512)), key("e", &p(512)));
    }
}
