//! The history page's chart: a series over time with its p10–p90 band, a mark per result (alerts,
//! confirmations and noisy runs drawn apart) and the fingerprint boundaries.

use std::fmt::Write;

use super::canvas::{Axis, BOTTOM, H, LEFT, RIGHT, Svg, TOP, W, esc};

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
    // Times within a minute of each other (one point, or a burst of runs) get a ten-minute axis
    // around them, not the ±10 % of the epoch a degenerate linear axis would take.
    let times = || {
        points
            .iter()
            .map(|p| p.t)
            .chain(boundaries.iter().map(|b| b.t))
    };
    let (t_lo, t_hi) = times().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), t| {
        (lo.min(t), hi.max(t))
    });
    let widen = if t_lo.is_finite() && t_hi - t_lo < 60.0 {
        let mid = (t_lo + t_hi) / 2.0;
        vec![mid - 300.0, mid + 300.0]
    } else {
        Vec::new()
    };
    let x = Axis::fit(times().chain(widen), false, LEFT, W - RIGHT);
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
    } else if span_s > 3.0 * 3600.0 {
        format!("{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
    } else {
        // Within hours, ticks minutes apart: the seconds tell them apart.
        format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
    }
}
#[cfg(test)]
mod tests {
    use super::super::canvas::Axis;
    use super::super::histogram::histogram;
    use super::super::power::power_chart;
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
    fn flat_and_empty_series_still_draw() {
        let flat: Vec<_> = (0..3).map(|i| pt(f64::from(i), 5.0, "")).collect();
        assert!(series_chart(&flat, &[], "us", true).contains("class=\"pt\""));
        assert!(series_chart(&[], &[], "us", false).ends_with("</svg>"));
        assert!(histogram(&[], None, None).ends_with("</svg>"));
        assert!(power_chart(&[], None, None, "seconds").ends_with("</svg>"));
    }
}
