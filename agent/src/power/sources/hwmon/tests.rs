//! Tests of [`super`] (`power/sources/hwmon.rs`).

use super::super::sysfs::number_after;
use super::*;
use std::os::unix::fs::symlink;

/// What the agent's probe finds with `root` as the sysfs root.
fn probe(root: &Path) -> crate::power::Probed {
    let config = PowerConfig {
        sysfs_root: root.to_path_buf(),
        ..PowerConfig::none()
    };
    (KIND.probe)(&config).expect("hwmon is always probed")
}

/// `card0` → 0; `card0-DP-1`, `renderD128`, `version` → None.
fn card_number(name: &str) -> Option<u32> {
    number_after(name, CARD_PREFIX)
}

/// Builds `<root>/sys/class/drm/cardN/device` → `<root>/sys/devices/
/// pci0000:00/<pci>` (a symlink, as in real sysfs) with the given files
/// relative to the device dir (`hwmon/hwmon3/power1_input`, `device`).
fn fixture_card(root: &Path, card: &str, pci: &str, files: &[(&str, &str)]) -> PathBuf {
    let dev = root.join("sys/devices/pci0000:00").join(pci);
    fs::create_dir_all(&dev).unwrap();
    let card_dir = root.join("sys/class/drm").join(card);
    fs::create_dir_all(&card_dir).unwrap();
    symlink(&dev, card_dir.join("device")).unwrap();
    for (rel, content) in files {
        let p = dev.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    dev
}

fn only_channel(root: &Path) -> (HwmonSource, Channel, Reading) {
    let mut src = HwmonSource::discover(root).unwrap();
    assert_eq!(src.channels().len(), 1);
    let ch = src.channels()[0].clone();
    let mut r = src.poll().unwrap();
    assert_eq!(r.len(), 1);
    (src, ch, r.remove(0).reading)
}

#[test]
fn rx580_like_has_only_power1_input() {
    let root = tempfile::tempdir().unwrap();
    fixture_card(
        root.path(),
        "card0",
        "0000:03:00.0",
        &[
            ("device", "0x67df\n"),
            ("gpu_busy_percent", "37\n"),
            ("hwmon/hwmon2/name", "amdgpu\n"),
            ("hwmon/hwmon2/power1_input", "8123000\n"),
            ("hwmon/hwmon2/power1_cap", "145000000\n"),
            ("hwmon/hwmon2/temp1_input", "41000\n"),
            ("hwmon/hwmon2/temp1_label", "edge\n"),
            ("hwmon/hwmon2/freq1_input", "300000000\n"),
            ("hwmon/hwmon2/freq2_input", "2000000000\n"),
        ],
    );
    // A connector entry next to the card must not be mistaken for one.
    fs::create_dir_all(root.path().join("sys/class/drm/card0-DP-1")).unwrap();
    let (_, ch, r) = only_channel(root.path());
    assert_eq!(ch.pci_bus_id, "0000:03:00.0");
    assert_eq!(ch.scope, Scope::Asic);
    assert_eq!(ch.nominal_period, Duration::from_millis(100));
    assert_eq!(ch.power_cap_w, Some(145.0));
    assert!(!ch.energy_counter);
    assert_eq!(r.watts, Some(8.123));
    assert_eq!(r.temperature_c, Some(41.0));
    assert_eq!(r.sclk_mhz, Some(300));
    assert_eq!(r.mclk_mhz, Some(2000));
    assert_eq!(r.utilization_pct, Some(37.0));
    assert_eq!(r.energy_j, None);
}

#[test]
fn rx5600xt_like_has_only_power1_average() {
    let root = tempfile::tempdir().unwrap();
    fixture_card(
        root.path(),
        "card1",
        "0000:0A:00.0",
        &[
            ("device", "0x731f\n"),
            ("hwmon/hwmon5/name", "amdgpu\n"),
            ("hwmon/hwmon5/power1_average", "152000000\n"),
            ("hwmon/hwmon5/temp1_input", "65000\n"),
            ("hwmon/hwmon5/temp1_label", "edge\n"),
            ("hwmon/hwmon5/temp2_input", "80000\n"),
            ("hwmon/hwmon5/temp2_label", "junction\n"),
            ("hwmon/hwmon5/temp3_input", "78000\n"),
            ("hwmon/hwmon5/temp3_label", "mem\n"),
            ("hwmon/hwmon5/freq1_input", "1750123456\n"),
            ("hwmon/hwmon5/freq2_input", "875000000\n"),
        ],
    );
    let (_, ch, r) = only_channel(root.path());
    assert_eq!(ch.pci_bus_id, "0000:0a:00.0");
    assert_eq!(ch.scope, Scope::Asic);
    assert_eq!(ch.nominal_period, Duration::from_secs(1));
    assert_eq!(r.watts, Some(152.0));
    assert_eq!(r.temperature_c, Some(65.0));
    assert_eq!(r.sclk_mhz, Some(1750));
    assert_eq!(r.mclk_mhz, Some(875));
    // No gpu_busy_percent file → None.
    assert_eq!(r.utilization_pct, None);
}

#[test]
fn apu_like_has_both_files_and_reads_the_average_as_socket() {
    let root = tempfile::tempdir().unwrap();
    fixture_card(
        root.path(),
        "card0",
        "0000:c4:00.0",
        &[
            ("device", "0x15bf\n"),
            ("hwmon/hwmon6/name", "amdgpu\n"),
            ("hwmon/hwmon6/power1_average", "17080000\n"),
            ("hwmon/hwmon6/power1_input", "21000000\n"),
            ("hwmon/hwmon6/temp1_input", "52000\n"),
            ("hwmon/hwmon6/temp1_label", "edge\n"),
            ("hwmon/hwmon6/freq1_input", "800000000\n"),
        ],
    );
    let (_, ch, r) = only_channel(root.path());
    assert_eq!(ch.scope, Scope::Socket);
    assert_eq!(ch.nominal_period, Duration::from_secs(1));
    assert_eq!(r.watts, Some(17.08), "the average is preferred");
    assert_eq!(r.mclk_mhz, None);
}

#[test]
fn mi300x_like_is_package_and_falls_back_to_the_first_temperature() {
    let root = tempfile::tempdir().unwrap();
    fixture_card(
        root.path(),
        "card2",
        "0000:1b:00.0",
        &[
            ("device", "0x74a1\n"),
            ("gpu_busy_percent", "100\n"),
            ("hwmon/hwmon9/name", "amdgpu\n"),
            ("hwmon/hwmon9/power1_input", "745000000\n"),
            ("hwmon/hwmon9/power1_cap", "750000000\n"),
            // MI300X has no edge sensor.
            ("hwmon/hwmon9/temp2_input", "84000\n"),
            ("hwmon/hwmon9/temp2_label", "junction\n"),
            ("hwmon/hwmon9/temp3_input", "70000\n"),
            ("hwmon/hwmon9/temp3_label", "mem\n"),
            ("hwmon/hwmon9/freq1_input", "2100000000\n"),
            ("hwmon/hwmon9/freq2_input", "1300000000\n"),
        ],
    );
    let (_, ch, r) = only_channel(root.path());
    assert_eq!(ch.pci_bus_id, "0000:1b:00.0");
    assert_eq!(ch.scope, Scope::Package);
    assert_eq!(ch.power_cap_w, Some(750.0));
    assert_eq!(r.watts, Some(745.0));
    assert_eq!(r.temperature_c, Some(84.0));
    assert_eq!(r.sclk_mhz, Some(2100));
    assert_eq!(r.utilization_pct, Some(100.0));
}

#[test]
fn scope_rules() {
    assert_eq!(scope_for(Some(0x74a5), false), Scope::Package);
    assert_eq!(scope_for(Some(0x74a0), false), Scope::Socket);
    assert_eq!(scope_for(Some(0x15bf), true), Scope::Socket);
    assert_eq!(scope_for(None, true), Scope::Socket);
    assert_eq!(scope_for(Some(0x67df), false), Scope::Asic);
    assert_eq!(scope_for(None, false), Scope::Asic);
    assert_eq!(parse_hex_u16("0x74A1\n"), Some(0x74a1));
    assert_eq!(parse_hex_u16("zz"), None);
}

#[test]
fn garbage_empty_and_missing_files_leave_fields_none() {
    let root = tempfile::tempdir().unwrap();
    fixture_card(
        root.path(),
        "card0",
        "0000:03:00.0",
        &[
            ("device", "not-hex\n"),
            ("gpu_busy_percent", "250\n"),
            ("hwmon/hwmon0/name", "amdgpu\n"),
            ("hwmon/hwmon0/power1_average", "banana\n"),
            ("hwmon/hwmon0/power1_cap", "\n"),
            ("hwmon/hwmon0/temp1_input", "-273150\n"),
            ("hwmon/hwmon0/freq1_input", "-5\n"),
            ("hwmon/hwmon0/freq2_input", ""),
        ],
    );
    let (_, ch, r) = only_channel(root.path());
    assert_eq!(ch.scope, Scope::Asic);
    assert_eq!(ch.power_cap_w, None);
    assert_eq!(r.watts, None);
    assert_eq!(r.temperature_c, None);
    assert_eq!(r.sclk_mhz, None);
    assert_eq!(r.mclk_mhz, None);
    assert_eq!(r.utilization_pct, None);

    // An all-ones register is not 4 kW.
    let dir = root
        .path()
        .join("sys/devices/pci0000:00/0000:03:00.0/hwmon/hwmon0");
    fs::write(dir.join("power1_average"), "18446744073709551615\n").unwrap();
    let mut src = HwmonSource::discover(root.path()).unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, None);
    fs::write(dir.join("power1_average"), "4294967295000000\n").unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, None);
    fs::write(dir.join("power1_average"), "33000000\n").unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, Some(33.0));
}

