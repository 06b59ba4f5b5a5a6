//! A small SVG writer for the dashboard's charts: drawn on the server, so every chart shows with
//! JavaScript disabled, and each mark carries a `<title>` tooltip. The charts: a series over time
//! with a band ([`series_chart`]), a histogram of iteration times ([`histogram`]), a power trace
//! with the kernel window ([`power_chart`]), a device's roofline ([`roofline_chart`]) and the
//! compare page's devices side by side ([`compare_chart`]).

use std::fmt::Write;

mod compare;
pub use compare::{RatioCell, RatioRow, compare_chart};

const W: f64 = 760.0;
const H: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 42.0;

/// Escapes text for SVG/HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value axis: linear or log10, mapping data to pixels.
#[derive(Debug, Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    px_lo: f64,
    px_hi: f64,
}

impl Axis {
    /// An axis covering `values` (with a little headroom); `log` needs positive values and falls
    /// back to linear without them.
    fn fit(values: impl Iterator<Item = f64>, log: bool, px_lo: f64, px_hi: f64) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            // Nothing to fit: a decade on a log axis (log10(0) would be -inf, and its ticks
            // endless), [0, 1] on a linear one.
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            let (l, h) = (lo.log10(), hi.log10());
            let pad = ((h - l) * 0.08).max(0.05);
            return Axis {
                lo: l - pad,
                hi: h + pad,
                log,
                px_lo,
                px_hi,
            };
        }
        if hi - lo < f64::EPSILON * hi.abs().max(1.0) {
            let d = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
            (lo, hi) = (lo - d, hi + d);
        }
        let pad = (hi - lo) * 0.08;
        let lo = if lo >= 0.0 && lo - pad < 0.0 {
            0.0
        } else {
            lo - pad
        };
        Axis {
            lo,
            hi: hi + pad,
            log,
            px_lo,
            px_hi,
        }
    }

    fn px(&self, v: f64) -> f64 {
        let v = if self.log {
            v.max(f64::MIN_POSITIVE).log10()
        } else {
            v
        };
        let t = (v - self.lo) / (self.hi - self.lo);
        self.px_lo + t * (self.px_hi - self.px_lo)
    }

    /// About `n` round tick values inside the axis.
    fn ticks(&self, n: usize) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.floor() as i32, self.hi.ceil() as i32);
            let mut out = Vec::new();
            for e in a..=b {
                for m in [1.0, 2.0, 5.0] {
                    let v = m * 10f64.powi(e);
                    let l = v.log10();
                    if l >= self.lo && l <= self.hi {
                        out.push(v);
                    }
                }
            }
            if out.len() > n * 2 {
                out.retain(|v| (v.log10().fract()).abs() < 1e-9);
            }
            return out;
        }
        let span = self.hi - self.lo;
        let raw = span / n.max(1) as f64;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| span / s <= n as f64 + 0.5)
            .unwrap_or(mag * 10.0);
        let mut v = (self.lo / step).ceil() * step;
        let mut out = Vec::new();
        while v <= self.hi + step * 1e-9 && out.len() < 50 {
            out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
            v += step;
        }
        out
    }
}

/// Short number for a tick label.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// An SVG document under construction.
struct Svg {
    out: String,
}

impl Svg {
    fn new(class: &str, label: &str) -> Svg {
        Svg::tall(class, label, H)
    }

