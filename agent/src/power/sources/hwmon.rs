//! amdgpu hwmon: power, temperature, clocks and busy percentage from sysfs.
//!
//! The amdgpu driver registers one hwmon device per GPU under
//! `/sys/class/drm/cardN/device/hwmon/hwmonM/` (name file: `amdgpu`). What it
//! exposes depends on the GPU generation and the kernel:
//! - `power1_average` (µW): a firmware average over about a second. Older
//!   discrete cards (RX 5600 XT) have only this one.
//! - `power1_input` (µW): the current value. RX 580 on Linux ≥ 6.6 has only
//!   this one (the driver now exposes its figure as current rather than
//!   average, drm/amd#2897), and so does MI300X, where it is the whole
//!   package.
//! - APUs have both, and there both cover the whole socket, CPU cores
//!   included: that is how we tell a socket reading from an ASIC one.
//!
//! Everything is read through a configurable root (`--sysfs-root`) so that
//! tests can build fixture trees; nothing here needs root privileges.
//!
//! A channel is its card's PCI address, never its `cardN` or `hwmonM` index:
//! channels are ordered by address and labelled by the files they read, so a
//! kernel update that renumbers the DRM cards keeps each sensor on its GPU.
//! A card whose hwmon directory vanishes mid-stream (driver reload, GPU reset)
//! is looked for again by its address at the next poll, wherever it is then.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::sysfs::{numbered_entries, read_parsed, read_trimmed};
use crate::host::pci::normalize_pci;
use crate::power::{
    Channel, ChannelReading, PollError, PowerConfig, PowerSource, Reading, Scope, SourceKind, boxed,
};

/// The source's name in Describe and on the wire.
pub const NAME: &str = "amdgpu-hwmon";

/// amdgpu hwmon in [`super::ALL`]: always probed, under the configured sysfs root.
pub const KIND: SourceKind = SourceKind {
    name: NAME,
    probe: |config: &PowerConfig| Some(boxed(HwmonSource::discover(&config.sysfs_root))),
};

/// PCI device ids whose `power1_input` is package power: the MI300 series
/// (MI300X 74a1, MI308X 74a2, MI325X 74a5, MI308X HF 74a8, MI300X HF 74a9,
/// MI300X VF 74b5, MI308X 74b6, MI300X HF 74bd) and the MI350 series built
/// the same way (MI350X 75a0, MI355X 75a3, and their VFs 75b0, 75b3). From
/// libdrm's `amdgpu.ids`. MI300A (74a0) is deliberately absent: it is an
/// APU, so its reading covers the CPU cores too and is a [`Scope::Socket`].
const PACKAGE_POWER_DEVICE_IDS: &[u16] = &[
    0x74a1, 0x74a2, 0x74a5, 0x74a8, 0x74a9, 0x74b5, 0x74b6, 0x74bd, 0x75a0, 0x75a3, 0x75b0, 0x75b3,
];
/// MI300A: an APU whose power file covers the whole socket.
const APU_SOCKET_DEVICE_IDS: &[u16] = &[0x74a0];

/// Readings beyond these are sensor garbage (an unset register reads as
/// 0xffffffff µW, an absent sensor as -273 °C), not physics.
const MAX_PLAUSIBLE_WATTS: f64 = 10_000.0;
const MIN_PLAUSIBLE_C: f64 = -60.0;
const MAX_PLAUSIBLE_C: f64 = 200.0;
const MAX_PLAUSIBLE_MHZ: f64 = 100_000.0;

/// Which power file a channel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PowerFile {
    Average,
    Input,
}

impl PowerFile {
    fn file_name(self) -> &'static str {
        match self {
            PowerFile::Average => "power1_average",
            PowerFile::Input => "power1_input",
        }
    }

    /// The firmware's `power1_average` is a running average over roughly a
    /// second, so reading it faster only returns the same window again.
    /// `power1_input` is the SMU's current value, refreshed every few
    /// milliseconds to tens of milliseconds depending on the part; 100 ms is
    /// a conservative start until the sampler has counted the real period.
    fn nominal_period(self) -> Duration {
        match self {
            PowerFile::Average => Duration::from_secs(1),
            PowerFile::Input => Duration::from_millis(100),
        }
    }
}

/// Where one GPU's files are.
#[derive(Debug, Clone)]
struct Card {
    hwmon_dir: PathBuf,
    device_dir: PathBuf,
    power: PowerFile,
    /// `tempN_input` chosen at probe (edge if labelled, else the first).
    temp_file: Option<PathBuf>,
}

/// The amdgpu hwmon source: one channel per GPU with a power file.
#[derive(Debug)]
pub struct HwmonSource {
    /// Where `sys/class/drm` is looked for, at probe and when a card moves.
    sysfs_root: PathBuf,
    cards: Vec<Card>,
    channels: Vec<Channel>,
}

