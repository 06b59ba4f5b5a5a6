//! The detection on seeded simulated fleets (how the defaults were chosen) and the causes.

use super::cause::{Conditions, likely_cause};
use super::*;

/// splitmix64 (`crate::test_rng`), so every run draws the same fleets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        crate::test_rng::splitmix64(&mut self.0)
    }

    fn uniform(&mut self) -> f64 {
        crate::test_rng::uniform(&mut self.0)
    }

    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

fn key() -> SiblingKey {
    SiblingKey {
        model: "AMD Instinct MI300X".into(),
        backend: "hip".into(),
        driver: "6.2".into(),
        memory_bytes: 192 << 30,
    }
}

fn obs(i: usize, value: f64, conditions: Conditions) -> Observation {
    Observation {
        result_id: i as i64,
        run_id: format!("run-{i}"),
        agent: format!("node-{i:03}"),
        device_id: "hip:0".into(),
        group: key(),
        spec_key: "copy/default/n=268435456".into(),
        unit: "GB/s".into(),
        value,
        higher_is_better: true,
        conditions,
    }
}

/// `n` identical devices whose values spread by `cv` (relative, normal), those in `planted`
/// `slowdown` slower.
fn fleet(rng: &mut Rng, n: usize, cv: f64, planted: &[usize], slowdown: f64) -> Vec<Observation> {
    (0..n)
        .map(|i| {
            let slow = if planted.contains(&i) {
                1.0 - slowdown
            } else {
                1.0
            };
            obs(
                i,
                4000.0 * slow * (1.0 + cv * rng.normal()),
                Conditions::default(),
            )
        })
        .collect()
}

/// Which devices the defaults name in a fleet.
fn named(observations: &[Observation]) -> Vec<usize> {
    let reports = detect(observations, &OutlierConfig::DEFAULT);
    let mut out: Vec<usize> = reports
        .iter()
        .flat_map(|g| g.outliers().map(|(_, o)| o.result_id as usize))
        .collect();
    out.sort_unstable();
    out
}

/// Three of 200 devices: distinct, drawn from the seed.
fn three_of(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut planted = Vec::new();
    while planted.len() < 3 {
        let i = (rng.next() % n as u64) as usize;
        if !planted.contains(&i) {
            planted.push(i);
        }
    }
    planted.sort_unstable();
    planted
}

#[test]
fn the_defaults_name_three_planted_10_pct_slower_devices_of_200_and_no_other() {
    for seed in 0..10 {
        let mut rng = Rng(seed);
        let planted = three_of(&mut rng, 200);
        let f = fleet(&mut rng, 200, 0.01, &planted, 0.10);
        assert_eq!(named(&f), planted, "seed {seed}");
        let quiet = fleet(&mut rng, 200, 0.01, &[], 0.0);
        assert_eq!(
            named(&quiet),
            Vec::<usize>::new(),
            "seed {seed}, nothing planted"
        );
    }
}

/// The simulation behind the defaults: per device false and true rates over 100 seeded fleets of
/// 200 devices, at 1 % and 2 % spread between identical devices, 3 devices planted 5 %, 10 % and
/// 20 % slower (the table in docs/fleet.md). The defaults must keep false outliers below one in
/// 10,000 devices and find every 10 % slowdown at 1 % spread.
#[test]
fn outlier_defaults_grid() {
    let mut lines = vec!["spread | planted | false per device | found".to_string()];
    for cv in [0.01, 0.02] {
        for slowdown in [0.05, 0.10, 0.20] {
            let (mut false_hits, mut found, mut planted_total) = (0usize, 0usize, 0usize);
            for seed in 0..100 {
                let mut rng = Rng(1000 + seed);
                let planted = three_of(&mut rng, 200);
                let hits = named(&fleet(&mut rng, 200, cv, &planted, slowdown));
                found += hits.iter().filter(|h| planted.contains(h)).count();
                false_hits += hits.iter().filter(|h| !planted.contains(h)).count();
                planted_total += planted.len();
            }
            let false_rate = false_hits as f64 / (100.0 * 197.0);
            let found_rate = found as f64 / planted_total as f64;
            lines.push(format!(
                "{:.0} % | {:.0} % | {false_rate:.5} | {:.0} %",
                cv * 100.0,
                slowdown * 100.0,
                found_rate * 100.0
            ));
            assert!(false_rate < 1e-4, "{}", lines.join("\n"));
            if cv == 0.01 && slowdown >= 0.10 {
                assert_eq!(found_rate, 1.0, "{}", lines.join("\n"));
            }
        }
    }
    eprintln!("{}", lines.join("\n"));
}

