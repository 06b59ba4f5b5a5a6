//! The code objects embedded at build time (one per target, see `agent/build.rs`) and the choice
//! of one for a device: its arch from `gcnArchName`, or the arch `HSA_OVERRIDE_GFX_VERSION` makes
//! ROCm report. Pure except for [`embedded`].

mod generated {
    include!(concat!(env!("OUT_DIR"), "/hip_code_objects.rs"));
}

use super::elf;
use crate::backend::BackendError;

/// One embedded code object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedded {
    /// `gfx1030`.
    pub target: &'static str,
    /// The clang that built it (`clang --version`'s first line).
    pub compiler: &'static str,
    pub bytes: &'static [u8],
}

/// Every embedded code object, in the configured order.
pub fn embedded() -> Vec<Embedded> {
    generated::CODE_OBJECTS
        .iter()
        .map(|(target, compiler, bytes)| Embedded {
            target,
            compiler,
            bytes,
        })
        .collect()
}

/// The targets this binary was built for (`GPUFLEET_HIP_TARGETS` at build time, or the default).
pub fn configured_targets() -> &'static [&'static str] {
    generated::TARGETS
}

/// `gfx906` from ROCm's `gfx906:sramecc+:xnack-` (lower-cased, features dropped).
pub fn base_arch(gcn_arch_name: &str) -> String {
    gcn_arch_name
        .split(':')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether `arch` (a base arch, `gfx906`) has a dot product of four bytes into an int
/// (`v_dot4_i32_i8`: gfx906, gfx908, gfx90a, gfx94x, gfx1011, gfx1012, gfx103x; `v_dot4_i32_iu8`:
/// gfx11, gfx12), compute_peak's int8; kernels/hip/peak.hip picks the instruction by the same list.
/// Not the RX 580 (gfx803), Vega 10 (gfx900) nor the RX 5600/5700 (gfx1010).
pub fn has_int8_dot(arch: &str) -> bool {
    let Some(digits) = arch.strip_prefix("gfx") else {
        return false;
    };
    matches!(
        digits,
        "906" | "908" | "90a" | "940" | "941" | "942" | "1011" | "1012"
    ) || (digits.starts_with("103") && digits.len() == 4)
        || ((digits.starts_with("11") || digits.starts_with("12")) && digits.len() == 4)
}

/// The arch `HSA_OVERRIDE_GFX_VERSION` makes ROCm report: `major.minor.stepping`, each a
/// decimal number, as ROCr reads it (`10.3.0` → gfx1030, `9.0.10` → gfx90a); a stepping may
/// also be written as one hex digit (`9.0.a`). The name is `gfx` + major + minor + stepping in hex.
///
/// # Errors
/// A message naming the value and the expected form.
pub fn parse_override(value: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "HSA_OVERRIDE_GFX_VERSION={value:?} is not major.minor.stepping (e.g. 10.3.0 for \
             gfx1030, 9.0.10 or 9.0.a for gfx90a)"
        )
    };
    let parts: Vec<&str> = value.trim().split('.').collect();
    let [major, minor, stepping] = parts[..] else {
        return Err(bad());
    };
    let major: u32 = major.parse().map_err(|_| bad())?;
    let minor: u32 = minor.parse().map_err(|_| bad())?;
    let stepping: u32 = match stepping.parse() {
        Ok(s) => s,
        Err(_) if stepping.len() == 1 => u32::from_str_radix(stepping, 16).map_err(|_| bad())?,
        Err(_) => return Err(bad()),
    };
    if major == 0 || minor > 9 || stepping > 15 {
        return Err(bad());
    }
    Ok(format!("gfx{major}{minor}{stepping:x}"))
}

/// Which arch to load code for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchChoice {
    /// The arch whose code object is loaded.
    pub arch: String,
    /// The device's own arch (`gcnArchName` without features).
    pub device_arch: String,
    /// The override value when it decided the arch.
    pub override_value: Option<String>,
}

