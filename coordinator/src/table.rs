//! Plain tables for the terminal, Markdown and CSV, and the text of their cells. Pure.
//!
//! A listing is a *view*: one list of [`Column`]s (a header and how to read the cell from a row)
//! over the rows it shows, so a column is written once, never as a header list beside a value
//! list that must be kept in step. The number formats every view shares ([`fmt_metric`],
//! [`fmt_short`], [`csv_number`], [`params_text`], [`per_watt_unit`]) live here, below the CLI, the
//! comparison and the dashboard that all print them.

use std::collections::BTreeMap;

/// Output formats of listing commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for a terminal.
    Table,
    /// A Markdown table (for reports and PR comments).
    Md,
    /// Comma-separated values with a header row.
    Csv,
    /// JSON (an array of objects), for scripts.
    Json,
    /// `compare` only: the `llm` results as llama-bench's Markdown table (model, size, params,
    /// backend, test such as pp512 or tg128, t/s ± stddev), to put beside llama-bench's rows.
    LlamaBench,
}

/// A table: headers and rows of cells, rendered as text, Markdown or CSV.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One column of a view over rows of type `T`: its header and the text of its cell.
pub struct Column<T: ?Sized> {
    /// The header (a line break makes a two-line header in text tables).
    pub name: &'static str,
    /// The cell of one row.
    pub cell: fn(&T) -> String,
}

impl<T: ?Sized> Column<T> {
    /// A column named `name` whose cells `cell` writes.
    pub const fn new(name: &'static str, cell: fn(&T) -> String) -> Self {
        Column { name, cell }
    }
}

impl Table {
    /// The table of `rows` under `columns`: one header per column, one line per row.
    pub fn of<'a, T: ?Sized + 'a>(
        columns: &[Column<T>],
        rows: impl IntoIterator<Item = &'a T>,
    ) -> Table {
        let headers: Vec<&str> = columns.iter().map(|c| c.name).collect();
        let mut t = Table::new(&headers);
        for r in rows {
            t.push(columns.iter().map(|c| (c.cell)(r)).collect());
        }
        t
    }

    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders for `Table`, `Md` or `Csv` (`Json` is the caller's, as it
    /// has the typed rows).
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Md | Format::LlamaBench => self.markdown(),
            Format::Csv => self.csv(),
            Format::Table | Format::Json => self.text(),
        }
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self
            .headers
            .iter()
            .map(|h| h.lines().map(|l| l.chars().count()).max().unwrap_or(0))
            .collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        w
    }

    fn text(&self) -> String {
        let w = self.widths();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = w
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(c.chars().count());
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad + 2));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        // A header with a line break takes two (or more) lines, bottom-aligned.
        let depth = self
            .headers
            .iter()
            .map(|h| h.lines().count())
            .max()
            .unwrap_or(1);
        let mut out = String::new();
        for i in 0..depth.max(1) {
            let cells: Vec<String> = self
                .headers
                .iter()
                .map(|h| {
                    let lines: Vec<&str> = h.lines().collect();
                    let skip = depth - lines.len().max(1);
                    i.checked_sub(skip)
                        .and_then(|j| lines.get(j))
                        .map_or(String::new(), |l| l.to_string())
                })
                .collect();
            out.push_str(&line(&cells));
        }
        out.push_str(&line(&w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>()));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    fn markdown(&self) -> String {
        let esc = |c: &String| c.replace('|', "\\|").replace('\n', "<br>");
        let mut out = format!(
            "| {} |\n",
            self.headers.iter().map(esc).collect::<Vec<_>>().join(" | ")
        );
        out.push_str(&format!("|{}\n", " --- |".repeat(self.headers.len())));
        for r in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                r.iter().map(esc).collect::<Vec<_>>().join(" | ")
            ));
        }
        out
    }

    fn csv(&self) -> String {
        let headers: Vec<String> = self.headers.iter().map(|h| h.replace('\n', " ")).collect();
        let mut out = csv_line(&headers);
        for r in &self.rows {
            out.push_str(&csv_line(r));
        }
        out
    }
}

