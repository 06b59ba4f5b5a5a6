//! Tests of [`super`] (`power/sources/smi.rs`).

use super::super::command::tests::fake_tool;
use super::*;
use serde_json::json;
use std::fs;
use std::time::Instant;

// Where each fixture's shape comes from (values are illustrative):
// - rocm_smi_discrete.json: the `{"card0": {"Average Graphics Package
//   Power (W)": "222.0", …}}` shape users posted from `rocm-smi -P --json`
//   (RainbowMiner/RainbowMiner#749) and from an RX 7900 XTX
//   (henrygd/beszel#414); `PCI Bus` is the key `--showbus` adds, as read
//   by public rocm-smi parsers.
// - rocm_smi_mi300x.json: the `Current Socket Graphics Package Power (W)`
//   key that MI300 and APUs print (henrygd/beszel#414, public exporters);
//   watts from a public MI300X `rocm-smi` screen; card2's `N/A` added.
// - rocm_smi_mi250.json: `N/A (Secondary die)` is what rocm-smi prints
//   for MI250's second die (ROCm/rocm_smi_lib#160); card2's bare number
//   is how newer builds print values; the warning line ahead of the JSON
//   is modelled on the banners public parsers strip before parsing.
// - amd_smi_list.json: `amd-smi list --json` entries (gpu, bdf, uuid,
//   kfd_id, node_id, partition_id) as in public test fixtures; BDFs and
//   UUIDs from an MI300X `amd-smi` help screen (ROCm/amdsmi#132).
// - amd_smi_metric_power_list.json: the bare list with `{value, unit}`
//   of amd-smi < 26; the all-`N/A` entry as in ROCm/rocm-systems#2720.
// - amd_smi_metric_power_gpu_data.json: the `{"gpu_data": […]}` wrapper
//   of amd-smi ≥ 26 (ROCm/rocm-systems#223); gpu 1's mW unit is
//   synthesised to exercise unit conversion.
// - amd_smi_metric_power_legacy.json: `average_socket_power` as a bare
//   number (older amd-smi, key names of amdsmi_get_power_info); gpu 1's
//   `"128 W"` string is synthesised to exercise the string form.
const ROCM_DISCRETE: &str = include_str!("fixtures/rocm_smi_discrete.json");
const ROCM_MI300X: &str = include_str!("fixtures/rocm_smi_mi300x.json");
const ROCM_MI250: &str = include_str!("fixtures/rocm_smi_mi250.json");
const AMD_LIST: &str = include_str!("fixtures/amd_smi_list.json");
const AMD_POWER_LIST: &str = include_str!("fixtures/amd_smi_metric_power_list.json");
const AMD_POWER_GPU_DATA: &str = include_str!("fixtures/amd_smi_metric_power_gpu_data.json");
const AMD_POWER_LEGACY: &str = include_str!("fixtures/amd_smi_metric_power_legacy.json");

fn card(card: u32, pci: &str, key: RocmPowerKey, watts: Option<f64>) -> RocmSmiCard {
    RocmSmiCard {
        card,
        pci_bus_id: Some(pci.to_string()),
        key: Some(key),
        watts,
    }
}

#[test]
fn rocm_smi_discrete_average_power() {
    let cards = parse_rocm_smi(ROCM_DISCRETE).unwrap();
    assert_eq!(
        cards,
        [
            card(0, "0000:03:00.0", RocmPowerKey::Average, Some(222.0)),
            card(1, "0000:0c:00.0", RocmPowerKey::Average, Some(19.0)),
        ]
    );
}

#[test]
fn rocm_smi_mi300x_socket_power_with_na() {
    let cards = parse_rocm_smi(ROCM_MI300X).unwrap();
    let got: Vec<_> = cards.iter().map(|c| (c.card, c.watts)).collect();
    let expected = [
        (0, Some(133.0)),
        (1, Some(131.0)),
        (2, None),
        (3, Some(137.0)),
    ];
    assert_eq!(got, expected);
    let socket = Some(RocmPowerKey::CurrentSocket);
    assert!(cards.iter().all(|c| c.key == socket));
    assert_eq!(cards[3].pci_bus_id.as_deref(), Some("0000:65:00.0"));
}