/// The arch to load for a device reporting `gcn_arch_name`, given the value of
/// `HSA_OVERRIDE_GFX_VERSION` in this process (a run's environment override reaches the worker).
/// With the override ROCm itself reports the overridden arch, so both agree; parsing it too keeps
/// the choice right even where `gcnArchName` still shows the real chip.
///
/// # Errors
/// `Unsupported` naming a malformed override.
pub fn choose_arch(
    gcn_arch_name: &str,
    override_value: Option<&str>,
) -> Result<ArchChoice, BackendError> {
    let device_arch = base_arch(gcn_arch_name);
    match override_value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) => {
            let arch = parse_override(v).map_err(|what| BackendError::Unsupported {
                backend: "hip".into(),
                what,
            })?;
            Ok(ArchChoice {
                arch,
                device_arch,
                override_value: Some(v.to_string()),
            })
        }
        None => Ok(ArchChoice {
            arch: device_arch.clone(),
            device_arch,
            override_value: None,
        }),
    }
}

/// The code object for `choice` among `available`, checked to be an AMDGPU ELF for that target.
///
/// # Errors
/// `Unsupported` naming the arch and the archs there are code objects for (and, for a device
/// ROCm can run as a neighbouring arch, the override that does it).
pub fn select(choice: &ArchChoice, available: &[Embedded]) -> Result<Embedded, BackendError> {
    let Some(found) = available.iter().find(|e| e.target == choice.arch) else {
        let have: Vec<&str> = available.iter().map(|e| e.target).collect();
        let mut what = format!(
            "arch {}{}: no code object for it (this agent has {})",
            choice.arch,
            match &choice.override_value {
                Some(v) => format!(
                    " (HSA_OVERRIDE_GFX_VERSION={v} on a {})",
                    choice.device_arch
                ),
                None => String::new(),
            },
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        );
        if let Some(hint) = override_hint(&choice.arch)
            && have.contains(&hint.1)
        {
            what.push_str(&format!(
                "; ROCm may run it as {} with the run environment HSA_OVERRIDE_GFX_VERSION={}, \
                 or rebuild with GPUFLEET_HIP_TARGETS including {}",
                hint.1, hint.0, choice.arch
            ));
        } else {
            what.push_str(&format!(
                "; rebuild with GPUFLEET_HIP_TARGETS including {}",
                choice.arch
            ));
        }
        return Err(BackendError::Unsupported {
            backend: "hip".into(),
            what,
        });
    };
    let co = elf::parse(found.bytes).map_err(|e| BackendError::Unsupported {
        backend: "hip".into(),
        what: format!("embedded code object for {}: {e}", found.target),
    })?;
    if co.target() != Some(found.target) {
        return Err(BackendError::Unsupported {
            backend: "hip".into(),
            what: format!(
                "embedded code object listed as {} is built for {} (e_flags {:#x})",
                found.target,
                co.target().unwrap_or("an unknown target"),
                co.flags
            ),
        });
    }
    Ok(*found)
}

