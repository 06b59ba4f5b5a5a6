//! The suite file format and its expansion into [`SuiteRun`]s.
//!
//! ```toml
//! name = "smoke"                 # optional, defaults to the file name
//! description = "..."
//! [defaults]                     # optional; each run may override any of these
//! warmup = 2                     # left out: decided when a campaign plans the run
//! min_iterations = 5             # (RunSettings::DEFAULT: 3, 10, 0.5 s, 10000, 120 s, 1%, 5 × min_seconds)
//! min_seconds = 0.05
//! max_iterations = 1000
//! timeout_s = 60
//! target_ci_pct = 0              # 0: no interval target, the minimums decide
//! max_seconds = 1
//! mode = "compute_only"          # or "with_transfers"
//! dtype = "f32"                  # default f32
//! env = { KEY = "value" }        # merged under each run's env
//! [[run]]
//! kernel = "gemm"
//! variants = ["naive", "tiled"]  # or variant = "blocked"; omitted = every variant the backend has
//! params = { m = [128, 256], n = [128, 256], k = 128 }  # arrays zip, scalars broadcast
//! [[run]]
//! kernel = "llm"
//! model_config = "qwen3-4b.json" # llm: a Hugging Face config.json's shape (relative to this file)
//! ```
//!
//! Unknown fields are errors, so a misspelt `min_iteration` cannot silently fall back to a default.
//! Every field is read as `toml::Spanned` so each error points at the line of the value at fault.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::{Suite, SuiteError, SuiteRun};
use crate::error::SpecError;
use crate::problem::Problem;
use crate::run::{Mode, PartialSettings};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    defaults: Options,
    #[serde(default)]
    run: Vec<Spanned<RunDoc>>,
}