#[test]
fn rocm_smi_mi250_secondary_die_and_leading_warning() {
    let cards = parse_rocm_smi(ROCM_MI250).unwrap();
    assert_eq!(
        cards,
        [
            card(0, "0000:29:00.0", RocmPowerKey::Average, Some(237.0)),
            card(1, "0000:2c:00.0", RocmPowerKey::Average, None),
            card(2, "0000:2f:00.0", RocmPowerKey::Average, Some(230.5)),
        ]
    );
}

#[test]
fn rocm_smi_garbage_values_and_odd_keys() {
    let text = r#"{"system": {"Driver version": "6.8.0"},
        "card10": {"Average Graphics Package Power (W)": "-5", "PCI Bus": "bogus"},
        "card2": {"Average Graphics Package Power (W)": "abc"},
        "card3": {"Average Graphics Package Power (W)": "65535000"},
        "card4": {"GPU use (%)": "12"},
        "cardX": {"Average Graphics Package Power (W)": "10"},
        "card5": "not an object"}"#;
    let cards = parse_rocm_smi(text).unwrap();
    let got: Vec<_> = cards
        .iter()
        .map(|c| (c.card, c.key, c.watts, c.pci_bus_id.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (2, Some(RocmPowerKey::Average), None, None),
            (3, Some(RocmPowerKey::Average), None, None),
            (4, None, None, None),
            (10, Some(RocmPowerKey::Average), None, None),
        ]
    );
}

#[test]
fn rocm_smi_without_json_is_an_error() {
    let err = parse_rocm_smi("").unwrap_err();
    assert_eq!(err.to_string(), "rocm-smi printed no JSON (empty output)");
    let err = parse_rocm_smi("ERROR: GPU[0] : Unable to read power\n").unwrap_err();
    assert!(err.to_string().contains("Unable to read power"), "{err}");
    let err = parse_rocm_smi("{\"card0\": {\"Average").unwrap_err();
    assert!(matches!(err, ParseError::NoJson { .. }), "{err:?}");
    let err = parse_rocm_smi("[1, 2]").unwrap_err();
    assert_eq!(
        err.to_string(),
        "rocm-smi JSON is not an object keyed by card"
    );
}

#[test]
fn amd_smi_list_maps_indices_to_pci() {
    let pairs = |text: &str| -> Vec<(u32, Option<String>)> {
        let gpus = parse_amd_smi_list(text).unwrap();
        gpus.into_iter().map(|g| (g.gpu, g.pci_bus_id)).collect()
    };
    let expected = [
        (0, Some("0000:05:00.0".into())),
        (1, Some("0000:26:00.0".into())),
    ];
    assert_eq!(pairs(AMD_LIST), expected);
    assert_eq!(pairs(&format!("{{\"gpu_data\": {AMD_LIST}}}")), expected);
    let odd = r#"[{"gpu": "3", "bdf": "N/A"}, {"bdf": "0000:05:00.0"}]"#;
    assert_eq!(pairs(odd), [(3, None)]);
}

fn powers(text: &str) -> Vec<(u32, Option<f64>)> {
    let gpus = parse_amd_smi_power(text).unwrap();
    gpus.iter().map(|g| (g.gpu, g.watts)).collect()
}

#[test]
fn amd_smi_power_bare_list_with_value_unit_and_na() {
    assert_eq!(powers(AMD_POWER_LIST), [(0, Some(142.0)), (1, None)]);
}

#[test]
fn amd_smi_power_gpu_data_wrapper_and_milliwatts() {
    assert_eq!(
        powers(AMD_POWER_GPU_DATA),
        [(0, Some(741.0)), (1, Some(139.5))]
    );
}

#[test]
fn amd_smi_power_legacy_keys_numbers_and_strings() {
    // gpu 1: current_socket_power "128 W" wins over average "N/A".
    assert_eq!(
        powers(AMD_POWER_LEGACY),
        [(0, Some(133.0)), (1, Some(128.0))]
    );
}

