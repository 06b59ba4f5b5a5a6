//! The simulation's inputs, checked: the agents' names, their tokens from a file, and the
//! per-agent options (`--slow NAME=FRACTION`, `--pcie NAME=gen3 x4`). Pure: text in, values or a
//! message naming the option, the line or the agent out.

use std::collections::{BTreeMap, HashMap};

/// Most agents one process simulates: each is a task, a TLS link and a small state, so a few
/// thousand fit easily; a typo of a few more zeros is refused.
pub const MAX_AGENTS: usize = 100_000;

/// The simulated agents' names: `PREFIX-0000` .. `PREFIX-(n-1)`, zero-padded to four digits.
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

/// Checks `--agents` and `--name-prefix`.
///
/// # Errors
/// A count outside 1..=[`MAX_AGENTS`], or an empty prefix or one with whitespace.
pub fn check_agents(prefix: &str, n: usize) -> Result<(), String> {
    if !(1..=MAX_AGENTS).contains(&n) {
        return Err(format!("--agents {n} is outside 1..={MAX_AGENTS}"));
    }
    if prefix.is_empty() || prefix.chars().any(char::is_whitespace) {
        return Err(format!(
            "--name-prefix {prefix:?}: must be non-empty and have no whitespace"
        ));
    }
    Ok(())
}

/// Each of `names`' token, in order, from a tokens file: one `NAME TOKEN` pair per line, as a
/// script writes it from `gpufleet agents add NAME --dial-in --json`; blank lines and lines
/// starting with `#` are skipped; names the simulation does not use are ignored.
///
/// # Errors
/// A line that is not two words (naming its number), a name given twice with different tokens,
/// or a simulated agent without a token (naming it, and how many more lack one).
pub fn tokens_for(text: &str, names: &[String]) -> Result<Vec<String>, String> {
    let mut tokens: HashMap<&str, (&str, usize)> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let [name, token] = words[..] else {
            return Err(format!(
                "line {}: expected `NAME TOKEN`, got {} word(s)",
                i + 1,
                words.len()
            ));
        };
        if let Some((other, at)) = tokens.insert(name, (token, i + 1))
            && other != token
        {
            return Err(format!(
                "line {}: {name} has another token on line {at}",
                i + 1
            ));
        }
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !tokens.contains_key(n.as_str()))
        .collect();
    if let Some(first) = missing.first() {
        let more = match missing.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more)"),
        };
        return Err(format!(
            "no token for {first}{more}: enrol it with `gpufleet agents add {first} --dial-in --json` and add `{first} TOKEN` to the file"
        ));
    }
    Ok(names
        .iter()
        .map(|n| tokens[n.as_str()].0.to_string())
        .collect())
}

/// `NAME=VALUE`, split at the first `=`.
fn name_value<'a>(option: &str, text: &'a str) -> Result<(&'a str, &'a str), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => Ok((name.trim(), value.trim())),
        _ => Err(format!("{option} {text:?}: expected NAME=VALUE")),
    }
}

/// Largest planted slowdown: 10 × the time of the agent's siblings.
const MAX_SLOW: f64 = 10.0;

/// A `--slow NAME=FRACTION` value: that agent's iteration times are `1 + FRACTION` times its
/// siblings' (0.10: 10 % longer).
///
/// # Errors
/// No `=`, a fraction that is not a number in [0, 10].
pub fn parse_slow(text: &str) -> Result<(String, f64), String> {
    let (name, value) = name_value("--slow", text)?;
    let fraction: f64 = value
        .parse()
        .map_err(|_| format!("--slow {text:?}: {value:?} is not a number (e.g. 0.10)"))?;
    if !(0.0..=MAX_SLOW).contains(&fraction) {
        return Err(format!(
            "--slow {text:?}: the fraction {fraction} is outside [0, {MAX_SLOW}]"
        ));
    }
    Ok((name.to_string(), fraction))
}

/// A `--pcie NAME=LINK` value: the PCIe link the agent's device reports (`gen3 x4`), below the
/// simulated maximum `gen3 x16` to give the coordinator an outlier cause.
///
/// # Errors
/// No `=`, or a link that is not `genG xW` (G 1..=6, W one of 1, 2, 4, 8, 16).
pub fn parse_pcie(text: &str) -> Result<(String, String), String> {
    let (name, value) = name_value("--pcie", text)?;
    let bad =
        || format!("--pcie {text:?}: the link must read like `gen3 x4` (gen1..gen6, x1..x16)");
    let words: Vec<&str> = value.split_whitespace().collect();
    let [g, w] = words[..] else { return Err(bad()) };
    let generation: u32 = g
        .strip_prefix("gen")
        .and_then(|g| g.parse().ok())
        .ok_or_else(bad)?;
    let width: u32 = w
        .strip_prefix('x')
        .and_then(|w| w.parse().ok())
        .ok_or_else(bad)?;
    if !(1..=6).contains(&generation) || ![1, 2, 4, 8, 16].contains(&width) {
        return Err(bad());
    }
    Ok((name.to_string(), format!("gen{generation} x{width}")))
}

