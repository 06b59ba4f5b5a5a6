//! The autotuner every tuning backend uses (OpenCL and Vulkan tune GEMM `blocked`) and its
//! cache: one JSON file per backend under the agent cache dir, keyed by device fingerprint,
//! kernel, dtype, power-of-two size class and a hash of the kernel's device code (so an edited
//! kernel never reuses a stale tuning), written atomically (temp + rename). Fields added later
//! take `#[serde(default)]` so old files still load.
//!
//! A backend supplies only its candidates and how to prepare one ([`Trial`]); [`search`] times
//! and validates them the same way everywhere and [`cached_or_search`] consults the cache first.

use super::{BackendError, PreparedKernel};
use crate::cache;
use gpufleet_kernels::{Buffer, Problem};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// The key of `problem`'s GEMM class on the device with `fingerprint`, run by the device code
/// `sources` (OpenCL C or SPIR-V bytes): a changed kernel is a different key.
pub fn key(fingerprint: &str, problem: &Problem, sources: &[&[u8]]) -> String {
    let size = problem
        .param("m")
        .max(problem.param("n"))
        .max(problem.param("k"))
        .max(1);
    let bucket = 1i64 << (64 - (size - 1).leading_zeros()).min(62);
    format!(
        "{:016x}|gemm|{}|{bucket}|{:016x}",
        cache::fnv64(&[fingerprint.as_bytes()]),
        problem.dtype.name(),
        cache::fnv64(sources)
    )
}

fn load_all<T: DeserializeOwned>(path: &Path) -> BTreeMap<String, Tuned<T>> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The cached tuning for `key`, if any.
pub fn load<T: DeserializeOwned>(backend: &str, key: &str) -> Option<Tuned<T>> {
    load_all::<T>(&path(backend)).remove(key)
}

/// Stores `entry` under `key` (best effort: a read-only cache only costs a
/// search next time).
pub fn store<T: Serialize + DeserializeOwned + Clone>(backend: &str, key: &str, entry: &Tuned<T>) {
    store_in(&path(backend), key, entry);
}

