//! What every chart draws with: the plot's size and margins, escaping, a linear or log axis
//! mapping data to pixels with round ticks, short tick labels, and the SVG document under
//! construction (text, lines, the y axis and x ticks). Below the charts, which only place marks.

use std::fmt::Write;

pub(super) const W: f64 = 760.0;
pub(super) const H: f64 = 300.0;
pub(super) const LEFT: f64 = 64.0;
pub(super) const RIGHT: f64 = 16.0;
pub(super) const TOP: f64 = 18.0;
pub(super) const BOTTOM: f64 = 42.0;

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
pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) log: bool,
    pub(super) px_lo: f64,
    pub(super) px_hi: f64,
}

impl Axis {
    /// An axis covering `values` (with a little headroom); `log` needs positive values and falls
    /// back to linear without them.
    pub(super) fn fit(
        values: impl Iterator<Item = f64>,
        log: bool,
        px_lo: f64,
        px_hi: f64,
    ) -> Axis {
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

    pub(super) fn px(&self, v: f64) -> f64 {
        let v = if self.log {
            v.max(f64::MIN_POSITIVE).log10()
        } else {
            v
        };
        let t = (v - self.lo) / (self.hi - self.lo);
        self.px_lo + t * (self.px_hi - self.px_lo)
    }

    /// About `n` round tick values inside the axis.
    pub(super) fn ticks(&self, n: usize) -> Vec<f64> {
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
    short_plus(v, 0)
}

/// `short` with `extra` more digits after the point.
fn short_plus(v: f64, extra: usize) -> String {
    let a = v.abs();
    let digits = if a == 0.0 {
        return "0".into();
    } else if !(1e-3..1e6).contains(&a) {
        return format!("{v:.*e}", 1 + extra);
    } else if a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        3
    };
    format!("{v:.*}", digits + extra)
}

/// Labels for one axis's ticks: `short`, with more digits where that would write two ticks alike
/// (an axis around one value, say 10.08 to 10.12, whose ticks `short` all writes "10.1").
pub(super) fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let mut labels = Vec::new();
    for extra in 0..=6 {
        labels = ticks.iter().map(|&t| short_plus(t, extra)).collect();
        let distinct: std::collections::HashSet<&String> = labels.iter().collect();
        if distinct.len() == labels.len() {
            break;
        }
    }
    labels
}

/// An SVG document under construction.
pub(super) struct Svg {
    pub(super) out: String,
}

impl Svg {
    pub(super) fn new(class: &str, label: &str) -> Svg {
        Svg::tall(class, label, H)
    }

    /// A chart of the usual width and `height` pixels (one that grows with its rows).
    pub(super) fn tall(class: &str, label: &str, height: f64) -> Svg {
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="{}" viewBox="0 0 {W} {height:.0}" width="{W}" height="{height:.0}" role="img" aria-label="{}" font-family="system-ui, sans-serif" font-size="11">"#,
            esc(class),
            esc(label)
        );
        Svg { out }
    }

    pub(super) fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    pub(super) fn text(&mut self, x: f64, y: f64, anchor: &str, class: &str, s: &str) {
        let _ = write!(
            self.out,
            r##"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" class="{class}" fill="#4a5260">{}</text>"##,
            esc(s)
        );
    }

    pub(super) fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
        let _ = write!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {style}/>"#
        );
    }

    /// Grid lines and labels of a y axis, and the frame.
    pub(super) fn y_axis(&mut self, y: &Axis, unit: &str) {
        self.y_axis_of(y, unit, false);
    }

    /// A y axis of counts: whole-number ticks only, written as integers (`10`, not `10.0`).
    pub(super) fn y_axis_counts(&mut self, y: &Axis, unit: &str) {
        self.y_axis_of(y, unit, true);
    }

    fn y_axis_of(&mut self, y: &Axis, unit: &str, counts: bool) {
        let ticks: Vec<f64> = y
            .ticks(5)
            .into_iter()
            .filter(|t| !counts || t.fract() == 0.0)
            .collect();
        let labels = if counts {
            ticks.iter().map(|t| format!("{t:.0}")).collect()
        } else {
            tick_labels(&ticks)
        };
        for (t, text) in ticks.iter().zip(labels) {
            let py = y.px(*t);
            self.line((LEFT, py), (W - RIGHT, py), r##"stroke="#e6e9ee""##);
            self.text(LEFT - 6.0, py + 4.0, "end", "tick tick-y", &text);
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

    pub(super) fn x_ticks(&mut self, x: &Axis, label: impl Fn(f64) -> String, caption: &str) {
        let mut last = String::new();
        for t in x.ticks(6) {
            let px = x.px(t);
            self.line(
                (px, H - BOTTOM),
                (px, H - BOTTOM + 4.0),
                r##"stroke="#9aa1ab""##,
            );
            // A label that would run past the right edge is left out, and so is one that says
            // what the one before it said (a coarser unit than the ticks' spacing).
            let text = label(t);
            if px + 3.5 * text.len() as f64 <= W && text != last {
                self.text(px, H - BOTTOM + 16.0, "middle", "tick tick-x", &text);
            }
            last = text;
        }
        self.text(
            (LEFT + W - RIGHT) / 2.0,
            H - 6.0,
            "middle",
            "caption",
            caption,
        );
    }

    pub(super) fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}
#[cfg(test)]
mod tests {
    use super::*;

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
    fn ticks_around_one_value_get_the_digits_that_tell_them_apart() {
        // One point at 10.1 with a small spread, as a history of one run draws it.
        let a = Axis::fit([10.08, 10.12].into_iter(), false, 0.0, 100.0);
        let ticks = a.ticks(5);
        assert!(ticks.len() >= 3, "{ticks:?}");
        assert!(ticks.iter().all(|t| short(*t) == "10.1"), "{ticks:?}");
        let labels = tick_labels(&ticks);
        let distinct: std::collections::HashSet<&String> = labels.iter().collect();
        assert_eq!(distinct.len(), labels.len(), "{labels:?}");
        assert!(labels.iter().all(|l| l.starts_with("10.")), "{labels:?}");
        // Ticks `short` already tells apart keep its form.
        assert_eq!(tick_labels(&[0.0, 20.0, 40.0]), ["0", "20.0", "40.0"]);
        assert_eq!(tick_labels(&[2e6, 4e6]), ["2.0e6", "4.0e6"]);
    }
}
