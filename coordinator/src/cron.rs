//! Cron expressions for schedules, evaluated in UTC. Pure: text in, minute
//! slots (unix seconds) out.
//!
//! The five standard fields (minute, hour, day-of-month, month, day-of-week)
//! with `*`, `a`, `a-b`, `*/n`, `a-b/n`, `a/n` (a to the field's maximum,
//! step n) and comma lists; month and weekday names (`jan`, `sun`, any case);
//! the macros `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`,
//! `@yearly` and `@annually`. Day-of-week 7 is Sunday, like 0.
//!
//! Day matching follows Vixie cron: when both the day-of-month and the
//! day-of-week field are restricted, a day matches if *either* does (`0 0 1 * 1`
//! runs on the 1st and on every Monday). A field counts as unrestricted when it
//! starts with `*`, exactly as Vixie cron decides it, so `*/2` in day-of-month
//! together with `1` in day-of-week means "odd days that are Mondays".
//!
//! The calendar is the proleptic Gregorian one in UTC, computed with Howard
//! Hinnant's `days_from_civil` / `civil_from_days`; no date crate. The search
//! walks whole months and days that cannot match, so an expression that fires
//! once every four years (`0 0 29 2 *`) answers as fast as `* * * * *`, and an
//! impossible one (`0 0 31 2 *`) answers `None` after a bounded walk.

use std::fmt;
use std::str::FromStr;

/// How far [`Cron::next_after`] and [`Cron::latest_at_or_before`] look, in
/// days: a little over eight years, because that is the longest gap between
/// two February 29ths (2096 → 2104), and `0 0 29 2 *` must always be found.
const SEARCH_DAYS: i64 = 8 * 366 + 1;

const MINUTES_PER_DAY: i64 = 24 * 60;

/// One of the five fields, for error messages and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronField {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl CronField {
    const ALL: [CronField; 5] = [
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    /// The field's position in the expression, counting from 1.
    pub fn number(self) -> usize {
        self as usize + 1
    }

    pub fn name(self) -> &'static str {
        match self {
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
        }
    }

    /// The smallest value the field accepts.
    pub fn min(self) -> u32 {
        match self {
            CronField::DayOfMonth | CronField::Month => 1,
            _ => 0,
        }
    }

    /// The largest value the field accepts (7 for day-of-week: Sunday again).
    pub fn max(self) -> u32 {
        match self {
            CronField::Minute => 59,
            CronField::Hour => 23,
            CronField::DayOfMonth => 31,
            CronField::Month => 12,
            CronField::DayOfWeek => 7,
        }
    }

    /// The names a value may be written as, index = value.
    fn names(self) -> &'static [&'static str] {
        match self {
            CronField::Month => &[
                "", "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                "dec",
            ],
            CronField::DayOfWeek => &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
            _ => &[],
        }
    }
}

/// Why a cron expression was refused. Every message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("expected 5 fields (minute hour day-of-month month day-of-week), got {got}")]
    FieldCount { got: usize },
    #[error(
        "unknown cron macro {name:?} (known: @hourly @daily @midnight @weekly @monthly @yearly @annually)"
    )]
    UnknownMacro { name: String },
    #[error(
        "cron field {} ({}): {value} is outside {}-{}",
        .field.number(), .field.name(), .field.min(), .field.max()
    )]
    OutOfRange { field: CronField, value: u64 },
    #[error(
        "cron field {} ({}): range {start}-{end} runs backwards",
        .field.number(), .field.name()
    )]
    BackwardRange {
        field: CronField,
        start: u32,
        end: u32,
    },
    #[error("cron field {} ({}): {text:?} {problem}", .field.number(), .field.name())]
    Syntax {
        field: CronField,
        /// The offending part of the field, as written.
        text: String,
        problem: &'static str,
    },
}

/// A parsed cron expression. Each field is a bit set of the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    /// The expression as written (trimmed), for display and storage.
    text: String,
    /// Bit m set: minute m matches.
    minutes: u64,
    /// Bit h set: hour h matches.
    hours: u32,
    /// Bit d set (1-31): day-of-month d matches.
    days_of_month: u32,
    /// Bit m set (1-12): month m matches.
    months: u16,
    /// Bit w set (0-6, 0 = Sunday): weekday w matches (7 folded into 0).
    days_of_week: u8,
    /// Day-of-month field starts with `*` (Vixie's DOM_STAR).
    dom_star: bool,
    /// Day-of-week field starts with `*` (Vixie's DOW_STAR).
    dow_star: bool,
}

