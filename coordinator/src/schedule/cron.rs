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

use crate::time::{civil_from_days, days_from_civil};

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

/// Weekday of a day count since 1970-01-01, 0 = Sunday (1970-01-01 was a
/// Thursday).
fn weekday(days: i64) -> u32 {
    (days + 4).rem_euclid(7) as u32
}

#[cfg(test)]
mod tests;