impl HwmonSource {
    /// Finds every amdgpu hwmon under `<sysfs_root>/sys/class/drm/card*/device/`.
    ///
    /// # Errors
    /// The reason shown in Describe when there is no amdgpu hwmon with a
    /// power file.
    pub fn discover(sysfs_root: &Path) -> Result<HwmonSource, String> {
        let pattern = format!(
            "{}/card*/device/hwmon",
            sysfs_root.join("sys/class/drm").display()
        );
        let mut found = Vec::new();
        let mut without_power = Vec::new();
        for (device_dir, hwmon_dir) in amdgpu_hwmons(sysfs_root) {
            match describe_card(&device_dir, &hwmon_dir) {
                Some(pair) => found.push(pair),
                None => without_power.push(hwmon_dir.display().to_string()),
            }
        }
        // By PCI address, so renumbered cards keep their channel numbers (a card without an
        // address, which real sysfs does not have, sorts first by its path).
        found.sort_by(|(a, ca), (b, cb)| {
            (&ca.pci_bus_id, &a.hwmon_dir).cmp(&(&cb.pci_bus_id, &b.hwmon_dir))
        });
        if found.is_empty() {
            return Err(if without_power.is_empty() {
                format!("no amdgpu hwmon under {pattern}")
            } else {
                format!(
                    "amdgpu hwmon without power1_average or power1_input: {}",
                    without_power.join(", ")
                )
            });
        }
        let (cards, channels) = found.into_iter().unzip();
        Ok(HwmonSource {
            sysfs_root: sysfs_root.to_path_buf(),
            cards,
            channels,
        })
    }

    /// Looks for card `index` again by its PCI address after its hwmon directory vanished: the
    /// driver may have come back under another `cardN`/`hwmonM`. True when it was found.
    fn relocate(&mut self, index: usize) -> bool {
        let pci = &self.channels[index].pci_bus_id;
        if pci.is_empty() {
            return false;
        }
        let moved = amdgpu_hwmons(&self.sysfs_root)
            .into_iter()
            .find(|(device_dir, _)| pci_bus_id(device_dir).as_ref() == Some(pci));
        let Some((device_dir, hwmon_dir)) = moved else {
            return false;
        };
        let Some((card, _)) = describe_card(&device_dir, &hwmon_dir) else {
            return false;
        };
        self.cards[index] = card;
        true
    }
}

impl PowerSource for HwmonSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
        let mut readings = Vec::with_capacity(self.cards.len());
        for channel in 0..self.cards.len() {
            // A hwmon dir disappears on driver unload or GPU reset, and may come back under
            // another number; the channel has no reading until its card is found again.
            if !self.cards[channel].hwmon_dir.is_dir() && !self.relocate(channel) {
                continue;
            }
            readings.push(read_card(channel, &self.cards[channel]));
        }
        if readings.is_empty() {
            let gone: Vec<_> = self
                .cards
                .iter()
                .zip(&self.channels)
                .map(|(c, ch)| format!("{} (was {})", ch.pci_bus_id, c.hwmon_dir.display()))
                .collect();
            return Err(PollError::Retry(format!(
                "amdgpu hwmon vanished, looking for it again: {}",
                gone.join(", ")
            )));
        }
        Ok(readings)
    }
}

/// The DRM entries that are cards: `card0`, not `card0-DP-1` or `renderD128`.
const CARD_PREFIX: &str = "card";

/// Every amdgpu hwmon under `<sysfs_root>/sys/class/drm/card*/device/`: (device dir, hwmon dir).
fn amdgpu_hwmons(sysfs_root: &Path) -> Vec<(PathBuf, PathBuf)> {
    let Ok(cards) = numbered_entries(&sysfs_root.join("sys/class/drm"), CARD_PREFIX) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (_, card_dir) in cards {
        let device_dir = card_dir.join("device");
        for hwmon_dir in amdgpu_hwmon_dirs(&device_dir) {
            out.push((device_dir.clone(), hwmon_dir));
        }
    }
    out
}

/// `device/hwmon/hwmon*` entries whose `name` is `amdgpu`, sorted.
fn amdgpu_hwmon_dirs(device_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(device_dir.join("hwmon")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("hwmon"))
        })
        .filter(|p| read_trimmed(&p.join("name")).as_deref() == Some("amdgpu"))
        .collect();
    dirs.sort();
    dirs
}

