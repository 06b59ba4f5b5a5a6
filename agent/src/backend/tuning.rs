//! The autotuner every tuning backend uses (OpenCL and Vulkan tune GEMM `blocked` and the GEMM of
//! conv2d `im2col`: [`tunable`]) and its cache: one JSON file per backend under the agent cache
//! dir, keyed by device fingerprint, kernel, dtype, power-of-two size class and a hash of the
//! kernel's device code (so an edited kernel never reuses a stale tuning), written atomically
//! (temp + rename). Fields added later take `#[serde(default)]` so old files still load.
//!
//! A backend supplies only its candidates and how to prepare one ([`Trial`]); [`search`] times
//! and validates them the same way everywhere and [`cached_or_search`] consults the cache first.

use super::{BackendError, PreparedKernel};
use crate::cache;
use gpufleet_kernels::{Buffer, KernelId, Problem};
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
    /// Candidates the search was given (more than `candidates` when the budget ended it).
    #[serde(default)]
    pub offered: usize,
    /// The search's budget in seconds.
    #[serde(default)]
    pub budget_s: f64,
}

fn path(backend: &str) -> PathBuf {
    cache::dir().join(backend).join("gemm_tuning.json")
}

/// Whether `problem` runs a tuned GEMM: gemm `blocked`, and conv2d `im2col`, whose GEMM (filters ×
/// output pixels × channels·ksize², batched over the images) has its own best tile. The first
/// candidate that fits the filters, taken untuned, ran conv2d at 0.10-0.13 of OpenCL's speed on an
/// H200's Vulkan driver (128×128 tiles; docs/PERFORMANCE.md).
pub fn tunable(problem: &Problem) -> bool {
    matches!(
        (problem.id(), problem.variant.as_str()),
        (KernelId::Gemm, "blocked") | (KernelId::Conv2d, "im2col")
    )
}

/// The power of two at or above `v` (at least 1).
fn bucket(v: usize) -> usize {
    v.max(1).next_power_of_two()
}

