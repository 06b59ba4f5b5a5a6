use super::*;
use crate::store::{ResultRecord, ResultRow};
use crate::table::{Format, fmt_short, per_watt_unit};
use std::collections::BTreeMap;

fn row(key: &str, dev: &str, status: &str, metric: Option<f64>, higher: bool) -> ResultRow {
    ResultRow {
        id: 1,
        agent: "a".into(),
        device_name: Some(format!("{dev} name")),
        record: ResultRecord {
            spec_key: key.into(),
            kernel: key.split('/').next().unwrap().into(),
            variant: "v".into(),
            params: BTreeMap::from([("n".to_string(), 1)]),
            dtype: "f32".into(),
            mode: "compute_only".into(),
            device_id: dev.into(),
            backend: dev.split(':').next().unwrap().into(),
            status: status.into(),
            message: if status == "ok" {
                String::new()
            } else {
                "worker killed by SIGSEGV".into()
            },
            metric_value: metric,
            metric_unit: Some("GFLOP/s".into()),
            higher_is_better: Some(higher),
            cv: Some(0.01),
            median_s: Some(1.0),
            ci_low_s: Some(0.995),
            ci_high_s: Some(1.005),
            iterations: 10,
            run_id: format!("{key}-{dev}"),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn cells(rows: Vec<ResultRow>) -> Vec<Cell> {
    rows.into_iter().map(Cell::new).collect()
}

fn cell<'a>(p: &'a Pivot, row: usize, col: &str) -> &'a Cell {
    let i = p.columns.iter().position(|c| c.key == col).unwrap();
    p.rows[row].cells[i].as_ref().unwrap()
}

#[test]
fn relative_to_best_either_direction() {
    let mut rows = cells(vec![
        row("gemm/x", "cpu:1", "ok", Some(50.0), true),
        row("gemm/x", "cpu:2", "ok", Some(100.0), true),
        row("noop/x", "cpu:1", "ok", Some(2.0), false),
        row("noop/x", "cpu:2", "ok", Some(8.0), false),
        row("gemm/x", "cpu:3", "crashed", None, true),
    ]);
    rank(&mut rows);
    assert_eq!(rows[0].device_id(), "cpu:2");
    assert_eq!(rows[0].relative, Some(1.0));
    assert_eq!(rows[1].relative, Some(0.5));
    assert_eq!(rows[2].record().status, "crashed");
    assert_eq!(rows[2].relative, None);
    assert_eq!(rows[3].device_id(), "cpu:1");
    assert_eq!(rows[4].relative, Some(0.25));
}

#[test]
fn failed_and_noisy_rows_do_not_set_the_best() {
    let mut noisy = row("k/x", "cpu:3", "ok", Some(500.0), true);
    noisy.record.noisy = true;
    let mut rows = cells(vec![
        row("k/x", "cpu:1", "invalid", Some(1000.0), true),
        row("k/x", "cpu:2", "ok", Some(10.0), true),
        noisy,
    ]);
    rank(&mut rows);
    let ok = rows.iter().find(|r| r.device_id() == "cpu:2").unwrap();
    assert_eq!(ok.relative, Some(1.0));
    let noisy = rows.iter().find(|r| r.device_id() == "cpu:3").unwrap();
    assert_eq!(noisy.relative, Some(50.0));
}

#[test]
fn one_row_per_spec_one_column_per_device_params_in_numeric_order() {
    let mut rows = Vec::new();
    for k in [1024, 512, 64] {
        for (dev, v) in [("cpu:0", 10.0), ("opencl:0", 20.0)] {
            let mut r = row(&format!("gemm/k{k}"), dev, "ok", Some(v * k as f64), true);
            r.record.params = BTreeMap::from([("k".to_string(), k)]);
            rows.push(r);
        }
    }
    let p = Pivot::new(rows, By::Device);
    assert_eq!(p.columns.len(), 2);
    let ks: Vec<i64> = p.rows.iter().map(|r| r.spec().params["k"]).collect();
    assert_eq!(ks, [64, 512, 1024]);
    let t = p.render(Format::Table);
    let header = t.lines().next().unwrap();
    // dtype, mode and variant are the same everywhere: not columns, one line under the table.
    // Device columns: the agent over the device id, on two header lines.
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["a", "a"],
        "{t}"
    );
    let second = t.lines().nth(1).unwrap();
    assert_eq!(
        second.split_whitespace().collect::<Vec<_>>(),
        ["kernel", "params", "unit", "cpu:0", "opencl:0"],
        "{t}"
    );
    // dtype and mode are the same everywhere: not columns, one line under the table.
    assert!(t.contains("all rows: dtype f32, mode compute_only"), "{t}");
    assert!(t.contains("a:opencl:0: opencl:0 name"), "{t}");
    let first = t.lines().nth(3).unwrap();
    assert!(first.starts_with("gemm/v "), "{t}");
    assert!(
        first.contains("640.0 ×0.50") && first.contains("1280 ×1.00"),
        "{t}"
    );
}