impl FromStr for Cron {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let expanded = if let Some(name) = text.strip_prefix('@') {
            match name.to_ascii_lowercase().as_str() {
                "hourly" => "0 * * * *",
                "daily" | "midnight" => "0 0 * * *",
                "weekly" => "0 0 * * 0",
                "monthly" => "0 0 1 * *",
                "yearly" | "annually" => "0 0 1 1 *",
                _ => {
                    return Err(CronError::UnknownMacro {
                        name: text.to_string(),
                    });
                }
            }
        } else {
            text
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount { got: fields.len() });
        }
        let mut sets = [0u64; 5];
        for (set, (field, src)) in sets.iter_mut().zip(CronField::ALL.into_iter().zip(&fields)) {
            *set = parse_field(field, src)?;
        }
        // Fold Sunday-as-7 into 0.
        let dow = sets[4];
        let dow = (dow | (dow >> 7)) & 0x7f;
        Ok(Cron {
            text: text.to_string(),
            minutes: sets[0],
            hours: sets[1] as u32,
            days_of_month: sets[2] as u32,
            months: sets[3] as u16,
            days_of_week: dow as u8,
            dom_star: fields[2].starts_with('*'),
            dow_star: fields[4].starts_with('*'),
        })
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Cron {
    /// The first slot strictly after `t` (unix seconds, UTC), or `None` if
    /// there is none within the search window (about eight years; an
    /// impossible date such as `0 0 31 2 *` never has one).
    pub fn next_after(&self, t: i64) -> Option<i64> {
        // Minute index of the first candidate: the minute after t's minute.
        let first = t.div_euclid(60) + 1;
        let mut day = first.div_euclid(MINUTES_PER_DAY);
        let mut from = first.rem_euclid(MINUTES_PER_DAY) as u32;
        let last_day = day.saturating_add(SEARCH_DAYS);
        while day <= last_day {
            let (y, m, d) = civil_from_days(day);
            if !self.month_matches(m) {
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                day = days_from_civil(ny, nm, 1);
                from = 0;
                continue;
            }
            if self.day_matches(d, weekday(day))
                && let Some(minute) = self.first_minute_from(from)
            {
                return slot_seconds(day, minute);
            }
            day += 1;
            from = 0;
        }
        None
    }

    /// The latest slot at or before `t` (inclusive: a `t` inside a matching
    /// minute gives that minute), or `None` if there is none within the
    /// search window back. Used to run a slot missed while the coordinator
    /// was down.
    pub fn latest_at_or_before(&self, t: i64) -> Option<i64> {
        let last = t.div_euclid(60);
        let mut day = last.div_euclid(MINUTES_PER_DAY);
        let mut upto = last.rem_euclid(MINUTES_PER_DAY) as u32;
        let first_day = day.saturating_sub(SEARCH_DAYS);
        while day >= first_day {
            let (y, m, d) = civil_from_days(day);
            if !self.month_matches(m) {
                day = days_from_civil(y, m, 1) - 1;
                upto = (MINUTES_PER_DAY - 1) as u32;
                continue;
            }
            if self.day_matches(d, weekday(day))
                && let Some(minute) = self.last_minute_upto(upto)
            {
                return slot_seconds(day, minute);
            }
            day -= 1;
            upto = (MINUTES_PER_DAY - 1) as u32;
        }
        None
    }

    /// Whether `t`'s minute (UTC; seconds ignored) is a slot.
    pub fn matches(&self, t: i64) -> bool {
        let minute = t.div_euclid(60);
        let day = minute.div_euclid(MINUTES_PER_DAY);
        let of_day = minute.rem_euclid(MINUTES_PER_DAY) as u32;
        let (_, m, d) = civil_from_days(day);
        self.month_matches(m)
            && self.day_matches(d, weekday(day))
            && self.hours & (1 << (of_day / 60)) != 0
            && self.minutes & (1 << (of_day % 60)) != 0
    }

    fn month_matches(&self, month: u32) -> bool {
        self.months & (1 << month) != 0
    }

    /// Vixie's rule: both day fields restricted → either may match;
    /// otherwise both must (the unrestricted one always does).
    fn day_matches(&self, dom: u32, dow: u32) -> bool {
        let dom_ok = self.days_of_month & (1 << dom) != 0;
        let dow_ok = self.days_of_week & (1 << dow) != 0;
        if self.dom_star || self.dow_star {
            dom_ok && dow_ok
        } else {
            dom_ok || dow_ok
        }
    }

    /// The first matching minute of the day at or after minute-of-day `from`.
    fn first_minute_from(&self, from: u32) -> Option<u32> {
        let (h0, m0) = (from / 60, from % 60);
        for h in h0..24 {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let start = if h == h0 { m0 } else { 0 };
            let left = self.minutes & (u64::MAX << start);
            if left != 0 {
                return Some(h * 60 + left.trailing_zeros());
            }
        }
        None
    }

    /// The last matching minute of the day at or before minute-of-day `upto`.
    fn last_minute_upto(&self, upto: u32) -> Option<u32> {
        let (h0, m0) = (upto / 60, upto % 60);
        for h in (0..=h0).rev() {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let end = if h == h0 { m0 } else { 59 };
            let left = self.minutes & (u64::MAX >> (63 - end));
            if left != 0 {
                return Some(h * 60 + 63 - left.leading_zeros());
            }
        }
        None
    }
}