/// The per-agent values of `option`, keyed by name; the last value given for a name wins.
///
/// # Errors
/// A name that is not one of the simulated agents (a typo would plant nothing).
pub fn per_agent<T: Clone>(
    option: &str,
    given: &[(String, T)],
    names: &[String],
) -> Result<BTreeMap<String, T>, String> {
    let known: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut out = BTreeMap::new();
    for (name, value) in given {
        if !known.contains(name.as_str()) {
            return Err(format!(
                "{option} {name}=...: {name} is not a simulated agent (they are {} .. {})",
                names.first().map_or("", String::as_str),
                names.last().map_or("", String::as_str)
            ));
        }
        out.insert(name.clone(), value.clone());
    }
    Ok(out)
}

/// Checks `--spread`: the device-to-device spread, a fraction in [0, 0.5).
///
/// # Errors
/// A spread outside [0, 0.5).
pub fn check_spread(spread: f64) -> Result<(), String> {
    if (0.0..0.5).contains(&spread) {
        Ok(())
    } else {
        Err(format!(
            "--spread {spread}: must be a fraction in [0, 0.5) (0.01: 1 % between devices)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_prefix_and_a_padded_index() {
        assert_eq!(names("sim", 3), ["sim-0000", "sim-0001", "sim-0002"]);
        assert_eq!(names("n", 10_001)[10_000], "n-10000");
        assert!(check_agents("sim", 0).unwrap_err().contains("--agents 0"));
        assert!(
            check_agents("a b", 2)
                .unwrap_err()
                .contains("--name-prefix")
        );
        assert!(check_agents("sim", 2000).is_ok());
    }

    #[test]
    fn tokens_come_in_order_and_a_missing_name_is_named() {
        let names = names("sim", 2);
        let text = "# enrolled by the test\nsim-0001 tok1\n\nsim-0000   tok0\nother x\n";
        assert_eq!(tokens_for(text, &names).unwrap(), ["tok0", "tok1"]);
        let e = tokens_for("sim-0000 tok0\n", &names).unwrap_err();
        assert!(
            e.contains("no token for sim-0001") && e.contains("agents add sim-0001"),
            "{e}"
        );
        let e = tokens_for("", &names).unwrap_err();
        assert!(e.contains("sim-0000 (and 1 more)"), "{e}");
        let e = tokens_for("sim-0000\n", &names).unwrap_err();
        assert!(e.contains("line 1") && e.contains("NAME TOKEN"), "{e}");
        let e = tokens_for("sim-0000 a\nsim-0000 b\n", &names).unwrap_err();
        assert!(e.contains("line 2") && e.contains("line 1"), "{e}");
        // The same pair twice is harmless.
        assert!(tokens_for("sim-0000 a\nsim-0000 a\nsim-0001 b\n", &names).is_ok());
    }

    #[test]
    fn slow_and_pcie_values_are_checked_and_their_names_must_be_simulated() {
        assert_eq!(
            parse_slow("sim-0003=0.10").unwrap(),
            ("sim-0003".into(), 0.10)
        );
        assert!(parse_slow("sim-0003").unwrap_err().contains("NAME=VALUE"));
        assert!(
            parse_slow("sim-0003=fast")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(parse_slow("sim-0003=-0.1").unwrap_err().contains("outside"));
        assert_eq!(
            parse_pcie("sim-0001=gen3  x4").unwrap(),
            ("sim-0001".into(), "gen3 x4".into())
        );
        for bad in [
            "sim-0001=x4",
            "sim-0001=gen3 x3",
            "sim-0001=gen9 x4",
            "=gen3 x4",
        ] {
            assert!(parse_pcie(bad).is_err(), "{bad}");
        }
        let names = names("sim", 4);
        let slow = per_agent("--slow", &[("sim-0003".into(), 0.1)], &names).unwrap();
        assert_eq!(slow.get("sim-0003"), Some(&0.1));
        let e = per_agent("--slow", &[("sim-0004".into(), 0.1)], &names).unwrap_err();
        assert!(
            e.contains("sim-0004 is not a simulated agent") && e.contains("sim-0003"),
            "{e}"
        );
        assert!(check_spread(0.01).is_ok());
        assert!(check_spread(0.5).is_err() && check_spread(f64::NAN).is_err());
    }
}