#[test]
fn by_backend_and_by_agent_split_rows_by_what_the_columns_leave_out() {
    let mut rows = Vec::new();
    for agent in ["a1", "a2"] {
        for dev in ["cpu:0", "vulkan:0"] {
            let mut r = row("gemm/x", dev, "ok", Some(1.0), true);
            r.agent = agent.into();
            r.record.run_id = format!("{agent}-{dev}");
            rows.push(r);
        }
    }
    let p = Pivot::new(rows.clone(), By::Backend);
    let keys: Vec<&str> = p.columns.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["cpu", "vulkan"]);
    let within: Vec<&str> = p.rows.iter().map(|r| r.within.as_str()).collect();
    assert_eq!(within, ["a1", "a2"]);
    assert!(
        p.render(Format::Table).starts_with("kernel  agent"),
        "{}",
        p.render(Format::Table)
    );
    let p = Pivot::new(rows, By::Agent);
    let keys: Vec<&str> = p.columns.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["a1", "a2"]);
    let within: Vec<&str> = p.rows.iter().map(|r| r.within.as_str()).collect();
    assert_eq!(within, ["cpu:0", "vulkan:0"]);
}

#[test]
fn a_baseline_column_gives_percent_change_marked_by_direction() {
    let rows = vec![
        row("gemm/x", "cpu:0", "ok", Some(100.0), true),
        row("gemm/x", "opencl:0", "ok", Some(110.0), true),
        row("noop/x", "cpu:0", "ok", Some(10.0), false),
        row("noop/x", "opencl:0", "ok", Some(12.0), false),
        row("copy/x", "cpu:0", "ok", Some(5.0), true),
        row("copy/x", "opencl:0", "crashed", None, true),
    ];
    let mut p = Pivot::new(rows, By::Device);
    // By device id alone, or by the device name, when that names one column.
    assert_eq!(p.column("cpu:0"), Ok(0));
    assert_eq!(p.column("cpu:0 name"), Ok(0));
    let err = p.column("cuda:0").unwrap_err();
    assert!(err.contains("a:cpu:0, a:opencl:0"), "{err}");
    p.against_column(0);
    let gemm = p
        .rows
        .iter()
        .position(|r| r.spec().kernel == "gemm")
        .unwrap();
    let c = cell(&p, gemm, "a:opencl:0");
    assert!((c.change_pct.unwrap() - 10.0).abs() < 1e-9);
    assert_eq!(c.better, Some(true));
    let noop = p
        .rows
        .iter()
        .position(|r| r.spec().kernel == "noop")
        .unwrap();
    assert_eq!(cell(&p, noop, "a:opencl:0").better, Some(false));
    let t = p.render(Format::Table);
    assert!(t.contains("100.0 =") && t.contains("110.0 +10%▲"), "{t}");
    assert!(t.contains("12.00 +20%▼"), "{t}");
    // A failed cell says what failed, with the reason in a footnote.
    assert!(t.contains("crashed [1]"), "{t}");
    assert!(
        t.contains("[1] copy on a:opencl:0: worker killed by SIGSEGV"),
        "{t}"
    );
    let csv = p.render(Format::Csv);
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .contains(",baseline,change_pct,")
    );
}

#[test]
fn a_baseline_campaign_matches_the_same_device_and_spec() {
    let now = vec![
        row("gemm/x", "cpu:0", "ok", Some(90.0), true),
        row("gemm/x", "opencl:0", "ok", Some(200.0), true),
    ];
    let before = vec![row("gemm/x", "cpu:0", "ok", Some(100.0), true)];
    let mut p = Pivot::new(now, By::Device);
    p.against_campaign(7, &before);
    let c = cell(&p, 0, "a:cpu:0");
    assert_eq!((c.baseline, c.better), (Some(100.0), Some(false)));
    assert!((c.change_pct.unwrap() + 10.0).abs() < 1e-9);
    assert_eq!(cell(&p, 0, "a:opencl:0").change_pct, None);
    let t = p.render(Format::Table);
    assert!(t.contains("90.00 -10%▼"), "{t}");
    assert!(t.contains("campaign 7"), "{t}");
    assert_eq!(Baseline::parse("7"), Baseline::Campaign(7));
    assert_eq!(
        Baseline::parse("rig:cpu:0"),
        Baseline::Column("rig:cpu:0".into())
    );
    assert_eq!(Baseline::parse(""), Baseline::None);
}

