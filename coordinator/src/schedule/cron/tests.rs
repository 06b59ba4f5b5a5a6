// splitmix64, so the cross-check draws the same expressions every run.
use super::*;
use crate::test_rng::splitmix64 as splitmix;

/// Unix seconds of a UTC date and time.
fn at(y: i64, mo: u32, d: u32, h: i64, mi: i64) -> i64 {
    days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60
}

fn cron(s: &str) -> Cron {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn err(s: &str) -> String {
    match s.parse::<Cron>() {
        Ok(c) => panic!("{s:?} parsed as {c:?}"),
        Err(e) => e.to_string(),
    }
}

/// All slots in [from, to), by brute force.
fn scan(c: &Cron, from: i64, to: i64) -> Vec<i64> {
    (from / 60..to / 60)
        .map(|m| m * 60)
        .filter(|t| c.matches(*t))
        .collect()
}

#[test]
fn civil_round_trip_and_known_dates() {
    assert_eq!(days_from_civil(1970, 1, 1), 0);
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    assert_eq!(civil_from_days(-1), (1969, 12, 31));
    assert_eq!(at(2024, 2, 29, 12, 0), 1_709_208_000);
    assert_eq!(weekday(days_from_civil(2024, 2, 29)), 4); // Thursday
    assert_eq!(weekday(days_from_civil(1969, 12, 28)), 0); // Sunday
    for days in (-800_000..800_000).step_by(97) {
        let (y, m, d) = civil_from_days(days);
        assert_eq!(days_from_civil(y, m, d), days);
    }
}

#[test]
fn field_count_errors() {
    assert_eq!(
        err("0 3 * *"),
        "expected 5 fields (minute hour day-of-month month day-of-week), got 4"
    );
    assert!(err("").ends_with("got 0"));
    assert!(err("0 3 * * * *").ends_with("got 6"));
    assert!(err("@reboot").contains("unknown cron macro \"@reboot\""));
}

#[test]
fn errors_name_the_field_and_bound() {
    assert_eq!(err("0 25 * * *"), "cron field 2 (hour): 25 is outside 0-23");
    assert_eq!(
        err("60 * * * *"),
        "cron field 1 (minute): 60 is outside 0-59"
    );
    assert_eq!(
        err("0 0 0 * *"),
        "cron field 3 (day-of-month): 0 is outside 1-31"
    );
    assert_eq!(
        err("0 0 * 13 *"),
        "cron field 4 (month): 13 is outside 1-12"
    );
    assert_eq!(
        err("0 0 * * 8"),
        "cron field 5 (day-of-week): 8 is outside 0-7"
    );
    assert_eq!(
        err("0 0 * * 99999999999999999999999"),
        format!("cron field 5 (day-of-week): {} is outside 0-7", u64::MAX)
    );
    assert_eq!(
        err("0 5-2 * * *"),
        "cron field 2 (hour): range 5-2 runs backwards"
    );
    assert_eq!(
        err("x * * * *"),
        "cron field 1 (minute): \"x\" is not a number"
    );
    assert!(err("0 0 * foo *").starts_with("cron field 4 (month): \"foo\""));
    assert!(err("0 0 * * funday").starts_with("cron field 5 (day-of-week): \"funday\""));
    assert!(err("*/0 * * * *").contains("cron field 1 (minute): \"*/0\" needs a step"));
    assert!(err("*/x * * * *").contains("needs a step"));
    assert!(err("*/+2 * * * *").contains("needs a step"));
    assert!(err("1,,2 * * * *").contains("empty list item"));
    assert!(err("-1 * * * *").starts_with("cron field 1 (minute)"));
    assert!(err("0 0 jan * *").starts_with("cron field 3 (day-of-month)"));
}

#[test]
fn each_syntax_builds_the_right_set() {
    assert_eq!(cron("* * * * *").minutes, (1 << 60) - 1);
    assert_eq!(cron("7 * * * *").minutes, 1 << 7);
    assert_eq!(cron("1-3 * * * *").minutes, 0b1110);
    assert_eq!(cron("*/20 * * * *").minutes, 1 | 1 << 20 | 1 << 40);
    assert_eq!(
        cron("10-30/10 * * * *").minutes,
        1 << 10 | 1 << 20 | 1 << 30
    );
    assert_eq!(cron("45/5 * * * *").minutes, 1 << 45 | 1 << 50 | 1 << 55);
    assert_eq!(cron("1,5,10-11 * * * *").minutes, 1 << 1 | 1 << 5 | 3 << 10);
    assert_eq!(cron("0 */6 * * *").hours, 1 | 1 << 6 | 1 << 12 | 1 << 18);
    assert_eq!(cron("0 0 * jan,Mar-MAY *").months, 1 << 1 | 0b111 << 3);
    assert_eq!(
        cron("0 0 * */3 *").months,
        1 << 1 | 1 << 4 | 1 << 7 | 1 << 10
    );
    assert_eq!(cron("0 0 * * mon-fri").days_of_week, 0b011_1110);
    assert_eq!(cron("0 0 * * 7").days_of_week, 1);
    assert_eq!(cron("0 0 * * 5-7").days_of_week, 0b110_0001);
    assert_eq!(cron("0 0 * * */2").days_of_week, 0b101_0101);
    assert_eq!(cron("0 0 * * SUN").days_of_week, 1);
}

#[test]
fn macros_and_display() {
    assert_eq!(cron("@hourly"), cron("0 * * * *").with_text("@hourly"));
    assert_eq!(cron("@daily"), cron("0 0 * * *").with_text("@daily"));
    assert_eq!(cron("@midnight"), cron("0 0 * * *").with_text("@midnight"));
    assert_eq!(cron("@weekly"), cron("0 0 * * 0").with_text("@weekly"));
    assert_eq!(cron("@monthly"), cron("0 0 1 * *").with_text("@monthly"));
    assert_eq!(cron("@yearly"), cron("0 0 1 1 *").with_text("@yearly"));
    assert_eq!(cron("@annually"), cron("0 0 1 1 *").with_text("@annually"));
    assert_eq!(cron("  0 3 * * *\n").to_string(), "0 3 * * *");
    assert_eq!(cron("@weekly").to_string(), "@weekly");
}

impl Cron {
    fn with_text(mut self, text: &str) -> Self {
        self.text = text.to_string();
        self
    }
}

#[test]
fn next_after_is_strictly_after() {
    let c = cron("0 3 * * *");
    let slot = at(2025, 6, 10, 3, 0);
    assert_eq!(c.next_after(slot - 1), Some(slot));
    assert_eq!(c.next_after(slot), Some(slot + 86_400));
    assert_eq!(c.next_after(slot + 59), Some(slot + 86_400));
    assert!(c.matches(slot) && c.matches(slot + 59) && !c.matches(slot + 60));
}

#[test]
fn latest_at_or_before_is_inclusive() {
    let c = cron("0 3 * * *");
    let slot = at(2025, 6, 10, 3, 0);
    assert_eq!(c.latest_at_or_before(slot), Some(slot));
    assert_eq!(c.latest_at_or_before(slot + 59), Some(slot));
    assert_eq!(c.latest_at_or_before(slot + 3600), Some(slot));
    assert_eq!(c.latest_at_or_before(slot - 1), Some(slot - 86_400));
}

/// A UTC date and time: (year, month, day, hour, minute).
type Utc = (i64, u32, u32, i64, i64);

fn secs((y, mo, d, h, mi): Utc) -> i64 {
    at(y, mo, d, h, mi)
}

/// Asserts, for each `(from, slot)`, that the first slot of `expr` strictly after `from` is `slot`.
fn assert_next(expr: &str, cases: &[(Utc, Utc)]) {
    let c = cron(expr);
    for &(from, slot) in cases {
        assert_eq!(
            c.next_after(secs(from)),
            Some(secs(slot)),
            "{expr}: next after {from:?}"
        );
    }
}

/// Asserts, for each `(until, slot)`, that the latest slot of `expr` at or before `until` is `slot`.
fn assert_latest(expr: &str, cases: &[(Utc, Utc)]) {
    let c = cron(expr);
    for &(until, slot) in cases {
        assert_eq!(
            c.latest_at_or_before(secs(until)),
            Some(secs(slot)),
            "{expr}: latest at or before {until:?}"
        );
    }
}

#[test]
fn every_fifteen_minutes() {
    let c = cron("*/15 * * * *");
    assert_next(
        "*/15 * * * *",
        &[
            ((2025, 12, 31, 23, 50), (2026, 1, 1, 0, 0)),
            ((2026, 1, 1, 0, 0), (2026, 1, 1, 0, 15)),
        ],
    );
    assert_latest(
        "*/15 * * * *",
        &[((2025, 12, 31, 23, 50), (2025, 12, 31, 23, 45))],
    );
    assert_eq!(
        scan(&c, at(2025, 3, 1, 0, 0), at(2025, 3, 2, 0, 0)).len(),
        96
    );
}

#[test]
fn leap_day_only_every_four_years() {
    assert_next(
        "0 0 29 2 *",
        &[
            ((2024, 3, 1, 0, 0), (2028, 2, 29, 0, 0)),
            ((2023, 1, 1, 0, 0), (2024, 2, 29, 0, 0)),
            // 2100 is not a leap year: eight years from 2096 to 2104.
            ((2096, 3, 1, 0, 0), (2104, 2, 29, 0, 0)),
        ],
    );
    assert_latest(
        "0 0 29 2 *",
        &[
            ((2104, 2, 28, 0, 0), (2096, 2, 29, 0, 0)),
            ((2000, 2, 29, 0, 0), (2000, 2, 29, 0, 0)),
        ],
    );
}

#[test]
fn impossible_dates_give_none() {
    for s in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
        let c = cron(s);
        assert_eq!(c.next_after(at(2025, 1, 1, 0, 0)), None, "{s}");
        assert_eq!(c.latest_at_or_before(at(2025, 1, 1, 0, 0)), None, "{s}");
    }
}