/// The card's files and channel, or `None` when it has no power file.
fn describe_card(device_dir: &Path, hwmon_dir: &Path) -> Option<(Card, Channel)> {
    let has_average = hwmon_dir.join("power1_average").is_file();
    let has_input = hwmon_dir.join("power1_input").is_file();
    let power = match (has_average, has_input) {
        (true, _) => PowerFile::Average,
        (false, true) => PowerFile::Input,
        (false, false) => return None,
    };
    let device_id = read_trimmed(&device_dir.join("device")).and_then(|s| parse_hex_u16(&s));
    let card = Card {
        hwmon_dir: hwmon_dir.to_path_buf(),
        device_dir: device_dir.to_path_buf(),
        power,
        temp_file: choose_temp_file(hwmon_dir),
    };
    // What the channel reads, not where: the same after the cards are renumbered.
    let temp = card
        .temp_file
        .as_deref()
        .and_then(|t| t.file_name()?.to_str())
        .map_or_else(|| ", no temperature".to_string(), |t| format!(", {t}"));
    let channel = Channel {
        pci_bus_id: pci_bus_id(device_dir).unwrap_or_default(),
        scope: scope_for(device_id, has_average && has_input),
        label: format!("amdgpu {}{temp}", power.file_name()),
        energy_counter: false,
        power_cap_w: read_parsed::<u64>(&hwmon_dir.join("power1_cap"))
            .map(|uw| uw as f64 / 1e6)
            .filter(|w| *w > 0.0 && *w <= MAX_PLAUSIBLE_WATTS),
        nominal_period: power.nominal_period(),
    };
    Some((card, channel))
}

/// What the card's watts cover: the device id wins (MI300 package, MI300A
/// socket); otherwise an amdgpu that has both power files is an APU, whose
/// figure includes the CPU cores; otherwise the GPU chip alone.
fn scope_for(device_id: Option<u16>, both_power_files: bool) -> Scope {
    match device_id {
        Some(id) if PACKAGE_POWER_DEVICE_IDS.contains(&id) => Scope::Package,
        Some(id) if APU_SOCKET_DEVICE_IDS.contains(&id) => Scope::Socket,
        _ if both_power_files => Scope::Socket,
        _ => Scope::Asic,
    }
}

/// The PCI address: the basename of the resolved `device` link, else
/// `PCI_SLOT_NAME` from `device/uevent`.
fn pci_bus_id(device_dir: &Path) -> Option<String> {
    let from_link = fs::canonicalize(device_dir)
        .ok()
        .and_then(|p| p.file_name()?.to_str().and_then(normalize_pci));
    from_link.or_else(|| {
        let uevent = fs::read_to_string(device_dir.join("uevent")).ok()?;
        uevent
            .lines()
            .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
            .and_then(normalize_pci)
    })
}

/// The `tempN_input` labelled `edge`, else the first of temp1..3 present.
fn choose_temp_file(hwmon_dir: &Path) -> Option<PathBuf> {
    let present: Vec<u32> = (1..=3)
        .filter(|n| hwmon_dir.join(format!("temp{n}_input")).is_file())
        .collect();
    let edge = present.iter().copied().find(|n| {
        read_trimmed(&hwmon_dir.join(format!("temp{n}_label")))
            .is_some_and(|l| l.eq_ignore_ascii_case("edge"))
    });
    edge.or(present.first().copied())
        .map(|n| hwmon_dir.join(format!("temp{n}_input")))
}

/// One read of every file of one card; unreadable or garbage → `None`.
fn read_card(channel: usize, card: &Card) -> ChannelReading {
    let dir = &card.hwmon_dir;
    let reading = Reading {
        watts: read_parsed::<u64>(&dir.join(card.power.file_name()))
            .map(|uw| uw as f64 / 1e6)
            .filter(|w| *w <= MAX_PLAUSIBLE_WATTS),
        energy_j: None,
        temperature_c: card
            .temp_file
            .as_deref()
            .and_then(read_parsed::<i64>)
            .map(|mc| mc as f64 / 1000.0)
            .filter(|c| (MIN_PLAUSIBLE_C..=MAX_PLAUSIBLE_C).contains(c)),
        sclk_mhz: read_mhz(&dir.join("freq1_input")),
        mclk_mhz: read_mhz(&dir.join("freq2_input")),
        utilization_pct: read_parsed::<u64>(&card.device_dir.join("gpu_busy_percent"))
            .map(|p| p as f64)
            .filter(|p| *p <= 100.0),
    };
    ChannelReading { channel, reading }
}

/// A `freqN_input` in Hz as MHz, rounded.
fn read_mhz(path: &Path) -> Option<u32> {
    let mhz = read_parsed::<u64>(path)? as f64 / 1e6;
    (mhz <= MAX_PLAUSIBLE_MHZ).then(|| mhz.round() as u32)
}

/// `0x74a1` (or `74a1`) → 0x74a1.
fn parse_hex_u16(s: &str) -> Option<u16> {
    let s = s.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u16::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests;