#[test]
fn amd_smi_power_garbage() {
    let text = r#"WARNING: amd_smi not in render group
    [
      {"gpu": 0, "power": {"socket_power": {"value": "x", "unit": "W"}}},
      {"gpu": 1, "power": {"socket_power": {"value": 5, "unit": "kW"}}},
      {"gpu": 2, "power": {"socket_power": 65535}},
      {"gpu": 3, "power": {"socket_power": null}},
      {"gpu": 4, "power": "N/A"},
      {"gpu": -1, "power": {"socket_power": 10}},
      {"power": {"socket_power": 10}},
      {"gpu": 5, "power": {"socket_power": {"value": 90}}}
    ]"#;
    let expected = [(0, None), (1, None), (2, None), (3, None), (5, Some(90.0))];
    assert_eq!(powers(text), expected);
    assert!(parse_amd_smi_power("{\"gpus\": []}").is_err());
    assert!(parse_amd_smi_power("42").is_err());
    assert!(parse_amd_smi_power("Traceback (most recent call last):").is_err());
}

#[test]
fn watts_forms() {
    assert_eq!(watts_of(&json!(12.5)), Some(12.5));
    assert_eq!(watts_of(&json!("222.0")), Some(222.0));
    assert_eq!(watts_of(&json!(" 128 W ")), Some(128.0));
    assert_eq!(watts_of(&json!("1500 mW")), Some(1.5));
    assert_eq!(watts_of(&json!({"value": "7", "unit": "W"})), Some(7.0));
    assert_eq!(watts_of(&json!("N/A")), None);
    assert_eq!(watts_of(&json!("N/A (Secondary die)")), None);
    assert_eq!(watts_of(&json!(-1)), None);
    assert_eq!(watts_of(&json!("NaN")), None);
    assert_eq!(watts_of(&json!(true)), None);
    assert_eq!(watts_of(&json!([1])), None);
}

/// Fake tools that print fixture files: `rocm-smi` cats `out.json`;
/// `amd-smi` cats `list.json` or `metric.json` by its arguments. Both
/// fail on any other arguments, so the tests also check what we run.
fn fake_rocm_smi(dir: &Path, output: &str) -> PathBuf {
    fs::write(dir.join("out.json"), output).unwrap();
    let body = format!(
        "[ \"$*\" = \"--showpower --showbus --json\" ] || exit 9\ncat '{}'",
        dir.join("out.json").display()
    );
    fake_tool(dir, "rocm-smi", &body)
}

fn fake_amd_smi(dir: &Path, list: &str, metric: &str) -> PathBuf {
    fs::write(dir.join("list.json"), list).unwrap();
    fs::write(dir.join("metric.json"), metric).unwrap();
    let body = format!(
        "case \"$*\" in\n'list --json') cat '{0}/list.json';;\n\
         'metric --power --json') cat '{0}/metric.json';;\n\
         *) echo \"bad args: $*\" >&2; exit 2;;\nesac",
        dir.display()
    );
    fake_tool(dir, "amd-smi", &body)
}

fn polled(src: &mut dyn PowerSource) -> Vec<(usize, Option<f64>)> {
    let readings = src.poll().unwrap();
    readings
        .iter()
        .map(|r| (r.channel, r.reading.watts))
        .collect()
}

fn probe_error(result: Probed) -> String {
    result.err().expect("the probe fails")
}

#[test]
fn rocm_smi_end_to_end_through_a_fake_tool() {
    let dir = tempfile::tempdir().unwrap();
    let tool = fake_rocm_smi(dir.path(), ROCM_MI300X);
    let mut src = probe_rocm_smi(&tool, Duration::from_secs(5)).unwrap();
    assert_eq!((src.name(), src.slow()), (ROCM_SMI, true));
    let ch = src.channels();
    assert_eq!(ch.len(), 4);
    assert_eq!(ch[1].pci_bus_id, "0000:26:00.0");
    assert_eq!(
        (ch[1].label.as_str(), ch[1].scope),
        ("card1", Scope::Package)
    );
    assert_eq!(ch[1].nominal_period, Duration::from_secs(1));
    assert!(!ch[1].energy_counter);
    let expected = [
        (0, Some(133.0)),
        (1, Some(131.0)),
        (2, None),
        (3, Some(137.0)),
    ];
    assert_eq!(polled(src.as_mut()), expected);

    // Each poll runs the tool again.
    let hotter = ROCM_MI300X.replace("\"133.0\"", "\"700.0\"");
    fs::write(dir.path().join("out.json"), hotter).unwrap();
    assert_eq!(polled(src.as_mut())[0], (0, Some(700.0)));
    // A tool that starts failing is a retry, not the end of the source.
    fs::write(dir.path().join("out.json"), "garbage").unwrap();
    assert!(matches!(src.poll(), Err(PollError::Retry(m)) if m.contains("printed no JSON")));
}

