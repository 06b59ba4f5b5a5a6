//! Energy of a kernel window from a power trace. Pure: no clocks, no I/O.
//!
//! A trace is a list of [`Point`]s on CLOCK_MONOTONIC with watts and, where
//! the sensor has one, an energy counter. The energy in `[begin, end]` is the
//! counter's increase when the counter brackets the window (interpolated
//! linearly at both ends), else the trapezoid integral of the watts, with the
//! trace interpolated at the window's edges and held flat where it does not
//! reach them. Both figures are reported when both exist, so a sensor whose
//! watts are averaged by the firmware can be checked against its counter.

/// One sample of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Point {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub t_ns: u64,
    pub watts: Option<f64>,
    /// Monotonic energy counter in joules.
    pub energy_j: Option<f64>,
}

/// How [`Figures::joules`] was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The sensor's energy counter.
    Counter,
    /// Trapezoid integration of the watts.
    Trapezoid,
}

impl Method {
    /// `counter` or `trapezoid`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Counter => "counter",
            Method::Trapezoid => "trapezoid",
        }
    }
}

/// Energy and power over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// The energy figure reported (counter where available).
    pub joules: f64,
    pub method: Method,
    pub counter_j: Option<f64>,
    pub integrated_j: Option<f64>,
    /// `joules / window_s`.
    pub avg_watts: f64,
    /// Largest reading inside the window (or at its interpolated edges).
    pub peak_watts: f64,
    pub window_s: f64,
    /// Samples with a timestamp inside the window.
    pub samples: usize,
    /// False when the trace did not reach one of the window's edges and the
    /// nearest reading was held flat.
    pub covered: bool,
}

fn watts_points(points: &[Point]) -> Vec<(u64, f64)> {
    let mut v: Vec<(u64, f64)> = points
        .iter()
        .filter_map(|p| p.watts.filter(|w| w.is_finite()).map(|w| (p.t_ns, w)))
        .collect();
    v.sort_by_key(|&(t, _)| t);
    v
}

/// Linear interpolation of a sorted series at `t`, held flat outside it.
fn at(series: &[(u64, f64)], t: u64) -> f64 {
    let i = series.partition_point(|&(ts, _)| ts < t);
    if i == 0 {
        return series[0].1;
    }
    if i == series.len() {
        return series[i - 1].1;
    }
    let (t0, v0) = series[i - 1];
    let (t1, v1) = series[i];
    if t1 == t0 {
        return v1;
    }
    v0 + (v1 - v0) * (t - t0) as f64 / (t1 - t0) as f64
}

/// Trapezoid integral of the watts over `[begin, end]` in joules, or `None`
/// when the trace has no watts at all or the window is empty.
pub fn trapezoid(points: &[Point], begin_ns: u64, end_ns: u64) -> Option<f64> {
    let w = watts_points(points);
    if w.is_empty() || end_ns <= begin_ns {
        return None;
    }
    // Knots: the window's edges plus every sample strictly inside.
    let mut knots = vec![(begin_ns, at(&w, begin_ns))];
    knots.extend(
        w.iter()
            .copied()
            .filter(|&(t, _)| t > begin_ns && t < end_ns),
    );
    knots.push((end_ns, at(&w, end_ns)));
    let joules = knots
        .windows(2)
        .map(|k| (k[1].0 - k[0].0) as f64 * 1e-9 * (k[0].1 + k[1].1) / 2.0)
        .sum();
    Some(joules)
}

/// The energy counter's increase over `[begin, end]`; `None` unless counter
/// readings bracket the whole window.
///
/// The counter may be read far less often than the watts (NVML's costs
/// milliseconds of CPU per read, so it is read once a second): the increase
/// between the last reading at or before `begin` and the first at or after
/// `end` is taken, and the energy of the two margins outside the window is
/// taken off, integrated from the watts samples. Without watts the counter is
/// interpolated linearly at both edges.
pub fn counter_delta(points: &[Point], begin_ns: u64, end_ns: u64) -> Option<f64> {
    let mut c: Vec<(u64, f64)> = points
        .iter()
        .filter_map(|p| p.energy_j.filter(|e| e.is_finite()).map(|e| (p.t_ns, e)))
        .collect();
    c.sort_by_key(|&(t, _)| t);
    let (first, last) = (c.first()?, c.last()?);
    if first.0 > begin_ns || last.0 < end_ns || end_ns <= begin_ns {
        return None;
    }
    if watts_points(points).is_empty() {
        return Some((at(&c, end_ns) - at(&c, begin_ns)).max(0.0));
    }
    let before = c[c.partition_point(|&(t, _)| t <= begin_ns) - 1];
    let after = c[c.partition_point(|&(t, _)| t < end_ns)];
    let margin = |a: u64, b: u64| {
        if b > a {
            trapezoid(points, a, b).unwrap_or(0.0)
        } else {
            0.0
        }
    };
    let inside = after.1 - before.1 - margin(before.0, begin_ns) - margin(end_ns, after.0);
    Some(inside.max(0.0))
}

