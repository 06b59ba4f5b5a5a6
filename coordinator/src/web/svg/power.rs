//! The power trace of a run or an agent: watts over seconds, the kernel window shaded and the idle
//! baseline drawn where known.

use super::canvas::{Axis, BOTTOM, H, LEFT, RIGHT, Svg, TOP, W, short};

/// One power reading on the agent's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerReading {
    pub monotonic_ns: u64,
    pub watts: f64,
}

/// The power trace in seconds from its first sample, with the kernel window shaded and the idle
/// baseline drawn where known; `caption` says what the x axis's seconds count from.
pub fn power_chart(
    readings: &[PowerReading],
    window_ns: Option<(u64, u64)>,
    idle_watts: Option<f64>,
    caption: &str,
) -> String {
    let mut svg = Svg::new("power", &format!("{} power samples", readings.len()));
    let Some(t0) = readings
        .iter()
        .map(|r| r.monotonic_ns)
        .chain(window_ns.map(|w| w.0))
        .min()
    else {
        return svg.finish();
    };
    let sec = |ns: u64| ns.saturating_sub(t0) as f64 / 1e9;
    let x = Axis::fit(
        readings
            .iter()
            .map(|r| sec(r.monotonic_ns))
            .chain(window_ns.into_iter().flat_map(|(a, b)| [sec(a), sec(b)])),
        false,
        LEFT,
        W - RIGHT,
    );
    let y = Axis::fit(
        readings
            .iter()
            .map(|r| r.watts)
            .chain(idle_watts)
            .chain(std::iter::once(0.0)),
        false,
        H - BOTTOM,
        TOP,
    );
    svg.y_axis(&y, "W");
    svg.x_ticks(&x, short, caption);
    if let Some((a, b)) = window_ns {
        let (xa, xb) = (x.px(sec(a)), x.px(sec(b)));
        svg.raw(&format!(
            r##"<rect class="window" x="{xa:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#1a7f37" fill-opacity="0.12"><title>kernel window {:.3} s</title></rect>"##,
            (xb - xa).max(1.0),
            H - BOTTOM - TOP,
            (b.saturating_sub(a)) as f64 / 1e9
        ));
        svg.text(
            xa + 3.0,
            TOP + 10.0,
            "start",
            "window-label",
            "kernel window",
        );
    }
    if let Some(idle) = idle_watts {
        let py = y.px(idle);
        svg.line(
            (LEFT, py),
            (W - RIGHT, py),
            r##"class="idle" stroke="#6b7380" stroke-dasharray="5 4""##,
        );
        svg.text(
            W - RIGHT - 4.0,
            py - 4.0,
            "end",
            "idle-label",
            &format!("idle {} W", short(idle)),
        );
    }
    if !readings.is_empty() {
        let pts: Vec<String> = readings
            .iter()
            .map(|r| format!("{:.1},{:.1}", x.px(sec(r.monotonic_ns)), y.px(r.watts)))
            .collect();
        svg.raw(&format!(r##"<polyline class="trace" points="{}" fill="none" stroke="#c62828" stroke-width="1.5"/>"##, pts.join(" ")));
    }
    svg.finish()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_chart_marks_the_window_and_idle_line() {
        let r: Vec<_> = (0..50)
            .map(|i| PowerReading {
                monotonic_ns: 1_000_000_000 + i * 20_000_000,
                watts: if (10..40).contains(&i) { 250.0 } else { 60.0 },
            })
            .collect();
        let svg = power_chart(
            &r,
            Some((1_200_000_000, 1_800_000_000)),
            Some(58.0),
            "seconds",
        );
        assert!(svg.contains(r#"class="window""#) && svg.contains("kernel window 0.600 s"));
        assert!(svg.contains(r#"class="idle""#) && svg.contains("idle 58.0 W"));
        assert!(svg.contains(r#"class="trace""#));
    }
}