#[test]
fn small_groups_are_not_judged_and_better_devices_are_no_outliers() {
    let mut f: Vec<Observation> = (0..4)
        .map(|i| obs(i, 4000.0, Conditions::default()))
        .collect();
    f.push(obs(4, 2000.0, Conditions::default()));
    f.truncate(4);
    let r = detect(&f, &OutlierConfig::DEFAULT);
    assert_eq!((r[0].specs.len(), r[0].too_small), (0, 1));
    let mut f: Vec<Observation> = (0..9)
        .map(|i| obs(i, 4000.0 + i as f64, Conditions::default()))
        .collect();
    f.push(obs(9, 6000.0, Conditions::default()));
    assert_eq!(named(&f), Vec::<usize>::new(), "faster is no outlier");
    // A latency is worse higher.
    for o in &mut f {
        o.higher_is_better = false;
    }
    assert_eq!(named(&f), vec![9]);
}

#[test]
fn causes_name_the_link_the_cap_the_clock_the_heat_and_the_noise() {
    let usual = Conditions {
        pcie: Some(("gen3 x16".into(), "gen3 x16".into())),
        power_cap_w: Some(250.0),
        clock_mhz: Some(1500.0),
        max_temp_c: Some(70.0),
        robust_cv: Some(0.01),
        ..Conditions::default()
    };
    let siblings: Vec<Conditions> = (0..8).map(|_| usual.clone()).collect();
    let refs: Vec<&Conditions> = siblings.iter().collect();
    let cause = |c: Conditions| likely_cause(&c, &refs);
    assert_eq!(cause(usual.clone()), "unknown");
    let x4 = Conditions {
        pcie: Some(("gen3 x4".into(), "gen3 x16".into())),
        ..usual.clone()
    };
    assert_eq!(cause(x4), "PCIe x4 of x16");
    let gen2 = Conditions {
        pcie: Some(("gen2 x8".into(), "gen4 x16".into())),
        ..usual.clone()
    };
    assert_eq!(cause(gen2), "PCIe gen2 x8 of gen4 x16");
    let capped = Conditions {
        power_cap_w: Some(150.0),
        ..usual.clone()
    };
    assert_eq!(cause(capped), "power cap 150 W (siblings 250 W)");
    let hot = Conditions {
        max_temp_c: Some(92.0),
        clock_mhz: Some(1200.0),
        ..usual.clone()
    };
    assert_eq!(
        cause(hot),
        "clock 1200 MHz (siblings 1500 MHz); 92 °C during the run (siblings 70 °C)"
    );
    let noisy = Conditions {
        robust_cv: Some(0.09),
        ..usual.clone()
    };
    assert_eq!(cause(noisy), "a noisy run (robust CV 9.0 %)");
    let firmware = Conditions {
        firmware: Some("113-D1631700-111".into()),
        ..usual
    };
    let mut with_fw = siblings.clone();
    for s in &mut with_fw {
        s.firmware = Some("113-D1631700-100".into());
    }
    let refs: Vec<&Conditions> = with_fw.iter().collect();
    assert_eq!(
        likely_cause(&firmware, &refs),
        "firmware 113-D1631700-111 (siblings 113-D1631700-100)"
    );
}

#[test]
fn a_rerun_confirms_an_outlier_only_when_it_is_one_again() {
    let mut f: Vec<Observation> = (0..8)
        .map(|i| obs(i, 4000.0 + i as f64, Conditions::default()))
        .collect();
    f.push(obs(8, 3000.0, Conditions::default()));
    let first = detect(&f, &OutlierConfig::DEFAULT);
    let o = first[0].outliers().next().unwrap().1.clone();
    assert_eq!((o.result_id, o.results, o.confirmed), (8, 1, false));
    assert_eq!(o.rerun(), "not rerun yet");
    // Slow again: confirmed, with both results.
    let mut again = f.clone();
    again.push(Observation {
        result_id: 9,
        ..obs(8, 3100.0, Conditions::default())
    });
    let r = detect(&again, &OutlierConfig::DEFAULT);
    let o = r[0].outliers().next().unwrap().1.clone();
    assert_eq!((o.results, o.confirmed), (2, true));
    assert_eq!(o.rerun(), "confirmed (2 results)");
    // Its rerun ran like its siblings: no outlier.
    let mut cleared = f.clone();
    cleared.push(Observation {
        result_id: 9,
        ..obs(8, 4001.0, Conditions::default())
    });
    assert_eq!(named(&cleared), Vec::<usize>::new());
}
