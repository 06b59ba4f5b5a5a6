//! RAPL energy counters through the Linux powercap framework.
//!
//! Intel CPUs and AMD Zen both expose package energy as
//! `/sys/class/powercap/intel-rapl:N/energy_uj`: a counter in µJ that wraps
//! at `max_energy_range_uj` (a 32-bit hardware register times the energy
//! unit; at 200 W a wrap every twenty minutes or so). [`unfold`] turns the
//! wrapping counter into a monotonic one, and watts come from its deltas
//! between polls.
//!
//! Since the PLATYPUS side channel (CVE-2020-8694) `energy_uj` is readable by
//! root only on most distributions; probing then fails with that reason so
//! that Describe can say why the CPU has no power figure.
//!
//! Only top-level zones are read (`intel-rapl:0`, not the `intel-rapl:0:0`
//! core subzone, whose energy is already inside the package's).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::sysfs::{numbered_entries, read_parsed};
use crate::power::{
    Channel, ChannelReading, PollError, PowerConfig, PowerSource, Reading, Scope, SourceKind, boxed,
};

/// The source's name in Describe and on the wire.
pub const NAME: &str = "rapl";

/// RAPL in [`super::ALL`]: always probed, under the configured sysfs root.
pub const KIND: SourceKind = SourceKind {
    name: NAME,
    probe: |config: &PowerConfig| Some(boxed(RaplSource::discover(&config.sysfs_root))),
};

/// The top-level powercap zones: `intel-rapl:0`, not the `intel-rapl:0:0`
/// subzone or `intel-rapl-mmio:0` (a second view of package 0).
const ZONE_PREFIX: &str = "intel-rapl:";

/// RAPL's counters update about every millisecond (Intel documents
/// ~0.976 ms; AMD's MSRs the same order).
const NOMINAL_PERIOD: Duration = Duration::from_millis(1);

/// The energy consumed between two readings of a counter that wraps after
/// `range_uj`: `cur - prev`, or, when the counter went backwards, the rest
/// of the range plus the new value (at most one wrap between polls; the
/// fastest wrap is minutes away, polls are milliseconds apart).
///
/// A `prev` above the range (garbage, or a range that shrank) counts the
/// new value only.
pub fn unfold(prev_uj: u64, cur_uj: u64, range_uj: u64) -> u64 {
    if cur_uj >= prev_uj {
        cur_uj - prev_uj
    } else {
        range_uj.saturating_sub(prev_uj).saturating_add(cur_uj)
    }
}

/// The reason shown in Describe when `path` cannot be read: the one place
/// that maps the OS's codes for this source.
pub fn read_error_reason(path: &Path, err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "{} is readable by root only (permission denied)",
            path.display()
        ),
        io::ErrorKind::NotFound => format!("{} does not exist", path.display()),
        _ => format!("cannot read {}: {err}", path.display()),
    }
}

/// One package zone's counter state.
#[derive(Debug)]
struct Zone {
    energy_file: PathBuf,
    range_uj: u64,
    /// The previous read (at probe for the first poll, whose watts are
    /// therefore the average since probe).
    last_uj: u64,
    last_at: Instant,
    /// Unfolded µJ since probe (u64 µJ lasts 584 000 years at 1 kW).
    total_uj: u64,
}

/// The RAPL source: one channel per top-level powercap zone.
#[derive(Debug)]
pub struct RaplSource {
    zones: Vec<Zone>,
    channels: Vec<Channel>,
}

impl RaplSource {
    /// Finds the top-level `intel-rapl:N` zones under
    /// `<sysfs_root>/sys/class/powercap` and reads each counter once.
    ///
    /// # Errors
    /// The reason shown in Describe: no zones, or no zone whose `energy_uj`
    /// is readable (typically "readable by root only").
    pub fn discover(sysfs_root: &Path) -> Result<RaplSource, String> {
        let powercap = sysfs_root.join("sys/class/powercap");
        let dirs = numbered_entries(&powercap, ZONE_PREFIX).unwrap_or_default();
        if dirs.is_empty() {
            return Err(format!(
                "no RAPL zones under {}/{ZONE_PREFIX}*",
                powercap.display()
            ));
        }

        let mut zones = Vec::new();
        let mut channels = Vec::new();
        let mut reasons = Vec::new();
        for (_, dir) in dirs {
            match open_zone(&dir) {
                Ok(Some((zone, channel))) => {
                    zones.push(zone);
                    channels.push(channel);
                }
                Ok(None) => {}
                Err(reason) => reasons.push(reason),
            }
        }
        if zones.is_empty() {
            return Err(if reasons.is_empty() {
                format!("no RAPL package zone under {}", powercap.display())
            } else {
                reasons.join("; ")
            });
        }
        Ok(RaplSource { zones, channels })
    }
}

