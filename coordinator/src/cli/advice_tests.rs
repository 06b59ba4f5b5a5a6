//! Every `gpufleet …` command the coordinator's messages and pages advise (in backquotes in its
//! strings and templates) parses as printed, with placeholders (`NAME`, `HOST:PORT`, `{name}`)
//! given sample values; and none carries a secret (`--token VALUE`) on its command line. A
//! command only named (`gpufleet run`, at most two words short of its arguments) is not advice.

use super::Cli;
use clap::Parser;
use std::path::Path;

/// The text between backquotes that starts with `gpufleet `, from every line of `text` that is
/// not a comment (a doc comment names commands; messages and pages advise them).
fn advised(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut rest = line;
        while let Some(start) = rest.find("`gpufleet ") {
            let after = &rest[start + 1..];
            let Some(end) = after.find('`') else { break };
            out.push(after[..end].to_string());
            rest = &after[end + 1..];
        }
    }
    out
}

/// `cmd` with its placeholders replaced by sample values; `None` for a shape rather than a
/// command (`gpufleet run …`, a list of alternatives).
fn concrete(cmd: &str) -> Option<Vec<String>> {
    if cmd.contains('…') || cmd.contains("...") || cmd.contains('|') || cmd.contains('[') {
        return None;
    }
    let mut words: Vec<String> = Vec::new();
    for w in cmd.split_whitespace() {
        // A format argument (`{name}`, `{}`) or an upper-case placeholder; a number after a
        // flag (`--campaign {}`).
        let w = w.trim_end_matches([',', ';', '.']);
        let after_flag = words.last().is_some_and(|p| p.starts_with("--"));
        let sample = match w {
            "{}" | "{id}" if after_flag => "1",
            "NAME" | "AGENT" | "{name}" | "{}" | "{n}" | "{agent}" | "{LOCAL_AGENT}" => "rig",
            "HOST:PORT" => "127.0.0.1:50051",
            "http://HOST:PORT" | "URL" => "http://127.0.0.1:50051",
            "N" | "{id}" | "{c}" => "1",
            "FILE" | "DIR" => "/tmp/x",
            "SUITE" => "smoke",
            _ if w.contains('{') => "rig",
            _ => w,
        };
        words.push(sample.to_string());
    }
    Some(words)
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "html") {
            out.push((
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            ));
        }
    }
}

#[test]
fn every_advised_gpufleet_command_parses_as_printed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    sources(&root.join("../dashboards/templates"), &mut files);
    // The agent's messages advise the coordinator's commands too (`gpufleet agents add …`).
    sources(&root.join("../agent/src"), &mut files);
    let (mut checked, mut bad) = (0, Vec::new());
    for (file, text) in &files {
        if file.ends_with("advice_tests.rs") {
            continue;
        }
        for cmd in advised(text) {
            let Some(words) = concrete(&cmd) else {
                continue;
            };
            if words.iter().any(|w| w == "--token") {
                bad.push(format!("{file}: `{cmd}` puts a token on a command line"));
                continue;
            }
            checked += 1;
            if let Err(e) = Cli::try_parse_from(&words) {
                // `gpufleet run`, `gpufleet serve --fleet-listen`: a command named, not one to
                // type (two words at most, missing only its arguments).
                let named = words.len() <= 3
                    && (e.kind() == clap::error::ErrorKind::MissingRequiredArgument
                        || words.last().is_some_and(|w| w.starts_with("--")));
                if !named && e.kind() != clap::error::ErrorKind::DisplayHelp {
                    let first = e.to_string().lines().next().unwrap_or("").to_string();
                    bad.push(format!("{file}: `{cmd}`: {first}"));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} advised commands found");
    assert!(
        bad.is_empty(),
        "{} advised commands fail:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