/// Declares a document struct with the measurement options every `[defaults]` and `[[run]]` may
/// set, after its own fields. A macro rather than `#[serde(flatten)]`, which would lose the spans and
/// `deny_unknown_fields`.
macro_rules! with_options {
    ($(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $name {
            $($(#[$fmeta])* $field: $ty,)*
            warmup: Option<Spanned<i64>>,
            min_iterations: Option<Spanned<i64>>,
            min_seconds: Option<Spanned<f64>>,
            max_iterations: Option<Spanned<i64>>,
            timeout_s: Option<Spanned<f64>>,
            target_ci_pct: Option<Spanned<f64>>,
            max_seconds: Option<Spanned<f64>>,
            mode: Option<Spanned<String>>,
            dtype: Option<Spanned<String>>,
            #[serde(default)]
            env: BTreeMap<String, String>,
        }
    };
}

with_options! {
    /// Measurement options, shared by `[defaults]` and each `[[run]]`.
    #[derive(Default)]
    struct Options {}
}

with_options! {
    /// One `[[run]]`: a kernel, its variants and parameter points, and its own options.
    struct RunDoc {
        kernel: Spanned<String>,
        variant: Option<Spanned<String>>,
        variants: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        params: BTreeMap<String, Spanned<ParamValue>>,
        /// `llm`: a Hugging Face config.json (relative to the suite file) giving the shape's
        /// parameters; `params` win over it.
        model_config: Option<Spanned<String>>,
    }
}

/// A parameter: one value, or an array zipped with the run's other arrays.
enum ParamValue {
    One(Scalar),
    Many(Vec<Scalar>),
}

/// One parameter value as written: a number, or a name for a parameter that has names
/// (`model = "1b"`).
#[derive(Clone)]
enum Scalar {
    Int(i64),
    Name(String),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer or a name")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v)
                    .map(Scalar::Int)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Name(v.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ParamValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer, a name, or an array of them")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ParamValue, E> {
                Ok(ParamValue::One(Scalar::Int(v)))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ParamValue, E> {
                i64::try_from(v)
                    .map(|v| ParamValue::One(Scalar::Int(v)))
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ParamValue, E> {
                Ok(ParamValue::One(Scalar::Name(v.to_string())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ParamValue, A::Error> {
                let mut values = Vec::new();
                while let Some(v) = seq.next_element::<Scalar>()? {
                    values.push(v);
                }
                Ok(ParamValue::Many(values))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Builds errors located in one file.
struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn invalid(&self, span: &Range<usize>, field: &str, message: String) -> SuiteError {
        SuiteError::Invalid {
            origin: self.origin.to_string(),
            line: self.line(span),
            field: field.to_string(),
            message,
        }
    }
}

/// The first value present among a run's option and the defaults' option.
fn pick<'a, T>(
    run: &'a Option<Spanned<T>>,
    defaults: &'a Option<Spanned<T>>,
) -> Option<&'a Spanned<T>> {
    run.as_ref().or(defaults.as_ref())
}

/// A count as the file gives it; its bounds are checked with the other settings
/// ([`PartialSettings::check`]).
fn count(ctx: &Ctx, value: Option<&Spanned<i64>>, field: &str) -> Result<Option<u32>, SuiteError> {
    let Some(v) = value else { return Ok(None) };
    let n = *v.get_ref();
    u32::try_from(n).map(Some).map_err(|_| {
        ctx.invalid(
            &v.span(),
            field,
            format!("{n} is not a count (0..={})", u32::MAX),
        )
    })
}

/// Zips array params and broadcasts scalars into one map per point; a name is read as the
/// value of `kernel`'s parameter that has it.
fn points(
    ctx: &Ctx,
    kernel: &str,
    params: &BTreeMap<String, Spanned<ParamValue>>,
) -> Result<Vec<BTreeMap<String, i64>>, SuiteError> {
    let resolve = |name: &str, v: &Scalar, span: &Range<usize>| -> Result<i64, SuiteError> {
        match v {
            Scalar::Int(x) => Ok(*x),
            Scalar::Name(text) => {
                let def = crate::catalog::find_kernel(kernel).and_then(|k| k.param(name));
                match def {
                    Some(d) => d.parse_value(text),
                    None => Err(format!(
                        "{name}={}: the value must be an integer",
                        crate::error::quote(text)
                    )),
                }
                .map_err(|m| ctx.invalid(span, &format!("params.{name}"), m))
            }
        }
    };
    let mut len: Option<(&str, usize)> = None;
    for (name, value) in params {
        if let ParamValue::Many(values) = value.get_ref() {
            if values.is_empty() {
                return Err(ctx.invalid(
                    &value.span(),
                    &format!("params.{name}"),
                    "empty array: give at least one value".to_string(),
                ));
            }
            match len {
                None => len = Some((name, values.len())),
                Some((first, n)) if n != values.len() => {
                    return Err(ctx.invalid(
                        &value.span(),
                        &format!("params.{name}"),
                        format!(
                            "array of {} values does not match `params.{first}` with {n} \
                             (arrays are zipped, so they need equal lengths)",
                            values.len()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    let n = len.map_or(1, |(_, n)| n);
    (0..n)
        .map(|i| {
            params
                .iter()
                .map(|(name, v)| {
                    let value = match v.get_ref() {
                        ParamValue::One(x) => x,
                        ParamValue::Many(xs) => &xs[i],
                    };
                    Ok((name.clone(), resolve(name, value, &v.span())?))
                })
                .collect()
        })
        .collect()
}

/// Locates a catalog error on the field it is about.
fn spec_error(
    ctx: &Ctx,
    run: &Spanned<RunDoc>,
    variant_span: Option<Range<usize>>,
    dtype_span: Option<Range<usize>>,
    error: SpecError,
) -> SuiteError {
    let doc = run.get_ref();
    let (field, span) = match &error {
        SpecError::UnknownParam { param, .. } | SpecError::ParamOutOfRange { param, .. } => (
            format!("params.{param}"),
            doc.params.get(param).map(Spanned::span),
        ),
        SpecError::InvalidParams { .. } | SpecError::TooLarge { .. } => (
            "params".to_string(),
            doc.params.values().next().map(Spanned::span),
        ),
        SpecError::UnknownVariant { .. } => ("variant".to_string(), variant_span),
        SpecError::UnsupportedDtype { .. } => ("dtype".to_string(), dtype_span),
        SpecError::UnknownKernel { .. } | SpecError::DebugKernelDisabled { .. } => {
            ("kernel".to_string(), Some(doc.kernel.span()))
        }
    };
    let span = span.unwrap_or_else(|| doc.kernel.span());
    SuiteError::Spec {
        origin: ctx.origin.to_string(),
        line: ctx.line(&span),
        field,
        source: Box::new(error),
    }
}

fn expand(
    ctx: &Ctx,
    defaults: &Options,
    run: &Spanned<RunDoc>,
) -> Result<Vec<SuiteRun>, SuiteError> {
    let doc = run.get_ref();
    let o = doc;
    let (variants, variant_span) = match (&doc.variant, &doc.variants) {
        (Some(_), Some(list)) => {
            return Err(ctx.invalid(
                &list.span(),
                "variants",
                "give either `variant` or `variants`, not both".to_string(),
            ));
        }
        (Some(v), None) => (Some(vec![v.get_ref().clone()]), Some(v.span())),
        (None, Some(list)) if list.get_ref().is_empty() => {
            return Err(ctx.invalid(
                &list.span(),
                "variants",
                "empty list: omit the field to run every variant".to_string(),
            ));
        }
        (None, Some(list)) => (Some(list.get_ref().clone()), Some(list.span())),
        (None, None) => (None, None),
    };
    let mode = match pick(&o.mode, &defaults.mode) {
        None => Mode::default(),
        Some(m) => m
            .get_ref()
            .parse()
            .map_err(|e| ctx.invalid(&m.span(), "mode", e))?,
    };
    let dtype = pick(&o.dtype, &defaults.dtype);
    let dtype_span = dtype.map(Spanned::span);
    let dtype = dtype.map_or_else(String::new, |d| d.get_ref().clone());
    let warmup = pick(&o.warmup, &defaults.warmup);
    let min_it = pick(&o.min_iterations, &defaults.min_iterations);
    let max_it = pick(&o.max_iterations, &defaults.max_iterations);
    let min_s = pick(&o.min_seconds, &defaults.min_seconds);
    let timeout = pick(&o.timeout_s, &defaults.timeout_s);
    let target = pick(&o.target_ci_pct, &defaults.target_ci_pct);
    let budget = pick(&o.max_seconds, &defaults.max_seconds);
    let given = |v: Option<&Spanned<f64>>| v.map(|v| *v.get_ref());
    let settings = PartialSettings {
        warmup: count(ctx, warmup, "warmup")?,
        min_iterations: count(ctx, min_it, "min_iterations")?,
        min_seconds: given(min_s),
        max_iterations: count(ctx, max_it, "max_iterations")?,
        timeout_s: given(timeout),
        target_ci_pct: given(target),
        max_seconds: given(budget),
    };
    // A file that contradicts itself (a maximum below its minimum) is refused, not repaired.
    settings
        .check()
        .and_then(|()| settings.check_order())
        .map_err(|e| {
            let span = match e.field {
                "warmup" => warmup.map(Spanned::span),
                "min_iterations" => min_it.map(Spanned::span),
                "max_iterations" => max_it.or(min_it).map(Spanned::span),
                "min_seconds" => min_s.map(Spanned::span),
                "max_seconds" => budget.or(min_s).map(Spanned::span),
                "timeout_s" => timeout.map(Spanned::span),
                "target_ci_pct" => target.map(Spanned::span),
                _ => None,
            };
            ctx.invalid(&span.unwrap_or_else(|| run.span()), e.field, e.message)
        })?;
    let mut env = defaults.env.clone();
    env.extend(o.env.iter().map(|(k, v)| (k.clone(), v.clone())));

    let kernel = doc.kernel.get_ref();
    let points = points(ctx, kernel, &doc.params)?;
    let shape = match &doc.model_config {
        None => BTreeMap::new(),
        Some(file) => {
            let dir = Path::new(ctx.origin).parent().unwrap_or(Path::new(""));
            crate::llm::read_shape_params(&dir.join(file.get_ref()))
                .map_err(|m| ctx.invalid(&file.span(), "model_config", m))?
        }
    };
    let check_variants = variants.clone().unwrap_or_else(|| vec![String::new()]);
    let mut out = Vec::with_capacity(points.len());
    for mut params in points {
        for (name, value) in &shape {
            params.entry(name.clone()).or_insert(*value);
        }
        let mut resolved = None;
        for variant in &check_variants {
            let problem = Problem::new(kernel, variant, &params, &dtype, true).map_err(|e| {
                let e = e.without_debug_kernels();
                spec_error(ctx, run, variant_span.clone(), dtype_span.clone(), e)
            })?;
            resolved = Some(problem.dtype);
        }
        out.push(SuiteRun {
            kernel: kernel.clone(),
            variants: variants.clone(),
            params,
            dtype: resolved.unwrap_or_default(),
            mode,
            settings,
            env: env.clone(),
        });
    }
    Ok(out)
}

/// The key a TOML line assigns (`min_iterations = "ten"` → `min_iterations`), if it is one.
fn assigned_key(line: &str) -> Option<&str> {
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
    .then_some(key)
}

/// See [`Suite::parse`].
pub(super) fn parse(text: &str, origin: &str) -> Result<Suite, SuiteError> {
    let ctx = Ctx { text, origin };
    let doc: FileDoc = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| ctx.line(&s));
        let mut message = e.message().trim().to_string();
        // A wrong type names no field: take the key the line assigns.
        if !message.contains('`')
            && let Some(key) = text
                .lines()
                .nth(line.wrapping_sub(1))
                .and_then(assigned_key)
        {
            message = format!("field `{key}`: {message}");
        }
        SuiteError::Parse {
            origin: origin.to_string(),
            line,
            message,
        }
    })?;
    let mut runs = Vec::new();
    for run in &doc.run {
        runs.extend(expand(&ctx, &doc.defaults, run)?);
    }
    let name = doc.name.unwrap_or_else(|| {
        let file = origin.rsplit(['/', '\\']).next().unwrap_or(origin);
        file.strip_suffix(".toml").unwrap_or(file).to_string()
    });
    Ok(Suite {
        name,
        description: doc.description,
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;
    use crate::run::RunSettings;

    fn err(text: &str) -> String {
        parse(text, "bad.toml").unwrap_err().to_string()
    }

    /// The error for `text`, checked to start with `prefix`.
    fn err_starting(text: &str, prefix: &str) -> String {
        let msg = err(text);
        assert!(msg.starts_with(prefix), "{msg}");
        msg
    }

    #[test]
    fn defaults_apply_and_runs_override() {
        let s = parse(
            r#"
name = "mine"
description = "d"
[defaults]
warmup = 1
min_seconds = 1
mode = "with_transfers"
env = { A = "1", B = "2" }
[[run]]
kernel = "gemm"
variant = "tiled"
params = { m = [64, 128], n = [32, 64], k = 16 }
dtype = "f16"
warmup = 7
env = { B = "3" }
[[run]]
kernel = "noop"
"#,
            "mine.toml",
        )
        .unwrap();
        assert_eq!((s.name.as_str(), s.description.as_str()), ("mine", "d"));
        assert_eq!(s.runs.len(), 3);
        let r = &s.runs[1];
        assert_eq!(r.variants, Some(vec!["tiled".to_string()]));
        assert_eq!(
            r.params,
            BTreeMap::from([("k".into(), 16), ("m".into(), 128), ("n".into(), 64)])
        );
        assert_eq!(
            (r.dtype, r.mode, r.settings.warmup),
            (Dtype::F16, Mode::WithTransfers, Some(7))
        );
        assert_eq!(r.settings.min_seconds, Some(1.0));
        assert_eq!(r.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(r.env.get("B").map(String::as_str), Some("3"));
        let noop = &s.runs[2];
        assert_eq!(noop.variants, None);
        assert!(noop.params.is_empty());
        let n = noop.settings.resolve().unwrap();
        assert_eq!(
            (n.warmup, n.min_iterations, n.max_iterations, n.timeout_s),
            (1, 10, 10_000, 120.0)
        );
        assert_eq!(noop.dtype, Dtype::F32);
    }

    #[test]
    fn builtin_defaults_without_a_defaults_table() {
        let s = parse("[[run]]\nkernel = \"copy\"\n", "x.toml").unwrap();
        let r = &s.runs[0];
        assert_eq!(s.name, "x");
        assert_eq!(r.mode, Mode::ComputeOnly);
        // Nothing given, so the run is measured by the defaults when it is planned.
        assert_eq!(r.settings, PartialSettings::default());
        let (r, d) = (r.settings.resolve().unwrap(), RunSettings::DEFAULT);
        assert_eq!(
            (r.warmup, r.min_iterations, r.max_iterations),
            (d.warmup, d.min_iterations, d.max_iterations)
        );
        assert_eq!((r.min_seconds, r.timeout_s), (d.min_seconds, d.timeout_s));
        assert_eq!(
            (r.target_ci_pct, r.max_seconds),
            (d.target_ci_pct, 5.0 * d.min_seconds)
        );
    }

    #[test]
    fn the_interval_target_and_budget_are_checked() {
        let s = parse(
            "[defaults]\ntarget_ci_pct = 0.5\nmax_seconds = 2\n[[run]]\nkernel = \"copy\"\n[[run]]\nkernel = \"noop\"\ntarget_ci_pct = 0\n",
            "x.toml",
        )
        .unwrap();
        let first = s.runs[0].settings;
        assert_eq!(
            (first.target_ci_pct, first.max_seconds),
            (Some(0.5), Some(2.0))
        );
        assert_eq!(s.runs[1].settings.target_ci_pct, Some(0.0));
        assert_eq!(s.runs[1].settings.resolve().unwrap().target_ci_pct, None);
        let msg = err_starting(
            "[[run]]\nkernel = \"copy\"\ntarget_ci_pct = -1\n",
            "bad.toml:3: ",
        );
        assert!(msg.contains("target_ci_pct"), "{msg}");
        let msg = err_starting(
            "[[run]]\nkernel = \"copy\"\nmin_seconds = 5\nmax_seconds = 1\n",
            "bad.toml:4: ",
        );
        assert!(
            msg.contains("max_seconds") && msg.contains("below min_seconds"),
            "{msg}"
        );
        // The default budget scales with the minimum.
        let s = parse("[[run]]\nkernel = \"copy\"\nmin_seconds = 0.1\n", "x.toml").unwrap();
        assert_eq!(s.runs[0].settings.resolve().unwrap().max_seconds, 0.5);
    }

    #[test]
    fn syntax_errors_carry_the_line() {
        err_starting("name = \"x\"\n[[run]]\nkernel = \"gemm\n", "bad.toml:3: ");
    }

    #[test]
    fn unknown_fields_are_refused_with_their_line_and_name() {
        let msg = err_starting(
            "[[run]]\nkernel = \"gemm\"\nmin_iteration = 3\n",
            "bad.toml:3: ",
        );
        assert!(msg.contains("unknown field `min_iteration`"), "{msg}");
        let msg = err_starting("nme = \"x\"\n", "bad.toml:1: ");
        assert!(msg.contains("`nme`"), "{msg}");
        let msg = err_starting("[defaults]\nwarmpu = 1\n", "bad.toml:2: ");
        assert!(msg.contains("`warmpu`"), "{msg}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_field() {
        let msg = err_starting(
            "name = \"e2\"\n[[run]]\nkernel = \"gemm\"\nmin_iterations = \"ten\"\n",
            "bad.toml:4: field `min_iterations`: invalid type: string \"ten\"",
        );
        assert_eq!(msg.matches("min_iterations").count(), 1, "{msg}");
    }

    #[test]
    fn unknown_kernel_names_file_line_and_field() {
        err_starting(
            "name = \"x\"\n\n[[run]]\nkernel = \"gemmm\"\n",
            "bad.toml:4: field `kernel`: unknown kernel `gemmm` (known: gemm, ",
        );
    }

    #[test]
    fn out_of_range_params_point_at_the_param() {
        let msg =
            err("[[run]]\nkernel = \"gemm\"\nparams = { m = 128,\n  n = [64, 1000000000] }\n");
        assert_eq!(
            msg,
            "bad.toml:4: field `params.n`: param n=1000000000 exceeds the maximum 65536 for gemm"
        );
        err_starting(
            "[[run]]\nkernel = \"gemm\"\nparams = { q = 1 }\n",
            "bad.toml:3: field `params.q`: unknown param `q`",
        );
        err_starting(
            "[[run]]\nkernel = \"conv2d\"\nparams = { ksize = 4 }\n",
            "bad.toml:3: field `params`: invalid params",
        );
    }

    #[test]
    fn mismatched_and_empty_arrays_are_refused() {
        let msg = err_starting(
            "[[run]]\nkernel = \"gemm\"\nparams = { m = [1, 2], n = [1, 2, 3] }\n",
            "bad.toml:3: field `params.n`: array of 3 values",
        );
        assert!(msg.contains("`params.m` with 2"), "{msg}");
        let msg = err("[[run]]\nkernel = \"gemm\"\nparams = { m = [] }\n");
        assert!(msg.contains("field `params.m`: empty array"), "{msg}");
        let msg = err_starting(
            "[[run]]\nkernel = \"gemm\"\nparams = { m = 1.5 }\n",
            "bad.toml:3: ",
        );
        assert!(msg.contains("integer"), "{msg}");
    }

    #[test]
    fn variants_dtype_mode_and_counts_are_checked() {
        err_starting(
            "[[run]]\nkernel = \"gemm\"\nvariants = [\"naive\", \"fast\"]\n",
            "bad.toml:3: field `variant`: unknown variant `fast`",
        );
        let msg = err("[[run]]\nkernel = \"gemm\"\nvariant = \"naive\"\nvariants = [\"tiled\"]\n");
        assert!(msg.contains("field `variants`: give either"), "{msg}");
        err_starting(
            "[[run]]\nkernel = \"vec_add\"\ndtype = \"f16\"\n",
            "bad.toml:3: field `dtype`: dtype `f16`",
        );
        err_starting(
            "[defaults]\ndtype = \"f16\"\n[[run]]\nkernel = \"copy\"\n",
            "bad.toml:2: field `dtype`",
        );
        err_starting(
            "[[run]]\nkernel = \"copy\"\nmode = \"fast\"\n",
            "bad.toml:3: field `mode`: unknown mode `fast`",
        );
        err_starting(
            "[[run]]\nkernel = \"copy\"\nmin_iterations = 0\n",
            "bad.toml:3: field `min_iterations`: 0 is outside 1..=",
        );
        let msg = err("[[run]]\nkernel = \"copy\"\nmin_iterations = 10\nmax_iterations = 5\n");
        assert!(
            msg.contains("field `max_iterations`: 5 is below min_iterations 10"),
            "{msg}"
        );
        err_starting(
            "[[run]]\nkernel = \"copy\"\ntimeout_s = 0\n",
            "bad.toml:3: field `timeout_s`",
        );
    }

    #[test]
    fn a_model_config_gives_the_shape_and_params_win() {
        let dir = tempfile::tempdir().unwrap();
        let config = r#"{"hidden_size": 512, "num_hidden_layers": 3, "num_attention_heads": 8,
            "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1000}"#;
        std::fs::write(dir.path().join("shape.json"), config).unwrap();
        let suite = dir.path().join("mine.toml");
        let origin = suite.to_str().unwrap();
        let text = "[[run]]\nkernel = \"llm\"\ndtype = \"q8_0\"\nmodel_config = \"shape.json\"\n\
                    params = { layers = [1, 2] }\n";
        let s = parse(text, origin).unwrap();
        assert_eq!(s.runs.len(), 2);
        let p = &s.runs[1].params;
        assert_eq!(
            (p["model"], p["dim"], p["kv_heads"], p["layers"]),
            (7, 512, 2, 2)
        );
        let e = parse(&text.replace("shape.json", "nope.json"), origin)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":4: field `model_config`: cannot read model config"),
            "{e}"
        );
        std::fs::write(dir.path().join("shape.json"), "{\"hidden_size\": 512}").unwrap();
        let e = parse(text, origin).unwrap_err().to_string();
        assert!(e.contains("field `num_attention_heads` is missing"), "{e}");
    }

    #[test]
    fn debug_kernels_are_accepted_in_suites() {
        let s = parse(
            "[[run]]\nkernel = \"debug_crash\"\nparams = { mode = 1 }\n",
            "d.toml",
        );
        assert_eq!(s.unwrap().runs[0].params.get("mode"), Some(&1));
    }
}
