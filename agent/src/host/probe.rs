//! The host probe: the driver-stack facts that decide whether two runs on one card are comparable
//! (from the RDNA1 investigation gpufleet grew out of, where a changed `amdgpu.noretry` or missing
//! PCIe atomics changed results): amdgpu module parameters, the NVIDIA kernel driver and ROCm
//! versions, whether each GPU's PCIe AtomicOp requests are enabled, and each GPU's PCIe link (its
//! generation and width, the card's maximum, and a warning when it runs below it). They go into
//! Describe's `host.platform` and every result's fingerprint.
//!
//! Everything is read under a root (`--sysfs-root`), so tests and containers that mount the host's
//! /sys elsewhere give a tree; a fact that cannot be read is left out, never guessed.

use std::collections::BTreeMap;
use std::path::Path;

/// amdgpu module parameters that change behaviour or numbers.
const AMDGPU_PARAMS: [&str; 3] = ["noretry", "vm_fragment_size", "ppfeaturemask"];

fn read_trim(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.trim();
    (!t.is_empty()).then(|| gpufleet_kernels::prefix(t, 128).to_string())
}

/// The probe's facts under `root`: `amdgpu.<param>`, `nvidia_driver`, `rocm_version`, and per GPU
/// `pcie_atomics:<pci bus id>` (`enabled`, `disabled` or `unknown: why`) and its link
/// ([`link_facts`]: `pcie_link:`, `pcie_link_max:`, `pcie_link_warning:`).
pub fn probe(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for p in AMDGPU_PARAMS {
        if let Some(v) = read_trim(&root.join("sys/module/amdgpu/parameters").join(p)) {
            out.insert(format!("amdgpu.{p}"), v);
        }
    }
    if let Some(v) = read_trim(&root.join("proc/driver/nvidia/version"))
        .as_deref()
        .and_then(nvidia_version)
    {
        out.insert("nvidia_driver".into(), v);
    }
    for dir in ["opt/rocm/.info/version", "usr/share/rocm/.info/version"] {
        if let Some(v) = read_trim(&root.join(dir)) {
            out.insert("rocm_version".into(), v);
            break;
        }
    }
    let pci = root.join("sys/bus/pci/devices");
    let mut gpus: Vec<_> = std::fs::read_dir(&pci)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            // Display controllers (0x03) and processing accelerators (0x12).
            read_trim(&e.path().join("class"))
                .is_some_and(|c| c.starts_with("0x03") || c.starts_with("0x12"))
        })
        .collect();
    gpus.sort_by_key(|e| e.file_name());
    for e in gpus {
        let bdf = e.file_name().to_string_lossy().to_string();
        let state = match std::fs::read(e.path().join("config")) {
            Ok(config) => atomics(&config),
            Err(err) => format!("unknown: {err}"),
        };
        out.insert(format!("pcie_atomics:{bdf}"), state);
        out.extend(link_facts(&bdf, &chain(&e.path())));
    }
    out
}

/// A PCIe link's generation (1 for 2.5 GT/s … 6 for 64 GT/s) and width (lanes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub generation: u32,
    pub width: u32,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gen{} x{}", self.generation, self.width)
    }
}

/// The generation of a sysfs `*_link_speed` (`8.0 GT/s PCIe`, older kernels `8 GT/s`); `None` for
/// `Unknown speed` or anything else.
fn generation_of(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    [2.5, 5.0, 8.0, 16.0, 32.0, 64.0]
        .iter()
        .position(|g| (g - gts).abs() < 0.01)
        .map(|i| i as u32 + 1)
}

/// One PCI function's link registers as sysfs shows them: its current and maximum link, each
/// `None` where the attributes are missing or unknown (an integrated GPU, a virtual function).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The function's address (`0000:00:01.1`).
    pub bdf: String,
    pub current: Option<Link>,
    pub max: Option<Link>,
}

fn link_at(dir: &Path, which: &str) -> Option<Link> {
    let generation = generation_of(&read_trim(&dir.join(format!("{which}_link_speed")))?)?;
    let width: u32 = read_trim(&dir.join(format!("{which}_link_width")))?
        .trim_start_matches('x')
        .parse()
        .ok()?;
    (width > 0).then_some(Link { generation, width })
}

/// The functions from the GPU at `dir` up to its root port: `dir` itself, then each parent whose
/// name is a PCI address (the canonical sysfs path nests a function under the bridges above it:
/// `devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0` for a card with its own
/// switch). Each end of a link reads the same link status, so the path's links are all here.
pub fn chain(dir: &Path) -> Vec<Hop> {
    let start = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut hops = Vec::new();
    let mut at = Some(start.as_path());
    while let Some(d) = at {
        let Some(bdf) = d
            .file_name()
            .and_then(|n| super::pci::normalize_pci(&n.to_string_lossy()))
        else {
            break;
        };
        hops.push(Hop {
            bdf,
            current: link_at(d, "current"),
            max: link_at(d, "max"),
        });
        at = d.parent();
    }
    hops
}