/// Energy and power over `[begin, end]`; `None` when the trace has neither
/// watts nor a bracketing counter.
pub fn integrate(points: &[Point], begin_ns: u64, end_ns: u64) -> Option<Figures> {
    if end_ns <= begin_ns {
        return None;
    }
    let window_s = (end_ns - begin_ns) as f64 * 1e-9;
    let counter_j = counter_delta(points, begin_ns, end_ns);
    let integrated_j = trapezoid(points, begin_ns, end_ns);
    let (joules, method) = match (counter_j, integrated_j) {
        (Some(c), _) => (c, Method::Counter),
        (None, Some(i)) => (i, Method::Trapezoid),
        (None, None) => return None,
    };
    let w = watts_points(points);
    let inside: Vec<f64> = w
        .iter()
        .filter(|&&(t, _)| t >= begin_ns && t <= end_ns)
        .map(|&(_, v)| v)
        .collect();
    let mut peak = inside.iter().copied().fold(f64::NAN, f64::max);
    if !w.is_empty() {
        peak = peak.max(at(&w, begin_ns)).max(at(&w, end_ns));
    }
    let covered = match (w.first(), w.last()) {
        (Some(f), Some(l)) => f.0 <= begin_ns && l.0 >= end_ns,
        _ => counter_j.is_some(),
    };
    Some(Figures {
        joules,
        method,
        counter_j,
        integrated_j,
        avg_watts: joules / window_s,
        peak_watts: if peak.is_finite() { peak } else { 0.0 },
        window_s,
        samples: points
            .iter()
            .filter(|p| p.t_ns >= begin_ns && p.t_ns <= end_ns)
            .count(),
        covered,
    })
}