/// The key of `problem`'s GEMM class on the device with `fingerprint`, run by the device code
/// `sources` (OpenCL C or SPIR-V bytes): a changed kernel is a different key. A gemm's class is
/// the power of two above its largest side; a conv2d's the powers of two above each side of its
/// GEMM.
pub fn key(fingerprint: &str, problem: &Problem, sources: &[&[u8]]) -> String {
    let class = if problem.id() == KernelId::Conv2d {
        let s = problem.conv_shape();
        format!(
            "{}x{}x{}",
            bucket(s.filters),
            bucket(s.out_h * s.out_w),
            bucket(s.channels * s.ksize * s.ksize)
        )
    } else {
        let size = problem
            .param("m")
            .max(problem.param("n"))
            .max(problem.param("k"))
            .max(1);
        bucket(size as usize).to_string()
    };
    format!(
        "{:016x}|{}|{}|{class}|{:016x}",
        cache::fnv64(&[fingerprint.as_bytes()]),
        problem.kernel.name,
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
    let text = serde_json::to_vec_pretty(&all).expect("tuned configurations serialise to JSON");
    if std::fs::write(&tmp, text).is_ok() {
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

/// A candidate whose first timed iteration is this many times the best median so far cannot
/// win: it is dropped without its other iterations and its validation.
const HOPELESS: u32 = 3;

/// Searches `candidates` on the real problem: each is prepared (`prepare`; `Ok(None)` skips one
/// the planner refuses, an error is kept as the reason if nothing wins), run `TRIAL_RUNS` (4) times
/// and validated against `inputs`; the fastest valid median wins. `device` names the device in the
/// refusal.
///
/// Bounded by `budget` (see [`budget`]): the first candidate is always tried, and another one
/// starts only when the time spent so far plus the slowest candidate yet still fits, so a device
/// whose compiler takes seconds per program (PoCL builds a half-precision 8×8 tile in about 15 s)
/// stops early instead of running into the run's timeout. A build cannot be interrupted, so the
/// prediction is what keeps the search inside its budget. And a candidate whose first timed
/// iteration is [`HOPELESS`] times the best median yet is dropped there: a small tile late in the
/// list at n = 8192 took seconds an iteration, so its four iterations and validation took the
/// search of a 30 s budget to 46 s on an H200.
///
/// # Errors
/// The first preparation or launch error when no candidate ran and validated, else `Unsupported`.
pub fn search<C: Copy, T: Trial>(
    backend: &str,
    device: &str,
    budget: Duration,
    candidates: Vec<C>,
    problem: &Problem,
    inputs: &[Buffer],
    mut prepare: impl FnMut(&C) -> Result<Option<T>, BackendError>,
) -> Result<Tuned<C>, BackendError> {
    let started = Instant::now();
    let offered = candidates.len();
    let mut best: Option<(Duration, C)> = None;
    // The first failure: when one candidate's failure makes the next ones fail too (a driver
    // left in a bad state), the first is the cause.
    let (mut tried, mut first_err) = (0, None);
    // The longest one candidate took so far (preparation, trial runs, validation).
    let mut slowest = Duration::ZERO;
    for cand in candidates {
        if tried > 0 && started.elapsed() + slowest > budget {
            break;
        }
        tried += 1;
        let began = Instant::now();
        let outcome = prepare(&cand).and_then(|t| match t {
            Some(mut t) => trial_median(&mut t, problem, inputs, best.map(|(b, _)| b)),
            None => Ok(None),
        });
        slowest = slowest.max(began.elapsed());
        match outcome {
            Ok(Some(median)) if best.is_none_or(|(t, _)| median < t) => {
                best = Some((median, cand));
            }
            Ok(_) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match best {
        Some((_, tuning)) => Ok(Tuned {
            tuning,
            seconds: started.elapsed().as_secs_f64(),
            candidates: tried,
            offered,
            budget_s: budget.as_secs_f64(),
        }),
        None => Err(first_err.unwrap_or(BackendError::Unsupported {
            backend: backend.into(),
            what: format!(
                "{}/{} on {device}: no tuning candidate prepared and validated",
                problem.kernel.name, problem.variant
            ),
        })),
    }
}

/// `trial`'s median over [`TRIAL_RUNS`] less the warm-up, or `None` when its output fails
/// validation or its first timed iteration is [`HOPELESS`] times `best` (it cannot win).
///
/// # Errors
/// A launch or readback error.
fn trial_median<T: Trial>(
    trial: &mut T,
    problem: &Problem,
    inputs: &[Buffer],
    best: Option<Duration>,
) -> Result<Option<Duration>, BackendError> {
    let mut times = Vec::with_capacity(TRIAL_RUNS);
    for i in 0..TRIAL_RUNS {
        let t = trial.run()?;
        if i == 1 && best.is_some_and(|b| t > b * HOPELESS) {
            return Ok(None);
        }
        times.push(t);
    }
    if !problem.check(inputs, &trial.output()?).passed {
        return Ok(None);
    }
    times.remove(0);
    times.sort();
    Ok(Some(times[times.len() / 2]))
}

/// How long an autotuner may spend on one problem class: `GPUFLEET_TUNE_BUDGET_S` (default 8 s),
/// and at most a quarter of the run's timeout `run_timeout_s` (0: no timeout known), so the
/// search leaves the run room to measure.
pub fn budget(run_timeout_s: f64) -> Duration {
    budget_of(
        std::env::var("GPUFLEET_TUNE_BUDGET_S").ok().as_deref(),
        run_timeout_s,
    )
}

/// [`budget`] with the setting given.
fn budget_of(setting: Option<&str>, run_timeout_s: f64) -> Duration {
    let s = setting
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .unwrap_or(8.0);
    let s = if run_timeout_s > 0.0 {
        s.min(run_timeout_s / 4.0)
    } else {
        s
    };
    Duration::from_secs_f64(s.clamp(0.0, 600.0))
}

/// The config line recorded with a result.
pub fn describe<T>(t: &Tuned<T>, searched: bool) -> String {
    if searched {
        format!(
            "searched {} of {} candidates in {:.1} s (budget {:.1} s)",
            t.candidates, t.offered, t.seconds, t.budget_s
        )
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
        assert!(
            key("d", &p(256)).contains("|gemm|f32|256|"),
            "{}",
            key("d", &p(256))
        );
    }

    #[test]
    fn conv2d_im2col_is_tuned_per_shape_of_its_gemm() {
        let conv = |variant: &str, channels: i64, side: i64| {
            let params = BTreeMap::from([
                ("batch".to_string(), 8),
                ("channels".to_string(), channels),
                ("filters".to_string(), channels),
                ("height".to_string(), side),
                ("width".to_string(), side),
            ]);
            Problem::new("conv2d", variant, &params, "f32", false).unwrap()
        };
        assert!(tunable(&conv("im2col", 128, 28)));
        assert!(!tunable(&conv("direct", 128, 28)));
        let gemm = Problem::new("gemm", "blocked", &BTreeMap::new(), "f32", false).unwrap();
        assert!(tunable(&gemm));
        let naive = Problem::new("gemm", "naive", &BTreeMap::new(), "f32", false).unwrap();
        assert!(!tunable(&naive));
        let key = |p: &Problem| key("d", p, &[b"source"]);
        // 128 filters × 784 pixels × 1152: the 128x1024x2048 class.
        assert!(key(&conv("im2col", 128, 28)).contains("|conv2d|f32|128x1024x2048|"));
        // Two shapes whose largest side is in one class but whose GEMMs differ.
        assert_ne!(key(&conv("im2col", 64, 56)), key(&conv("im2col", 256, 14)));
        assert_ne!(key(&conv("im2col", 64, 8)), key(&gemm));
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
            offered: 5,
            budget_s: 8.0,
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

    thread_local! {
        /// (time in ms, iterations run) of every Fake dropped on this thread, in order.
        static FAKE_RUNS: std::cell::RefCell<Vec<(u64, usize)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            let entry = (self.time.as_millis() as u64, self.runs);
            FAKE_RUNS.with(|r| r.borrow_mut().push(entry));
        }
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
        let ample = Duration::from_secs(60);
        let cands: Vec<(u64, bool)> = vec![(5, true), (2, false), (3, true), (9, true)];
        let found = search("x", "x:0", ample, cands, &p, &inputs, |&(ms, valid)| {
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
        assert_eq!((found.candidates, found.offered), (4, 4));
        let lost = search("x", "x:0", ample, vec![1u8, 2], &p, &inputs, |&c| {
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
        let refused = search("x", "x:0", ample, vec![1u8], &p, &inputs, |_| {
            Ok(None::<Fake>)
        })
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "x does not support copy/default on x:0: no tuning candidate prepared and validated"
        );
    }

    #[test]
    fn search_starts_no_candidate_it_predicts_would_overrun_the_budget() {
        let params = BTreeMap::from([("n".to_string(), 64)]);
        let p = Problem::new("copy", "", &params, "f32", false).unwrap();
        let inputs = p.inputs(1);
        // Each preparation takes 60 ms (a slow compiler); the budget is 100 ms. After the
        // first (60 ms), a second would end near 120 ms: it is not started.
        let prepared = std::cell::Cell::new(0);
        let found = search(
            "x",
            "x:0",
            Duration::from_millis(100),
            vec![1u8, 2, 3],
            &p,
            &inputs,
            |_| {
                prepared.set(prepared.get() + 1);
                std::thread::sleep(Duration::from_millis(60));
                Ok(Some(Fake {
                    time: Duration::from_millis(1),
                    out: inputs[0].clone(),
                    runs: 0,
                }))
            },
        )
        .unwrap();
        assert_eq!(prepared.get(), 1);
        assert_eq!((found.candidates, found.offered), (1, 3));
        assert_eq!(
            describe(&found, true).split(" in ").next(),
            Some("searched 1 of 3 candidates")
        );
        // A zero budget still tries the first candidate: a run always gets a tuning.
        let first = search(
            "x",
            "x:0",
            Duration::ZERO,
            vec![1u8, 2],
            &p,
            &inputs,
            |_| {
                Ok(Some(Fake {
                    time: Duration::from_millis(1),
                    out: inputs[0].clone(),
                    runs: 0,
                }))
            },
        )
        .unwrap();
        assert_eq!(first.candidates, 1);
    }

    #[test]
    fn a_candidate_far_slower_than_the_best_stops_after_one_timed_iteration() {
        let params = BTreeMap::from([("n".to_string(), 64)]);
        let p = Problem::new("copy", "", &params, "f32", false).unwrap();
        let inputs = p.inputs(1);
        let runs = std::cell::RefCell::new(Vec::new());
        FAKE_RUNS.with(|r| r.borrow_mut().clear());
        let found = search(
            "x",
            "x:0",
            Duration::from_secs(60),
            vec![2u64, 50, 5],
            &p,
            &inputs,
            |&ms| {
                Ok(Some(Fake {
                    time: Duration::from_millis(ms),
                    out: inputs[0].clone(),
                    runs: 0,
                }))
            },
        )
        .unwrap();
        assert_eq!(found.tuning, 2);
        assert_eq!(found.candidates, 3, "every candidate was tried");
        // Each Fake reports its runs when dropped (below): the 50 ms one stopped after its warm-up
        // and one timed iteration, the 5 ms one (not 3x the best) ran all four.
        FAKE_RUNS.with(|r| runs.borrow_mut().extend(r.borrow_mut().drain(..)));
        assert_eq!(*runs.borrow(), vec![(2, 4), (50, 2), (5, 4)]);
    }

    #[test]
    fn the_budget_leaves_the_run_three_quarters_of_its_timeout() {
        let secs = |setting, timeout| budget_of(setting, timeout).as_secs_f64();
        assert_eq!(secs(None, 0.0), 8.0, "the default, no timeout known");
        assert_eq!(secs(None, 120.0), 8.0);
        assert_eq!(secs(None, 20.0), 5.0, "a quarter of a short timeout");
        assert_eq!(secs(Some("30"), 60.0), 15.0);
        assert_eq!(secs(Some("2"), 30.0), 2.0);
        assert_eq!(
            secs(Some("nan"), 0.0),
            8.0,
            "an unreadable setting is the default"
        );
        assert_eq!(secs(Some("-1"), 0.0), 0.0);
    }
}
