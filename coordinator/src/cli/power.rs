//! `gpufleet power`: an agent's power samples, live: a direct agent's from its `StreamPower`, a
//! dial-in agent's from the serve that holds its link (`/api/agents/{name}/power`, found through
//! the agent's row; see [`crate::link::serve_api`]).
//!
//! The agent samples every channel at its own rate (`gpufleet-agent --power-rate-hz`, 20 by
//! default); the request asks for `--rate-hz` per channel, which the agent (or the serve) keeps
//! with [`Pace`], on a fixed schedule so the rate shown is the rate asked for whenever the agent
//! samples at least that often. The same pace applies here too, for an agent too old to pace.
//! On a terminal the table view is one line per channel, redrawn in place; otherwise (a pipe, a
//! file) every kept sample is a line of its own. Ctrl-C or `--seconds` end it cleanly (exit 0, a
//! summary on stderr); an agent that cannot be reached, refuses, or closes the stream exits 1 with
//! the reason (bad arguments and unknown names are errors, exit 2).

use super::agents::lookup_agent;
use super::args::{PowerArgs, PowerFormat};
use crate::db::Db;
use crate::fleet::attachment::attached;
use crate::link::grpc::AgentAddr;
use crate::link::serve_api::{PowerEvents, power_events};
use crate::live::{Key, key};
use crate::store::{AgentKind, AgentRow};
use crate::table::{csv_line, csv_number, or_dash};
use anyhow::{Context, bail};
use futures::StreamExt;
use gpufleet_proto::power::{LiveSample, Pace, PowerPoint, check_rate_hz};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const CSV_HEADER: [&str; 11] = [
    "wall_unix_s",
    "source",
    "scope",
    "pci_bus_id",
    "label",
    "watts",
    "temperature_c",
    "sclk_mhz",
    "mclk_mhz",
    "utilization_pct",
    "energy_j",
];

fn csv_cells(p: &PowerPoint, label: &str) -> Vec<String> {
    let r = &p.reading;
    vec![
        format!("{:.3}", p.wall_unix_s),
        p.source.clone(),
        p.scope.clone(),
        p.pci_bus_id.clone(),
        label.to_string(),
        csv_number(r.watts),
        csv_number(r.temperature_c),
        csv_number(r.sclk_mhz.map(f64::from)),
        csv_number(r.mclk_mhz.map(f64::from)),
        csv_number(r.utilization_pct),
        csv_number(r.energy_j),
    ]
}

/// The sample as a JSON object: [`PowerPoint`]'s fields and the channel's label.
fn json_line(p: &PowerPoint, label: &str) -> String {
    let sample = LiveSample {
        point: p.clone(),
        label: label.to_string(),
    };
    serde_json::to_string(&sample).expect("a live sample serialises to JSON")
}

/// The wall time of day (UTC) of a sample, `12:00:01.250`.
fn clock(wall_unix_s: f64) -> String {
    let ms = (wall_unix_s.max(0.0) * 1000.0) as u64 % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The latest sample of each channel and how many were shown, for the live table and the summary.
#[derive(Default)]
struct Channels {
    latest: BTreeMap<Key, (PowerPoint, u64)>,
    /// Lines the live table drew last time (to move back over them).
    drawn: usize,
}

impl Channels {
    fn note(&mut self, k: Key, p: PowerPoint) {
        let shown = self.latest.get(&k).map_or(0, |(_, n)| *n);
        self.latest.insert(k, (p, shown + 1));
    }

    /// The live table: a header and one line per channel.
    fn table(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{:<13} {:<13} {:<8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>7}  label",
            "source", "device", "scope", "power", "temp", "sclk", "mclk", "busy", "samples"
        )];
        for ((source, pci, label), (p, n)) in &self.latest {
            let [w, t, s, m, u] = p.reading.text_cells();
            let device = if pci.is_empty() { "host" } else { pci };
            lines.push(format!(
                "{source:<13} {device:<13} {:<8} {w:>9} {t:>9} {s:>9} {m:>9} {u:>6} {n:>7}  {}",
                or_dash(&p.scope),
                or_dash(label)
            ));
        }
        lines
    }

    /// Redraws the table over the previous one (a terminal).
    fn redraw(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        let lines = self.table();
        if self.drawn > 0 {
            write!(out, "\x1b[{}A", self.drawn)?;
        }
        for l in &lines {
            writeln!(out, "\x1b[2K{l}")?;
        }
        self.drawn = lines.len();
        out.flush()
    }
}