/// The link facts of the GPU `bdf` from its `hops` ([`chain`]):
/// - `pcie_link:<bdf>`: the generation and width data gets now, the slowest and narrowest link on
///   the way to the root port (`gen3 x4`), or `none: …` when no link is reported (an integrated
///   GPU shares system memory);
/// - `pcie_link_max:<bdf>`: what the GPU itself can do (its own maximum link);
/// - `pcie_link_warning:<bdf>`: when the link runs below that maximum, which hop limits it and why
///   that may be.
pub fn link_facts(bdf: &str, hops: &[Hop]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(gpu) = hops.first() else {
        return out;
    };
    let current: Vec<(&str, Link)> = hops
        .iter()
        .filter_map(|h| Some((h.bdf.as_str(), h.current?)))
        .collect();
    let Some(generation) = current.iter().map(|(_, l)| l.generation).min() else {
        out.insert(
            format!("pcie_link:{bdf}"),
            "none: no PCIe link reported (an integrated GPU shares system memory; a virtual \
             function has no link of its own)"
                .into(),
        );
        return out;
    };
    let width = current.iter().map(|(_, l)| l.width).min().unwrap_or(0);
    let now = Link { generation, width };
    out.insert(format!("pcie_link:{bdf}"), now.to_string());
    let Some(max) = gpu.max else {
        return out;
    };
    out.insert(format!("pcie_link_max:{bdf}"), max.to_string());
    // The hop nearest the root port whose link matches: for a narrow width, the slot's own port.
    let limited_at = |matches: &dyn Fn(&Link) -> bool| {
        current
            .iter()
            .rev()
            .find(|(_, l)| matches(l))
            .map_or("", |(b, _)| *b)
    };
    let mut why = Vec::new();
    if width < max.width {
        let at = limited_at(&|l| l.width == width);
        why.push(format!(
            "x{width} is the width of the link at {at} (a narrower slot, a riser or a shared lane \
             split)"
        ));
    }
    if generation < max.generation {
        let at = limited_at(&|l| l.generation == generation);
        why.push(format!(
            "gen{generation} is the speed of the link at {at}: a GPU lowers its link speed when idle, so \
             this may be power saving (read when the agent started); if it stays there under load, \
             the slot, a riser or the firmware settings limit it"
        ));
    }
    if !why.is_empty() {
        out.insert(
            format!("pcie_link_warning:{bdf}"),
            format!("runs at {now}, below its {max}: {}", why.join("; ")),
        );
    }
    out
}

/// The version in `/proc/driver/nvidia/version` (`NVRM version: NVIDIA UNIX x86_64 Kernel Module
/// 550.54.15  Tue Mar  5 …`).
fn nvidia_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after.split_whitespace().next().map(str::to_string)
}

/// Whether the function's PCIe AtomicOp requests are enabled (Device Control 2, bit 6), from its
/// configuration space; `unknown: …` when the capability cannot be read (unprivileged readers
/// see only the first 64 bytes).
pub fn atomics(config: &[u8]) -> String {
    let byte = |at: usize| config.get(at).copied();
    let word = |at: usize| Some(u16::from_le_bytes([byte(at)?, byte(at + 1)?]));
    // Status register bit 4: a capability list exists.
    if word(0x06).is_none_or(|s| s & 0x10 == 0) {
        return "unknown: no capability list".into();
    }
    let mut at = byte(0x34).unwrap_or(0) as usize & !3;
    for _ in 0..48 {
        if at < 0x40 {
            break;
        }
        let (Some(id), Some(next)) = (byte(at), byte(at + 1)) else {
            return "unknown: configuration space not readable (needs root)".into();
        };
        if id == 0x10 {
            return match word(at + 0x28) {
                Some(ctl2) if ctl2 & 0x40 != 0 => "enabled".into(),
                Some(_) => "disabled".into(),
                None => "unknown: configuration space not readable (needs root)".into(),
            };
        }
        at = next as usize & !3;
    }
    if config.len() <= 0x40 {
        return "unknown: configuration space not readable (needs root)".into();
    }
    "unknown: no PCI Express capability".into()
}

/// Writes sysfs trees of made-up PCI devices: for tests of the probe here and of what it feeds
/// (the coordinator's outlier causes), where no such card is plugged in.
pub mod fixture {
    use std::path::Path;