#[test]
fn month_ends() {
    assert_next(
        "30 23 31 * *",
        &[
            ((2025, 4, 1, 0, 0), (2025, 5, 31, 23, 30)),
            ((2025, 7, 31, 23, 30), (2025, 8, 31, 23, 30)),
        ],
    );
    assert_latest(
        "30 23 31 * *",
        &[((2025, 7, 1, 0, 0), (2025, 5, 31, 23, 30))],
    );
    assert_next(
        "0 12 28-29 2 *",
        &[
            ((2025, 2, 28, 12, 0), (2026, 2, 28, 12, 0)),
            ((2024, 2, 28, 12, 0), (2024, 2, 29, 12, 0)),
        ],
    );
    // New year rollover in both directions.
    assert_next("0 0 1 1 *", &[((2025, 1, 1, 0, 0), (2026, 1, 1, 0, 0))]);
    assert_latest("0 0 1 1 *", &[((2025, 12, 31, 23, 59), (2025, 1, 1, 0, 0))]);
}

#[test]
fn day_of_month_or_day_of_week_when_both_restricted() {
    // 1st of the month OR any Monday. June 2025: Sun 1, Mon 2, Mon 9.
    assert_next(
        "0 0 1 * mon",
        &[
            ((2025, 5, 31, 0, 0), (2025, 6, 1, 0, 0)),
            ((2025, 6, 1, 0, 0), (2025, 6, 2, 0, 0)),
            ((2025, 6, 2, 0, 0), (2025, 6, 9, 0, 0)),
        ],
    );
    // Only one restricted: both must match (the other always does).
    assert_next("0 0 * * 1", &[((2025, 5, 31, 0, 0), (2025, 6, 2, 0, 0))]);
    assert_next("0 0 1 * *", &[((2025, 6, 1, 0, 0), (2025, 7, 1, 0, 0))]);
    // Vixie: a field starting with `*` counts as unrestricted, so this is
    // "odd days that are Mondays" (June 9, 2025 is the first).
    assert_next("0 0 */2 * 1", &[((2025, 5, 31, 0, 0), (2025, 6, 9, 0, 0))]);
}

