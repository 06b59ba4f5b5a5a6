//! Wall-clock time as the coordinator reads and prints it: the one clock ([`now`]), UTC calendar
//! arithmetic with no date crate (Hinnant's `days_from_civil` / `civil_from_days`), and the three
//! ways a time or a duration is written for people (the CLI, the dashboard and log lines alike).
//!
//! Pure apart from [`now`]; it sits below every module that prints a time, so none of them imports
//! another's formatting.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock unix seconds; 0 if the system clock is before 1970. The store's default clock.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's
/// `days_from_civil`). `month` 1-12, `day` 1-31.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400); // [0, 399]
    let mp = i64::from((month + 9) % 12); // March = 0
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// The (year, month 1-12, day 1-31) of a day count since 1970-01-01
/// (Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The UTC date and time of day of unix seconds: (year, month, day, hour, minute, second).
pub fn utc_parts(t: f64) -> (i64, u32, u32, i64, i64, i64) {
    let secs = t.floor() as i64;
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    (y, m, d, rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// `YYYY-MM-DD HH:MM UTC` of unix seconds.
pub fn fmt_time(t: f64) -> String {
    let (y, m, d, h, mi, _) = utc_parts(t);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02} UTC")
}

/// `YYYY-MM-DDTHH:MM:SSZ` of unix seconds (log lines).
pub fn fmt_timestamp(t: f64) -> String {
    let (y, m, d, h, mi, sec) = utc_parts(t);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}Z")
}

/// A duration for people: `42s`, `5m`, `3h`, `2d`.
pub fn ago(s: f64) -> String {
    let s = s.max(0.0);
    if s < 120.0 {
        format!("{s:.0}s")
    } else if s < 7200.0 {
        format!("{:.0}m", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.0}h", s / 3600.0)
    } else {
        format!("{:.0}d", s / 86_400.0)
    }
}

/// Seconds of a duration written as a number and a unit: `30s`, `90m`, `36h`, `7d`, `2w`.
/// `None` for anything else (no unit, a negative or non-finite number, another unit).
pub fn parse_duration(text: &str) -> Option<f64> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let n: f64 = num.parse().ok().filter(|n: &f64| n.is_finite())?;
    let secs = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        _ => return None,
    };
    Some(n * secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_utc() {
        assert_eq!(fmt_time(0.0), "1970-01-01 00:00 UTC");
        assert_eq!(fmt_time(1_795_000_000.0), "2026-11-18 11:06 UTC");
        assert_eq!(fmt_timestamp(1_795_000_000.0), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(ago(-3.0), "0s");
        assert_eq!(ago(42.0), "42s");
        assert_eq!(ago(300.0), "5m");
        assert_eq!(ago(3.0 * 3600.0), "3h");
        assert_eq!(ago(2.0 * 86_400.0), "2d");
    }

    #[test]
    fn the_clock_is_after_2020() {
        assert!(now() > 1.6e9);
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("90d"), Some(90.0 * 86_400.0));
        assert_eq!(parse_duration("1.5h"), Some(5400.0));
        assert_eq!(parse_duration(" 2w "), Some(14.0 * 86_400.0));
        for bad in ["", "90", "d", "-3d", "3y", "1e400d", "3 d"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