/// Opens `agent`'s live power: a URL or a direct agent over its StreamPower, a dial-in agent
/// through the serve that holds its link. Returns the name to report and the samples; `Err` of
/// the outer result for what is the user's to fix (exit 2), of the inner for an agent that
/// cannot be read now (exit 1).
async fn open(
    db: &Db,
    agent: &str,
    token_file: Option<&std::path::Path>,
    request: pb::PowerRequest,
    connect_timeout: Duration,
) -> anyhow::Result<Result<(String, PowerEvents), String>> {
    let addr = match AgentAddr::of_url(agent, connect_timeout) {
        Some(mut a) => {
            if let Some(file) = token_file {
                let text = std::fs::read_to_string(file)
                    .with_context(|| format!("--token-file {}", file.display()))?;
                let token = text.lines().next().unwrap_or("").trim();
                if token.is_empty() {
                    bail!(
                        "--token-file {}: the file's first line is empty",
                        file.display()
                    );
                }
                a.token = Some(token.to_string());
            }
            a
        }
        None if token_file.is_some() => bail!(
            "--token-file goes with an agent URL; the registered agent {} uses the token stored with it",
            gpufleet_kernels::quote(agent)
        ),
        None => {
            let row = lookup_agent(db, agent)?;
            if row.kind == AgentKind::DialIn {
                return Ok(through_serve(&row, &request, connect_timeout).await);
            }
            AgentAddr::of(&row, connect_timeout)
        }
    };
    let opened = async {
        let mut client = addr.connect().await?;
        client
            .stream_power(request)
            .await
            .map_err(|s| addr.refused(s))
    };
    Ok(match opened.await {
        Ok(r) => {
            let name = addr.name.clone();
            let events = r
                .into_inner()
                .map(move |item| item.map_err(|status| addr.refused(status).to_string()));
            Ok((name, events.boxed()))
        }
        Err(e) => Err(e.to_string()),
    })
}

/// A dial-in agent's power, from the serve whose link it holds (found in the agent's row).
async fn through_serve(
    row: &AgentRow,
    request: &pb::PowerRequest,
    connect_timeout: Duration,
) -> Result<(String, PowerEvents), String> {
    let name = &row.name;
    let api = match (&row.api_url, attached(row, crate::time::now())) {
        (Some(api), true) => api,
        _ => {
            return Err(match row.last_seen {
                Some(t) => format!(
                    "dial-in agent {name} is not attached to a running serve (last seen {:.0} s ago)",
                    crate::time::now() - t
                ),
                None => format!("dial-in agent {name} has never attached to a serve"),
            });
        }
    };
    let token = std::env::var("GPUFLEET_READ_TOKEN").ok();
    let events = power_events(api, name, request, token.as_deref(), connect_timeout).await?;
    Ok((name.clone(), events))
}