/// One CSV line (with its newline): cells joined by commas, quoted where they hold a comma, a
/// quote or a newline.
pub fn csv_line(cells: &[String]) -> String {
    let field = |c: &String| {
        if c.contains([',', '"', '\n']) {
            format!("\"{}\"", c.replace('"', "\"\""))
        } else {
            c.clone()
        }
    };
    cells.iter().map(field).collect::<Vec<_>>().join(",") + "\n"
}

/// The text of a cell for people: `-` where there is nothing to show.
pub fn or_dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.into() }
}

/// Formats a metric with a precision that suits its size.
pub fn fmt_metric(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// Four significant digits (at most six characters below a million), for matrix cells.
pub fn fmt_short(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// A number for CSV: full precision, empty when missing.
pub fn csv_number(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Parameters as `k=1,m=64` (with `sep` between them), in key order.
pub fn params_text(params: &BTreeMap<String, i64>, sep: &str) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={}", gpufleet_kernels::show_param(k, *v)))
        .collect::<Vec<_>>()
        .join(sep)
}

/// A percentage for people: whole numbers from 10 %, two significant digits below, so a small
/// fraction of a peak reads `0.06%`, not `0%`.
pub fn fmt_pct(pct: f64) -> String {
    if pct >= 10.0 || pct == 0.0 {
        format!("{pct:.0}%")
    } else if pct >= 1.0 {
        format!("{pct:.1}%")
    } else {
        let digits = (1 - pct.log10().floor() as i32).clamp(2, 6) as usize;
        format!("{pct:.digits$}%")
    }
}

/// The unit of a metric per watt: throughput per watt (`GFLOP/s/W`), or, for `img/s`, images per
/// joule (`tok/s`: tokens per joule), the same quantity under its usual name.
pub fn per_watt_unit(unit: &str) -> String {
    match unit {
        "img/s" => "img/J".to_string(),
        "tok/s" => "tok/J".to_string(),
        _ => format!("{unit}/W"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(&["kernel", "value"]);
        t.push(vec!["gemm".into(), "1,5".into()]);
        t.push(vec!["a|b".into(), "say \"hi\"".into()]);
        t
    }

    #[test]
    fn small_percentages_keep_two_digits() {
        assert_eq!(fmt_pct(42.4), "42%");
        assert_eq!(fmt_pct(2.34), "2.3%");
        assert_eq!(fmt_pct(0.0563), "0.056%");
        assert_eq!(fmt_pct(0.56), "0.56%");
        assert_eq!(fmt_pct(0.0), "0%");
    }

    #[test]
    fn text_aligns_columns() {
        let s = sample().render(Format::Table);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "kernel  value");
        assert_eq!(lines[1], "------  --------");
        assert_eq!(lines[2], "gemm    1,5");
    }

    #[test]
    fn markdown_escapes_pipes() {
        let s = sample().render(Format::Md);
        assert!(s.starts_with("| kernel | value |\n| --- | --- |\n"));
        assert!(s.contains("a\\|b"));
    }

    #[test]
    fn csv_quotes_when_needed() {
        let s = sample().render(Format::Csv);
        assert_eq!(s, "kernel,value\ngemm,\"1,5\"\na|b,\"say \"\"hi\"\"\"\n");
    }

    #[test]
    fn a_view_writes_each_column_once() {
        let columns: [Column<(&str, i64)>; 2] = [
            Column::new("name", |r| r.0.to_string()),
            Column::new("twice", |r| (2 * r.1).to_string()),
        ];
        let t = Table::of(&columns, &[("a", 1), ("b", 21)]);
        assert_eq!(t.render(Format::Csv), "name,twice\na,2\nb,42\n");
    }
}