fn store_in<T: Serialize + DeserializeOwned + Clone>(path: &Path, key: &str, entry: &Tuned<T>) {
    let mut all = load_all::<T>(path);
    all.insert(key.to_string(), entry.clone());
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, serde_json::to_vec_pretty(&all).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// The tuning cached under `key` for `backend`, else the one `search` finds, stored under `key`;
/// with the line recorded with a result ([`describe`]).
///
/// # Errors
/// The search's error.
pub fn cached_or_search<T: Serialize + DeserializeOwned + Clone>(
    backend: &str,
    key: &str,
    search: impl FnOnce() -> Result<Tuned<T>, BackendError>,
) -> Result<(Tuned<T>, String), BackendError> {
    if let Some(entry) = load::<T>(backend, key) {
        let line = describe(&entry, false);
        return Ok((entry, line));
    }
    let entry = search()?;
    store(backend, key, &entry);
    let line = describe(&entry, true);
    Ok((entry, line))
}

/// One tuning candidate prepared on the device, ready to be timed and validated.
pub trait Trial {
    /// One iteration's device time.
    ///
    /// # Errors
    /// `Driver` when the launch fails.
    fn run(&mut self) -> Result<Duration, BackendError>;

    /// The last iteration's output.
    ///
    /// # Errors
    /// `Driver` when the readback fails.
    fn output(&mut self) -> Result<Buffer, BackendError>;
}

/// Any prepared kernel is a trial (the Vulkan tuner prepares whole kernels in compute-only mode).
impl<K: PreparedKernel + ?Sized> Trial for K {
    fn run(&mut self) -> Result<Duration, BackendError> {
        PreparedKernel::run(self)
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        PreparedKernel::output(self)
    }
}

/// Iterations per candidate: one warm-up, then the median of the rest is its time.
const TRIAL_RUNS: usize = 4;

/// Searches `candidates` on the real problem: each is prepared (`prepare`; `Ok(None)` skips one
/// the planner refuses, an error is kept as the reason if nothing wins), run `TRIAL_RUNS` (4) times
/// and validated against `inputs`; the fastest valid median wins. Bounded by [`budget`] (the
/// first candidate is always tried). `device` names the device in the refusal.
///
/// # Errors
/// The last preparation or launch error when no candidate ran and validated, else `Unsupported`.
pub fn search<C: Copy, T: Trial>(
    backend: &str,
    device: &str,
    candidates: Vec<C>,
    problem: &Problem,
    inputs: &[Buffer],
    mut prepare: impl FnMut(&C) -> Result<Option<T>, BackendError>,
) -> Result<Tuned<C>, BackendError> {
    let started = Instant::now();
    let budget = budget();
    let mut best: Option<(Duration, C)> = None;
    let (mut tried, mut last_err) = (0, None);
    for cand in candidates {
        if tried > 0 && started.elapsed() > budget {
            break;
        }
        tried += 1;
        let mut trial = match prepare(&cand) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                last_err = Some(e);
                continue;
            }
        };
        let mut times = Vec::with_capacity(TRIAL_RUNS);
        for _ in 0..TRIAL_RUNS {
            match trial.run() {
                Ok(t) => times.push(t),
                Err(e) => {
                    last_err = Some(e);
                    break;
                }
            }
        }
        let valid = times.len() == TRIAL_RUNS
            && trial
                .output()
                .is_ok_and(|o| problem.check(inputs, &o).passed);
        if !valid {
            continue;
        }
        times.remove(0);
        times.sort();
        let median = times[times.len() / 2];
        if best.is_none_or(|(t, _)| median < t) {
            best = Some((median, cand));
        }
    }
    match best {
        Some((_, tuning)) => Ok(Tuned {
            tuning,
            seconds: started.elapsed().as_secs_f64(),
            candidates: tried,
        }),
        None => Err(last_err.unwrap_or(BackendError::Unsupported {
            backend: backend.into(),
            what: format!(
                "{}/{} on {device}: no tuning candidate prepared and validated",
                problem.kernel.name, problem.variant
            ),
        })),
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
        let key = |d: &str, p: &Problem| key(d, p, &[b"source"]);
        // n and k default to 256, so m below that shares the 256 class.
        assert_eq!(key("d", &p(100)), key("d", &p(256)));
        assert_ne!(key("d", &p(257)), key("d", &p(256)));
        assert_eq!(key("d", &p(300)), key("d", &p(512)));
        assert_ne!(key("d", &p(512)), key("e", &p(512)));
    }

    #[test]
    fn an_edited_kernel_source_is_a_different_key_and_a_cache_miss() {
        let p = Problem::new("gemm", "blocked", &BTreeMap::new(), "f32", false).unwrap();
        let old = key("d", &p, &[b"__kernel void gemm_blocked() {}"]);
        let edited = key("d", &p, &[b"__kernel void gemm_blocked() { /* faster */ }"]);
        assert_ne!(old, edited);
        assert_eq!(old, key("d", &p, &[b"__kernel void gemm_blocked() {}"]));
        // Parts are separated: the same bytes split differently are another source set.
        assert_ne!(key("d", &p, &[b"ab", b"c"]), key("d", &p, &[b"a", b"bc"]));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gemm_tuning.json");
        let entry = Tuned {
            tuning: 7u32,
            seconds: 1.0,
            candidates: 3,
        };
        store_in(&path, &old, &entry);
        let cached = |k: &str| load_all::<u32>(&path).remove(k);
        assert_eq!(cached(&old), Some(entry));
        assert_eq!(
            cached(&edited),
            None,
            "a tuning of the old source is not reused"
        );
    }

    /// A candidate whose time and output are given.
    struct Fake {
        time: Duration,
        out: Buffer,
        runs: usize,
    }

    impl Trial for Fake {
        fn run(&mut self) -> Result<Duration, BackendError> {
            self.runs += 1;
            // The warm-up is slow; the median of the rest is the time.
            Ok(if self.runs == 1 {
                self.time * 10
            } else {
                self.time
            })
        }

        fn output(&mut self) -> Result<Buffer, BackendError> {
            Ok(self.out.clone())
        }
    }

    #[test]
    fn search_keeps_the_fastest_valid_candidate_and_says_why_when_none_is() {
        let params = BTreeMap::from([("n".to_string(), 64)]);
        let p = Problem::new("copy", "", &params, "f32", false).unwrap();
        let inputs = p.inputs(1);
        let wrong = Buffer::F32(vec![f32::NAN; 64]);
        let cands: Vec<(u64, bool)> = vec![(5, true), (2, false), (3, true), (9, true)];
        let found = search("x", "x:0", cands, &p, &inputs, |&(ms, valid)| {
            Ok(Some(Fake {
                time: Duration::from_millis(ms),
                out: if valid {
                    inputs[0].clone()
                } else {
                    wrong.clone()
                },
                runs: 0,
            }))
        })
        .unwrap();
        assert_eq!(found.tuning, (3, true), "the fastest valid one");
        assert_eq!(found.candidates, 4);
        let lost = search("x", "x:0", vec![1u8, 2], &p, &inputs, |&c| {
            if c == 1 {
                Ok(None::<Fake>)
            } else {
                Err(BackendError::Driver {
                    backend: "x".into(),
                    call: "launch".into(),
                    message: "lost".into(),
                })
            }
        })
        .unwrap_err();
        assert!(matches!(lost, BackendError::Driver { .. }), "{lost}");
        let refused = search("x", "x:0", vec![1u8], &p, &inputs, |_| Ok(None::<Fake>)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "x does not support copy/default on x:0: no tuning candidate prepared and validated"
        );
    }
}