#[test]
fn noisy_and_peak_suspect_cells_are_marked_and_explained() {
    let mut a = row("gemm/x", "cpu:0", "ok", Some(50.0), true);
    a.record.noisy = true;
    a.record.cv = Some(0.4);
    let mut b = row("gemm/x", "cpu:1", "ok", Some(40.0), true);
    b.record.pct_of_peak = Some(130.0);
    b.record.peak_source = "cpuinfo".into();
    let p = Pivot::new(vec![a, b], By::Device);
    let t = p.render(Format::Table);
    assert!(t.contains("50.00~ ×1.25"), "{t}");
    assert!(t.contains("40.00 peak? ×1.00"), "{t}");
    assert_eq!(fmt_short(123_456.7), "123457");
    assert_eq!(fmt_short(1.23456), "1.235");
    assert_eq!(fmt_short(0.012345), "0.0123");
    assert!(
        t.contains("~ noisy: robust or quartile CV above 12.5%"),
        "{t}"
    );
    assert!(t.contains("peak?: above 100%"), "{t}");
    let csv = p.render(Format::Csv);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let line: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let at = |name: &str| line[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!((at("noisy"), at("cv_pct")), ("true", "40"));
}

#[test]
fn long_params_are_abbreviated_with_a_legend_and_json_params_are_objects() {
    let mut r = row("conv2d/x", "cpu:0", "ok", Some(1.0), true);
    r.record.params = [
        ("batch", 1),
        ("channels", 8),
        ("height", 32),
        ("width", 32),
        ("filters", 8),
        ("ksize", 3),
        ("stride", 1),
        ("pad", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let p = Pivot::new(vec![r], By::Device);
    let t = p.render(Format::Table);
    // `f=8`, not `f8` (which reads as a dtype).
    assert!(t.contains("b1 c8 f=8 h32 k3 p1 s1 w32"), "{t}");
    assert!(t.contains("conv2d params: b=batch c=channels"), "{t}");
    let j: serde_json::Value = serde_json::from_str(&p.render(Format::Json)).unwrap();
    assert_eq!(j[0]["params"]["channels"], 8);
}

/// A name whose shortest unique prefix runs into its second word (`head_dim` beside `heads`) is
/// shown by its initials, which keeps the attention kernels' row inside a terminal.
#[test]
fn a_prefix_into_a_second_word_becomes_initials() {
    let mut r = row("attention/decode", "cpu:0", "ok", Some(1.0), true);
    r.record.params = [
        ("batch", 2),
        ("context", 60),
        ("head_dim", 32),
        ("heads", 8),
        ("kv_heads", 2),
        ("tokens", 4),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let t = Pivot::new(vec![r], By::Device).render(Format::Table);
    assert!(t.contains("b2 c60 hd32 heads8 k2 t4"), "{t}");
    assert!(t.contains("hd=head_dim"), "{t}");
}

#[test]
fn energy_figures_are_plain_numbers_in_csv() {
    let mut a = row("gemm/x", "cpu:0", "ok", Some(500.0), true);
    a.record.avg_watts = Some(250.0);
    a.record.metric_per_watt = Some(2.0);
    a.record.joules_per_unit = Some(0.5);
    let p = Pivot::new(
        vec![a, row("gemm/x", "cpu:1", "ok", Some(100.0), true)],
        By::Device,
    );
    let csv = p.render(Format::Csv);
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .contains(",avg_w,metric_per_w,j_per_unit,"),
        "{csv}"
    );
    assert!(csv.lines().nth(1).unwrap().contains(",250,2,0.5,"), "{csv}");
    assert!(csv.lines().nth(2).unwrap().contains(",,,,"), "{csv}");
}

#[test]
fn env_sets_are_their_own_rows_with_their_name() {
    let rows = vec![
        row("gemm/x@stock", "cpu:0", "ok", Some(100.0), true),
        row("gemm/x@gfx1030", "cpu:0", "ok", Some(120.0), true),
    ];
    let p = Pivot::new(rows, By::Device);
    assert_eq!(p.rows.len(), 2);
    // Each set is ranked on its own row: both are the best of their row.
    assert!(p.cells().iter().all(|r| r.relative == Some(1.0)));
    let t = p.render(Format::Table);
    assert!(t.lines().nth(1).unwrap().contains("env set"), "{t}");
    let csv = p.render(Format::Csv);
    assert!(
        csv.contains(",gfx1030,") && csv.contains(",stock,"),
        "{csv}"
    );
}

#[test]
fn images_per_second_per_watt_are_images_per_joule() {
    assert_eq!(per_watt_unit("img/s"), "img/J");
    assert_eq!(per_watt_unit("GFLOP/s"), "GFLOP/s/W");
}

/// An `llm` result of `variant` with `params`, `rate` tokens/s and a 2% standard deviation.
fn llm_row(variant: &str, params: &[(&str, i64)], dtype: &str, dev: &str, rate: f64) -> ResultRow {
    let mut r = row("llm/x", dev, "ok", Some(rate), true);
    r.record.variant = variant.into();
    r.record.params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    r.record.dtype = dtype.into();
    r.record.median_s = Some(0.5);
    r.record.stddev_s = Some(0.01);
    r
}

#[test]
fn llm_results_read_as_llama_bench_rows() {
    let rows = vec![
        llm_row(
            "decode",
            &[("model", 2), ("gen", 128)],
            "f16",
            "vulkan:0",
            917.9,
        ),
        llm_row(
            "decode",
            &[("model", 2), ("gen", 32), ("context", 1024), ("batch", 8)],
            "f16",
            "vulkan:0",
            800.0,
        ),
        llm_row(
            "prefill",
            &[("model", 2), ("prompt", 512)],
            "f16",
            "vulkan:0",
            2282.0,
        ),
        llm_row(
            "prefill",
            &[("model", 0), ("prompt", 8)],
            "f32",
            "cpu:0",
            100.0,
        ),
        llm_row(
            "decode",
            &[("model", 5), ("gen", 32)],
            "f16",
            "vulkan:0",
            218.6,
        ),
        llm_row(
            "decode",
            &[("model", 3), ("gen", 128)],
            "q4_0",
            "opencl:0",
            150.0,
        ),
        // A cut-down 8b (two blocks) and a shape given whole: labelled by their weights.
        llm_row(
            "decode",
            &[("model", 3), ("layers", 2), ("gen", 128)],
            "q4_0",
            "opencl:0",
            900.0,
        ),
        llm_row(
            "decode",
            &[
                ("model", 7),
                ("dim", 512),
                ("layers", 3),
                ("heads", 8),
                ("ffn", 1024),
                ("vocab", 1000),
                ("gen", 128),
            ],
            "f32",
            "cpu:0",
            700.0,
        ),
        row("gemm/x", "cpu:0", "ok", Some(5.0), true),
        row("llm/x", "cpu:0", "crashed", None, true),
    ];
    let (t, left_out) = llama_bench(&rows);
    assert_eq!(left_out, 2, "the gemm and the crashed run");
    let text: Vec<String> = t.rows.iter().map(|r| r.join(" | ")).collect();
    assert_eq!(
        text,
        [
            // tiny: 4,000,000 weights, f32.
            "llama tiny F32 | 15.26 MiB | 4.00 M | CPU | pp8 | 100.00 ± 2.00 | a:cpu:0",
            // 1b: 1,235,814,400 weights, f16; prefill first, then by tokens.
            "llama 1B F16 | 2.30 GiB | 1.24 B | Vulkan | pp512 | 2282.00 ± 45.64 | a:vulkan:0",
            "llama 1B F16 | 2.30 GiB | 1.24 B | Vulkan | tg32 @ d1024 ×8 | 800.00 ± 16.00 | a:vulkan:0",
            "llama 1B F16 | 2.30 GiB | 1.24 B | Vulkan | tg128 | 917.90 ± 18.36 | a:vulkan:0",
            // 8b cut to two blocks: 1,486,901,248 weights.
            "llama 1B Q4_0 | 797.70 MiB | 1.49 B | OpenCL | tg128 | 900.00 ± 18.00 | a:opencl:0",
            // 8b in Q4_0: every matrix in blocks of 18 bytes, the norms f32.
            "llama 8B Q4_0 | 4.21 GiB | 8.03 B | OpenCL | tg128 | 150.00 ± 3.00 | a:opencl:0",
            // Qwen2.5-7B less its biases: 7,615,487,488 weights.
            "qwen2 7B F16 | 14.18 GiB | 7.62 B | Vulkan | tg32 | 218.60 ± 4.37 | a:vulkan:0",
            // custom: kv_heads = heads, head_dim 64, an own LM head: 8,891,904 weights.
            "llama 9M F32 | 33.92 MiB | 8.89 M | CPU | tg128 | 700.00 ± 14.00 | a:cpu:0",
        ]
    );
    let md = t.render(Format::LlamaBench);
    assert!(
        md.starts_with("| model | size | params | backend | test | t/s | device |"),
        "{md}"
    );
}