    /// A chart of the usual width and `height` pixels (one that grows with its rows).
    fn tall(class: &str, label: &str, height: f64) -> Svg {
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="{}" viewBox="0 0 {W} {height:.0}" width="{W}" height="{height:.0}" role="img" aria-label="{}" font-family="system-ui, sans-serif" font-size="11">"#,
            esc(class),
            esc(label)
        );
        Svg { out }
    }

    fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn text(&mut self, x: f64, y: f64, anchor: &str, class: &str, s: &str) {
        let _ = write!(
            self.out,
            r##"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" class="{class}" fill="#4a5260">{}</text>"##,
            esc(s)
        );
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
        let _ = write!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {style}/>"#
        );
    }

    /// Grid lines and labels of a y axis, and the frame.
    fn y_axis(&mut self, y: &Axis, unit: &str) {
        for t in y.ticks(5) {
            let py = y.px(t);
            self.line((LEFT, py), (W - RIGHT, py), r##"stroke="#e6e9ee""##);
            self.text(LEFT - 6.0, py + 4.0, "end", "tick", &short(t));
        }
        self.line((LEFT, TOP), (LEFT, H - BOTTOM), r##"stroke="#9aa1ab""##);
        self.line(
            (LEFT, H - BOTTOM),
            (W - RIGHT, H - BOTTOM),
            r##"stroke="#9aa1ab""##,
        );
        let _ = write!(
            self.out,
            r##"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle" fill="#4a5260">{}</text>"##,
            (TOP + H - BOTTOM) / 2.0,
            (TOP + H - BOTTOM) / 2.0,
            esc(unit)
        );
    }

    fn x_ticks(&mut self, x: &Axis, label: impl Fn(f64) -> String, caption: &str) {
        for t in x.ticks(6) {
            let px = x.px(t);
            self.line(
                (px, H - BOTTOM),
                (px, H - BOTTOM + 4.0),
                r##"stroke="#9aa1ab""##,
            );
            // A label that would run past the right edge is left out.
            if px + 3.5 * label(t).len() as f64 <= W {
                self.text(px, H - BOTTOM + 16.0, "middle", "tick", &label(t));
            }
        }
        self.text(
            (LEFT + W - RIGHT) / 2.0,
            H - 6.0,
            "middle",
            "caption",
            caption,
        );
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}

/// One point of a series: when, the value, its band and how to show it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoint {
    /// Unix seconds.
    pub t: f64,
    pub value: f64,
    /// The p10–p90 band in the metric's unit, when known.
    pub band: Option<(f64, f64)>,
    /// `alert-regression`, `alert-improvement`, `confirm`, `noisy` or empty: a CSS class and a
    /// distinct mark.
    pub mark: String,
    /// Tooltip.
    pub title: String,
    /// Where a click goes (the result page).
    pub href: String,
}

/// A labelled vertical line: where the fingerprint changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Boundary {
    pub t: f64,
    pub label: String,
}