#[test]
fn rocm_smi_discrete_cards_are_asic_and_cards_need_a_power_key() {
    let dir = tempfile::tempdir().unwrap();
    let tool = fake_rocm_smi(dir.path(), ROCM_DISCRETE);
    let src = probe_rocm_smi(&tool, Duration::from_secs(5)).unwrap();
    assert!(src.channels().iter().all(|c| c.scope == Scope::Asic));

    let tool = fake_rocm_smi(dir.path(), r#"{"card0": {"PCI Bus": "0000:03:00.0"}}"#);
    let err = probe_error(probe_rocm_smi(&tool, Duration::from_secs(5)));
    assert!(
        err.ends_with("reported no GPU with a power figure"),
        "{err}"
    );
}

#[test]
fn amd_smi_end_to_end_through_a_fake_tool() {
    let dir = tempfile::tempdir().unwrap();
    let tool = fake_amd_smi(dir.path(), AMD_LIST, AMD_POWER_GPU_DATA);
    let mut src = probe_amd_smi(&tool, Duration::from_secs(5)).unwrap();
    assert_eq!((src.name(), src.slow()), (AMD_SMI, true));
    let ids: Vec<_> = src
        .channels()
        .iter()
        .map(|c| (c.pci_bus_id.as_str(), c.label.as_str(), c.scope))
        .collect();
    let expected = [
        ("0000:05:00.0", "gpu 0", Scope::Package),
        ("0000:26:00.0", "gpu 1", Scope::Package),
    ];
    assert_eq!(ids, expected);
    assert_eq!(polled(src.as_mut()), [(0, Some(741.0)), (1, Some(139.5))]);

    // A GPU missing from one poll's output just has no reading.
    let renumbered = AMD_POWER_LEGACY.replace("\"gpu\": 0", "\"gpu\": 7");
    fs::write(dir.path().join("metric.json"), renumbered).unwrap();
    assert_eq!(polled(src.as_mut()), [(1, Some(128.0))]);
}

#[test]
fn amd_smi_list_failure_is_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let tool = fake_amd_smi(dir.path(), "no json here", AMD_POWER_LIST);
    let err = probe_error(probe_amd_smi(&tool, Duration::from_secs(5)));
    assert!(
        err.starts_with("amd-smi list: amd-smi printed no JSON"),
        "{err}"
    );
}

#[test]
fn a_hanging_tool_times_out_at_probe() {
    let dir = tempfile::tempdir().unwrap();
    let tool = fake_tool(dir.path(), "rocm-smi", "sleep 30");
    let timeout = Duration::from_millis(300);
    let start = Instant::now();
    let err = probe_error(probe_rocm_smi(&tool, timeout));
    assert!(err.ends_with("rocm-smi timed out after 0.3 s"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(3));
    let start = Instant::now();
    let err = probe_error(probe_amd_smi(&tool, timeout));
    assert!(err.contains("timed out after 0.3 s"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_missing_tool_is_not_found() {
    let second = Duration::from_secs(1);
    let err = probe_error(probe_rocm_smi(Path::new("gpufleet-no-rocm-smi"), second));
    assert_eq!(err, "gpufleet-no-rocm-smi not found in PATH");
    let err = probe_error(probe_amd_smi(Path::new("/nonexistent/amd-smi"), second));
    assert_eq!(err, "amd-smi list: /nonexistent/amd-smi not found");
}