/// Unix seconds of minute `minute` of day `day`; `None` past the i64 range.
fn slot_seconds(day: i64, minute: u32) -> Option<i64> {
    day.checked_mul(MINUTES_PER_DAY)?
        .checked_add(i64::from(minute))?
        .checked_mul(60)
}

/// Parses one field into a bit set (bit v = value v allowed).
fn parse_field(field: CronField, src: &str) -> Result<u64, CronError> {
    let mut set = 0u64;
    for item in src.split(',') {
        let syntax = |problem| CronError::Syntax {
            field,
            text: item.to_string(),
            problem,
        };
        if item.is_empty() {
            return Err(CronError::Syntax {
                field,
                text: src.to_string(),
                problem: "has an empty list item",
            });
        }
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => {
                let step = step
                    .parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0 && step.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| syntax("needs a step that is a whole number >= 1"))?;
                (base, Some(step))
            }
            None => (item, None),
        };
        let (start, end) = if base == "*" {
            (field.min(), field.max())
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b) = (parse_value(field, a)?, parse_value(field, b)?);
            if a > b {
                return Err(CronError::BackwardRange {
                    field,
                    start: a,
                    end: b,
                });
            }
            (a, b)
        } else {
            let a = parse_value(field, base)?;
            // `a/n` runs from a to the field's maximum.
            (a, if step.is_some() { field.max() } else { a })
        };
        let step = step.unwrap_or(1) as usize;
        for v in (start..=end).step_by(step) {
            set |= 1 << v;
        }
    }
    Ok(set)
}

