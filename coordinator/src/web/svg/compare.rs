//! The compare page's chart: each device's figure for each spec relative to a reference (the
//! baseline column, or the best device of the row), as grouped bars for a few specs and as a heat
//! map for many. Ratios are oriented so that above 1 is better whichever way the metric improves,
//! and drawn on a log scale, so ×2 and ×½ are the same distance from the reference.

use super::canvas::{Axis, Svg, W, esc, short};
use std::fmt::Write;

/// One device's cell of one spec.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioCell {
    /// The figure relative to the reference (above 1 is better); `None` for a run that did not end
    /// `ok` or a row without a reference figure.
    pub ratio: Option<f64>,
    /// Whether this cell is the reference itself (the baseline column).
    pub reference: bool,
    /// Tooltip.
    pub title: String,
    /// Where a click goes (the result page).
    pub href: String,
}

/// One spec: its label and a cell per column (`None` where the device has no result).
#[derive(Debug, Clone, PartialEq)]
pub struct RatioRow {
    pub label: String,
    pub cells: Vec<Option<RatioCell>>,
}

/// Most specs drawn as bars; more become a heat map.
const MAX_BAR_ROWS: usize = 16;
/// Most bars in one bar chart; more become a heat map.
const MAX_BARS: usize = 96;
/// Width of the spec labels on the left.
const LABEL_W: f64 = 236.0;
/// Longest spec label shown in full (the tooltip has all of it).
const LABEL_CHARS: usize = 34;
/// Colours of the columns (devices), in column order, repeating.
const PALETTE: [&str; 8] = [
    "#2458b3", "#c05621", "#1a7f37", "#7b3fb3", "#b3246b", "#0b7285", "#6b7380", "#b26a00",
];
/// The ratio at which a heat-map cell reaches its full colour (and beyond which it stays there).
const HEAT_FULL: f64 = 8.0;

/// The chart of `rows` over `columns` (device labels) against `reference` (`the baseline` or
/// `the best of each row`, for the captions): bars when they fit, else a heat map.
pub fn compare_chart(columns: &[String], rows: &[RatioRow], reference: &str) -> String {
    let bars: usize = rows.iter().map(|r| r.cells.iter().flatten().count()).sum();
    if rows.len() <= MAX_BAR_ROWS && bars <= MAX_BARS {
        bar_chart(columns, rows, reference)
    } else {
        heat_map(columns, rows, reference)
    }
}

