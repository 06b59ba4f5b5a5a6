use super::links::{CompareQuery, HistoryQuery, Links, Scope};
use super::pages;
use super::seed::{SeedConfig, SeedSummary, seed_history};
use super::{WebError, report};
use crate::store::Store;
use crate::store::test_support::{TestDb, temp_store};

/// A seeded store on the engine under test (keep the `TestDb` alive as long as the store).
fn seeded() -> (TestDb, Store, SeedSummary) {
    let (db, mut store) = temp_store();
    let summary = seed_history(&mut store, &SeedConfig::default()).unwrap();
    (db, store, summary)
}

fn render(p: Result<super::Page, WebError>) -> String {
    p.unwrap().render().unwrap()
}

#[test]
fn every_page_renders_on_an_empty_store() {
    let (_db, store) = temp_store();
    let l = Links::default();
    assert!(render(pages::fleet::fleet(&store, &l, None)).contains("No agents yet"));
    assert!(
        render(pages::compare::compare_page(
            &store,
            &l,
            &CompareQuery::default(),
            &Scope::default()
        ))
        .contains("No results match")
    );
    assert!(
        render(pages::campaigns::campaigns(&store, &l, &Scope::default()))
            .contains("No campaigns yet")
    );
    assert!(render(pages::alerts::alerts(&store, &l, &Scope::default())).contains("No confirmed"));
    assert!(
        render(pages::groups::groups(&store, &l, &Scope::default()))
            .contains("No campaign has results yet")
    );
    assert!(matches!(
        pages::run::run(&store, &l, 1),
        Err(WebError::NotFound(_))
    ));
    assert!(matches!(
        pages::campaigns::campaign(&store, &l, 1, None),
        Err(WebError::NotFound(_))
    ));
}

#[test]
fn the_seed_goes_through_the_real_check_and_confirms_one_regression() {
    let (_db, store, s) = seeded();
    assert_eq!(s.campaigns, 30);
    assert_eq!(s.alerts, 1, "{s:?}");
    let alerts = store.alerts(0.0).unwrap();
    assert_eq!(alerts[0].direction, "regression");
    assert!(alerts[0].change_pct < -15.0, "{:?}", alerts[0]);
    assert!(s.power_result.is_some());
}

/// The history page reads which of a series' results are confirmation reruns in one query per
/// 500 ids: it agrees with asking each result, across a chunk boundary.
#[test]
fn confirmation_reruns_agree_with_asking_each_result() {
    let (_db, store, _) = seeded();
    let all: Vec<i64> = store
        .results(&crate::store::ResultFilter::default())
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert!(
        all.len() > 500,
        "{} results: more than one chunk",
        all.len()
    );
    let reruns = store.confirmation_reruns(&all).unwrap();
    let confirmation = store.alerts(0.0).unwrap()[0].confirmation_result_id;
    assert!(reruns.contains(&confirmation), "{reruns:?}");
    for id in &all {
        assert_eq!(
            store.confirms(*id).unwrap().is_some(),
            reruns.contains(id),
            "result {id}"
        );
    }
    assert!(store.confirmation_reruns(&[]).unwrap().is_empty());
}

#[test]
fn history_shows_every_night_the_alert_and_what_changed() {
    let (_db, store, _) = seeded();
    let l = Links::default();
    let a = &store.alerts(0.0).unwrap()[0];
    let q = HistoryQuery {
        spec: a.spec_key.clone(),
        agent: a.agent.clone().unwrap(),
        device: a.device_id.clone(),
        scale: String::new(),
    };
    let html = render(pages::history::history(&store, &l, &q));
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
    // 30 nights plus the confirmation rerun.
    assert_eq!(svg.matches("class=\"pt").count(), 31, "{svg}");
    assert_eq!(
        svg.matches("class=\"pt alert alert-regression\"").count(),
        1
    );
    assert_eq!(svg.matches("class=\"pt confirm\"").count(), 1);
    assert!(svg.contains("class=\"band\""));
    let log = render(pages::history::history(
        &store,
        &l,
        &HistoryQuery {
            scale: "log".into(),
            ..q.clone()
        },
    ));
    assert!(log.contains("GFLOP/s (log)"));
    // Agent 1's driver update is a labelled segment boundary.
    let q1 = HistoryQuery {
        agent: "seed-a1".into(),
        device: "cpu:0".into(),
        ..q.clone()
    };
    let html = render(pages::history::history(&store, &l, &q1));
    assert!(html.contains("driver_version 1.0 → 2.0"), "{html}");
    assert_eq!(html.matches("class=\"boundary\"").count(), 1);
    let csv = pages::history::history_csv(&store, &q).unwrap();
    assert_eq!(csv.lines().count(), 32, "{csv}");
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .split(',')
            .nth(3)
            .unwrap()
            .parse::<f64>()
            .is_ok(),
        "{csv}"
    );
}