/// One value: a number within the field's bounds, or a month/weekday name.
fn parse_value(field: CronField, text: &str) -> Result<u32, CronError> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let value = text.parse::<u64>().unwrap_or(u64::MAX);
        if value < u64::from(field.min()) || value > u64::from(field.max()) {
            return Err(CronError::OutOfRange { field, value });
        }
        return Ok(value as u32);
    }
    let lower = text.to_ascii_lowercase();
    match field
        .names()
        .iter()
        .position(|n| !n.is_empty() && *n == lower)
    {
        Some(i) => Ok(i as u32),
        None => Err(CronError::Syntax {
            field,
            text: text.to_string(),
            problem: match field {
                CronField::Month => "is not a number or a month name (jan-dec)",
                CronField::DayOfWeek => "is not a number or a weekday name (sun-sat)",
                _ => "is not a number",
            },
        }),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's
/// `days_from_civil`). `month` 1-12, `day` 1-31.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
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
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
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

/// Weekday of a day count since 1970-01-01, 0 = Sunday (1970-01-01 was a
/// Thursday).
fn weekday(days: i64) -> u32 {
    (days + 4).rem_euclid(7) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_fifteen_minutes() {
        let c = cron("*/15 * * * *");
        let t = at(2025, 12, 31, 23, 50);
        assert_eq!(c.next_after(t), Some(at(2026, 1, 1, 0, 0)));
        assert_eq!(
            c.next_after(at(2026, 1, 1, 0, 0)),
            Some(at(2026, 1, 1, 0, 15))
        );
        assert_eq!(c.latest_at_or_before(t), Some(at(2025, 12, 31, 23, 45)));
        assert_eq!(
            scan(&c, at(2025, 3, 1, 0, 0), at(2025, 3, 2, 0, 0)).len(),
            96
        );
    }

    #[test]
    fn leap_day_only_every_four_years() {
        let c = cron("0 0 29 2 *");
        assert_eq!(
            c.next_after(at(2024, 3, 1, 0, 0)),
            Some(at(2028, 2, 29, 0, 0))
        );
        assert_eq!(
            c.next_after(at(2023, 1, 1, 0, 0)),
            Some(at(2024, 2, 29, 0, 0))
        );
        // 2100 is not a leap year: eight years from 2096 to 2104.
        assert_eq!(
            c.next_after(at(2096, 3, 1, 0, 0)),
            Some(at(2104, 2, 29, 0, 0))
        );
        assert_eq!(
            c.latest_at_or_before(at(2104, 2, 28, 0, 0)),
            Some(at(2096, 2, 29, 0, 0))
        );
        assert_eq!(
            c.latest_at_or_before(at(2000, 2, 29, 0, 0)),
            Some(at(2000, 2, 29, 0, 0))
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
        let c = cron("30 23 31 * *");
        assert_eq!(
            c.next_after(at(2025, 4, 1, 0, 0)),
            Some(at(2025, 5, 31, 23, 30))
        );
        assert_eq!(
            c.next_after(at(2025, 7, 31, 23, 30)),
            Some(at(2025, 8, 31, 23, 30))
        );
        assert_eq!(
            c.latest_at_or_before(at(2025, 7, 1, 0, 0)),
            Some(at(2025, 5, 31, 23, 30))
        );
        let last_of_feb = cron("0 12 28-29 2 *");
        assert_eq!(
            last_of_feb.next_after(at(2025, 2, 28, 12, 0)),
            Some(at(2026, 2, 28, 12, 0))
        );
        assert_eq!(
            last_of_feb.next_after(at(2024, 2, 28, 12, 0)),
            Some(at(2024, 2, 29, 12, 0))
        );
        // New year rollover in both directions.
        let c = cron("0 0 1 1 *");
        assert_eq!(
            c.next_after(at(2025, 1, 1, 0, 0)),
            Some(at(2026, 1, 1, 0, 0))
        );
        assert_eq!(
            c.latest_at_or_before(at(2025, 12, 31, 23, 59)),
            Some(at(2025, 1, 1, 0, 0))
        );
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_restricted() {
        // 1st of the month OR any Monday. June 2025: Sun 1, Mon 2, Mon 9.
        let c = cron("0 0 1 * mon");
        assert_eq!(
            c.next_after(at(2025, 5, 31, 0, 0)),
            Some(at(2025, 6, 1, 0, 0))
        );
        assert_eq!(
            c.next_after(at(2025, 6, 1, 0, 0)),
            Some(at(2025, 6, 2, 0, 0))
        );
        assert_eq!(
            c.next_after(at(2025, 6, 2, 0, 0)),
            Some(at(2025, 6, 9, 0, 0))
        );
        // Only one restricted: both must match (the other always does).
        let mondays = cron("0 0 * * 1");
        assert_eq!(
            mondays.next_after(at(2025, 5, 31, 0, 0)),
            Some(at(2025, 6, 2, 0, 0))
        );
        let firsts = cron("0 0 1 * *");
        assert_eq!(
            firsts.next_after(at(2025, 6, 1, 0, 0)),
            Some(at(2025, 7, 1, 0, 0))
        );
        // Vixie: a field starting with `*` counts as unrestricted, so this is
        // "odd days that are Mondays" (June 9, 2025 is the first).
        let odd_mondays = cron("0 0 */2 * 1");
        assert_eq!(
            odd_mondays.next_after(at(2025, 5, 31, 0, 0)),
            Some(at(2025, 6, 9, 0, 0))
        );
    }

    #[test]
    fn works_before_1970_and_at_the_extremes() {
        let c = cron("0 3 * * *");
        assert_eq!(
            c.next_after(at(1969, 12, 31, 4, 0)),
            Some(at(1970, 1, 1, 3, 0))
        );
        assert_eq!(
            c.latest_at_or_before(at(1969, 12, 31, 2, 0)),
            Some(at(1969, 12, 30, 3, 0))
        );
        assert_eq!(c.next_after(i64::MAX), None);
        assert_eq!(c.latest_at_or_before(i64::MIN), None);
        assert!(c.next_after(i64::MIN).is_some());
        assert!(c.latest_at_or_before(i64::MAX).is_some());
    }

    /// splitmix64, so the cross-check draws the same expressions every run.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
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
}