impl PowerSource for RaplSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
        let mut readings = Vec::with_capacity(self.zones.len());
        let mut first_error = None;
        for (channel, zone) in self.zones.iter_mut().enumerate() {
            let now = Instant::now();
            let cur = match read_counter(&zone.energy_file) {
                Ok(v) => v,
                Err(reason) => {
                    first_error.get_or_insert(reason);
                    continue;
                }
            };
            let delta = unfold(zone.last_uj, cur, zone.range_uj);
            let dt = now.duration_since(zone.last_at).as_secs_f64();
            zone.total_uj = zone.total_uj.saturating_add(delta);
            zone.last_uj = cur;
            // Between two polls in the same counter update the delta is 0:
            // a real 0 W would be wrong, so say nothing and keep the interval
            // open, so the next change gives the mean power since the last
            // one instead of a spike (a counter that updates late would
            // otherwise read as 0 W, then as its whole backlog over one poll).
            if delta > 0 {
                zone.last_at = now;
            }
            readings.push(ChannelReading {
                channel,
                reading: Reading {
                    watts: (dt > 0.0 && delta > 0).then(|| delta as f64 / 1e6 / dt),
                    energy_j: Some(zone.total_uj as f64 / 1e6),
                    ..Reading::default()
                },
            });
        }
        match first_error {
            Some(reason) if readings.is_empty() => Err(PollError::Retry(reason)),
            _ => Ok(readings),
        }
    }
}

/// What a top-level zone's energy covers, from its `name`.
fn scope_for(name: &str) -> Option<Scope> {
    if name.starts_with("package") {
        Some(Scope::Package)
    } else if name == "psys" {
        // The platform domain: the SoC and what hangs off its power input
        // (laptops, some desktops). The nearest we have is the node.
        Some(Scope::Node)
    } else {
        None
    }
}

/// Opens one zone: `Ok(None)` for a zone we do not read (unknown name),
/// `Err` with the reason when its counter is unreadable.
fn open_zone(dir: &Path) -> Result<Option<(Zone, Channel)>, String> {
    let name_file = dir.join("name");
    let name = fs::read_to_string(&name_file)
        .map_err(|e| read_error_reason(&name_file, &e))?
        .trim()
        .to_string();
    let Some(scope) = scope_for(&name) else {
        return Ok(None);
    };
    let range_file = dir.join("max_energy_range_uj");
    let range_uj = read_counter(&range_file)?;
    if range_uj == 0 {
        return Err(format!("{} is 0", range_file.display()));
    }
    let energy_file = dir.join("energy_uj");
    let first = read_counter(&energy_file)?;
    let power_cap_w = read_parsed::<u64>(&dir.join("constraint_0_power_limit_uw"))
        .filter(|uw| *uw > 0)
        .map(|uw| uw as f64 / 1e6);
    let zone = Zone {
        energy_file,
        range_uj,
        last_uj: first,
        last_at: Instant::now(),
        total_uj: 0,
    };
    let channel = Channel {
        pci_bus_id: String::new(),
        scope,
        label: name,
        energy_counter: true,
        power_cap_w,
        nominal_period: NOMINAL_PERIOD,
    };
    Ok(Some((zone, channel)))
}

/// Reads a µJ counter file.
fn read_counter(path: &Path) -> Result<u64, String> {
    let text = fs::read_to_string(path).map_err(|e| read_error_reason(path, &e))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{} holds {:?}, not a counter", path.display(), text.trim()))
}

#[cfg(test)]
mod tests {
    use super::super::sysfs::number_after;
    use super::*;

    /// What the agent's probe finds with `root` as the sysfs root.
    fn probe(root: &Path) -> crate::power::Probed {
        let config = PowerConfig {
            sysfs_root: root.to_path_buf(),
            ..PowerConfig::none()
        };
        (KIND.probe)(&config).expect("RAPL is always probed")
    }