/// The common override for a family ROCm ships no kernels for: (override value, arch it gives).
fn override_hint(arch: &str) -> Option<(&'static str, &'static str)> {
    match arch {
        "gfx1031" | "gfx1032" | "gfx1033" | "gfx1034" | "gfx1035" | "gfx1036" => {
            Some(("10.3.0", "gfx1030"))
        }
        "gfx1010" | "gfx1011" | "gfx1012" | "gfx1013" => Some(("10.3.0", "gfx1030")),
        "gfx1101" | "gfx1102" | "gfx1103" | "gfx1150" | "gfx1151" => Some(("11.0.0", "gfx1100")),
        "gfx940" | "gfx941" => Some(("9.4.2", "gfx942")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_like_rocr() {
        for (value, arch) in [
            ("10.3.0", "gfx1030"),
            ("9.0.6", "gfx906"),
            ("9.0.10", "gfx90a"),
            ("9.0.a", "gfx90a"),
            ("9.0.A", "gfx90a"),
            ("11.0.0", "gfx1100"),
            ("9.4.2", "gfx942"),
            ("8.0.3", "gfx803"),
            (" 10.1.0 ", "gfx1010"),
        ] {
            assert_eq!(parse_override(value).as_deref(), Ok(arch), "{value}");
        }
        for bad in [
            "", "10.3", "10.3.0.1", "x.3.0", "10.3.16", "10.3.g", "10.10.0", "0.0.0", "-1.3.0",
        ] {
            let e = parse_override(bad).unwrap_err();
            assert!(e.contains("major.minor.stepping"), "{bad}: {e}");
        }
    }

    #[test]
    fn int8_dot_follows_the_instruction_sets() {
        for arch in [
            "gfx906", "gfx90a", "gfx942", "gfx1011", "gfx1030", "gfx1036", "gfx1100", "gfx1201",
        ] {
            assert!(has_int8_dot(arch), "{arch}");
        }
        for arch in ["gfx803", "gfx900", "gfx1010", "gfx110", "sm_90", ""] {
            assert!(!has_int8_dot(arch), "{arch}");
        }
    }

    #[test]
    fn base_arch_drops_features() {
        assert_eq!(base_arch("gfx906:sramecc+:xnack-"), "gfx906");
        assert_eq!(base_arch("gfx90a:sramecc+:xnack-"), "gfx90a");
        assert_eq!(base_arch("gfx1030"), "gfx1030");
        assert_eq!(base_arch("GFX942:sramecc+"), "gfx942");
        assert_eq!(base_arch(""), "");
    }

    #[test]
    fn override_decides_the_arch() {
        let c = choose_arch("gfx1010:xnack-", Some("10.3.0")).unwrap();
        assert_eq!(c.arch, "gfx1030");
        assert_eq!(c.device_arch, "gfx1010");
        let c = choose_arch("gfx1010:xnack-", None).unwrap();
        assert_eq!(c.arch, "gfx1010");
        let c = choose_arch("gfx942:sramecc+:xnack-", Some("  ")).unwrap();
        assert_eq!(c.arch, "gfx942", "a blank override is no override");
        assert!(matches!(
            choose_arch("gfx1010", Some("ten")),
            Err(BackendError::Unsupported { .. })
        ));
    }

    #[test]
    fn every_embedded_object_is_selectable_for_its_arch() {
        let all = embedded();
        assert_eq!(all.len(), configured_targets().len());
        for e in &all {
            let c = choose_arch(e.target, None).unwrap();
            assert_eq!(select(&c, &all).unwrap().target, e.target);
        }
    }

    #[test]
    fn unknown_arch_names_what_there_is() {
        let all = embedded();
        let c = choose_arch("gfx1200", None).unwrap();
        let BackendError::Unsupported { what, .. } = select(&c, &all).unwrap_err() else {
            panic!("not unsupported");
        };
        assert!(what.contains("gfx1200"), "{what}");
        for t in configured_targets() {
            assert!(what.contains(t), "{what} lacks {t}");
        }
        // A gfx1031 gets pointed at the override when gfx1030 is embedded.
        let c = choose_arch("gfx1031", None).unwrap();
        let e = select(&c, &all).unwrap_err().to_string();
        if configured_targets().contains(&"gfx1030") {
            assert!(e.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{e}");
        }
        let c = choose_arch("gfx1010", Some("10.3.5")).unwrap();
        let e = select(&c, &all).unwrap_err().to_string();
        assert!(
            e.contains("gfx1035") && e.contains("HSA_OVERRIDE_GFX_VERSION=10.3.5 on a gfx1010"),
            "{e}"
        );
    }

    #[test]
    fn a_mislabelled_object_is_refused() {
        let all = embedded();
        let Some(first) = all.first() else { return };
        let Some(other) = all.iter().find(|e| e.target != first.target) else {
            return;
        };
        let lying = [Embedded {
            target: first.target,
            compiler: "test",
            bytes: other.bytes,
        }];
        let c = choose_arch(first.target, None).unwrap();
        let e = select(&c, &lying).unwrap_err().to_string();
        assert!(e.contains(other.target), "{e}");
    }
}
