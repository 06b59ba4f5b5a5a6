//! Expanding a suite over agents and devices into jobs. Pure: agent
//! descriptions in, job specs out, so every rule here has a unit test.
//!
//! A job is one (device, kernel, variant, params, dtype, mode). Variants a
//! suite leaves open become every variant the device's backend implements;
//! combinations the backend does not implement are skipped and counted, not
//! run, so a suite written for GPUs still runs on a CPU-only agent.

use super::error::CampaignError;
use super::selection::{EnvSet, Selection};
use gpufleet_kernels::{Mode, Problem, RunSettings, SpecError, SuiteRun, find_kernel};
use gpufleet_proto::v1 as pb;

/// Seed used by campaigns so every device gets the same inputs.
pub const CAMPAIGN_SEED: u64 = 42;

/// An agent with its description, as planning sees it.
#[derive(Debug, Clone)]
pub struct Target {
    pub agent: String,
    pub info: pb::AgentInfo,
}

/// One job to run.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedJob {
    pub agent: String,
    pub device: pb::Device,
    pub spec: pb::RunSpec,
    pub spec_key: String,
}

/// The jobs and what was left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobPlan {
    pub jobs: Vec<PlannedJob>,
    /// (device, kernel/variant/dtype) combinations the backend lacks.
    pub skipped: Vec<String>,
    /// Devices left out and why (backend unavailable, filtered).
    pub notes: Vec<String>,
}

/// The wire value of a mode (the one place the coordinator converts it).
pub fn wire_mode(mode: Mode) -> pb::RunMode {
    match mode {
        Mode::ComputeOnly => pb::RunMode::ComputeOnly,
        Mode::WithTransfers => pb::RunMode::WithTransfers,
    }
}

fn support<'a>(b: &'a pb::BackendStatus, kernel: &str) -> Option<&'a pb::KernelSupport> {
    b.kernels.iter().find(|k| k.kernel == kernel)
}

/// A run with its spec validated and its settings decided: the problem of each variant it may
/// run, and how every job of it is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedRun {
    pub run: SuiteRun,
    /// The variants the run names, resolved; or, when it leaves them open, every catalog variant
    /// of the kernel that accepts the run's parameters.
    pub problems: Vec<Problem>,
    /// The run's settings under the selection's overrides, every default applied: what its jobs
    /// store and send.
    pub settings: RunSettings,
}

/// Validates every run and decides its settings: the coordinator's one validation point for specs
/// (a suite file's runs were also checked when the file was read, with its line numbers) and the
/// one place a campaign's settings are resolved. Pure; callers resolve before any agent is
/// contacted or anything is stored.
///
/// # Errors
/// [`CampaignError::Env`] for an environment override the agents would refuse (checked here so
/// no campaign is made for it); [`CampaignError::Settings`] for a setting outside its bounds
/// (say, a `--timeout-s` override of 0); [`CampaignError::Spec`] of the first run whose kernel, or
/// a variant it names, cannot become a problem (unknown kernel, variant or parameter, a bound
/// crossed, a dtype the kernel lacks).
pub fn resolve_runs(runs: &[SuiteRun], sel: &Selection) -> Result<Vec<ResolvedRun>, CampaignError> {
    let overrides = sel.options.overrides();
    let mut settings = Vec::with_capacity(runs.len());
    for run in runs {
        for (key, value) in &run.env {
            gpufleet_kernels::env::check_override(key, value)
                .map_err(|e| CampaignError::Env(format!("{}: {e}", run.kernel)))?;
        }
        let resolved =
            overrides
                .or(run.settings)
                .resolve()
                .map_err(|source| CampaignError::Settings {
                    kernel: run.kernel.clone(),
                    source,
                })?;
        settings.push(resolved);
    }
    Ok(resolve_specs(runs, &settings)?)
}

fn resolve_specs(
    runs: &[SuiteRun],
    settings: &[RunSettings],
) -> Result<Vec<ResolvedRun>, SpecError> {
    runs.iter()
        .zip(settings)
        .map(|(run, settings)| {
            let problem = |variant: &str| {
                Problem::new(&run.kernel, variant, &run.params, run.dtype.name(), true)
                    .map_err(SpecError::without_debug_kernels)
            };
            let problems = match (&run.variants, find_kernel(&run.kernel)) {
                (Some(variants), _) => variants
                    .iter()
                    .map(|v| problem(v))
                    .collect::<Result<Vec<_>, _>>()?,
                (None, Some(def)) => def
                    .variants
                    .iter()
                    .filter_map(|v| problem(v).ok())
                    .collect(),
                // An unknown kernel: the error says which kernels there are.
                (None, None) => vec![problem("")?],
            };
            Ok(ResolvedRun {
                run: run.clone(),
                problems,
                settings: *settings,
            })
        })
        .collect()
}