/// A series over time with its band, marks and segment boundaries. `unit` labels the y axis;
/// `log` draws it on a log10 scale.
pub fn series_chart(
    points: &[SeriesPoint],
    boundaries: &[Boundary],
    unit: &str,
    log: bool,
) -> String {
    let mut svg = Svg::new("series", &format!("{} points", points.len()));
    let x = Axis::fit(
        points
            .iter()
            .map(|p| p.t)
            .chain(boundaries.iter().map(|b| b.t)),
        false,
        LEFT,
        W - RIGHT,
    );
    let y = Axis::fit(
        points.iter().flat_map(|p| {
            let (lo, hi) = p.band.unwrap_or((p.value, p.value));
            [p.value, lo, hi]
        }),
        log,
        H - BOTTOM,
        TOP,
    );
    svg.y_axis(&y, &format!("{unit}{}", if log { " (log)" } else { "" }));
    let span = x.hi - x.lo;
    svg.x_ticks(&x, |t| date_label(t, span), "time (UTC)");
    // The band as one polygon: p90 forwards, p10 backwards.
    let banded: Vec<&SeriesPoint> = points.iter().filter(|p| p.band.is_some()).collect();
    if banded.len() > 1 {
        let mut pts = String::new();
        for p in &banded {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                x.px(p.t),
                y.px(p.band.unwrap_or_default().1)
            );
        }
        for p in banded.iter().rev() {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                x.px(p.t),
                y.px(p.band.unwrap_or_default().0)
            );
        }
        svg.raw(&format!(r##"<polygon class="band" points="{}" fill="#2458b3" fill-opacity="0.13" stroke="none"/>"##, pts.trim_end()));
    }
    if points.len() > 1 {
        let line: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x.px(p.t), y.px(p.value)))
            .collect();
        svg.raw(&format!(r##"<polyline class="median" points="{}" fill="none" stroke="#2458b3" stroke-width="1.5"/>"##, line.join(" ")));
    }
    for b in boundaries {
        let px = x.px(b.t);
        svg.line(
            (px, TOP),
            (px, H - BOTTOM),
            r##"class="boundary" stroke="#b26a00" stroke-dasharray="4 3""##,
        );
        svg.text(px + 3.0, TOP + 10.0, "start", "boundary-label", &b.label);
    }
    // Alerts last, so no other mark covers them.
    let (alerts, rest): (Vec<&SeriesPoint>, Vec<&SeriesPoint>) =
        points.iter().partition(|p| p.mark.starts_with("alert"));
    for p in rest.into_iter().chain(alerts) {
        let (px, py) = (x.px(p.t), y.px(p.value));
        let title = format!("<title>{}</title>", esc(&p.title));
        let mark = match p.mark.as_str() {
            "alert-regression" | "alert-improvement" => {
                let color = if p.mark == "alert-regression" {
                    "#c62828"
                } else {
                    "#1a7f37"
                };
                format!(
                    r##"<path class="pt alert {m}" d="M{:.1},{:.1} l6,10 h-12 z" fill="{color}" stroke="#fff">{title}</path>"##,
                    px,
                    py - 6.0,
                    m = p.mark
                )
            }
            "confirm" => format!(
                r##"<circle class="pt confirm" cx="{px:.1}" cy="{py:.1}" r="4" fill="#fff" stroke="#2458b3" stroke-width="1.5">{title}</circle>"##
            ),
            "noisy" => format!(
                r##"<circle class="pt noisy" cx="{px:.1}" cy="{py:.1}" r="3.5" fill="#fff" stroke="#b26a00" stroke-dasharray="2 1">{title}</circle>"##
            ),
            _ => format!(
                r##"<circle class="pt" cx="{px:.1}" cy="{py:.1}" r="3" fill="#2458b3">{title}</circle>"##
            ),
        };
        if p.href.is_empty() {
            svg.raw(&mark);
        } else {
            svg.raw(&format!(r#"<a href="{}">{mark}</a>"#, esc(&p.href)));
        }
    }
    svg.finish()
}

/// A date label for a tick, coarser when the axis spans more.
fn date_label(t: f64, span_s: f64) -> String {
    let secs = t.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = crate::time::civil_from_days(days);
    if span_s > 3.0 * 86_400.0 {
        format!("{y:04}-{m:02}-{d:02}")
    } else {
        format!("{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
    }
}

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
    svg.y_axis(&y, "iterations");
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
        svg.text(
            outlier_px + 12.0,
            H - BOTTOM + 12.0,
            "middle",
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

/// One result on a roofline: its operational intensity and achieved arithmetic rate.
#[derive(Debug, Clone, PartialEq)]
pub struct RoofPoint {
    /// FLOPs per byte of the problem.
    pub intensity: f64,
    pub gflops: f64,
    /// A CSS class naming its family (`gemm`, `ceiling`...), for the legend's colours.
    pub family: String,
    /// Tooltip.
    pub title: String,
    /// Where a click goes (the result page).
    pub href: String,
}

/// A roofline: memory bandwidth up to the ridge, then the arithmetic peak.
#[derive(Debug, Clone, PartialEq)]
pub struct Roof {
    pub gbps: f64,
    pub gflops: f64,
    /// Measured (solid) or theoretical (dashed).
    pub measured: bool,
    pub label: String,
}

/// The colour of a point's family.
fn family_color(family: &str) -> &'static str {
    match family {
        "gemm" => "#2458b3",
        "conv" => "#5c7cfa",
        "network" => "#7b3fb3",
        "transformer" => "#b3246b",
        "memory" => "#1a7f37",
        "rows" => "#0b7285",
        "ceiling" => "#b26a00",
        _ => "#4a5260",
    }
}

/// A device's roofline on log-log axes (FLOP/byte against GFLOP/s): each roof as a line rising
/// with the bandwidth to its ridge and flat at its peak (measured solid, theoretical dashed), and
/// every result at its operational intensity, a `<title>` tooltip and a link each.
pub fn roofline_chart(points: &[RoofPoint], roofs: &[Roof]) -> String {
    let mut svg = Svg::new("roofline", &format!("{} results", points.len()));
    let roofs: Vec<&Roof> = roofs
        .iter()
        .filter(|r| r.gbps > 0.0 && r.gflops > 0.0)
        .collect();
    let x = Axis::fit(
        points
            .iter()
            .map(|p| p.intensity)
            .chain([1.0 / 16.0, 256.0])
            .chain(roofs.iter().map(|r| r.gflops / r.gbps)),
        true,
        LEFT,
        W - RIGHT,
    );
    let (x_lo, x_hi) = (10f64.powf(x.lo), 10f64.powf(x.hi));
    let y = Axis::fit(
        points
            .iter()
            .map(|p| p.gflops)
            .chain(roofs.iter().flat_map(|r| [r.gflops, r.gbps * x_lo])),
        true,
        H - BOTTOM,
        TOP,
    );
    let (y_lo, y_hi) = (10f64.powf(y.lo), 10f64.powf(y.hi));
    svg.y_axis(&y, "GFLOP/s (log)");
    svg.x_ticks(&x, short, "operational intensity (FLOP/byte, log)");
    for r in &roofs {
        let ridge = r.gflops / r.gbps;
        // From where the slope enters the plot to the ridge, then flat to the right edge.
        let start = x_lo.max(y_lo / r.gbps);
        let pts = [
            (start, r.gbps * start),
            (ridge.clamp(x_lo, x_hi), r.gflops.min(y_hi)),
            (x_hi, r.gflops.min(y_hi)),
        ];
        let line: Vec<String> = pts
            .iter()
            .map(|&(a, b)| format!("{:.1},{:.1}", x.px(a), y.px(b)))
            .collect();
        let (class, dash) = if r.measured {
            ("roof measured", "")
        } else {
            ("roof theoretical", r#" stroke-dasharray="6 4""#)
        };
        svg.raw(&format!(
            r##"<polyline class="{class}" points="{}" fill="none" stroke="#c62828" stroke-width="1.6"{dash}><title>{}: {} GB/s, {} GFLOP/s, ridge at {} FLOP/byte</title></polyline>"##,
            line.join(" "),
            esc(&r.label),
            short(r.gbps),
            short(r.gflops),
            short(ridge)
        ));
        // The label just past the ridge, above the flat part.
        let ridge_px = x.px(ridge.clamp(x_lo, x_hi));
        svg.text(
            (ridge_px + 6.0).min(W - RIGHT - 70.0),
            y.px(r.gflops.min(y_hi)) - 5.0,
            "start",
            "roof-label",
            &r.label,
        );
    }
    // A legend of the families shown, top left inside the plot.
    let mut families: Vec<&str> = Vec::new();
    for p in points {
        if !families.contains(&p.family.as_str()) {
            families.push(&p.family);
        }
    }
    if !families.is_empty() {
        svg.raw(&format!(
            r##"<rect class="legend-box" x="{:.1}" y="{:.1}" width="88" height="{:.1}" fill="#fff" fill-opacity="0.85"/>"##,
            LEFT + 4.0,
            TOP + 1.0,
            13.0 * families.len() as f64 + 4.0
        ));
    }
    for (i, f) in families.iter().enumerate() {
        let ly = TOP + 10.0 + 13.0 * i as f64;
        svg.raw(&format!(
            r##"<circle class="legend" cx="{:.1}" cy="{:.1}" r="3.5" fill="{}"/>"##,
            LEFT + 12.0,
            ly - 3.5,
            family_color(f)
        ));
        svg.text(LEFT + 20.0, ly, "start", "legend-label", f);
    }
    for p in points
        .iter()
        .filter(|p| p.intensity > 0.0 && p.gflops > 0.0)
    {
        let mark = format!(
            r##"<circle class="pt {}" cx="{:.1}" cy="{:.1}" r="3.5" fill="{}" fill-opacity="0.8"><title>{}</title></circle>"##,
            esc(&p.family),
            x.px(p.intensity),
            y.px(p.gflops),
            family_color(&p.family),
            esc(&p.title)
        );
        if p.href.is_empty() {
            svg.raw(&mark);
        } else {
            svg.raw(&format!(r#"<a href="{}">{mark}</a>"#, esc(&p.href)));
        }
    }
    svg.finish()
}

/// One power reading on the agent's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerReading {
    pub monotonic_ns: u64,
    pub watts: f64,
}

/// The power trace in seconds from its first sample, with the kernel window shaded and the idle
/// baseline drawn where known.
pub fn power_chart(
    readings: &[PowerReading],
    window_ns: Option<(u64, u64)>,
    idle_watts: Option<f64>,
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
    svg.x_ticks(&x, short, "seconds");
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
    fn a_log_axis_over_no_positive_value_is_one_decade() {
        // A series of zeros (roofline at 0 flops per byte is 0 GFLOP/s) on the log scale: the axis
        // once took log10(0) and looped over every exponent down to i32::MIN, until out of memory.
        let zero = |t: f64| SeriesPoint {
            t,
            value: 0.0,
            band: None,
            mark: String::new(),
            title: String::new(),
            href: String::new(),
        };
        let svg = series_chart(&[zero(1.0), zero(2.0)], &[], "GFLOP/s", true);
        assert!(
            svg.ends_with("</svg>") && svg.len() < 20_000,
            "{}",
            svg.len()
        );
        let y = Axis::fit([0.0, -3.0].into_iter(), true, 100.0, 0.0);
        assert_eq!((y.lo.floor(), y.hi.ceil()), (-1.0, 2.0), "{y:?}");
        assert!(y.ticks(5).len() < 10);
    }

    #[test]
    fn the_roofline_draws_each_roof_and_places_points_by_intensity() {
        let pt = |intensity: f64, gflops: f64| RoofPoint {
            intensity,
            gflops,
            family: "gemm".into(),
            title: format!("gemm at {intensity}"),
            href: format!("/runs/{}", intensity as i64),
        };
        let roofs = [
            Roof {
                gbps: 1000.0,
                gflops: 20000.0,
                measured: true,
                label: "measured".into(),
            },
            Roof {
                gbps: 2000.0,
                gflops: 40000.0,
                measured: false,
                label: "theoretical".into(),
            },
        ];
        let svg = roofline_chart(&[pt(0.5, 400.0), pt(100.0, 15000.0)], &roofs);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("class=\"roof measured\"").count(), 1);
        assert_eq!(svg.matches("class=\"roof theoretical\"").count(), 1);
        assert!(
            svg.contains("stroke-dasharray=\"6 4\""),
            "the theoretical roof is dashed"
        );
        assert!(svg.contains("ridge at 20.0 FLOP/byte"), "{svg}");
        assert_eq!(svg.matches("<circle class=\"pt gemm\"").count(), 2);
        assert!(
            svg.contains("<a href=\"/runs/100\">") && svg.contains("<title>gemm at 100</title>")
        );
        // Higher intensity is further right, higher GFLOP/s further up (the points, not the
        // legend's mark).
        let attr = |name: &str| -> Vec<f64> {
            svg.match_indices("<circle class=\"pt ")
                .map(|(i, _)| {
                    let at = svg[i..].find(name).unwrap() + i + name.len();
                    svg[at..].split('"').next().unwrap().parse().unwrap()
                })
                .collect()
        };
        let (cx, cy) = (attr("cx=\""), attr("cy=\""));
        assert!(cx[1] > cx[0] && cy[1] < cy[0], "{cx:?} {cy:?}");
        assert_eq!(
            svg.matches("class=\"legend-label\"").count(),
            1,
            "one family, one entry"
        );
        // No roofs and no points still makes a chart.
        assert!(roofline_chart(&[], &[]).ends_with("</svg>"));
    }

    fn pt(t: f64, v: f64, mark: &str) -> SeriesPoint {
        SeriesPoint {
            t,
            value: v,
            band: Some((v * 0.9, v * 1.1)),
            mark: mark.into(),
            title: format!("v={v}"),
            href: format!("/runs/{t}"),
        }
    }

    #[test]
    fn a_series_has_one_mark_per_point_and_its_alerts() {
        let pts: Vec<_> = (0..30)
            .map(|i| {
                pt(
                    1.7e9 + f64::from(i) * 86_400.0,
                    100.0 + f64::from(i),
                    if i == 20 { "alert-regression" } else { "" },
                )
            })
            .collect();
        let svg = series_chart(
            &pts,
            &[Boundary {
                t: 1.7e9 + 10.0 * 86_400.0,
                label: "driver 550→560".into(),
            }],
            "GFLOP/s",
            false,
        );
        assert_eq!(svg.matches(r#"class="pt"#).count(), 30, "{svg}");
        assert_eq!(svg.matches("alert-regression").count(), 1);
        assert!(svg.contains(r#"class="band""#) && svg.contains(r#"class="boundary""#));
        assert!(svg.contains("driver 550→560"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn text_is_escaped() {
        let mut p = pt(1.0, 2.0, "");
        p.title = "<script>alert(1)</script> & \"x\"".into();
        let svg = series_chart(
            &[p],
            &[Boundary {
                t: 1.0,
                label: "<b>".into(),
            }],
            "<u>",
            false,
        );
        assert!(
            !svg.contains("<script>") && !svg.contains("<b>") && !svg.contains("<u>"),
            "{svg}"
        );
        assert!(svg.contains("&lt;script&gt;"));
    }

    #[test]
    fn log_scale_maps_decades_evenly_and_skips_nonpositive_values() {
        let a = Axis::fit([1.0, 10.0, 100.0, 0.0, -5.0].into_iter(), true, 100.0, 0.0);
        let (p1, p10, p100) = (a.px(1.0), a.px(10.0), a.px(100.0));
        assert!(((p1 - p10) - (p10 - p100)).abs() < 1e-9);
        assert!(a.ticks(5).iter().all(|t| *t > 0.0));
        let lin = Axis::fit([0.0, 7.3].into_iter(), false, 0.0, 100.0);
        let t = lin.ticks(5);
        assert!(t.len() >= 3 && t[0] == 0.0, "{t:?}");
    }

    #[test]
    fn flat_and_empty_series_still_draw() {
        let flat: Vec<_> = (0..3).map(|i| pt(f64::from(i), 5.0, "")).collect();
        assert!(series_chart(&flat, &[], "us", true).contains("class=\"pt\""));
        assert!(series_chart(&[], &[], "us", false).ends_with("</svg>"));
        assert!(histogram(&[], None, None).ends_with("</svg>"));
        assert!(power_chart(&[], None, None).ends_with("</svg>"));
    }

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

    #[test]
    fn power_chart_marks_the_window_and_idle_line() {
        let r: Vec<_> = (0..50)
            .map(|i| PowerReading {
                monotonic_ns: 1_000_000_000 + i * 20_000_000,
                watts: if (10..40).contains(&i) { 250.0 } else { 60.0 },
            })
            .collect();
        let svg = power_chart(&r, Some((1_200_000_000, 1_800_000_000)), Some(58.0));
        assert!(svg.contains(r#"class="window""#) && svg.contains("kernel window 0.600 s"));
        assert!(svg.contains(r#"class="idle""#) && svg.contains("idle 58.0 W"));
        assert!(svg.contains(r#"class="trace""#));
    }
}