#[test]
fn compare_has_device_columns_a_baseline_and_a_numeric_csv() {
    let (_db, store, _) = seeded();
    let l = Links::default();
    let q = CompareQuery::default();
    let html = render(pages::compare::compare_page(
        &store,
        &l,
        &q,
        &Scope::default(),
    ));
    for device in [
        "Seed cpu device 0",
        "Seed opencl device 1",
        "Seed vulkan device 1",
    ] {
        assert!(
            html.contains(&format!("<th class=\"num\">{device}<br>")),
            "{device} is no column"
        );
    }
    assert!(html.contains("×1.00"), "the best cell is ×1.00");
    let m = pages::compare::matrix(&store, &q, &Scope::default()).unwrap();
    // 3 specs × 6 devices.
    assert_eq!(m.cells().len(), 18);
    let csv = pages::compare::matrix_csv(&m);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        assert!(f[col("metric")].parse::<f64>().is_ok(), "{line}");
        assert!(
            f[col("relative")].parse::<f64>().unwrap() <= 1.0 + 1e-9,
            "{line}"
        );
    }
    // Against a baseline column: every other ok cell has its % change, the column itself none.
    let base = CompareQuery {
        baseline: "seed-a0:cpu:0".into(),
        ..Default::default()
    };
    let m = pages::compare::matrix(&store, &base, &Scope::default()).unwrap();
    for c in m.cells() {
        let is_base = c.agent() == "seed-a0" && c.device_id() == "cpu:0";
        assert_eq!(c.change_pct.is_none(), is_base, "{c:?}");
    }
    assert!(m.cells().iter().any(|c| c.better == Some(true)));
    let html = render(pages::compare::compare_page(
        &store,
        &l,
        &base,
        &Scope::default(),
    ));
    assert!(html.contains("Changes are against"), "{html}");
    // The chart view: 3 specs × 6 devices are bars, each the cell against the baseline's cell,
    // turned so that above 1 is better.
    assert!(html.contains("compare-chart bars"), "{html}");
    assert_eq!(html.matches(r#"<rect class="bar base""#).count(), 3);
    for c in m.cells() {
        let (Some(v), Some(b)) = (c.metric(), c.baseline) else {
            continue;
        };
        let want = crate::compare::ratio(v, b, c.record().higher_is_better()).unwrap();
        assert!(
            html.contains(&format!("×{want:.3}</title>")),
            "no bar of {want:.3} for {c:?}"
        );
    }
    let bad = CompareQuery {
        baseline: "nobody:gpu".into(),
        ..Default::default()
    };
    assert!(
        matches!(pages::compare::matrix(&store, &bad, &Scope::default()), Err(WebError::BadRequest(m)) if m.contains("baseline"))
    );
    let filtered = CompareQuery {
        kernel: "nothing".into(),
        ..Default::default()
    };
    assert!(
        pages::compare::matrix(&store, &filtered, &Scope::default())
            .unwrap()
            .cells()
            .is_empty()
    );
}

#[test]
fn a_run_page_draws_the_power_trace_with_the_window_and_idle_line() {
    let (_db, store, s) = seeded();
    let html = render(pages::run::run(
        &store,
        &Links::default(),
        s.power_result.unwrap(),
    ));
    assert!(
        html.contains("class=\"trace\"") && html.contains("class=\"window\""),
        "{html}"
    );
    assert!(html.contains("idle 60.0 W"));
    assert!(html.contains("class=\"histogram\""));
    assert!(html.contains("150.000 J"));
}

#[test]
fn history_queries_are_checked() {
    let (_db, store, _) = seeded();
    let l = Links::default();
    let err = pages::history::history(&store, &l, &HistoryQuery::default()).unwrap_err();
    assert!(
        matches!(err, WebError::BadRequest(ref m) if m.contains("spec")),
        "{err}"
    );
    let q = HistoryQuery {
        spec: "x".repeat(500),
        agent: "a".into(),
        device: "d".into(),
        scale: String::new(),
    };
    let err = pages::history::history(&store, &l, &q)
        .unwrap_err()
        .to_string();
    assert!(matches!(
        pages::history::history(&store, &l, &q),
        Err(WebError::NotFound(_))
    ));
    assert!(err.len() < 200, "the input is quoted short: {err}");
    let q = HistoryQuery {
        scale: "cubic".into(),
        spec: "s".into(),
        agent: "a".into(),
        device: "d".into(),
    };
    assert!(matches!(
        pages::history::history(&store, &l, &q),
        Err(WebError::BadRequest(_))
    ));
}

#[test]
fn text_from_the_store_is_escaped() {
    let (_db, mut store) = temp_store();
    store.add_agent("evil", "http://127.0.0.1:1", None).unwrap();
    let mut cfg = SeedConfig {
        agents: 1,
        nights: 1,
        specs: 1,
        backends: vec!["cpu".into()],
        ..Default::default()
    };
    cfg.regression_at = None;
    seed_history(&mut store, &cfg).unwrap();
    store
        .create_campaign("<script>alert(1)</script>", "", "{}")
        .unwrap();
    let html = render(pages::campaigns::campaigns(
        &store,
        &Links::default(),
        &Scope::default(),
    ));
    assert!(!html.contains("<script>alert(1)"), "{html}");
    assert!(html.contains("&lt;script&gt;"));
}

/// The compare matrix writes its cells itself (not through the template): what it quotes from the
/// store is escaped there too.
#[test]
fn compare_cells_escape_what_they_quote() {
    use crate::store::ResultRecord;
    let (_db, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    for (i, (status, unit)) in [("ok", "<u>GB/s"), ("crashed", "GB/s")]
        .into_iter()
        .enumerate()
    {
        let r = ResultRecord {
            run_id: format!("r{i}"),
            agent_id: agent,
            device_id: format!("cpu:{i}"),
            backend: "cpu".into(),
            spec_key: "saxpy/naive/n=1/f32/compute\"<b>".into(),
            kernel: "saxpy".into(),
            variant: "naive".into(),
            params: [("n".to_string(), 1)].into(),
            dtype: "f32".into(),
            mode: "compute".into(),
            status: status.into(),
            message: "<img src=x onerror=alert(1)> & \"quoted\"".into(),
            metric_value: Some(2.5),
            metric_unit: Some(unit.into()),
            ..ResultRecord::default()
        };
        store.insert_result(&r).unwrap();
    }
    let html = render(pages::compare::compare_page(
        &store,
        &Links::default(),
        &CompareQuery::default(),
        &Scope::default(),
    ));
    assert!(
        !html.contains("<img") && !html.contains("<u>") && !html.contains("\"<b>"),
        "{html}"
    );
    assert!(
        html.contains(
            "title=\"crashed: &lt;img src=x onerror=alert(1)&gt; &amp; &quot;quoted&quot;\""
        ),
        "the failed cell's reason, escaped, as its tooltip: {html}"
    );
    assert!(
        html.contains("<span class=\"unit\">&lt;u&gt;GB/s</span>"),
        "{html}"
    );
    assert!(
        html.contains("spec=saxpy%2Fnaive%2Fn%3D1%2Ff32%2Fcompute%22%3Cb%3E&amp;agent=a"),
        "the history link's query, encoded and then escaped: {html}"
    );
}

/// Every relative link of every written page points at a written file.
#[test]
fn a_report_is_self_contained() {
    let (_db, store, s) = seeded();
    let dir = tempfile::tempdir().unwrap();
    let summary = report::write_report(&store, dir.path(), &Scope::default()).unwrap();
    assert!(
        summary.runs > 100 && summary.histories == 18 && summary.campaigns == 30,
        "{summary:?}"
    );
    // The fleet page links every device's page: 2 agents with 3 devices each.
    assert_eq!(summary.devices, 6, "{summary:?}");
    let mut checked = 0;
    for entry in walk(dir.path()) {
        if entry.extension().is_none_or(|e| e != "html") {
            continue;
        }
        let html = std::fs::read_to_string(&entry).unwrap();
        for part in html
            .split("href=\"")
            .skip(1)
            .chain(html.split("src=\"").skip(1))
        {
            let link = part
                .split('"')
                .next()
                .unwrap()
                .replace("&#x2f;", "/")
                .replace("&amp;", "&");
            if link.starts_with("data:") {
                continue;
            }
            assert!(
                !link.starts_with('/') && !link.starts_with("http"),
                "{} links {link}",
                entry.display()
            );
            let target = entry.parent().unwrap().join(&link);
            assert!(
                target.is_file(),
                "{} links {link}, which is not there",
                entry.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
    assert!(
        dir.path()
            .join(format!("runs/{}.html", s.power_result.unwrap()))
            .is_file()
    );
    // One campaign: its pages only, but its series' whole histories.
    let one = tempfile::tempdir().unwrap();
    let summary = report::write_report(
        &store,
        one.path(),
        &Scope {
            campaign: Some(30),
            since: None,
        },
    )
    .unwrap();
    assert_eq!(summary.campaigns, 1, "{summary:?}");
    assert!(summary.histories == 18 && summary.runs > 30, "{summary:?}");
    assert!(matches!(
        report::write_report(
            &store,
            one.path(),
            &Scope {
                campaign: Some(99),
                since: None
            }
        ),
        Err(WebError::NotFound(_))
    ));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_large_matrix_comes_in_pages_and_its_downloads_hold_every_row() {
    use crate::store::ResultRecord;
    let (_db, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let specs = pages::compare::ROWS_PER_PAGE + 5;
    for i in 0..specs {
        let r = ResultRecord {
            run_id: format!("r{i}"),
            agent_id: agent,
            device_id: "cpu:0".into(),
            backend: "cpu".into(),
            spec_key: format!("saxpy/naive/n={i}/f32/compute"),
            kernel: "saxpy".into(),
            variant: "naive".into(),
            params: [("n".to_string(), i as i64)].into(),
            dtype: "f32".into(),
            mode: "compute".into(),
            status: "ok".into(),
            metric_value: Some(1.0 + i as f64),
            metric_unit: Some("GB/s".into()),
            ..ResultRecord::default()
        };
        store.insert_result(&r).unwrap();
    }
    let l = Links::default();
    let at = |page: Option<usize>| {
        pages::compare::compare_page(
            &store,
            &l,
            &CompareQuery {
                page,
                ..CompareQuery::default()
            },
            &Scope::default(),
        )
    };
    let rows = |html: &str| html.matches("<th scope=\"row\">").count();
    let first = render(at(None));
    assert_eq!(rows(&first), pages::compare::ROWS_PER_PAGE);
    assert!(first.contains("rel=\"next\""), "a link to page 2");
    assert!(first.contains(&format!("of {specs}")), "says how many");
    assert!(
        !first.contains("compare.csv?page") && !first.contains("compare.json?page"),
        "the downloads are not paged"
    );
    let second = render(at(Some(2)));
    assert_eq!(rows(&second), 5);
    assert!(second.contains("rel=\"prev\"") && !second.contains("rel=\"next\""));
    for bad in [0, 3] {
        assert!(
            matches!(at(Some(bad)), Err(WebError::BadRequest(ref m)) if m.contains("page")),
            "page {bad}"
        );
    }
    let all = pages::compare::matrix(&store, &CompareQuery::default(), &Scope::default()).unwrap();
    assert_eq!(all.cells().len(), specs, "the download holds every row");
}

#[test]
fn a_fleet_of_many_devices_is_pages_of_columns() {
    use crate::store::ResultRecord;
    let (_db, mut store) = temp_store();
    let devices = pages::compare::COLUMNS_PER_PAGE + 3;
    for i in 0..devices {
        let agent = store
            .add_agent(&format!("n{i:04}"), "http://h:1", None)
            .unwrap()
            .id;
        let r = ResultRecord {
            run_id: format!("r{i}"),
            agent_id: agent,
            device_id: "cpu:0".into(),
            backend: "cpu".into(),
            spec_key: "copy/default/n=16/f32/compute".into(),
            kernel: "copy".into(),
            variant: "default".into(),
            params: [("n".to_string(), 16)].into(),
            dtype: "f32".into(),
            mode: "compute".into(),
            status: "ok".into(),
            metric_value: Some(100.0 + i as f64),
            metric_unit: Some("GB/s".into()),
            ..ResultRecord::default()
        };
        store.insert_result(&r).unwrap();
    }
    let l = Links::default();
    let at = |cols: Option<usize>| {
        pages::compare::compare_page(
            &store,
            &l,
            &CompareQuery {
                cols,
                ..CompareQuery::default()
            },
            &Scope::default(),
        )
        .map(|p| p.render().unwrap().replace("&#x2f;", "/"))
    };
    let cells = |html: &str| html.matches("<td class=\"num").count();
    let first = at(None).unwrap();
    assert!(first.contains("(n0000:cpu:0)") && !first.contains("(n0100:cpu:0)"));
    assert!(
        first.contains(&format!("Devices 1–100 of {devices}")),
        "{first}"
    );
    assert!(
        first.contains("/compare?cols=2"),
        "a link to the next columns"
    );
    let second = at(Some(2)).unwrap();
    assert!(second.contains("(n0100:cpu:0)") && !second.contains("(n0099:cpu:0)"));
    assert!(cells(&second) < cells(&first), "3 columns, not 100");
    assert!(matches!(at(Some(3)), Err(WebError::BadRequest(_))));
    let all = pages::compare::matrix(&store, &CompareQuery::default(), &Scope::default()).unwrap();
    assert_eq!(
        all.cells().len(),
        devices,
        "the download holds every column"
    );
}

#[test]
fn the_fleet_page_shows_each_gpus_pcie_link_and_warns_below_its_maximum() {
    use crate::store::DeviceRecord;
    let (_db, mut store) = temp_store();
    let a = store.add_agent("rig", "http://127.0.0.1:1", None).unwrap();
    let info = serde_json::json!({"host": {"hostname": "rig", "platform": {
        "pcie_link:0000:0a:00.0": "gen3 x4",
        "pcie_link_max:0000:0a:00.0": "gen3 x16",
        "pcie_link_warning:0000:0a:00.0": "runs at gen3 x4, below its gen3 x16: x4 is the width of the link at 0000:00:03.1",
        "pcie_link:0000:05:00.0": "gen3 x16"}}});
    store.set_agent_info(a.id, &info.to_string()).unwrap();
    for (id, bdf, kind) in [
        ("vulkan:0000:0a:00.0", "0000:0a:00.0", "discrete_gpu"),
        ("vulkan:0000:05:00.0", "0000:05:00.0", "integrated_gpu"),
    ] {
        let d = DeviceRecord {
            device_id: id.into(),
            backend: "vulkan".into(),
            vendor: "AMD".into(),
            name: format!("card {bdf}"),
            arch: "gfx803".into(),
            pci_bus_id: bdf.into(),
            info_json: serde_json::json!({ "device_type": kind }).to_string(),
        };
        store.upsert_device(a.id, &d).unwrap();
    }
    let html = render(pages::fleet::fleet(&store, &Links::default(), None));
    assert!(html.contains("gen3 x4 (max gen3 x16)"), "{html}");
    assert!(
        html.contains("below its maximum: runs at gen3 x4, below its gen3 x16"),
        "{html}"
    );
    assert!(
        html.contains("none: an integrated GPU shares system memory"),
        "{html}"
    );
}

/// A stored result on seed-a0's cpu:0 like the seed's gemm ones, as `kernel`/`variant` with
/// `params`, its metric `value` in `unit`, and `config`; returns its row id.
fn add_result(
    store: &mut Store,
    (kernel, variant): (&str, &str),
    params: &[(&str, i64)],
    (value, unit, median_s): (f64, &str, f64),
    config: serde_json::Value,
) -> i64 {
    let template = store
        .results(&crate::store::ResultFilter {
            agent: Some("seed-a0".into()),
            device_id: Some("cpu:0".into()),
            ..Default::default()
        })
        .unwrap()
        .pop()
        .unwrap()
        .record;
    let params: std::collections::BTreeMap<String, i64> =
        params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let keyed: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let r = crate::store::ResultRecord {
        run_id: format!("ceiling-{kernel}-{variant}-{}", keyed.join("-")),
        campaign_id: None,
        job_id: None,
        kernel: kernel.into(),
        variant: variant.into(),
        spec_key: format!("{kernel}/{variant}/{}/f32/compute_only", keyed.join(",")),
        params,
        metric_unit: Some(unit.into()),
        metric_value: Some(value),
        median_s: Some(median_s),
        config,
        created_at: Some(template.created_at.unwrap() + 10.0),
        ..template
    };
    store.insert_result(&r).unwrap();
    store
        .results(&crate::store::ResultFilter {
            agent: Some("seed-a0".into()),
            device_id: Some("cpu:0".into()),
            kernel: Some(kernel.into()),
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .find(|row| row.record.run_id == r.run_id)
        .unwrap()
        .id
}

#[test]
fn a_device_page_shows_its_ceilings_and_places_every_result_on_its_roofline() {
    let (_db, mut store, _) = seeded();
    let l = Links::default();
    // The ceilings suite's results: fp32 at 800 GFLOP/s (the device table says 1000), copy at 300
    // GB/s and the sweep's low end at 320 (the table says 400), a pinned upload at 25 GB/s.
    let items = 1 << 20;
    let peak = add_result(
        &mut store,
        ("compute_peak", "fp32"),
        &[("items", items), ("pairs", 1024)],
        (800.0, "GFLOP/s", items as f64 * 8.0 * 1024.0 * 4.0 / 800e9),
        serde_json::json!({}),
    );
    add_result(
        &mut store,
        ("copy", "default"),
        &[("n", 1 << 26)],
        (300.0, "GB/s", 8.0 * f64::from(1 << 26) / 300e9),
        serde_json::json!({}),
    );
    add_result(
        &mut store,
        ("roofline", "default"),
        &[("n", 1 << 26), ("pairs", 0)],
        (0.0, "GFLOP/s", 8.0 * f64::from(1 << 26) / 320e9),
        serde_json::json!({"achieved_gbps": "320.0"}),
    );
    add_result(
        &mut store,
        ("transfer", "h2d"),
        &[("bytes", 1 << 28), ("pinned", 1)],
        (25.0, "GB/s", f64::from(1 << 28) / 25e9),
        serde_json::json!({}),
    );
    let html = render(pages::device::device(&store, &l, "seed-a0", "cpu:0")).replace("&#x2f;", "/");
    assert!(html.contains("Seed cpu device 0"), "{html}");
    // Measured beside theoretical, and the share.
    let row = |what: &str| {
        let at = html
            .find(what)
            .unwrap_or_else(|| panic!("{what} missing: {html}"));
        html[at..at + html[at..].find("</tr>").unwrap()].to_string()
    };
    let fp32 = row("fp32 arithmetic");
    assert!(
        fp32.contains("800.0 GFLOP/s") && fp32.contains("1000.0 GFLOP/s") && fp32.contains("80.0%"),
        "{fp32}"
    );
    assert!(fp32.contains(&format!("/runs/{peak}")), "{fp32}");
    let mem = row("memory bandwidth");
    assert!(
        mem.contains("320.0 GB/s") && mem.contains("400.0 GB/s") && mem.contains("80.0%"),
        "the best of copy and the sweep: {mem}"
    );
    assert!(row("host to device, pinned").contains("25.00 GB/s"));
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
    assert!(svg.contains("class=\"roofline\""));
    assert_eq!(svg.matches("class=\"roof measured\"").count(), 1, "{svg}");
    assert_eq!(
        svg.matches("class=\"roof theoretical\"").count(),
        1,
        "{svg}"
    );
    // The seed's three GEMM sizes and compute_peak are placed; copy, the sweep's copy point and
    // the transfer move bytes without arithmetic.
    assert_eq!(svg.matches("<circle class=\"pt gemm\"").count(), 3, "{svg}");
    assert_eq!(
        svg.matches("<circle class=\"pt ceiling\"").count(),
        1,
        "{svg}"
    );
    assert!(svg.contains(&format!("<a href=\"/runs/{peak}\">")));
    assert!(
        svg.contains("compute_peak fp32 items=1048576,pairs=1024 f32: 800.0 GFLOP/s"),
        "{svg}"
    );
    assert!(
        html.contains("3 results without floating-point arithmetic"),
        "{html}"
    );
    // The measured roof says the size of the copy that set its bandwidth.
    assert!(svg.contains("measured (bandwidth from "), "{svg}");
    // Another device: no ceilings measured, the theoretical roof alone.
    let other = render(pages::device::device(&store, &l, "seed-a1", "opencl:0"));
    assert!(other.contains("No ceilings measured yet"), "{other}");
    assert_eq!(other.matches("class=\"roof theoretical\"").count(), 1);
    assert_eq!(other.matches("class=\"roof measured\"").count(), 0);
    // The fleet page links it; an unknown device is a 404 naming it.
    let fleet = render(pages::fleet::fleet(&store, &l, None)).replace("&#x2f;", "/");
    assert!(fleet.contains("href=\"/devices/seed-a0/cpu:0\""), "{fleet}");
    match pages::device::device(&store, &l, "seed-a0", "rocm:<9>") {
        Err(WebError::NotFound(m)) => assert!(m.contains("seed-a0") && m.contains("rocm"), "{m}"),
        other => panic!("{:?}", other.map(|p| p.template)),
    }
}

#[test]
fn an_agent_page_shows_each_channels_last_figures_and_its_chart() {
    use crate::store::{CampaignState, JobState, NewJob};
    use gpufleet_proto::v1 as pb;
    let (_db, mut store) = temp_store();
    let rig = store.add_agent("rig", "http://127.0.0.1:1", None).unwrap();
    // A running campaign with one job running on rig, one queued and one finished.
    let c = store.create_campaign("nightly", "", "{}").unwrap();
    store.set_campaign_state(c, CampaignState::Running).unwrap();
    for (i, state) in [JobState::Running, JobState::Queued, JobState::Done]
        .into_iter()
        .enumerate()
    {
        let job = store
            .add_job(&NewJob {
                campaign_id: c,
                agent_id: rig.id,
                device_row_id: None,
                spec_key: format!("gemm n={i}"),
                spec_json: r#"{"kernel": "gemm", "device_id": "vulkan:0"}"#.into(),
                run_id: format!("run-{i}"),
            })
            .unwrap();
        store.set_job_state(job, state, None).unwrap();
    }
    let l = Links::default();
    let mut sample = pb::PowerSample {
        source: "amdgpu-hwmon".into(),
        scope: "asic".into(),
        pci_bus_id: "0000:03:00.0".into(),
        label: "amdgpu power1_input <b>".into(),
        monotonic_ns: 2_000_000_000,
        wall_unix_s: 1_760_000_000.0,
        ..Default::default()
    };
    gpufleet_proto::power::Reading {
        watts: Some(8.123),
        temperature_c: Some(41.0),
        sclk_mhz: Some(300),
        ..Default::default()
    }
    .write_to(&mut sample);
    let live = pages::agent::LiveView {
        connected: true,
        history: [(
            crate::live::key(&sample),
            vec![(1_000_000_000, 8.0), (2_000_000_000, 8.123)],
        )]
        .into(),
        latest: vec![sample],
    };
    let html = render(pages::agent::agent(&store, &l, "rig", &live));
    assert!(
        html.contains(r#"data-channel="amdgpu-hwmon|0000:03:00.0|amdgpu power1_input &lt;b&gt;""#),
        "{html}"
    );
    for figure in ["8.1 W", "41.0 °C", "300 MHz", "2025-10-09T08:53:20Z"] {
        assert!(html.contains(figure), "{figure} in {html}");
    }
    assert!(
        html.contains("<polyline class=\"trace\""),
        "the chart is drawn"
    );
    assert!(
        html.contains("Runs in progress") && html.contains("gemm n=0"),
        "{html}"
    );
    assert!(
        !html.contains("gemm n=1") && !html.contains("gemm n=2"),
        "{html}"
    );
    // minijinja escapes `/` in attributes; the browser reads it back.
    assert!(
        html.contains(r#"data-stream="&#x2f;api&#x2f;agents&#x2f;rig&#x2f;power?rate_hz=2""#),
        "{html}"
    );
    let html = render(pages::agent::agent(
        &store,
        &l,
        "rig",
        &pages::agent::LiveView::default(),
    ));
    assert!(html.contains("does not follow this agent now"), "{html}");
    assert!(matches!(
        pages::agent::agent(&store, &l, "nobody", &pages::agent::LiveView::default()),
        Err(WebError::NotFound(_))
    ));
    // The fleet page links the agent's page on a serve, not in the static report.
    assert!(
        render(pages::fleet::fleet(&store, &l, None))
            .contains(r#"<a href="&#x2f;agents&#x2f;rig">rig</a>"#)
    );
}

/// `/groups` draws the sibling group's strip with a dot per device, the two outliers red and
/// linked to their results, each named with its cause; `/alerts` lists them beside the
/// regressions; the static report writes the page.
#[test]
fn the_groups_page_marks_the_outliers_and_the_alerts_page_lists_them() {
    let (_db, mut store) = temp_store();
    let campaign = crate::outliers::collect::rx580_campaign(&mut store);
    let l = Links::default();
    let html = render(pages::groups::groups(&store, &l, &Scope::default()));
    assert!(
        html.contains("AMD Radeon RX 580 · vulkan · driver Mesa 22.3.6 · 8.0 GiB"),
        "{html}"
    );
    assert_eq!(
        html.matches("<circle class=\"dot\"").count(),
        6,
        "six siblings"
    );
    assert_eq!(
        html.matches("<circle class=\"dot outlier\"").count(),
        2,
        "two outliers"
    );
    assert!(html.contains("PCIe x4 of x16"), "{html}");
    assert!(
        html.contains("94 °C during the run (siblings 71 °C)"),
        "{html}"
    );
    let outlier_run = store
        .results(&crate::store::ResultFilter {
            campaign_id: Some(campaign),
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .find(|r| r.agent == "node-3")
        .unwrap()
        .id;
    assert!(
        html.contains(&format!("href=\"/runs/{outlier_run}\"")),
        "{html}"
    );
    let alerts = render(pages::alerts::alerts(&store, &l, &Scope::default()));
    assert!(
        alerts.contains("Outliers in campaign <a href=")
            && alerts.contains(&format!(">#{campaign}</a></h2>")),
        "{alerts}"
    );
    assert!(alerts.contains("node-3:vulkan:0"), "{alerts}");
    // A campaign without groups of five says so.
    let empty = render(pages::groups::groups(
        &store,
        &l,
        &Scope {
            campaign: Some(campaign + 1),
            ..Scope::default()
        },
    ));
    assert!(
        empty.contains("No campaign has results yet") || empty.contains("No group has"),
        "{empty}"
    );
}

#[test]
fn a_fleet_of_many_agents_is_pages_with_a_summary_on_each() {
    let (_db, mut store) = temp_store();
    let total = pages::fleet::FLEET_AGENTS * 2 + 3;
    for i in 0..total {
        store
            .add_agent(
                &format!("node-{i:04}"),
                &format!("http://10.1.0.1:{}", 1000 + i),
                None,
            )
            .unwrap();
    }
    for i in 0..3 {
        store
            .enrol_agent(&format!("pod-{i}"), &crate::store::token_hash("a-token"))
            .unwrap();
    }
    let l = Links::default();
    let page = |n| render(pages::fleet::fleet(&store, &l, n)).replace("&#x2f;", "/");
    let first = page(None);
    let sections = |html: &str| html.matches("<section class=\"agent\"").count();
    assert_eq!(sections(&first), pages::fleet::FLEET_AGENTS);
    assert!(first.contains("id=\"agent-node-0000\""), "{first}");
    assert!(
        first.contains(&format!("{} agents:", total + 3)),
        "the summary counts every agent"
    );
    // The never-attached dial-in agents are named in the summary on every page.
    assert!(
        first.contains("offline: <a href=\"/agents/pod-0\">pod-0</a>"),
        "{first}"
    );
    assert!(first.contains("href=\"/?page=2\" rel=\"next\""), "{first}");
    let last = page(Some(3));
    assert_eq!(sections(&last), total + 3 - 2 * pages::fleet::FLEET_AGENTS);
    assert!(last.contains("id=\"agent-pod-2\""));
    assert!(last.contains("offline: <a href=\"/agents/pod-0\">pod-0</a>"));
    assert!(!last.contains("rel=\"next\""));
    assert_eq!(
        pages::fleet::page_of(&store, "pod-1").unwrap(),
        3,
        "pod-1 sorts after the 103 node-* agents"
    );
    let Err(WebError::BadRequest(e)) = pages::fleet::fleet(&store, &l, Some(4)) else {
        panic!("page 4 of 3 rendered");
    };
    assert!(e.contains("pages 1 to 3"), "{e}");
    // A static report lists every agent on its one page.
    let report_links = Links::report(Default::default());
    assert_eq!(
        sections(&render(pages::fleet::fleet(&store, &report_links, None))),
        total + 3
    );
}

#[test]
fn a_campaign_of_many_jobs_is_pages() {
    let (_db, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let campaign = store.create_campaign("s", "", "{}").unwrap();
    let jobs = pages::campaigns::JOBS_PER_PAGE + 2;
    let new: Vec<crate::store::NewJob> = (0..jobs)
        .map(|i| crate::store::NewJob {
            campaign_id: campaign,
            agent_id: agent,
            device_row_id: None,
            spec_key: format!("k{i}"),
            spec_json: "{}".into(),
            run_id: format!("run-{i}"),
        })
        .collect();
    store.add_jobs(&new).unwrap();
    // The last job's result, read for the page that shows it.
    let last = format!("run-{}", jobs - 1);
    store
        .insert_result(&crate::store::test_support::sample_result(&last, agent))
        .unwrap();
    let result = store.results(&Default::default()).unwrap()[0].id;
    let l = Links::default();
    let at = |n| render(pages::campaigns::campaign(&store, &l, campaign, n)).replace("&#x2f;", "/");
    let rows = |html: &str| html.matches("<span class=\"pill queued\">").count();
    let first = at(None);
    assert_eq!(rows(&first), pages::campaigns::JOBS_PER_PAGE);
    assert!(
        first.contains(&format!("/campaigns/{campaign}?page=2")),
        "{first}"
    );
    assert!(!first.contains(&format!("#{result} ok")));
    let second = at(Some(2));
    assert_eq!(rows(&second), 2);
    assert!(
        second.contains(&format!("#{result} ok")) && second.contains(&format!("/runs/{result}")),
        "{second}"
    );
    assert!(pages::campaigns::campaign(&store, &l, campaign, Some(3)).is_err());
}

#[test]
fn a_result_is_found_by_its_number_or_its_short_run_id_even_one_of_digits() {
    let (_db, mut store, _) = seeded();
    let l = Links::default();
    let first = store.results(&Default::default()).unwrap().remove(0);
    // The heading names the result the page shows.
    let shown = |store: &Store, reference: &str| {
        let html = render(pages::run::run_by_ref(store, &l, reference));
        let at = html.find("Result #").expect("a result page");
        html[at + 8..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    assert_eq!(shown(&store, &first.id.to_string()), first.id);
    // One short id in forty is all digits; no result has that number, so it is a run id's start.
    let mut ids = Vec::new();
    for run_id in [
        "69796374-0000-4000-8000-000000000001",
        "69796374-0000-4000-8000-000000000002",
        "abcdef12-0000-4000-8000-000000000003",
    ] {
        let r = crate::store::ResultRecord {
            run_id: run_id.into(),
            job_id: None,
            ..first.record.clone()
        };
        assert!(store.insert_result(&r).unwrap(), "{run_id}");
        ids.push(store.results_with_run_prefix(run_id, 1).unwrap()[0]);
    }
    assert_eq!(
        shown(&store, "69796374-0000-4000-8000-000000000002"),
        ids[1]
    );
    assert_eq!(shown(&store, "ABCDEF12"), ids[2]);
    let err = |reference: &str| pages::run::run_by_ref(&store, &l, reference).unwrap_err();
    assert!(matches!(err("69796374"), WebError::BadRequest(m) if m.contains("more than one")));
    assert!(matches!(err("6979637499"), WebError::NotFound(_)));
    assert!(matches!(err("abc"), WebError::BadRequest(_)));
    let long = format!("<script>{}", "x".repeat(500));
    assert!(matches!(err(&long), WebError::BadRequest(m) if m.len() < 300));
}