#[test]
fn works_before_1970_and_at_the_extremes() {
    let c = cron("0 3 * * *");
    assert_next("0 3 * * *", &[((1969, 12, 31, 4, 0), (1970, 1, 1, 3, 0))]);
    assert_latest("0 3 * * *", &[((1969, 12, 31, 2, 0), (1969, 12, 30, 3, 0))]);
    assert_eq!(c.next_after(i64::MAX), None);
    assert_eq!(c.latest_at_or_before(i64::MIN), None);
    assert!(c.next_after(i64::MIN).is_some());
    assert!(c.latest_at_or_before(i64::MAX).is_some());
}

/// A random field: `*`, a value, a range, a step, or a list of those.
fn random_field(rng: &mut u64, min: u32, max: u32) -> String {
    let mut pick = |n: u32| (splitmix(rng) % u64::from(n)) as u32;
    let parts = 1 + pick(2);
    let mut out = Vec::new();
    for _ in 0..parts {
        let a = min + pick(max - min + 1);
        let b = a + pick(max - a + 1);
        let step = 1 + pick(max.min(12));
        out.push(match pick(6) {
            0 => "*".to_string(),
            1 => format!("*/{step}"),
            2 => format!("{a}"),
            3 => format!("{a}-{b}"),
            4 => format!("{a}-{b}/{step}"),
            _ => format!("{a}/{step}"),
        });
    }
    out.join(",")
}