/// One amdgpu card whose hwmon reads 10 W; returns its device directory.
fn card_at_10_watts(root: &Path) -> PathBuf {
    fixture_card(
        root,
        "card0",
        "0000:03:00.0",
        &[
            ("hwmon/hwmon1/name", "amdgpu\n"),
            ("hwmon/hwmon1/power1_input", "10000000\n"),
        ],
    )
}

#[test]
fn readings_follow_the_files() {
    let root = tempfile::tempdir().unwrap();
    let dev = card_at_10_watts(root.path());
    let mut src = HwmonSource::discover(root.path()).unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, Some(10.0));
    fs::write(dev.join("hwmon/hwmon1/power1_input"), "12500000\n").unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, Some(12.5));
    // The file disappearing (GPU suspended, driver busy) is a None, not an error.
    fs::remove_file(dev.join("hwmon/hwmon1/power1_input")).unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, None);
}

#[test]
fn vanished_hwmon_dir_is_retry() {
    let root = tempfile::tempdir().unwrap();
    let dev = card_at_10_watts(root.path());
    let mut src = HwmonSource::discover(root.path()).unwrap();
    fs::remove_dir_all(dev.join("hwmon/hwmon1")).unwrap();
    match src.poll() {
        Err(PollError::Retry(msg)) => assert!(msg.contains("hwmon1"), "{msg}"),
        other => panic!("expected Retry, got {other:?}"),
    }
}

