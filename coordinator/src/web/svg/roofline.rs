//! The device page's roofline: each roof (measured or theoretical) up to its ridge and flat at its
//! peak, on log-log axes, and every result at its operational intensity, coloured by family.

use super::canvas::{Axis, BOTTOM, H, LEFT, RIGHT, Svg, TOP, W, esc, short};
use gpufleet_kernels::KernelGroup;

/// One result on a roofline: its operational intensity and achieved arithmetic rate.
#[derive(Debug, Clone, PartialEq)]
pub struct RoofPoint {
    /// FLOPs per byte of the problem.
    pub intensity: f64,
    pub gflops: f64,
    /// Its kernel's group, as the catalog says: the point's colour, CSS class and legend entry.
    pub family: KernelGroup,
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

/// The colour of a point's group.
fn family_color(family: KernelGroup) -> &'static str {
    match family {
        KernelGroup::Gemm => "#2458b3",
        KernelGroup::Conv => "#5c7cfa",
        KernelGroup::Network => "#7b3fb3",
        KernelGroup::Transformer => "#b3246b",
        KernelGroup::Memory => "#1a7f37",
        KernelGroup::Rows => "#0b7285",
        KernelGroup::Ceiling => "#b26a00",
        KernelGroup::Other => "#4a5260",
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
    // The families shown, for the legend at the right of the plot (outside it: no roof or
    // point is ever under it).
    let mut families: Vec<KernelGroup> = Vec::new();
    for p in points {
        if !families.contains(&p.family) {
            families.push(p.family);
        }
    }
    let plot_right = if families.is_empty() {
        W - RIGHT
    } else {
        W - RIGHT - LEGEND_W
    };
    let x = Axis::fit(
        points
            .iter()
            .map(|p| p.intensity)
            .chain([1.0 / 16.0, 256.0])
            .chain(roofs.iter().map(|r| r.gflops / r.gbps)),
        true,
        LEFT,
        plot_right,
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
            (ridge_px + 6.0).min(plot_right - 70.0),
            y.px(r.gflops.min(y_hi)) - 5.0,
            "start",
            "roof-label",
            &r.label,
        );
    }
    let (lx, ly0) = (plot_right + 10.0, TOP + 1.0);
    if !families.is_empty() {
        svg.raw(&format!(
            r##"<rect class="legend-box" x="{lx:.1}" y="{ly0:.1}" width="{:.1}" height="{:.1}" fill="#fff"/>"##,
            LEGEND_W - 10.0,
            13.0 * families.len() as f64 + 4.0
        ));
    }
    for (i, f) in families.iter().enumerate() {
        let ly = ly0 + 9.0 + 13.0 * i as f64;
        svg.raw(&format!(
            r##"<circle class="legend" cx="{:.1}" cy="{:.1}" r="3.5" fill="{}"/>"##,
            lx + 8.0,
            ly - 3.5,
            family_color(*f)
        ));
        svg.text(lx + 16.0, ly, "start", "legend-label", f.name());
    }
    for p in points
        .iter()
        .filter(|p| p.intensity > 0.0 && p.gflops > 0.0)
    {
        let mark = format!(
            r##"<circle class="pt {}" cx="{:.1}" cy="{:.1}" r="3.5" fill="{}" fill-opacity="0.8"><title>{}</title></circle>"##,
            p.family.name(),
            x.px(p.intensity),
            y.px(p.gflops),
            family_color(p.family),
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
/// Width kept right of the plot for the legend of families.
const LEGEND_W: f64 = 96.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roofline_draws_each_roof_and_places_points_by_intensity() {
        let pt = |intensity: f64, gflops: f64| RoofPoint {
            intensity,
            gflops,
            family: KernelGroup::Gemm,
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

    #[test]
    fn the_legend_stands_right_of_every_roof() {
        let roofs = [Roof {
            gbps: 10.0,
            gflops: 1e6,
            measured: false,
            label: "theoretical".into(),
        }];
        let p = RoofPoint {
            intensity: 1.0,
            gflops: 5.0,
            family: KernelGroup::Gemm,
            title: String::new(),
            href: String::new(),
        };
        let svg = roofline_chart(&[p], &roofs);
        let num = |after: &str, name: &str| -> f64 {
            let at = svg.find(after).unwrap();
            let at = svg[at..].find(name).unwrap() + at + name.len();
            svg[at..].split('"').next().unwrap().parse().unwrap()
        };
        let legend_x = num("class=\"legend-box\"", " x=\"");
        let at = svg.find("class=\"roof theoretical\" points=\"").unwrap() + 33;
        let points = svg[at..].split('"').next().unwrap();
        for pt in points.split(' ') {
            let x: f64 = pt.split(',').next().unwrap().parse().unwrap();
            assert!(x < legend_x, "roof at x {x}, legend at {legend_x}");
        }
    }
}