#[test]
fn agrees_with_a_minute_by_minute_scan() {
    let mut rng = 0x5EED_u64;
    let from = at(2027, 12, 20, 0, 0);
    let to = from + 21 * 86_400; // three weeks over a new year
    let fixed = ["0 0 1 * mon", "*/15 * * * *", "0 0 29 2 *", "5 4 * * sun"];
    let mut exprs: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    for _ in 0..12 {
        // Day fields drawn from the whole calendar so both the OR rule
        // and sparse days are exercised; months near the window.
        exprs.push(format!(
            "{} {} {} {} {}",
            random_field(&mut rng, 0, 59),
            random_field(&mut rng, 0, 23),
            random_field(&mut rng, 1, 31),
            ["*", "12", "1", "12,1", "*/11"][(splitmix(&mut rng) % 5) as usize],
            random_field(&mut rng, 0, 7),
        ));
    }
    let mut with_slots = 0;
    for e in &exprs {
        let c = cron(e);
        let slots = scan(&c, from, to);
        with_slots += usize::from(!slots.is_empty());
        // Walk forward from just before the window with next_after ...
        let mut walked = Vec::new();
        let mut t = from - 1;
        while let Some(n) = c.next_after(t).filter(|n| *n < to) {
            walked.push(n);
            t = n + (splitmix(&mut rng) % 60) as i64; // anywhere in the slot's minute
        }
        assert_eq!(walked, slots, "next_after for {e}");
        // ... and backward with latest_at_or_before.
        let mut back = Vec::new();
        let mut t = to - 1;
        while let Some(p) = c.latest_at_or_before(t).filter(|p| *p >= from) {
            back.push(p);
            t = p - 1;
        }
        back.reverse();
        assert_eq!(back, slots, "latest_at_or_before for {e}");
    }
    // Most expressions fire in the window, so the comparison is not
    // between two empty lists.
    assert!(
        with_slots >= exprs.len() / 2,
        "{with_slots} of {}",
        exprs.len()
    );
}