    /// Writes a PCI function under `root` as real sysfs nests it: `sys/devices/pci0000:00/<path…>`
    /// (the bridges above it first, the function last), linked from `sys/bus/pci/devices/<bdf>`,
    /// with its class and link attributes (`(speed, width)`; `None`: absent).
    ///
    /// # Errors
    /// An empty `path`, or a file that cannot be written.
    pub fn pci_function(
        root: &Path,
        path: &[&str],
        class: &str,
        current: Option<(&str, &str)>,
        max: Option<(&str, &str)>,
    ) -> std::io::Result<()> {
        let Some(bdf) = path.last() else {
            return Err(std::io::Error::other("a PCI function needs its address"));
        };
        let dir = path
            .iter()
            .fold(root.join("sys/devices/pci0000:00"), |d, p| d.join(p));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("class"), format!("{class}\n"))?;
        for (which, link) in [("current", current), ("max", max)] {
            if let Some((speed, width)) = link {
                std::fs::write(
                    dir.join(format!("{which}_link_speed")),
                    format!("{speed}\n"),
                )?;
                std::fs::write(
                    dir.join(format!("{which}_link_width")),
                    format!("{width}\n"),
                )?;
            }
        }
        let bus = root.join("sys/bus/pci/devices");
        std::fs::create_dir_all(&bus)?;
        std::os::unix::fs::symlink(&dir, bus.join(bdf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration space with a capability list: power management at 0x50, then PCI Express
    /// at 0x70 with Device Control 2 = `ctl2`.
    fn config(ctl2: u16) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0x06] = 0x10;
        c[0x34] = 0x50;
        c[0x50] = 0x01;
        c[0x51] = 0x70;
        c[0x70] = 0x10;
        c[0x71] = 0x00;
        c[0x70 + 0x28..0x70 + 0x2a].copy_from_slice(&ctl2.to_le_bytes());
        c
    }

    #[test]
    fn atomics_from_device_control_2() {
        assert_eq!(atomics(&config(0x0040)), "enabled");
        assert_eq!(atomics(&config(0x0000)), "disabled");
        // What an unprivileged reader gets: the first 64 bytes.
        assert!(atomics(&config(0x0040)[..64]).contains("needs root"));
        assert!(atomics(&[0u8; 64]).contains("no capability list"));
    }

    fn function(
        root: &Path,
        path: &[&str],
        class: &str,
        current: Option<(&str, &str)>,
        max: Option<(&str, &str)>,
    ) {
        fixture::pci_function(root, path, class, current, max).unwrap();
    }

    const GEN3: &str = "8.0 GT/s PCIe";
    const GEN4: &str = "16.0 GT/s PCIe";

    /// An RX 580 (Polaris, gen3 x16, no switch of its own) under the root port 0000:00:03.1 of a
    /// gen4 board, whose link trained at `speed` and `width`; the root port's own maximum is
    /// `port_width` lanes. Its HDMI audio function sits beside it.
    fn rx580(speed: &str, width: &str, port_width: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let now = Some((speed, width));
        function(
            root,
            &["0000:00:03.1"],
            "0x060400",
            now,
            Some((GEN4, port_width)),
        );
        let gpu = ["0000:00:03.1", "0000:0a:00.0"];
        function(root, &gpu, "0x030000", now, Some((GEN3, "16")));
        let audio = ["0000:00:03.1", "0000:0a:00.1"];
        function(root, &audio, "0x040300", now, Some((GEN3, "16")));
        dir
    }

    #[test]
    fn an_rx_580_at_full_width_has_no_warning() {
        let dir = rx580(GEN3, "16", "16");
        let p = probe(dir.path());
        assert_eq!(p["pcie_link:0000:0a:00.0"], "gen3 x16");
        assert_eq!(p["pcie_link_max:0000:0a:00.0"], "gen3 x16");
        assert!(
            !p.keys().any(|k| k.starts_with("pcie_link_warning")),
            "{p:?}"
        );
        // Not a GPU: the card's audio function and the root port get no entry.
        assert!(
            !p.keys()
                .any(|k| k.ends_with("0a:00.1") || k.ends_with("03.1")),
            "{p:?}"
        );
    }