#[test]
fn two_cards_keep_their_order_and_a_vanished_one_just_has_no_reading() {
    let root = tempfile::tempdir().unwrap();
    let files = |w: &'static str| {
        vec![
            ("hwmon/hwmon1/name", "amdgpu\n"),
            ("hwmon/hwmon1/power1_input", w),
        ]
    };
    fixture_card(root.path(), "card10", "0000:04:00.0", &files("4000000\n"));
    let dev2 = fixture_card(root.path(), "card2", "0000:03:00.0", &files("3000000\n"));
    let mut src = HwmonSource::discover(root.path()).unwrap();
    let ids: Vec<_> = src
        .channels()
        .iter()
        .map(|c| c.pci_bus_id.clone())
        .collect();
    assert_eq!(ids, ["0000:03:00.0", "0000:04:00.0"], "card2 before card10");
    fs::remove_dir_all(dev2.join("hwmon/hwmon1")).unwrap();
    let r = src.poll().unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].channel, r[0].reading.watts), (1, Some(4.0)));
}

#[test]
fn other_hwmon_drivers_and_powerless_cards_are_skipped_with_a_reason() {
    let root = tempfile::tempdir().unwrap();
    assert_eq!(
        HwmonSource::discover(root.path()).unwrap_err(),
        format!(
            "no amdgpu hwmon under {}/sys/class/drm/card*/device/hwmon",
            root.path().display()
        )
    );
    fixture_card(
        root.path(),
        "card0",
        "0000:01:00.0",
        &[
            ("hwmon/hwmon0/name", "nouveau\n"),
            ("hwmon/hwmon0/power1_input", "1000000\n"),
        ],
    );
    assert!(
        HwmonSource::discover(root.path())
            .unwrap_err()
            .starts_with("no amdgpu hwmon")
    );
    fixture_card(
        root.path(),
        "card1",
        "0000:02:00.0",
        &[
            ("hwmon/hwmon1/name", "amdgpu\n"),
            ("hwmon/hwmon1/temp1_input", "30000\n"),
        ],
    );
    let err = HwmonSource::discover(root.path()).unwrap_err();
    assert!(
        err.contains("without power1_average or power1_input"),
        "{err}"
    );
    assert!(probe(root.path()).is_err());
}

#[test]
fn pci_id_falls_back_to_uevent() {
    let root = tempfile::tempdir().unwrap();
    // A plain directory named like no PCI address, as a copied tree has.
    let dev = root.path().join("sys/class/drm/card0/device");
    fs::create_dir_all(dev.join("hwmon/hwmon0")).unwrap();
    fs::write(
        dev.join("uevent"),
        "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:2F:00.0\n",
    )
    .unwrap();
    fs::write(dev.join("hwmon/hwmon0/name"), "amdgpu\n").unwrap();
    fs::write(dev.join("hwmon/hwmon0/power1_input"), "5000000\n").unwrap();
    let src = probe(root.path()).unwrap();
    assert_eq!(src.name(), NAME);
    assert_eq!(src.channels()[0].pci_bus_id, "0000:2f:00.0");
}