/// `gpufleet power`: exit 0 when `--seconds` or Ctrl-C ends it, 1 (the reason on stderr) when
/// the agent cannot be reached, refuses or ends the stream.
///
/// # Errors
/// Bad arguments, an unknown agent name, or stdout failing.
pub async fn power(db: &Db, args: PowerArgs, connect_timeout: Duration) -> anyhow::Result<i32> {
    if let Err(e) = check_rate_hz(args.rate_hz) {
        bail!("--rate-hz {e}");
    }
    let limit = match args.seconds {
        Some(s) if !(s.is_finite() && s > 0.0) => bail!("--seconds {s} must be positive"),
        Some(s) => Some(Duration::from_secs_f64(s.min(1e9))),
        None => None,
    };
    let request = pb::PowerRequest {
        device_id: args.device.clone().unwrap_or_default(),
        source: args.source.clone().unwrap_or_default(),
        rate_hz: args.rate_hz,
    };
    let (name, mut stream) = match open(
        db,
        &args.agent,
        args.token_file.as_deref(),
        request,
        connect_timeout,
    )
    .await?
    {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };

    let started = Instant::now();
    let deadline = limit.map(|l| tokio::time::Instant::now() + l);
    let mut pace = Pace::<Key>::new(args.rate_hz);
    let mut channels = Channels::default();
    let live = args.format == PowerFormat::Table && std::io::stdout().is_terminal();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.format == PowerFormat::Csv {
        out.write_all(csv_line(&CSV_HEADER.map(String::from)).as_bytes())?;
        out.flush()?;
    }
    // A line per sample (into a file or a pipe): the columns named once, as above them.
    if args.format == PowerFormat::Table && !live {
        writeln!(
            out,
            "{:<12}  {:<13} {:<13} {:<8} {:>9} {:>9} {:>9} {:>9} {:>6}",
            "time (UTC)", "source", "device", "scope", "power", "temp", "sclk", "mclk", "busy"
        )?;
        out.flush()?;
    }
    let mut last_draw = Instant::now() - Duration::from_secs(1);
    let ended = loop {
        let next = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, stream.next()).await.ok(),
                None => Some(stream.next().await),
            }
        };
        let item = tokio::select! {
            item = next => item,
            _ = tokio::signal::ctrl_c() => break None,
        };
        let sample = match item {
            None => break None, // --seconds
            Some(Some(Ok(s))) => s,
            Some(Some(Err(why))) => break Some(why),
            Some(None) => break Some(format!("agent {name} ended the power stream")),
        };
        let k = key(&sample);
        if !pace.keep(k.clone(), sample.monotonic_ns) {
            continue;
        }
        let point = PowerPoint::from(&sample);
        match args.format {
            PowerFormat::Json => writeln!(out, "{}", json_line(&point, &sample.label))?,
            PowerFormat::Csv => {
                out.write_all(csv_line(&csv_cells(&point, &sample.label)).as_bytes())?
            }
            PowerFormat::Table if !live => {
                let [w, t, s, m, u] = point.reading.text_cells();
                let device = if point.pci_bus_id.is_empty() {
                    "host"
                } else {
                    &point.pci_bus_id
                };
                writeln!(
                    out,
                    "{}  {:<13} {device:<13} {:<8} {w:>9} {t:>9} {s:>9} {m:>9} {u:>6}",
                    clock(point.wall_unix_s),
                    point.source,
                    or_dash(&point.scope)
                )?;
            }
            PowerFormat::Table => {}
        }
        channels.note(k, point);
        if live {
            // At most ten redraws a second, whatever the rate.
            if last_draw.elapsed() >= Duration::from_millis(100) {
                channels.redraw(&mut out)?;
                last_draw = Instant::now();
            }
        } else {
            out.flush()?;
        }
    };
    if live {
        channels.redraw(&mut out)?;
    }
    out.flush()?;
    drop(out);
    let secs = started.elapsed().as_secs_f64();
    let shown: u64 = channels.latest.values().map(|(_, n)| n).sum();
    eprintln!(
        "{shown} samples of {} channel(s) from {} in {secs:.1} s",
        channels.latest.len(),
        name
    );
    match ended {
        None => Ok(0),
        Some(why) => {
            eprintln!("error: {why}");
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_name_every_figure_and_leave_missing_ones_empty() {
        let mut s = pb::PowerSample {
            source: "amdgpu-hwmon".into(),
            scope: "asic".into(),
            pci_bus_id: "0000:03:00.0".into(),
            monotonic_ns: 5,
            wall_unix_s: 1_760_000_000.25,
            label: "amdgpu power1_input, temp1_input".into(),
            ..Default::default()
        };
        gpufleet_proto::power::Reading {
            watts: Some(8.123),
            temperature_c: Some(41.0),
            ..Default::default()
        }
        .write_to(&mut s);
        let p = PowerPoint::from(&s);
        let line = csv_line(&csv_cells(&p, &s.label));
        assert_eq!(
            line,
            "1760000000.250,amdgpu-hwmon,asic,0000:03:00.0,\"amdgpu power1_input, temp1_input\",8.123,41,,,,\n"
        );
        assert_eq!(csv_cells(&p, "").len(), CSV_HEADER.len());
        let v: serde_json::Value = serde_json::from_str(&json_line(&p, &s.label)).unwrap();
        assert_eq!(v["watts"], 8.123);
        assert_eq!(v["label"], "amdgpu power1_input, temp1_input");
        assert!(v["sclk_mhz"].is_null());
        assert_eq!(p.reading.text_cells()[0], "8.1 W");
        assert_eq!(p.reading.text_cells()[2], "-");
        assert_eq!(clock(1_760_000_000.25), "08:53:20.250");
    }
}
