//! Why a kernel spec was refused.
//!
//! Every message names the field and the bound so a user can fix a suite or a CLI flag without reading
//! the catalog; [`SpecError::field`] lets the agent map the error onto the request field it came from.

/// A spec (kernel, variant, params, dtype) that cannot become a [`crate::Problem`].
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SpecError {
    /// No kernel of that name (or a debug kernel name was listed only when debug kernels are on).
    #[error("unknown kernel {} (known: {})", quote(name), list(known))]
    UnknownKernel {
        /// The name asked for.
        name: String,
        /// Names that would have been accepted.
        known: Vec<String>,
    },
    /// The kernel has no variant of that name.
    #[error(
        "unknown variant {} for {kernel} (known: {})",
        quote(variant),
        list(known)
    )]
    UnknownVariant {
        /// Kernel name.
        kernel: String,
        /// The variant asked for.
        variant: String,
        /// The kernel's variants.
        known: Vec<String>,
    },
    /// The kernel has no parameter of that name.
    #[error("unknown param {} for {kernel} (known: {})", quote(param), list(known))]
    UnknownParam {
        /// Kernel name.
        kernel: String,
        /// The parameter given.
        param: String,
        /// The kernel's parameters.
        known: Vec<String>,
    },
    /// A parameter outside its `min..=max` bounds.
    #[error("{}", range_message(kernel, param, *value, *min, *max))]
    ParamOutOfRange {
        /// Kernel name.
        kernel: String,
        /// Parameter name.
        param: String,
        /// The value given.
        value: i64,
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// Parameters that are each in range but do not fit together (conv2d output smaller than 1, ...).
    #[error("invalid params for {kernel}: {message}")]
    InvalidParams {
        /// Kernel name.
        kernel: String,
        /// What is wrong, naming the parameters involved.
        message: String,
    },
    /// A dtype the kernel is not defined for, or not a dtype at all.
    #[error(
        "dtype {} is not supported by {kernel} (supported: {})",
        quote(dtype),
        list(supported)
    )]
    UnsupportedDtype {
        /// Kernel name.
        kernel: String,
        /// The dtype asked for.
        dtype: String,
        /// The kernel's dtypes.
        supported: Vec<String>,
    },
    /// A `debug_*` kernel asked of an agent that does not enable them.
    #[error(
        "kernel `{kernel}` is a debug kernel, only available when the agent runs with --enable-debug-kernels"
    )]
    DebugKernelDisabled {
        /// Kernel name.
        kernel: String,
    },
    /// Buffers above the absolute sanity limit, whatever the device.
    #[error(
        "params for {kernel} need {} of buffers ({bytes} bytes), above the sanity limit of {}",
        human_bytes(*bytes),
        human_bytes(*limit)
    )]
    TooLarge {
        /// Kernel name.
        kernel: String,
        /// Footprint of all inputs and the output.
        bytes: u64,
        /// The limit ([`crate::MAX_FOOTPRINT_BYTES`]).
        limit: u64,
    },
}

impl SpecError {
    /// The spec field at fault: `"kernel"`, `"variant"`, `"params"` or `"dtype"`.
    pub fn field(&self) -> &'static str {
        match self {
            SpecError::UnknownKernel { .. } | SpecError::DebugKernelDisabled { .. } => "kernel",
            SpecError::UnknownVariant { .. } => "variant",
            SpecError::UnknownParam { .. }
            | SpecError::ParamOutOfRange { .. }
            | SpecError::InvalidParams { .. }
            | SpecError::TooLarge { .. } => "params",
            SpecError::UnsupportedDtype { .. } => "dtype",
        }
    }
}

/// Most bytes of a caller's input that a message quotes: enough to recognise a typo, bounded so
/// that a huge name (a hostile or broken client) cannot make an error larger than the transport
/// allows or flood a log.
pub const QUOTE_MAX_BYTES: usize = 200;

/// `s` in backquotes for an error message, cut to [`QUOTE_MAX_BYTES`] (at a character boundary)
/// with its full length added when longer: `` `gemmm` ``, `` `aaaa…` (1048576 bytes) ``.
pub fn quote(s: &str) -> String {
    if s.len() <= QUOTE_MAX_BYTES {
        return format!("`{s}`");
    }
    format!("`{}…` ({} bytes)", prefix(s, QUOTE_MAX_BYTES), s.len())
}

/// The longest prefix of `s` of at most `max_bytes` that ends at a character boundary.
pub fn prefix(s: &str, max_bytes: usize) -> &str {
    let mut end = max_bytes.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `outer: inner: innermost` for an error and its sources, each source's text added once (many
/// errors repeat their source's text in their own).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

fn range_message(kernel: &str, param: &str, value: i64, min: i64, max: i64) -> String {
    if value > max {
        format!("param {param}={value} exceeds the maximum {max} for {kernel}")
    } else {
        format!("param {param}={value} is below the minimum {min} for {kernel}")
    }
}

/// `1099511627776` -> `"1.0 TiB"`, `1536` -> `"1.5 KiB"`: bytes in binary units, one decimal from
/// KiB up; for people to read.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_bounded_and_cut_at_a_character_boundary() {
        assert_eq!(quote("gemmm"), "`gemmm`");
        let huge = "k".repeat(1 << 20);
        let q = quote(&huge);
        assert!(q.len() < QUOTE_MAX_BYTES + 40, "{} bytes", q.len());
        assert!(q.ends_with("…` (1048576 bytes)"), "{q}");
        // 'é' is two bytes: a cut inside it moves back to the boundary.
        let accents = "é".repeat(150);
        let q = quote(&accents);
        assert!(q.starts_with("`é") && q.ends_with("…` (300 bytes)"), "{q}");
        let e = SpecError::UnknownKernel {
            name: huge,
            known: vec!["gemm".into()],
        };
        assert!(e.to_string().len() < 300, "{}", e.to_string().len());
    }

    #[test]
    fn range_messages_name_param_value_and_bound() {
        let over = SpecError::ParamOutOfRange {
            kernel: "gemm".into(),
            param: "n".into(),
            value: 1_000_000_000,
            min: 1,
            max: 65536,
        };
        assert_eq!(
            over.to_string(),
            "param n=1000000000 exceeds the maximum 65536 for gemm"
        );
        let under = SpecError::ParamOutOfRange {
            kernel: "gemm".into(),
            param: "m".into(),
            value: 0,
            min: 1,
            max: 65536,
        };
        assert_eq!(
            under.to_string(),
            "param m=0 is below the minimum 1 for gemm"
        );
        assert_eq!(under.field(), "params");
    }

    #[test]
    fn lists_and_fields() {
        let e = SpecError::UnknownKernel {
            name: "gemmm".into(),
            known: vec!["gemm".into(), "vec_add".into()],
        };
        assert_eq!(
            e.to_string(),
            "unknown kernel `gemmm` (known: gemm, vec_add)"
        );
        assert_eq!(e.field(), "kernel");
        let e = SpecError::UnknownParam {
            kernel: "noop".into(),
            param: "n".into(),
            known: vec![],
        };
        assert_eq!(e.to_string(), "unknown param `n` for noop (known: none)");
        let e = SpecError::UnsupportedDtype {
            kernel: "vec_add".into(),
            dtype: "f16".into(),
            supported: vec!["f32".into()],
        };
        assert_eq!(e.field(), "dtype");
        assert!(e.to_string().contains("supported: f32"));
    }

    #[test]
    fn human_bytes_scales() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1 << 40), "1.0 TiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024), "5.0 MiB");
    }
}
