//! The groups page's strip plot: one spec of one sibling group, a dot per device along the value
//! axis, the group's median as a line, each outlier a larger red dot linked to its result.

use super::canvas::{Axis, LEFT, RIGHT, Svg, W, esc, short, tick_labels};

/// A strip's height, pixels.
const STRIP_H: f64 = 70.0;
/// Where the dots sit (top to bottom) and the axis line.
const DOTS: (f64, f64) = (10.0, 40.0);
const AXIS_Y: f64 = 48.0;

/// One device on a strip.
pub struct StripDot {
    pub value: f64,
    /// `agent device`, for its tooltip.
    pub label: String,
    /// The result page, for an outlier's link.
    pub href: String,
    /// Why it is an outlier (its gap and likely cause), when it is one.
    pub outlier: Option<String>,
}

/// The strip of `dots` in `unit`, with the group's `median`.
pub fn strip_chart(dots: &[StripDot], median: f64, unit: &str, label: &str) -> String {
    let mut svg = Svg::tall("strip", label, STRIP_H);
    let x = Axis::fit(
        dots.iter().map(|d| d.value).chain([median]),
        false,
        LEFT,
        W - RIGHT,
    );
    svg.line((LEFT, AXIS_Y), (W - RIGHT, AXIS_Y), r##"stroke="#9aa1ab""##);
    let ticks = x.ticks(6);
    for (t, text) in ticks.iter().zip(tick_labels(&ticks)) {
        let px = x.px(*t);
        svg.line((px, AXIS_Y), (px, AXIS_Y + 4.0), r##"stroke="#9aa1ab""##);
        svg.text(px, AXIS_Y + 16.0, "middle", "tick tick-x", &text);
    }
    svg.text(LEFT - 6.0, AXIS_Y + 16.0, "end", "caption", unit);
    let m = x.px(median);
    svg.line(
        (m, DOTS.0 - 4.0),
        (m, AXIS_Y),
        r##"class="median" stroke="#2458b3" stroke-dasharray="4 3""##,
    );
    // Siblings first, outliers on top; each dot at a height of its own so a crowd stays visible.
    let span = DOTS.1 - DOTS.0;
    let mut order: Vec<(usize, &StripDot)> = dots.iter().enumerate().collect();
    order.sort_by_key(|(_, d)| d.outlier.is_some());
    for (i, d) in order {
        let y = DOTS.0 + (i as f64 * 0.618_034).fract() * span;
        let px = x.px(d.value);
        match &d.outlier {
            None => svg.raw(&format!(
                r##"<circle class="dot" cx="{px:.1}" cy="{y:.1}" r="2.5" fill="#4a5260" fill-opacity="0.55"><title>{} {} {}</title></circle>"##,
                esc(&d.label),
                short(d.value),
                esc(unit)
            )),
            Some(why) => svg.raw(&format!(
                r##"<a href="{}"><circle class="dot outlier" cx="{px:.1}" cy="{y:.1}" r="5" fill="#c62828"><title>{} {} {}: {}</title></circle></a>"##,
                esc(&d.href),
                esc(&d.label),
                short(d.value),
                esc(unit),
                esc(why)
            )),
        }
    }
    svg.finish()
}