/// `label` cut to `chars` characters, with an ellipsis when cut.
fn clip(label: &str, chars: usize) -> String {
    if label.chars().count() <= chars {
        return label.to_string();
    }
    let mut s: String = label.chars().take(chars.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// `label` in lines of at most `chars` characters, broken after a space or a dash (mid-word only
/// where a word is longer than a line), at most `max_lines` of them, the last clipped.
fn wrap(label: &str, chars: usize, max_lines: usize) -> Vec<String> {
    let chars = chars.max(2);
    let mut lines: Vec<String> = Vec::new();
    let mut rest: Vec<char> = label.chars().collect();
    while !rest.is_empty() && lines.len() + 1 < max_lines && rest.len() > chars {
        // The last break point within the line, else a hard cut.
        let cut = (1..=chars)
            .rev()
            .find(|&i| matches!(rest[i - 1], ' ' | '-' | ','))
            .unwrap_or(chars);
        let line: String = rest[..cut].iter().collect();
        lines.push(line.trim_end().to_string());
        rest.drain(..cut);
    }
    if !rest.is_empty() {
        lines.push(clip(&rest.iter().collect::<String>(), chars));
    }
    lines
}

/// `×1.23`, `×0.042`, `×120`.
fn ratio_text(r: f64) -> String {
    format!("×{}", short(r))
}

/// A spec's label at the left, right-aligned at `y`, with its full text as a tooltip.
fn spec_label(svg: &mut Svg, y: f64, label: &str) {
    let _ = write!(
        svg.out,
        r##"<text x="{:.1}" y="{y:.1}" text-anchor="end" class="spec" fill="#1f2430"><title>{}</title>{}</text>"##,
        LABEL_W - 8.0,
        esc(label),
        esc(&clip(label, LABEL_CHARS))
    );
}

/// `mark` wrapped in a link to `href` when there is one.
fn linked(href: &str, mark: String) -> String {
    if href.is_empty() {
        mark
    } else {
        format!(r#"<a href="{}">{mark}</a>"#, esc(href))
    }
}

/// One group of horizontal bars per spec, one bar per device from the reference line (×1) to its
/// ratio, coloured by device, with the ratio at the bar's end.
fn bar_chart(columns: &[String], rows: &[RatioRow], reference: &str) -> String {
    const PER_LINE: usize = 4;
    const LEGEND_STEP: f64 = 15.0;
    const BAR: f64 = 9.0;
    const BAR_STEP: f64 = 12.0;
    const GROUP_GAP: f64 = 10.0;
    const AXIS_H: f64 = 40.0;
    let legend_h = columns.len().div_ceil(PER_LINE) as f64 * LEGEND_STEP + 8.0;
    let group_h = columns.len() as f64 * BAR_STEP + GROUP_GAP;
    let top = legend_h + 10.0;
    let plot_bottom = top + rows.len() as f64 * group_h;
    let height = plot_bottom + AXIS_H;
    let mut svg = Svg::tall(
        "compare-chart bars",
        &format!(
            "{} specs on {} devices against {reference}",
            rows.len(),
            columns.len()
        ),
        height,
    );
    for (i, c) in columns.iter().enumerate() {
        let (lx, ly) = (
            8.0 + (i % PER_LINE) as f64 * ((W - 16.0) / PER_LINE as f64),
            14.0 + (i / PER_LINE) as f64 * LEGEND_STEP,
        );
        let _ = write!(
            svg.out,
            r##"<rect class="legend" x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{}"/>"##,
            ly - 9.0,
            PALETTE[i % PALETTE.len()]
        );
        let _ = write!(
            svg.out,
            r##"<text x="{:.1}" y="{ly:.1}" class="legend-label" fill="#4a5260"><title>{}</title>{}</text>"##,
            lx + 14.0,
            esc(c),
            esc(&clip(c, 28))
        );
    }
    // Room left of the plot for the ratio written at the end of a bar that points left.
    let x = Axis::fit(
        rows.iter()
            .flat_map(|r| r.cells.iter().flatten().filter_map(|c| c.ratio))
            .chain([1.0]),
        true,
        LABEL_W + 44.0,
        W - 52.0,
    );
    let one = x.px(1.0);
    for t in x.ticks(6) {
        let px = x.px(t);
        svg.line((px, top - 4.0), (px, plot_bottom), r##"stroke="#eef0f3""##);
        svg.text(px, plot_bottom + 14.0, "middle", "tick", &ratio_text(t));
    }
    svg.line(
        (one, top - 6.0),
        (one, plot_bottom),
        r##"class="reference" stroke="#4a5260" stroke-dasharray="4 3""##,
    );
    svg.text(
        (LABEL_W + W) / 2.0,
        height - 8.0,
        "middle",
        "caption",
        &format!("relative to {reference} (log scale; right is better)"),
    );
    for (g, row) in rows.iter().enumerate() {
        let y0 = top + g as f64 * group_h;
        spec_label(&mut svg, y0 + (group_h - GROUP_GAP) / 2.0 + 4.0, &row.label);
        for (i, cell) in row.cells.iter().enumerate() {
            let Some(cell) = cell else { continue };
            let y = y0 + i as f64 * BAR_STEP;
            let color = PALETTE[i % PALETTE.len()];
            let Some(r) = cell.ratio else {
                let mark = format!(
                    r##"<text class="bar-missing" x="{:.1}" y="{:.1}" fill="#9aa1ab"><title>{}</title>no figure</text>"##,
                    one + 4.0,
                    y + BAR - 1.0,
                    esc(&cell.title)
                );
                svg.raw(&linked(&cell.href, mark));
                continue;
            };
            let end = x.px(r);
            let (left, width) = (one.min(end), (end - one).abs().max(2.0));
            let class = if cell.reference {
                "base"
            } else if r >= 1.0 {
                "better"
            } else {
                "worse"
            };
            let mark = format!(
                r##"<rect class="bar {class}" x="{:.1}" y="{y:.1}" width="{width:.1}" height="{BAR}" fill="{color}"><title>{}</title></rect>"##,
                if (end - one).abs() < 2.0 {
                    one - 1.0
                } else {
                    left
                },
                esc(&cell.title)
            );
            svg.raw(&linked(&cell.href, mark));
            let (tx, anchor) = if r >= 1.0 {
                (one.max(end) + 4.0, "start")
            } else {
                (end - 4.0, "end")
            };
            let label = if cell.reference {
                "baseline".to_string()
            } else {
                ratio_text(r)
            };
            svg.text(tx, y + BAR - 1.0, anchor, "ratio", &label);
        }
    }
    svg.finish()
}

/// The fill of a heat-map cell at ratio `r`: white at ×1, green towards ×8 and red towards ×⅛.
fn heat_color(r: f64) -> String {
    let t = (r.log2() / HEAT_FULL.log2()).clamp(-1.0, 1.0);
    let (red, green, blue) = if t >= 0.0 {
        (26.0, 127.0, 55.0)
    } else {
        (198.0, 40.0, 40.0)
    };
    let a = t.abs() * 0.85;
    let mix = |c: f64| (255.0 + (c - 255.0) * a).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(red), mix(green), mix(blue))
}

/// One row per spec and one column per device, each cell coloured by its ratio (green better, red
/// worse, grey the reference) and linked to its result.
fn heat_map(columns: &[String], rows: &[RatioRow], reference: &str) -> String {
    const ROW: f64 = 15.0;
    const KEY_H: f64 = 58.0;
    /// Lines of a column's label, and their height.
    const LABEL_LINES: usize = 3;
    const LINE_H: f64 = 12.0;
    let cols = columns.len().max(1);
    let cell_w = ((W - LABEL_W - 8.0) / cols as f64).min(180.0);
    // About 6 px a character at 11 px: each label wrapped to its column's width.
    let chars = ((cell_w - 6.0) / 6.2).max(2.0) as usize;
    let labels: Vec<Vec<String>> = columns
        .iter()
        .map(|c| wrap(c, chars, LABEL_LINES))
        .collect();
    let lines = labels.iter().map(Vec::len).max().unwrap_or(1);
    let header = LINE_H * lines as f64 + 8.0;
    let top = header;
    let height = top + rows.len() as f64 * ROW + KEY_H;
    let mut svg = Svg::tall(
        "compare-chart heat",
        &format!(
            "{} specs on {} devices against {reference}",
            rows.len(),
            columns.len()
        ),
        height,
    );
    for (i, (c, label)) in columns.iter().zip(&labels).enumerate() {
        let cx = LABEL_W + (i as f64 + 0.5) * cell_w;
        // Bottom-aligned: the last line just above the map.
        let first = header - 8.0 - LINE_H * (label.len() - 1) as f64;
        let spans: String = label
            .iter()
            .enumerate()
            .map(|(k, l)| {
                format!(
                    r#"<tspan x="{cx:.1}" y="{:.1}">{}</tspan>"#,
                    first + LINE_H * k as f64,
                    esc(l)
                )
            })
            .collect();
        let _ = write!(
            svg.out,
            r##"<text text-anchor="middle" class="column" fill="#4a5260"><title>{}</title>{spans}</text>"##,
            esc(c),
        );
    }
    let write_ratio = cell_w >= 36.0;
    for (g, row) in rows.iter().enumerate() {
        let y = top + g as f64 * ROW;
        spec_label(&mut svg, y + ROW - 4.0, &row.label);
        for (i, cell) in row.cells.iter().enumerate() {
            let Some(cell) = cell else { continue };
            let cx = LABEL_W + i as f64 * cell_w;
            let (fill, class, text) = match cell.ratio {
                _ if cell.reference => ("#dfe3e8".to_string(), "cell base", "base".to_string()),
                Some(r) => (
                    heat_color(r),
                    if r >= 1.0 {
                        "cell better"
                    } else {
                        "cell worse"
                    },
                    ratio_text(r),
                ),
                None => ("#f3f4f6".to_string(), "cell missing", "–".to_string()),
            };
            let mut mark = format!(
                r##"<g class="{class}"><title>{}</title><rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}" stroke="#fff"/>"##,
                esc(&cell.title),
                cx,
                cell_w,
                ROW
            );
            if write_ratio {
                let _ = write!(
                    mark,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#1f2430">{}</text>"##,
                    cx + cell_w / 2.0,
                    y + ROW - 4.0,
                    esc(&text)
                );
            }
            mark.push_str("</g>");
            svg.raw(&linked(&cell.href, mark));
        }
    }
    // The colour key: ×⅛ … ×8 under the map, each step wide enough for its label.
    let key_y = top + rows.len() as f64 * ROW + 10.0;
    let steps = [1.0 / 8.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0];
    const STEP: f64 = 54.0;
    for (i, r) in steps.iter().enumerate() {
        let kx = LABEL_W + i as f64 * STEP;
        let _ = write!(
            svg.out,
            r##"<rect class="key" x="{kx:.1}" y="{key_y:.1}" width="{}" height="12" fill="{}" stroke="#dfe3e8"/>"##,
            STEP - 2.0,
            heat_color(*r)
        );
        svg.text(
            kx + STEP / 2.0 - 1.0,
            key_y + 24.0,
            "middle",
            "tick",
            &ratio_text(*r),
        );
    }
    if rows
        .iter()
        .flat_map(|r| r.cells.iter().flatten())
        .any(|c| c.ratio.is_none() && !c.reference)
    {
        svg.text(
            LABEL_W,
            key_y + 40.0,
            "start",
            "caption",
            "–: no ratio (a run that failed, or a row with no quiet figure to compare against); hover for why",
        );
    }
    svg.text(
        LABEL_W - 8.0,
        key_y + 10.0,
        "end",
        "caption",
        &format!("relative to {reference}:"),
    );
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ratio: Option<f64>, reference: bool, href: &str) -> Option<RatioCell> {
        Some(RatioCell {
            ratio,
            reference,
            title: format!("t {ratio:?}"),
            href: href.to_string(),
        })
    }

    /// The `x` attributes and widths of the bars, in drawing order.
    fn bars(svg: &str) -> Vec<(String, f64, f64)> {
        svg.match_indices(r#"<rect class="bar "#)
            .map(|(i, _)| {
                let tag = &svg[i..i + svg[i..].find('>').unwrap()];
                let attr = |name: &str| -> f64 {
                    let at = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                    tag[at..at + tag[at..].find('"').unwrap()].parse().unwrap()
                };
                let class = tag["<rect class=\"bar ".len()..].split('"').next().unwrap();
                (class.to_string(), attr("x"), attr("width"))
            })
            .collect()
    }

    #[test]
    fn bars_grow_from_the_reference_both_ways_and_link_their_results() {
        let columns = vec!["A (a:cpu:0)".to_string(), "B (b:opencl:0)".to_string()];
        let rows = vec![
            RatioRow {
                label: "gemm/blocked n=1024".into(),
                cells: vec![
                    cell(Some(1.0), true, "/runs/1"),
                    cell(Some(4.0), false, "/runs/2"),
                ],
            },
            RatioRow {
                label: "copy n=2^26".into(),
                cells: vec![
                    cell(Some(1.0), true, "/runs/3"),
                    cell(Some(0.25), false, ""),
                ],
            },
            RatioRow {
                label: "noop".into(),
                cells: vec![None, cell(None, false, "/runs/5")],
            },
        ];
        let svg = compare_chart(&columns, &rows, "baseline");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("compare-chart bars"), "few specs are bars");
        let b = bars(&svg);
        assert_eq!(b.len(), 4, "{b:?}");
        let (base, up, down) = (&b[0], &b[1], &b[3]);
        assert_eq!(
            (base.0.as_str(), up.0.as_str(), down.0.as_str()),
            ("base", "better", "worse")
        );
        // ×4 and ×¼ are mirror images about the reference line.
        let one = up.1;
        assert!((down.1 + down.2 - one).abs() < 0.2, "{b:?}");
        assert!((up.2 - down.2).abs() < 0.2, "{b:?}");
        assert!(base.2 <= 2.0, "the reference's own bar is a tick: {b:?}");
        assert!(svg.contains(r#"<a href="/runs/2">"#) && !svg.contains(r#"<a href="">"#));
        assert!(svg.contains("×4.00") && svg.contains("×0.250"));
        assert!(svg.contains("no figure"), "a failed cell says so");
    }

    #[test]
    fn many_specs_become_a_heat_map_coloured_by_ratio() {
        let columns: Vec<String> = (0..3).map(|i| format!("dev{i}")).collect();
        let rows: Vec<RatioRow> = (0..40)
            .map(|i| RatioRow {
                label: format!("spec {i} {}", "x".repeat(60)),
                cells: vec![
                    cell(Some(1.0), true, ""),
                    cell(Some(8.0), false, &format!("/runs/{i}")),
                    cell(Some(0.125), false, ""),
                ],
            })
            .collect();
        let svg = compare_chart(&columns, &rows, "baseline");
        assert!(svg.contains("compare-chart heat"));
        assert_eq!(svg.matches(r#"<g class="cell better">"#).count(), 40);
        assert_eq!(svg.matches(r#"<g class="cell worse">"#).count(), 40);
        assert_eq!(svg.matches(r#"<g class="cell base">"#).count(), 40);
        assert_eq!(heat_color(1.0), "#ffffff");
        assert_eq!(heat_color(8.0), heat_color(100.0), "clamped at ×8");
        assert!(svg.contains(&format!(r#"fill="{}""#, heat_color(8.0))));
        assert!(
            svg.contains("…"),
            "long labels are cut, their tooltip keeps them"
        );
        assert!(svg.contains(&format!("<title>spec 7 {}</title>", "x".repeat(60))));
    }

    #[test]
    fn labels_are_escaped() {
        let rows = vec![RatioRow {
            label: "<script>".into(),
            cells: vec![cell(Some(2.0), false, "/r?a=1&b=2")],
        }];
        let svg = compare_chart(&["<b>".to_string()], &rows, "best of each row");
        assert!(!svg.contains("<script>") && !svg.contains("<b>"));
        assert!(svg.contains("&lt;script&gt;") && svg.contains("/r?a=1&amp;b=2"));
    }
}