    #[test]
    fn an_rx_580_in_a_x4_slot_is_warned_about_and_the_slot_named() {
        let dir = rx580(GEN3, "4", "4");
        let p = probe(dir.path());
        assert_eq!(p["pcie_link:0000:0a:00.0"], "gen3 x4");
        assert_eq!(p["pcie_link_max:0000:0a:00.0"], "gen3 x16");
        let w = &p["pcie_link_warning:0000:0a:00.0"];
        assert!(w.starts_with("runs at gen3 x4, below its gen3 x16"), "{w}");
        assert!(
            w.contains("x4 is the width of the link at 0000:00:03.1"),
            "{w}"
        );
        assert!(!w.contains("power saving"), "{w}");
        // Trained at gen 1 (or idling there): said, with what it may mean.
        let dir = rx580("2.5 GT/s PCIe", "16", "16");
        let p = probe(dir.path());
        assert_eq!(p["pcie_link:0000:0a:00.0"], "gen1 x16");
        let w = &p["pcie_link_warning:0000:0a:00.0"];
        assert!(
            w.contains("gen1 is the speed") && w.contains("power saving"),
            "{w}"
        );
    }

    #[test]
    fn a_card_with_its_own_switch_is_judged_by_the_slowest_link_to_the_root_port() {
        // An RX 5600 XT (Navi 10, gen4) on a gen3 board: its switch's internal links read gen4
        // x16, the link from the card to the board gen3 x16.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let up = Some((GEN3, "16"));
        let inside = Some((GEN4, "16"));
        function(root, &["0000:00:01.1"], "0x060400", up, up);
        let usp = ["0000:00:01.1", "0000:01:00.0"];
        function(root, &usp, "0x060400", up, inside);
        let dsp = ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0"];
        function(root, &dsp, "0x060400", inside, inside);
        let gpu = [
            "0000:00:01.1",
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:03:00.0",
        ];
        function(root, &gpu, "0x030000", inside, inside);
        let p = probe(root);
        assert_eq!(p["pcie_link:0000:03:00.0"], "gen3 x16");
        assert_eq!(p["pcie_link_max:0000:03:00.0"], "gen4 x16");
        let w = &p["pcie_link_warning:0000:03:00.0"];
        assert!(
            w.contains("gen3 is the speed of the link at 0000:00:01.1"),
            "{w}"
        );
        // Only the GPU function is reported, not the switch's ports.
        assert_eq!(p.keys().filter(|k| k.starts_with("pcie_link:")).count(), 1);
    }

    #[test]
    fn an_integrated_gpu_without_a_link_says_so() {
        // A Ryzen APU's GPU (Renoir) behind the internal bridge 0000:00:08.1. Where the kernel
        // shows no link for it, the probe says there is none rather than guessing one.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        function(root, &["0000:00:08.1"], "0x060400", None, None);
        let gpu = ["0000:00:08.1", "0000:05:00.0"];
        function(root, &gpu, "0x030000", Some(("Unknown speed", "0")), None);
        let p = probe(root);
        assert!(p["pcie_link:0000:05:00.0"].starts_with("none: "), "{p:?}");
        assert!(p["pcie_link:0000:05:00.0"].contains("integrated GPU shares system memory"));
        assert!(!p.contains_key("pcie_link_max:0000:05:00.0"));
        assert!(!p.contains_key("pcie_link_warning:0000:05:00.0"));
        assert_eq!(generation_of("8 GT/s"), Some(3));
        assert_eq!(generation_of("32.0 GT/s PCIe"), Some(5));
        assert_eq!(generation_of("Unknown speed"), None);
    }

    #[test]
    fn probe_reads_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let params = root.join("sys/module/amdgpu/parameters");
        std::fs::create_dir_all(&params).unwrap();
        std::fs::write(params.join("noretry"), "1\n").unwrap();
        std::fs::write(params.join("ppfeaturemask"), "0xfff7bfff\n").unwrap();
        let gpu = root.join("sys/bus/pci/devices/0000:03:00.0");
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(gpu.join("class"), "0x030000\n").unwrap();
        std::fs::write(gpu.join("config"), config(0x0040)).unwrap();
        let nic = root.join("sys/bus/pci/devices/0000:05:00.0");
        std::fs::create_dir_all(&nic).unwrap();
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(
            root.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version: gcc 12\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("opt/rocm/.info")).unwrap();
        std::fs::write(root.join("opt/rocm/.info/version"), "6.2.4-120\n").unwrap();
        let p = probe(root);
        assert_eq!(p["amdgpu.noretry"], "1");
        assert_eq!(p["amdgpu.ppfeaturemask"], "0xfff7bfff");
        assert!(!p.contains_key("amdgpu.vm_fragment_size"));
        assert_eq!(p["nvidia_driver"], "550.54.15");
        assert_eq!(p["rocm_version"], "6.2.4-120");
        assert_eq!(p["pcie_atomics:0000:03:00.0"], "enabled");
        assert!(!p.keys().any(|k| k.contains("0000:05:00.0")), "{p:?}");
        assert!(probe(&root.join("missing")).is_empty());
    }
}