#[test]
fn card_names() {
    assert_eq!(card_number("card0"), Some(0));
    assert_eq!(card_number("card12"), Some(12));
    assert_eq!(card_number("card0-DP-1"), None);
    assert_eq!(card_number("card"), None);
    assert_eq!(card_number("renderD128"), None);
}

/// Renames `<root>/sys/class/drm/<from>` to `<to>` and the card's `hwmon/<hw_from>` to
/// `hwmon/<hw_to>`, as a kernel that numbers the DRM cards and hwmon devices differently does.
fn renumber(root: &Path, (from, to): (&str, &str), (hw_from, hw_to): (&str, &str)) {
    let drm = root.join("sys/class/drm");
    fs::rename(drm.join(from), drm.join(to)).unwrap();
    let hwmon = drm.join(to).join("device/hwmon");
    fs::rename(hwmon.join(hw_from), hwmon.join(hw_to)).unwrap();
}

/// An RX 580 at 0000:03:00.0 as card0/hwmon2 reading `watts`.
fn rx580_at(root: &Path, card: &str, pci: &str, watts: &str) -> PathBuf {
    fixture_card(
        root,
        card,
        pci,
        &[
            ("device", "0x67df\n"),
            ("hwmon/hwmon2/name", "amdgpu\n"),
            ("hwmon/hwmon2/power1_input", watts),
            ("hwmon/hwmon2/temp1_input", "41000\n"),
            ("hwmon/hwmon2/temp1_label", "edge\n"),
        ],
    )
}

#[test]
fn renumbered_cards_keep_their_channel_between_two_probes() {
    let root = tempfile::tempdir().unwrap();
    rx580_at(root.path(), "card0", "0000:03:00.0", "8123000\n");
    let (_, before, r0) = only_channel(root.path());
    assert_eq!(before.label, "amdgpu power1_input, temp1_input");
    renumber(root.path(), ("card0", "card1"), ("hwmon2", "hwmon5"));
    let (src, after, r1) = only_channel(root.path());
    assert_eq!(after, before, "same PCI device, scope and name");
    assert_eq!((r1.watts, r1.temperature_c), (r0.watts, r0.temperature_c));
    assert!(
        src.cards[0]
            .hwmon_dir
            .ends_with("card1/device/hwmon/hwmon5")
    );
}

#[test]
fn a_card_renumbered_mid_stream_is_found_again_by_its_address() {
    let root = tempfile::tempdir().unwrap();
    rx580_at(root.path(), "card0", "0000:03:00.0", "8000000\n");
    let mut src = HwmonSource::discover(root.path()).unwrap();
    assert_eq!(src.poll().unwrap()[0].reading.watts, Some(8.0));
    renumber(root.path(), ("card0", "card1"), ("hwmon2", "hwmon5"));
    let moved = root
        .path()
        .join("sys/devices/pci0000:00/0000:03:00.0/hwmon/hwmon5/power1_input");
    fs::write(moved, "9500000\n").unwrap();
    let r = src.poll().unwrap();
    assert_eq!((r[0].channel, r[0].reading.watts), (0, Some(9.5)));
    assert_eq!(
        r[0].reading.temperature_c,
        Some(41.0),
        "its temperature file too"
    );
    // Gone altogether: reported as gone (with its address), not streamed as zeros.
    fs::remove_dir_all(root.path().join("sys/class/drm/card1")).unwrap();
    match src.poll() {
        Err(PollError::Retry(msg)) => assert!(msg.contains("0000:03:00.0"), "{msg}"),
        other => panic!("expected Retry, got {other:?}"),
    }
}

#[test]
fn two_cards_whose_numbers_swap_keep_their_own_sensors() {
    let root = tempfile::tempdir().unwrap();
    rx580_at(root.path(), "card0", "0000:03:00.0", "8000000\n");
    rx580_at(root.path(), "card1", "0000:0a:00.0", "30000000\n");
    let probe_all = |root: &Path| {
        let mut src = HwmonSource::discover(root).unwrap();
        let watts: Vec<_> = src
            .poll()
            .unwrap()
            .iter()
            .map(|r| r.reading.watts)
            .collect();
        let ids: Vec<_> = src
            .channels()
            .iter()
            .map(|c| c.pci_bus_id.clone())
            .collect();
        (ids, watts)
    };
    let before = probe_all(root.path());
    assert_eq!(before.0, ["0000:03:00.0", "0000:0a:00.0"]);
    assert_eq!(before.1, [Some(8.0), Some(30.0)]);
    let drm = root.path().join("sys/class/drm");
    fs::rename(drm.join("card0"), drm.join("tmp")).unwrap();
    fs::rename(drm.join("card1"), drm.join("card0")).unwrap();
    fs::rename(drm.join("tmp"), drm.join("card1")).unwrap();
    assert_eq!(probe_all(root.path()), before);
}