/// Expands resolved runs over every selected device of every target.
pub fn plan_jobs(runs: &[ResolvedRun], targets: &[Target], sel: &Selection) -> JobPlan {
    let opts = &sel.options;
    let mut plan = JobPlan::default();
    for t in targets {
        for device in &t.info.devices {
            let Some(backend) = t.info.backends.iter().find(|b| b.name == device.backend) else {
                continue;
            };
            if !opts.backends.is_empty() && !opts.backends.contains(&device.backend) {
                continue;
            }
            if !sel.devices.is_empty() && !sel.devices.contains(&device.id) {
                continue;
            }
            if !backend.available {
                plan.notes.push(format!(
                    "{}:{}: backend unavailable: {}",
                    t.agent, device.id, backend.reason
                ));
                continue;
            }
            for ResolvedRun {
                run,
                problems,
                settings,
            } in runs
            {
                if !opts.kernels.is_empty() && !opts.kernels.contains(&run.kernel) {
                    continue;
                }
                let Some(sup) = support(backend, &run.kernel) else {
                    plan.skipped
                        .push(format!("{}:{} {}", t.agent, device.id, run.kernel));
                    continue;
                };
                let variants: Vec<String> = match &run.variants {
                    Some(_) => problems.iter().map(|p| p.variant.clone()).collect(),
                    None => sup.variants.clone(),
                };
                for variant in variants {
                    if !sup.variants.contains(&variant)
                        || !sup.dtypes.iter().any(|d| d == run.dtype.name())
                    {
                        plan.skipped.push(format!(
                            "{}:{} {}/{variant}/{}",
                            t.agent, device.id, run.kernel, run.dtype
                        ));
                        continue;
                    }
                    // A variant that needs a device feature (compute_peak's fp16 and fp64).
                    if let Some(f) = gpufleet_kernels::variant_feature(&run.kernel, &variant)
                        && !device.features.iter().any(|x| x == f)
                    {
                        plan.skipped.push(format!(
                            "{}:{} {}/{variant} (the device lacks {f})",
                            t.agent, device.id, run.kernel
                        ));
                        continue;
                    }
                    let Some(problem) = problems.iter().find(|p| p.variant == variant) else {
                        plan.skipped.push(format!(
                            "{}:{} {}/{variant}",
                            t.agent, device.id, run.kernel
                        ));
                        continue;
                    };
                    let sets: Vec<Option<&EnvSet>> = if opts.env_sets.is_empty() {
                        vec![None]
                    } else {
                        opts.env_sets.iter().map(Some).collect()
                    };
                    for set in sets {
                        let mut env = run.env.clone();
                        env.extend(opts.env.clone());
                        if let Some(set) = set {
                            env.extend(set.env.clone());
                        }
                        plan.jobs.push(PlannedJob {
                            agent: t.agent.clone(),
                            device: device.clone(),
                            spec_key: match set {
                                Some(set) => {
                                    format!("{}@{}", problem.spec_key(run.mode), set.name)
                                }
                                None => problem.spec_key(run.mode),
                            },
                            spec: pb::RunSpec {
                                kernel: run.kernel.clone(),
                                variant: problem.variant.clone(),
                                params: problem
                                    .params
                                    .iter()
                                    .map(|(k, v)| (k.clone(), *v))
                                    .collect(),
                                dtype: problem.dtype.name().to_string(),
                                device_id: device.id.clone(),
                                mode: wire_mode(run.mode) as i32,
                                skip_validation: false,
                                seed: CAMPAIGN_SEED,
                                env: env.into_iter().collect(),
                                power_window_s: sel.power_window_s,
                                ..pb::RunSpec::default()
                            }
                            // Every setting explicit: the job stores and sends what was resolved.
                            .with_settings(settings.explicit()),
                        });
                    }
                }
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_kernels::{Dtype, PartialSettings};
    use std::collections::BTreeMap;

    /// (backend, available, [(kernel, [variants])])
    type BackendSpec<'a> = (&'a str, bool, Vec<(&'a str, Vec<&'a str>)>);

    fn target(name: &str, backends: Vec<BackendSpec>) -> Target {
        let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Target {
            agent: name.into(),
            info: pb::AgentInfo {
                devices: backends
                    .iter()
                    .map(|(b, _, _)| pb::Device {
                        id: format!("{b}:0"),
                        backend: b.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                backends: backends
                    .iter()
                    .map(|(b, avail, ks)| pb::BackendStatus {
                        name: b.to_string(),
                        available: *avail,
                        reason: if *avail {
                            String::new()
                        } else {
                            "no driver".into()
                        },
                        kernels: ks
                            .iter()
                            .map(|(k, vs)| pb::KernelSupport {
                                kernel: k.to_string(),
                                variants: strs(vs),
                                dtypes: strs(&["f32"]),
                            })
                            .collect(),
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    fn run(kernel: &str, variants: Option<Vec<&str>>, params: &[(&str, i64)]) -> SuiteRun {
        SuiteRun {
            kernel: kernel.into(),
            variants: variants.map(|v| v.iter().map(|s| s.to_string()).collect()),
            params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            dtype: Dtype::F32,
            mode: Mode::ComputeOnly,
            settings: PartialSettings {
                warmup: Some(1),
                min_iterations: Some(2),
                min_seconds: Some(0.0),
                max_iterations: Some(10),
                timeout_s: Some(30.0),
                target_ci_pct: Some(1.0),
                max_seconds: Some(1.0),
            },
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn open_variants_expand_to_what_the_backend_has() {
        let t = target(
            "a",
            vec![("cpu", true, vec![("gemm", vec!["naive", "blocked"])])],
        );
        let p = plan_jobs(
            &resolve_runs(&[run("gemm", None, &[("m", 64)])], &Selection::default()).unwrap(),
            &[t],
            &Selection::default(),
        );
        let vs: Vec<&str> = p.jobs.iter().map(|j| j.spec.variant.as_str()).collect();
        assert_eq!(vs, vec!["naive", "blocked"]);
        // Params are resolved with the catalog's defaults, so keys compare.
        assert_eq!(p.jobs[0].spec.params.get("n"), Some(&256));
        assert_eq!(
            p.jobs[0].spec_key,
            "gemm/naive/k=256,m=64,n=256/f32/compute_only"
        );
        assert_eq!(p.jobs[0].spec.seed, CAMPAIGN_SEED);
    }

    #[test]
    fn a_variant_needing_a_device_feature_runs_only_where_the_device_has_it() {
        let mut t = target(
            "a",
            vec![(
                "opencl",
                true,
                vec![(
                    "compute_peak",
                    vec!["fp32", "fp16", "fp64", "int32", "int8"],
                )],
            )],
        );
        // Like NVIDIA's OpenCL: double arithmetic, no cl_khr_fp16, dot products of bytes.
        t.info.devices[0].features = vec!["fp64".into(), "cl_khr_fp64".into(), "int8_dot".into()];
        let none = Selection::default();
        let runs = resolve_runs(&[run("compute_peak", None, &[])], &none).unwrap();
        let p = plan_jobs(&runs, std::slice::from_ref(&t), &none);
        let vs: Vec<&str> = p.jobs.iter().map(|j| j.spec.variant.as_str()).collect();
        assert_eq!(vs, vec!["fp32", "fp64", "int32", "int8"]);
        assert_eq!(
            p.skipped,
            vec!["a:opencl:0 compute_peak/fp16 (the device lacks fp16)"]
        );
        // Without the dot product feature int8 is skipped too.
        let mut old = t.clone();
        old.info.devices[0].features.retain(|f| f != "int8_dot");
        let p = plan_jobs(&runs, std::slice::from_ref(&old), &none);
        assert!(
            p.skipped
                .contains(&"a:opencl:0 compute_peak/int8 (the device lacks int8_dot)".to_string()),
            "{:?}",
            p.skipped
        );
        // A device with half arithmetic runs it.
        t.info.devices[0].features.push("fp16".into());
        assert_eq!(plan_jobs(&runs, &[t], &none).jobs.len(), 5);
    }

    #[test]
    fn missing_support_is_skipped_and_unavailable_noted() {
        let t = target(
            "a",
            vec![
                ("cpu", true, vec![("gemm", vec!["blocked"])]),
                ("opencl", false, vec![]),
            ],
        );
        let runs = [
            run("gemm", Some(vec!["tiled"]), &[]),
            run("softmax", None, &[]),
        ];
        let none = Selection::default();
        let p = plan_jobs(&resolve_runs(&runs, &none).unwrap(), &[t], &none);
        assert!(p.jobs.is_empty());
        assert_eq!(p.skipped.len(), 2);
        assert!(p.notes[0].contains("no driver"), "{:?}", p.notes);
    }

    #[test]
    fn selection_filters_backends_devices_kernels_and_adds_env() {
        let t = target(
            "a",
            vec![(
                "cpu",
                true,
                vec![("gemm", vec!["blocked"]), ("copy", vec!["default"])],
            )],
        );
        let mut sel = Selection::default();
        sel.options.kernels = vec!["copy".into()];
        sel.options.env.insert("POCL_X".into(), "1".into());
        sel.options.timeout_s = Some(5.0);
        let runs = [run("gemm", None, &[]), run("copy", None, &[])];
        let runs = resolve_runs(&runs, &sel).unwrap();
        let p = plan_jobs(&runs, std::slice::from_ref(&t), &sel);
        assert_eq!(p.jobs.len(), 1);
        assert_eq!(
            p.jobs[0].spec.env.get("POCL_X").map(String::as_str),
            Some("1")
        );
        assert_eq!(p.jobs[0].spec.given_settings().timeout_s, Some(5.0));
        let mut sel = Selection::default();
        sel.options.backends = vec!["vulkan".into()];
        assert!(
            plan_jobs(&runs, std::slice::from_ref(&t), &sel)
                .jobs
                .is_empty()
        );
        let sel = Selection {
            devices: vec!["cpu:0".into()],
            ..Default::default()
        };
        assert_eq!(plan_jobs(&runs, &[t], &sel).jobs.len(), 2);
    }

    #[test]
    fn runs_are_resolved_once_and_bad_specs_refused() {
        // Open variants: every catalog variant that accepts the parameters.
        let none = Selection::default();
        let open = resolve_runs(&[run("gemm", None, &[("m", 64)])], &none).unwrap();
        let vs: Vec<&str> = open[0]
            .problems
            .iter()
            .map(|p| p.variant.as_str())
            .collect();
        assert_eq!(vs, vec!["naive", "tiled", "blocked"]);
        assert_eq!(open[0].problems[0].params["n"], 256, "defaults filled in");
        // Named variants, unknown kernels and bad parameters are errors naming the field.
        let field = |r: SuiteRun| match resolve_runs(&[r], &none).unwrap_err() {
            CampaignError::Spec(e) => e.field(),
            e => panic!("{e}"),
        };
        assert_eq!(field(run("gemm", Some(vec!["fast"]), &[])), "variant");
        assert_eq!(field(run("gemmm", None, &[])), "kernel");
        assert_eq!(field(run("gemmm", Some(vec![""]), &[])), "kernel");
        assert_eq!(
            field(run("gemm", Some(vec!["naive"]), &[("m", 0)])),
            "params"
        );
    }

    #[test]
    fn jobs_carry_every_setting_resolved_with_the_overrides_on_top() {
        let t = target("a", vec![("cpu", true, vec![("copy", vec!["default"])])]);
        let mut bare = run("copy", None, &[]);
        bare.settings = PartialSettings {
            min_seconds: Some(0.2),
            target_ci_pct: Some(0.0),
            ..Default::default()
        };
        let none = Selection::default();
        let p = plan_jobs(
            &resolve_runs(&[bare.clone()], &none).unwrap(),
            std::slice::from_ref(&t),
            &none,
        );
        let s = p.jobs[0].spec.given_settings();
        // Every default applied here, once; no target is an explicit 0, the budget derived.
        assert_eq!(
            (s.warmup, s.min_iterations, s.max_iterations, s.timeout_s),
            (Some(3), Some(10), Some(10_000), Some(120.0))
        );
        assert_eq!(
            (s.min_seconds, s.target_ci_pct, s.max_seconds),
            (Some(0.2), Some(0.0), Some(1.0))
        );
        // The agent decides the power window unless the selection says.
        assert_eq!(p.jobs[0].spec.power_window_s, None);
        let mut sel = Selection::default();
        sel.options.target_ci_pct = Some(2.0);
        sel.options.max_seconds = Some(0.1);
        sel.power_window_s = Some(-1.0);
        let p = plan_jobs(&resolve_runs(&[bare.clone()], &sel).unwrap(), &[t], &sel);
        let (s, spec) = (p.jobs[0].spec.given_settings(), &p.jobs[0].spec);
        // A budget below the minimum is raised to it, as the agent did.
        assert_eq!(
            (s.target_ci_pct, s.max_seconds, spec.power_window_s),
            (Some(2.0), Some(0.2), Some(-1.0))
        );
        // An override outside its bounds is refused before anything runs, naming the field.
        sel.options.timeout_s = Some(0.0);
        let e = resolve_runs(&[bare], &sel).unwrap_err();
        assert!(matches!(e, CampaignError::Settings { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "copy: timeout_s: 0 is outside (0, 86400] seconds"
        );
    }
}