    /// `intel-rapl:0` → 0; `intel-rapl:0:1` (subzone), `intel-rapl`,
    /// `intel-rapl-mmio:0` (a second view of package 0) → None.
    fn zone_number(name: &str) -> Option<u32> {
        number_after(name, ZONE_PREFIX)
    }

    fn zone(root: &Path, dir: &str, name: &str, energy: &str, range: &str) -> PathBuf {
        let d = root.join("sys/class/powercap").join(dir);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("name"), format!("{name}\n")).unwrap();
        fs::write(d.join("energy_uj"), energy).unwrap();
        fs::write(d.join("max_energy_range_uj"), range).unwrap();
        d
    }

    #[test]
    fn unfold_without_wrap_is_the_difference() {
        assert_eq!(unfold(100, 350, 1000), 250);
        assert_eq!(unfold(7, 7, 1000), 0);
    }

    #[test]
    fn unfold_across_a_wrap_adds_the_rest_of_the_range() {
        // 262143328850 is a real Intel range; 90 µJ before the top, 10 after.
        let range = 262_143_328_850;
        assert_eq!(unfold(range - 90, 10, range), 100);
        assert_eq!(unfold(999, 0, 1000), 1);
    }

    #[test]
    fn unfold_with_garbage_prev_counts_only_the_new_value() {
        assert_eq!(unfold(5000, 40, 1000), 40);
        assert_eq!(unfold(u64::MAX, 3, u64::MAX), 3);
    }

    #[test]
    fn counter_becomes_monotonic_joules_and_watts_across_a_wrap() {
        let root = tempfile::tempdir().unwrap();
        let d = zone(
            root.path(),
            "intel-rapl:0",
            "package-0",
            "999000000\n",
            "1000000000\n",
        );
        fs::write(d.join("constraint_0_power_limit_uw"), "65000000\n").unwrap();
        // A subzone and an mmio duplicate must be ignored.
        zone(root.path(), "intel-rapl:0:0", "core", "5\n", "1000000000\n");
        zone(
            root.path(),
            "intel-rapl-mmio:0",
            "package-0",
            "5\n",
            "1000000000\n",
        );
        let mut src = RaplSource::discover(root.path()).unwrap();
        assert_eq!(src.channels().len(), 1);
        let ch = &src.channels()[0];
        assert_eq!((ch.label.as_str(), ch.scope), ("package-0", Scope::Package));
        assert!(ch.energy_counter);
        assert_eq!(ch.pci_bus_id, "");
        assert_eq!(ch.power_cap_w, Some(65.0));

        std::thread::sleep(Duration::from_millis(20));
        fs::write(d.join("energy_uj"), "999500000\n").unwrap();
        let r = src.poll().unwrap();
        assert_eq!(r[0].reading.energy_j, Some(0.5));
        let w = r[0].reading.watts.unwrap();
        // 0.5 J over ≥ 20 ms (and surely < 5 s): between 0.1 and 25 W.
        assert!(w > 0.1 && w <= 25.0, "{w}");

        // Wrap: 999.5 J → top (1000 J) → 0.25 J = 0.75 J more.
        fs::write(d.join("energy_uj"), "250000\n").unwrap();
        let r = src.poll().unwrap();
        assert_eq!(r[0].reading.energy_j, Some(1.25));

        // No change: energy stays, watts unknown rather than 0.
        let r = src.poll().unwrap();
        assert_eq!(
            (r[0].reading.energy_j, r[0].reading.watts),
            (Some(1.25), None)
        );
    }

    #[test]
    fn zones_are_ordered_and_psys_is_the_node() {
        let root = tempfile::tempdir().unwrap();
        zone(root.path(), "intel-rapl:1", "package-1", "10\n", "1000\n");
        zone(root.path(), "intel-rapl:0", "package-0", "10\n", "1000\n");
        zone(root.path(), "intel-rapl:2", "psys", "10\n", "1000\n");
        zone(root.path(), "intel-rapl:3", "mystery", "10\n", "1000\n");
        let src = probe(root.path()).unwrap();
        assert_eq!(src.name(), NAME);
        let got: Vec<_> = src
            .channels()
            .iter()
            .map(|c| (c.label.as_str(), c.scope))
            .collect();
        assert_eq!(
            got,
            [
                ("package-0", Scope::Package),
                ("package-1", Scope::Package),
                ("psys", Scope::Node)
            ]
        );
    }

    #[test]
    fn no_zones_is_a_reason() {
        let root = tempfile::tempdir().unwrap();
        let err = RaplSource::discover(root.path()).unwrap_err();
        assert!(err.starts_with("no RAPL zones under"), "{err}");
        assert!(err.ends_with("sys/class/powercap/intel-rapl:*"), "{err}");
    }

    /// What this proves: the error mapping turns EACCES/EPERM into the
    /// "readable by root only" reason. It does not prove that a real
    /// root-only sysfs file yields EACCES (that is the kernel's behaviour).
    #[test]
    fn permission_denied_maps_to_root_only() {
        let p = Path::new("/sys/class/powercap/intel-rapl:0/energy_uj");
        let eacces = io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            read_error_reason(p, &eacces),
            "/sys/class/powercap/intel-rapl:0/energy_uj is readable by root only (permission denied)"
        );
        let eperm = io::Error::from_raw_os_error(libc::EPERM);
        assert!(read_error_reason(p, &eperm).ends_with("(permission denied)"));
        let enoent = io::Error::from_raw_os_error(libc::ENOENT);
        assert!(read_error_reason(p, &enoent).ends_with("does not exist"));
    }

    /// What this proves: an `energy_uj` that cannot be read at probe makes
    /// the probe fail with a reason naming the file (here it is a directory,
    /// EISDIR, which even root cannot read as a file).
    #[test]
    fn unreadable_counter_fails_the_probe_with_the_path() {
        let root = tempfile::tempdir().unwrap();
        let d = zone(root.path(), "intel-rapl:0", "package-0", "1\n", "1000\n");
        fs::remove_file(d.join("energy_uj")).unwrap();
        fs::create_dir(d.join("energy_uj")).unwrap();
        let err = RaplSource::discover(root.path()).unwrap_err();
        assert!(err.starts_with("cannot read "), "{err}");
        assert!(err.contains("intel-rapl:0/energy_uj"), "{err}");
    }

    /// A mode-000 file: only meaningful when not running as root (root reads
    /// it anyway), so as root this test says so and checks nothing more.
    #[test]
    fn mode_000_counter_is_root_only_when_not_root() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let d = zone(root.path(), "intel-rapl:0", "package-0", "1\n", "1000\n");
        fs::set_permissions(d.join("energy_uj"), fs::Permissions::from_mode(0o000)).unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            eprintln!(
                "running as root: a mode-000 file is readable, see permission_denied_maps_to_root_only"
            );
            assert!(RaplSource::discover(root.path()).is_ok());
            return;
        }
        let err = RaplSource::discover(root.path()).unwrap_err();
        assert!(
            err.ends_with("is readable by root only (permission denied)"),
            "{err}"
        );
    }

    #[test]
    fn garbage_counter_at_poll_is_retry_and_recovers() {
        let root = tempfile::tempdir().unwrap();
        let d = zone(root.path(), "intel-rapl:0", "package-0", "100\n", "1000\n");
        let mut src = RaplSource::discover(root.path()).unwrap();
        fs::write(d.join("energy_uj"), "garbage\n").unwrap();
        assert!(matches!(src.poll(), Err(PollError::Retry(m)) if m.contains("not a counter")));
        fs::write(d.join("energy_uj"), "400\n").unwrap();
        assert_eq!(src.poll().unwrap()[0].reading.energy_j, Some(0.0003));
    }

    #[test]
    fn garbage_range_fails_the_probe() {
        let root = tempfile::tempdir().unwrap();
        zone(root.path(), "intel-rapl:0", "package-0", "100\n", "0\n");
        assert!(
            RaplSource::discover(root.path())
                .unwrap_err()
                .ends_with("is 0")
        );
        zone(root.path(), "intel-rapl:0", "package-0", "100\n", "lots\n");
        assert!(
            RaplSource::discover(root.path())
                .unwrap_err()
                .contains("not a counter")
        );
    }

    #[test]
    fn zone_names() {
        assert_eq!(zone_number("intel-rapl:0"), Some(0));
        assert_eq!(zone_number("intel-rapl:11"), Some(11));
        assert_eq!(zone_number("intel-rapl:0:1"), None);
        assert_eq!(zone_number("intel-rapl"), None);
        assert_eq!(zone_number("intel-rapl-mmio:0"), None);
    }
}