/// Idle power: the median of the watts read in `[from, to)`, `None` without
/// readings there.
pub fn idle_watts(points: &[Point], from_ns: u64, to_ns: u64) -> Option<f64> {
    let mut v: Vec<f64> = points
        .iter()
        .filter(|p| p.t_ns >= from_ns && p.t_ns < to_ns)
        .filter_map(|p| p.watts.filter(|w| w.is_finite()))
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The kernel window needed for a trustworthy energy figure: four sensor
/// update periods (a reading averaged over a period needs a few of them
/// inside the window to say anything about it), and at least one second.
pub fn required_window_s(sensor_period_s: f64) -> f64 {
    (4.0 * sensor_period_s).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn w(t_ms: u64, watts: f64) -> Point {
        Point {
            t_ns: t_ms * 1_000_000,
            watts: Some(watts),
            energy_j: None,
        }
    }

    #[test]
    fn constant_power_integrates_exactly() {
        let trace: Vec<Point> = (0..=40).map(|i| w(i * 50, 100.0)).collect();
        let f = integrate(&trace, S / 2, 3 * S / 2).unwrap();
        assert!((f.joules - 100.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.method, Method::Trapezoid);
        assert!((f.avg_watts - 100.0).abs() < 1e-9);
        assert_eq!(f.samples, 21);
        assert!(f.covered);
    }

    #[test]
    fn a_ramp_is_integrated_with_interpolated_edges() {
        // 0 W at t=0 rising 100 W/s, sampled every 100 ms; window 0.25..1.75 s.
        let trace: Vec<Point> = (0..=20).map(|i| w(i * 100, i as f64 * 10.0)).collect();
        let j = trapezoid(&trace, S / 4, 7 * S / 4).unwrap();
        // ∫ 100 t dt from 0.25 to 1.75 = 50 (1.75² - 0.25²) = 150 J.
        assert!((j - 150.0).abs() < 1e-9, "{j}");
        let f = integrate(&trace, S / 4, 7 * S / 4).unwrap();
        assert!((f.peak_watts - 175.0).abs() < 1e-9);
    }

    #[test]
    fn a_trace_that_stops_early_is_held_flat_and_flagged() {
        let trace = vec![w(0, 10.0), w(500, 20.0)];
        let f = integrate(&trace, 0, S).unwrap();
        // 0..0.5 s: mean 15 W → 7.5 J; 0.5..1 s held at 20 W → 10 J.
        assert!((f.joules - 17.5).abs() < 1e-9);
        assert!(!f.covered);
    }

    #[test]
    fn the_counter_wins_when_it_brackets_the_window() {
        // Watts read 10% high (a firmware average); the counter is right.
        let trace: Vec<Point> = (0..=10)
            .map(|i| Point {
                t_ns: i * S / 10,
                watts: Some(55.0),
                energy_j: Some(i as f64 * 5.0),
            })
            .collect();
        let f = integrate(&trace, S / 20, 19 * S / 20).unwrap();
        assert_eq!(f.method, Method::Counter);
        // 50 J/s over 0.9 s = 45 J; only the two 50 ms margins come from the watts.
        assert!((f.joules - 45.0).abs() < 0.6, "{f:?}");
        assert!((f.integrated_j.unwrap() - 49.5).abs() < 1e-6);
        // Not bracketed: no counter figure.
        assert_eq!(counter_delta(&trace, S / 20, 2 * S), None);
        // Without watts the counter is interpolated linearly.
        let bare: Vec<Point> = trace.iter().map(|p| Point { watts: None, ..*p }).collect();
        assert!((counter_delta(&bare, S / 20, 19 * S / 20).unwrap() - 45.0).abs() < 1e-9);
    }

    #[test]
    fn a_counter_read_once_a_second_is_joined_to_the_window_by_the_watts() {
        // 70 W idle, 550 W from 1.3 s to 7.3 s, watts every 10 ms; the counter
        // (exact) only every second, as the NVML source reads it.
        let ms = S / 1000;
        let watts = |t_ms: u64| {
            if (1300..7300).contains(&t_ms) {
                550.0
            } else {
                70.0
            }
        };
        let mut trace: Vec<Point> = (0..=800)
            .map(|i| Point {
                t_ns: i * 10 * ms,
                watts: Some(watts(i * 10)),
                energy_j: None,
            })
            .collect();
        let truth = |t_ns: u64| trapezoid(&trace, 0, t_ns).unwrap_or(0.0);
        let counter: Vec<(usize, f64)> = (0..=8)
            .map(|s| (s * 100, if s == 0 { 0.0 } else { truth(s as u64 * S) }))
            .collect();
        for (i, e) in counter {
            trace[i].energy_j = Some(e);
        }
        let (begin, end) = (1300 * ms, 7300 * ms);
        let exact = trapezoid(&trace, begin, end).unwrap();
        let got = counter_delta(&trace, begin, end).unwrap();
        assert!((got - exact).abs() < 1e-6, "{got} vs {exact}");
        // Interpolating the sparse counter linearly instead would be far off.
        let c: Vec<(u64, f64)> = trace
            .iter()
            .filter_map(|p| p.energy_j.map(|e| (p.t_ns, e)))
            .collect();
        let linear = at(&c, end) - at(&c, begin);
        assert!((linear - exact).abs() / exact > 0.02, "{linear} vs {exact}");
    }

    #[test]
    fn no_watts_no_counter_no_figures() {
        let trace = vec![Point {
            t_ns: 5,
            watts: None,
            energy_j: None,
        }];
        assert_eq!(integrate(&trace, 0, S), None);
        assert_eq!(integrate(&[], 0, S), None);
        assert_eq!(integrate(&[w(0, 1.0)], S, S), None);
    }

    #[test]
    fn idle_is_the_median_before_the_run() {
        let trace = vec![w(0, 30.0), w(100, 90.0), w(200, 31.0), w(300, 500.0)];
        assert_eq!(idle_watts(&trace, 0, 300 * 1_000_000), Some(31.0));
        assert_eq!(idle_watts(&trace, 0, 200 * 1_000_000), Some(60.0));
        assert_eq!(idle_watts(&trace, 10 * S, 11 * S), None);
    }

    #[test]
    fn required_window_covers_four_periods_and_a_second() {
        assert_eq!(required_window_s(0.05), 1.0);
        assert_eq!(required_window_s(1.0), 4.0);
    }
}
