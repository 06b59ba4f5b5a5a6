//! The run page's histogram of per-iteration times, with the median, a strip of every iteration
//! and the high outliers (beyond the Tukey fence) in a bar of their own.

use super::canvas::{Axis, BOTTOM, H, LEFT, RIGHT, Svg, TOP, W, short};

/// A histogram of per-iteration times (microseconds on the x axis) with the median marked, and
/// each iteration as a tick on a strip under it. Iterations above `fence_s` (the Tukey upper
/// fence) are high outliers: one orange bar at the right end holds them, so a long tail does not
/// squash the bulk into one bin.
pub fn histogram(times_s: &[f64], median_s: Option<f64>, fence_s: Option<f64>) -> String {
    let us: Vec<f64> = times_s
        .iter()
        .map(|t| t * 1e6)
        .filter(|t| t.is_finite())
        .collect();
    let fence = fence_s.map(|f| f * 1e6).filter(|f| f.is_finite());
    let is_outlier = |v: f64| fence.is_some_and(|f| v > f);
    let (bulk, outliers): (Vec<f64>, Vec<f64>) = us.iter().partition(|v| !is_outlier(**v));
    let mut svg = Svg::new("histogram", &format!("{} iterations", us.len()));
    if bulk.is_empty() {
        return svg.finish();
    }
    // The axis spans the bulk (and the fence); outliers, however far, get one bar at its end.
    let x = Axis::fit(
        bulk.iter()
            .copied()
            .chain(fence.filter(|_| !outliers.is_empty())),
        false,
        LEFT,
        W - RIGHT - if outliers.is_empty() { 0.0 } else { 40.0 },
    );
    let bins = ((bulk.len() as f64).sqrt().ceil() as usize).clamp(5, 40);
    let width = (x.hi - x.lo) / bins as f64;
    let mut counts = vec![0usize; bins];
    for v in &bulk {
        let i = (((v - x.lo) / width) as usize).min(bins - 1);
        counts[i] += 1;
    }
    let max = counts
        .iter()
        .copied()
        .chain([outliers.len()])
        .max()
        .unwrap_or(1) as f64;
    let y = Axis::fit([0.0, max].into_iter(), false, H - BOTTOM - 14.0, TOP);
    svg.y_axis_counts(&y, "iterations");
    svg.x_ticks(&x, short, "time per iteration (µs)");
    let base = H - BOTTOM - 14.0;
    for (i, c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let (x0, x1) = (
            x.px(x.lo + i as f64 * width),
            x.px(x.lo + (i + 1) as f64 * width),
        );
        let top = y.px(*c as f64);
        svg.raw(&format!(
            r##"<rect class="bin" x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="#2458b3" fill-opacity="0.7"><title>{} iterations in {}–{} µs</title></rect>"##,
            x0 + 0.5,
            (x1 - x0 - 1.0).max(0.5),
            (base - top).max(0.0),
            c,
            short(x.lo + i as f64 * width),
            short(x.lo + (i + 1) as f64 * width)
        ));
    }
    let outlier_px = W - RIGHT - 30.0;
    if let (Some(f), false) = (fence, outliers.is_empty()) {
        let top = y.px(outliers.len() as f64);
        let slowest = outliers.iter().copied().fold(f64::MIN, f64::max);
        svg.raw(&format!(
            r##"<rect class="outliers" x="{:.1}" y="{top:.1}" width="24" height="{:.1}" fill="#e07b00" fill-opacity="0.8"><title>{} iterations above the Tukey fence (Q3 + 1.5 IQR = {} µs), up to {} µs</title></rect>"##,
            outlier_px,
            (base - top).max(0.0),
            outliers.len(),
            short(f),
            short(slowest)
        ));
        // On the caption's line, right-aligned: clear of the x axis's tick labels.
        svg.text(
            W - 4.0,
            H - 6.0,
            "end",
            "outliers-label",
            &format!("{} > fence", outliers.len()),
        );
        let px = x.px(f);
        svg.line(
            (px, TOP),
            (px, H - BOTTOM),
            r##"class="fence" stroke="#e07b00" stroke-dasharray="2 3""##,
        );
    }
    for v in &us {
        let px = if is_outlier(*v) {
            outlier_px + 12.0
        } else {
            x.px(*v)
        };
        svg.line(
            (px, H - BOTTOM - 10.0),
            (px, H - BOTTOM - 2.0),
            r##"class="strip" stroke="#4a5260" stroke-opacity="0.35""##,
        );
    }
    if let Some(m) = median_s {
        let px = x.px(m * 1e6);
        svg.line(
            (px, TOP),
            (px, H - BOTTOM),
            r##"class="median" stroke="#c62828" stroke-dasharray="4 3""##,
        );
        svg.text(
            px + 3.0,
            TOP + 10.0,
            "start",
            "median-label",
            &format!("median {} µs", short(m * 1e6)),
        );
    }
    svg.finish()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_every_iteration() {
        let times: Vec<f64> = (0..100).map(|i| 1e-5 + f64::from(i % 10) * 1e-7).collect();
        let svg = histogram(&times, Some(1.04e-5), None);
        assert_eq!(svg.matches(r#"class="strip""#).count(), 100);
        let total: usize = svg
            .split("<title>")
            .skip(1)
            .filter_map(|s| s.split(' ').next()?.parse::<usize>().ok())
            .sum();
        assert_eq!(total, 100, "{svg}");
        assert!(svg.contains("median 10.4 µs"), "{svg}");
    }

    #[test]
    fn histogram_puts_outliers_beyond_the_fence_in_their_own_bar() {
        let mut times: Vec<f64> = (0..100).map(|i| 1e-5 + f64::from(i % 10) * 1e-7).collect();
        times[3] = 1e-3;
        times[50] = 5e-4;
        let svg = histogram(&times, Some(1.04e-5), Some(1.2e-5));
        assert!(svg.contains(r#"class="outliers""#), "{svg}");
        assert!(
            svg.contains(
                "2 iterations above the Tukey fence (Q3 + 1.5 IQR = 12.0 µs), up to 1000 µs"
            ),
            "{svg}"
        );
        assert!(
            svg.contains("2 &gt; fence") || svg.contains("2 > fence"),
            "{svg}"
        );
        // The bulk keeps its resolution: the axis ends near the fence, not at 1000 µs.
        assert!(!svg.contains(">1000<"), "{svg}");
        assert_eq!(svg.matches(r#"class="strip""#).count(), 100);
        // Without outliers there is no such bar.
        let quiet = histogram(&times[4..50], Some(1.04e-5), Some(1.2e-5));
        assert!(!quiet.contains(r#"class="outliers""#), "{quiet}");
    }
}
