//! Recurring time windows: a five-field cron expression says when a window opens, a
//! `duration` how long it stays open, and an IANA `timeZone` (default UTC) in which the
//! cron fields are read. Capacity buffers use it (warm capacity before working hours);
//! anything else that should only hold at certain times can reuse [`Schedule`].
//!
//! Cron fields are `minute hour day-of-month month day-of-week`, each `*`, a number, a
//! range `a-b`, a step `*/n`, `a/n` or `a-b/n`, or a comma list of those. Months and
//! weekdays also take three-letter names (`JAN`, `MON`, any case); weekday 0 and 7 are
//! Sunday. As in Vixie cron, when both day fields are restricted (neither starts with
//! `*`), a day matching either one counts. `@hourly`, `@daily`, `@weekly`, `@monthly`
//! and `@yearly` are shorthands.
//!
//! Times are wall-clock times in the zone. A start that a DST jump skips opens the
//! window at the shifted instant (02:30 on a spring-forward night opens at 03:30); a
//! start that occurs twice opens it at the first occurrence.

use std::fmt;
use std::time::{Duration, SystemTime};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Deserializer};

/// The field order, for errors and docs.
const SHAPE: &str = "minute hour day-of-month month day-of-week, e.g. `0 7 * * 1-5`";

/// A recurring window: opens at every time `cron` matches and stays open `duration`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Schedule {
    pub cron: Cron,
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    #[serde(default)]
    pub time_zone: Zone,
}

impl Schedule {
    /// The longest `duration` accepted: a window longer than a year is "always".
    pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

    /// Whether `now` lies in `[start, start + duration)` for some start `cron` matches.
    pub fn active(&self, now: SystemTime) -> bool {
        self.window_at(now).is_some()
    }

    /// The window `now` lies in, as `(start, end)`, if any. When windows overlap, the
    /// one that started last (and so ends last).
    pub fn window_at(&self, now: SystemTime) -> Option<(SystemTime, SystemTime)> {
        if self.duration.is_zero() {
            return None;
        }
        let now = Timestamp::try_from(now).ok()?;
        let duration = SignedDuration::try_from(self.duration).ok()?;
        let start = self.last_start_at_or_before(now, duration)?;
        let end = start.checked_add(duration).ok()?;
        (now < end).then(|| (start.into(), end.into()))
    }

    /// The latest start at or before `now`, searching back no further than `within`
    /// (plus a day of slack for starts a DST gap shifted).
    fn last_start_at_or_before(&self, now: Timestamp, within: SignedDuration) -> Option<Timestamp> {
        let tz = &self.time_zone.tz;
        let earliest = now.checked_sub(within).ok()?;
        let stop = tz.to_datetime(earliest).date().yesterday().ok()?;
        let mut day = tz.to_datetime(now).date();
        let mut best: Option<Timestamp> = None;
        let mut found_on: Option<Date> = None;
        while day >= stop {
            // A start a DST gap pushed forward can land on the next day: look at one
            // more day after the first that had a start.
            if let Some(first) = found_on {
                if first.yesterday().ok()? > day {
                    break;
                }
            }
            if self.cron.matches_day(day) {
                for ts in self.cron.starts_on(day, tz).filter(|ts| *ts <= now) {
                    if best.is_none_or(|b| ts > b) {
                        best = Some(ts);
                    }
                    found_on.get_or_insert(day);
                }
            }
            day = day.yesterday().ok()?;
        }
        best
    }
}

/// A time zone by IANA name, from the tz database built into the binary (so a container
/// image without `/usr/share/zoneinfo` reads the same times).
#[derive(Clone)]
pub struct Zone {
    name: String,
    tz: TimeZone,
}

impl Zone {
    pub fn parse(name: &str) -> Result<Zone, String> {
        let name = name.trim();
        match TimeZone::get(name) {
            Ok(tz) => Ok(Zone {
                name: name.to_string(),
                tz,
            }),
            Err(_) => {
                let mut msg = format!("unknown time zone `{name}`");
                let known: Vec<String> = jiff::tz::db()
                    .available()
                    .map(|n| n.as_str().to_string())
                    .collect();
                if let Some(best) = super::error::did_you_mean(name, &known) {
                    msg.push_str(&format!("; did you mean `{best}`?"));
                }
                msg.push_str(
                    " (expected an IANA name such as `Europe/Berlin`, `America/New_York` or `UTC`)",
                );
                Err(msg)
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Default for Zone {
    fn default() -> Self {
        Zone {
            name: "UTC".to_string(),
            tz: TimeZone::UTC,
        }
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for Zone {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Zone::parse(&name).map_err(serde::de::Error::custom)
    }
}

/// A parsed five-field cron expression, each field as the set of values it matches.
#[derive(Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    /// Bit `m` for minute `m` (0-59).
    minutes: u64,
    /// Bit `h` for hour `h` (0-23).
    hours: u32,
    /// Bit `d` for day of month `d` (1-31).
    days: u32,
    /// Bit `m` for month `m` (1-12).
    months: u16,
    /// Bit `d` for weekday `d`, 0 = Sunday (7 is folded onto 0).
    weekdays: u8,
    /// Whether the day-of-month / day-of-week field starts with `*` (Vixie cron's rule
    /// for combining them).
    days_star: bool,
    weekdays_star: bool,
}

/// One cron field: its name, bounds and value names.
struct Field {
    name: &'static str,
    min: u8,
    max: u8,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
};
const WEEKDAY: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
};

impl Field {
    fn value(&self, s: &str) -> Result<u8, String> {
        if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            // Months are named from 1, weekdays from 0 (Sunday).
            return Ok(i as u8 + self.min);
        }
        let v: u8 = match s.parse() {
            Ok(v) => v,
            Err(_) => {
                let names = if self.names.is_empty() {
                    String::new()
                } else {
                    format!(
                        " or a name {}-{}",
                        self.names[0],
                        self.names[self.names.len() - 1]
                    )
                };
                return Err(format!(
                    "`{s}` is not a number; expected {}-{}{names}",
                    self.min, self.max
                ));
            }
        };
        if v < self.min || v > self.max {
            return Err(format!(
                "{v} is out of range; expected {}-{}",
                self.min, self.max
            ));
        }
        Ok(v)
    }

    /// The set of values `text` matches, as bits, and whether it starts with `*`.
    fn parse(&self, text: &str) -> Result<(u64, bool), String> {
        let mut bits = 0u64;
        for item in text.split(',') {
            if item.is_empty() {
                return Err("empty list item; expected values separated by single commas".into());
            }
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => {
                    let step: u8 = s
                        .parse()
                        .map_err(|_| format!("step `{s}` is not a number; expected e.g. `*/15`"))?;
                    if step == 0 {
                        return Err("step 0; expected a step of at least 1".into());
                    }
                    (r, Some(step))
                }
                None => (item, None),
            };
            let (lo, hi) = if range == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (lo, hi) = (self.value(a)?, self.value(b)?);
                if lo > hi {
                    return Err(format!(
                        "range `{range}` runs backwards; expected the smaller value first"
                    ));
                }
                (lo, hi)
            } else {
                let v = self.value(range)?;
                // `a/n` means from a to the end, every n.
                (v, if step.is_some() { self.max } else { v })
            };
            let step = step.unwrap_or(1);
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v = match v.checked_add(step) {
                    Some(next) => next,
                    None => break,
                };
            }
        }
        Ok((bits, text.starts_with('*')))
    }
}

impl Cron {
    pub fn parse(text: &str) -> Result<Cron, String> {
        let text = text.trim();
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!(
                    "`{other}` is not a known shorthand; expected @hourly, @daily, @weekly, @monthly, @yearly or five fields: {SHAPE}"
                ))
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            let hint = if fields.len() > 5 {
                " (seconds and years are not supported)"
            } else {
                ""
            };
            return Err(format!(
                "`{text}` has {} field(s){hint}; expected five: {SHAPE}",
                fields.len()
            ));
        }
        let specs = [&MINUTE, &HOUR, &DAY, &MONTH, &WEEKDAY];
        let mut parsed = [(0u64, false); 5];
        for (i, (spec, field)) in specs.iter().zip(&fields).enumerate() {
            parsed[i] = spec.parse(field).map_err(|e| {
                format!(
                    "`{text}`: {} field `{field}`: {e}; fields are {SHAPE}",
                    spec.name
                )
            })?;
        }
        let weekdays = parsed[4].0;
        let cron = Cron {
            text: text.to_string(),
            minutes: parsed[0].0,
            hours: parsed[1].0 as u32,
            days: parsed[2].0 as u32,
            months: parsed[3].0 as u16,
            // Sunday is 0 and 7.
            weekdays: ((weekdays | (weekdays >> 7)) & 0x7f) as u8,
            days_star: parsed[2].1,
            weekdays_star: parsed[4].1,
        };
        if !cron.ever_matches() {
            return Err(format!(
                "`{text}` never matches: no month in the month field has a day in the day-of-month field; fields are {SHAPE}"
            ));
        }
        Ok(cron)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether some day of some year matches (`0 0 31 2 *` never does).
    fn ever_matches(&self) -> bool {
        if !self.weekdays_star {
            // Every weekday comes round each month.
            return true;
        }
        (1..=12u8).filter(|m| self.months & (1 << m) != 0).any(|m| {
            let longest = match m {
                2 => 29,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            (1..=longest).any(|d| self.days & (1 << d) != 0)
        })
    }

    /// Whether the day fields and the month field match `date`.
    pub fn matches_day(&self, date: Date) -> bool {
        let month = date.month() as u32;
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom = self.days & (1 << date.day() as u32) != 0;
        let dow = self.weekdays & (1 << date.weekday().to_sunday_zero_offset() as u32) != 0;
        match (self.days_star, self.weekdays_star) {
            (false, false) => dom || dow,
            _ => dom && dow,
        }
    }

    /// The instants the hour and minute fields give on `date` (a matching day) in `tz`.
    fn starts_on<'t>(&self, date: Date, tz: &'t TimeZone) -> impl Iterator<Item = Timestamp> + 't {
        let (hours, minutes) = (self.hours, self.minutes);
        (0..24i8)
            .filter(move |h| hours & (1 << *h as u32) != 0)
            .flat_map(move |h| {
                (0..60i8)
                    .filter(move |m| minutes & (1u64 << *m as u32) != 0)
                    .map(move |m| (h, m))
            })
            .filter_map(move |(h, m)| {
                tz.to_ambiguous_timestamp(date.at(h, m, 0, 0))
                    .compatible()
                    .ok()
            })
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Cron {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Cron::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` for {} ({})",
            self.cron,
            humantime::format_duration(self.duration),
            self.time_zone
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A civil time in `zone` as a `SystemTime`.
    fn at(zone: &str, y: i16, mo: i8, d: i8, h: i8, mi: i8) -> SystemTime {
        let tz = TimeZone::get(zone).expect("known zone");
        let ts = tz
            .to_ambiguous_timestamp(jiff::civil::date(y, mo, d).at(h, mi, 0, 0))
            .compatible()
            .expect("valid time");
        ts.into()
    }

    fn utc(y: i16, mo: i8, d: i8, h: i8, mi: i8) -> SystemTime {
        at("UTC", y, mo, d, h, mi)
    }

    fn schedule(cron: &str, duration: &str, zone: &str) -> Schedule {
        Schedule {
            cron: Cron::parse(cron).expect("valid cron"),
            duration: humantime::parse_duration(duration).expect("valid duration"),
            time_zone: Zone::parse(zone).expect("valid zone"),
        }
    }

    fn bits(values: &[u8]) -> u64 {
        values.iter().fold(0, |b, v| b | 1 << v)
    }

    #[test]
    fn valid_expressions() {
        // (expression, minutes, hours, days, months, weekdays)
        let all_min = (0..60).fold(0u64, |b, v| b | 1 << v);
        let all_hours = (0..24).fold(0u64, |b, v| b | 1 << v);
        let all_days = (1..32).fold(0u64, |b, v| b | 1 << v);
        let all_months = (1..13).fold(0u64, |b, v| b | 1 << v);
        let cases: &[(&str, u64, u64, u64, u64, u64)] = &[
            ("* * * * *", all_min, all_hours, all_days, all_months, 0x7f),
            (
                "0 7 * * 1-5",
                bits(&[0]),
                bits(&[7]),
                all_days,
                all_months,
                bits(&[1, 2, 3, 4, 5]),
            ),
            (
                "*/15 9-17/4 1,15 * *",
                bits(&[0, 15, 30, 45]),
                bits(&[9, 13, 17]),
                bits(&[1, 15]),
                all_months,
                0x7f,
            ),
            (
                "5/20 0 * jan,Jul-AUG sun",
                bits(&[5, 25, 45]),
                bits(&[0]),
                all_days,
                bits(&[1, 7, 8]),
                bits(&[0]),
            ),
            (
                "0 0 * * 7",
                bits(&[0]),
                bits(&[0]),
                all_days,
                all_months,
                bits(&[0]),
            ),
            (
                "0 0 * * 5-7",
                bits(&[0]),
                bits(&[0]),
                all_days,
                all_months,
                bits(&[0, 5, 6]),
            ),
            (
                "  59 23 31 12 MON-fri  ",
                bits(&[59]),
                bits(&[23]),
                bits(&[31]),
                bits(&[12]),
                bits(&[1, 2, 3, 4, 5]),
            ),
            ("@daily", bits(&[0]), bits(&[0]), all_days, all_months, 0x7f),
            (
                "@weekly",
                bits(&[0]),
                bits(&[0]),
                all_days,
                all_months,
                bits(&[0]),
            ),
        ];
        for &(text, minutes, hours, days, months, weekdays) in cases {
            let c = Cron::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (
                    c.minutes,
                    u64::from(c.hours),
                    u64::from(c.days),
                    u64::from(c.months),
                    u64::from(c.weekdays)
                ),
                (minutes, hours, days, months, weekdays),
                "{text}"
            );
        }
    }

    #[test]
    fn invalid_expressions_name_the_field() {
        // (expression, fragments the error must contain)
        let cases: &[(&str, &[&str])] = &[
            ("", &["0 field(s)", "expected five"]),
            ("0 7 * *", &["4 field(s)", "minute hour day-of-month"]),
            ("0 0 7 * * 1-5", &["6 field(s)", "seconds and years"]),
            ("60 * * * *", &["minute field `60`", "out of range", "0-59"]),
            ("* 24 * * *", &["hour field `24`", "0-23"]),
            ("* * 0 * *", &["day-of-month field `0`", "1-31"]),
            ("* * 32 * *", &["day-of-month field `32`"]),
            ("* * * 13 *", &["month field `13`", "1-12"]),
            (
                "* * * foo *",
                &["month field `foo`", "not a number", "JAN-DEC"],
            ),
            ("* * * * 8", &["day-of-week field `8`", "0-7"]),
            ("* * * * monday", &["day-of-week field `monday`", "SUN-SAT"]),
            ("*/0 * * * *", &["minute field `*/0`", "step 0"]),
            ("*/x * * * *", &["step `x`"]),
            ("5-1 * * * *", &["range `5-1` runs backwards"]),
            ("1,,2 * * * *", &["empty list item"]),
            ("* * * * 1-", &["day-of-week field `1-`"]),
            ("0 0 31 2 *", &["never matches"]),
            ("0 0 30,31 2 *", &["never matches"]),
            ("0 0 31 4,6,9,11 *", &["never matches"]),
            ("@reboot", &["not a known shorthand"]),
        ];
        for &(text, fragments) in cases {
            let err = match Cron::parse(text) {
                Ok(c) => panic!("{text:?} accepted as {c:?}"),
                Err(e) => e,
            };
            for f in fragments {
                assert!(err.contains(f), "{text:?}: {err:?} lacks {f:?}");
            }
            assert!(
                !err.contains("unit"),
                "{err}: would be taken for a size error"
            );
        }
        // Both day fields restricted: either matches, so Feb 31 on Mondays is fine.
        assert!(Cron::parse("0 0 31 2 1").is_ok());
    }

    #[test]
    fn day_fields_combine_like_vixie_cron() {
        let d = |y, m, d| jiff::civil::date(y, m, d);
        // 2025-06-02 is a Monday, 2025-06-13 a Friday.
        let either = Cron::parse("0 0 13 * 1").expect("valid");
        assert!(either.matches_day(d(2025, 6, 2)), "a Monday");
        assert!(either.matches_day(d(2025, 6, 13)), "the 13th");
        assert!(!either.matches_day(d(2025, 6, 3)));
        // `*/2` starts with `*`, so both fields must match; over 1-31 it is the odd days.
        let both = Cron::parse("0 0 */2 * 1").expect("valid");
        assert!(!both.matches_day(d(2025, 6, 2)));
        assert!(both.matches_day(d(2025, 6, 9)), "Monday the 9th");
        assert!(!both.matches_day(d(2025, 6, 11)), "Wednesday the 11th");
        let months = Cron::parse("0 0 * dec *").expect("valid");
        assert!(!months.matches_day(d(2025, 6, 2)));
        assert!(months.matches_day(d(2025, 12, 2)));
    }

    #[test]
    fn window_boundaries_in_utc() {
        let s = schedule("0 7 * * 1-5", "10h", "UTC");
        // 2025-06-02 is a Monday.
        assert!(!s.active(utc(2025, 6, 2, 6, 59)));
        assert!(s.active(utc(2025, 6, 2, 7, 0)), "start is inside");
        assert!(s.active(utc(2025, 6, 2, 16, 59)));
        assert!(!s.active(utc(2025, 6, 2, 17, 0)), "end is outside");
        assert_eq!(
            s.window_at(utc(2025, 6, 2, 12, 0)),
            Some((utc(2025, 6, 2, 7, 0), utc(2025, 6, 2, 17, 0)))
        );
        // Saturday 2025-06-07: no start.
        assert!(!s.active(utc(2025, 6, 7, 9, 0)));
        // Friday's window runs past midnight with a long duration.
        let long = schedule("0 20 * * 5", "30h", "UTC");
        assert!(long.active(utc(2025, 6, 7, 1, 59)));
        assert!(long.active(utc(2025, 6, 8, 1, 59)));
        assert!(!long.active(utc(2025, 6, 8, 2, 0)));
        // Overlapping windows: the later start decides the end.
        let every_hour = schedule("0 * * * *", "90m", "UTC");
        assert_eq!(
            every_hour.window_at(utc(2025, 6, 2, 10, 45)),
            Some((utc(2025, 6, 2, 10, 0), utc(2025, 6, 2, 11, 30)))
        );
        // A monthly start found across a month of days.
        let monthly = schedule("0 0 1 * *", "20d", "UTC");
        assert!(monthly.active(utc(2025, 6, 20, 23, 59)));
        assert!(!monthly.active(utc(2025, 6, 21, 0, 0)));
    }

    #[test]
    fn window_in_a_zone_follows_local_time_across_dst() {
        let s = schedule("0 7 * * 1-5", "10h", "Europe/Berlin");
        // Winter: CET is UTC+1, so 07:00 local is 06:00 UTC.
        assert!(!s.active(utc(2025, 1, 6, 5, 59)));
        assert!(s.active(utc(2025, 1, 6, 6, 0)));
        assert!(!s.active(utc(2025, 1, 6, 16, 0)));
        // Summer: CEST is UTC+2, so 07:00 local is 05:00 UTC.
        assert!(!s.active(utc(2025, 6, 2, 4, 59)));
        assert!(s.active(utc(2025, 6, 2, 5, 0)));
        assert!(s.active(utc(2025, 6, 2, 14, 59)));
        assert!(!s.active(utc(2025, 6, 2, 15, 0)));

        // Spring forward (2025-03-30, a Sunday): 02:00-03:00 does not exist. A start at
        // 02:30 opens at 03:30 CEST = 01:30 UTC; the window lasts its duration in real
        // time.
        let gap = schedule("30 2 * * *", "1h", "Europe/Berlin");
        assert!(!gap.active(utc(2025, 3, 30, 1, 29)));
        assert!(gap.active(utc(2025, 3, 30, 1, 30)));
        assert!(!gap.active(utc(2025, 3, 30, 2, 30)));
        // The night before, 02:30 CET = 01:30 UTC as usual.
        assert!(gap.active(utc(2025, 3, 29, 1, 30)));

        // A window across the change: 00:00 local for 6h on 2025-03-30 opens at 23:00
        // UTC on the 29th and, being six real hours, closes at 05:00 UTC = 07:00 CEST.
        let across = schedule("0 0 30 3 *", "6h", "Europe/Berlin");
        assert!(across.active(utc(2025, 3, 29, 23, 0)));
        assert!(across.active(utc(2025, 3, 30, 4, 59)));
        assert!(!across.active(utc(2025, 3, 30, 5, 0)));

        // Fall back (2025-10-26): 02:00-03:00 happens twice; a start at 02:30 opens at
        // the first one (CEST, 00:30 UTC) only.
        let fold = schedule("30 2 * * *", "20m", "Europe/Berlin");
        assert!(fold.active(utc(2025, 10, 26, 0, 30)));
        assert!(!fold.active(utc(2025, 10, 26, 0, 50)));
        assert!(!fold.active(utc(2025, 10, 26, 1, 30)), "no second opening");
    }

    #[test]
    fn zones_and_durations() {
        assert_eq!(Zone::default().name(), "UTC");
        let e = Zone::parse("Europe/Berln").expect_err("typo");
        assert!(e.contains("unknown time zone `Europe/Berln`"), "{e}");
        assert!(e.contains("did you mean `Europe/Berlin`"), "{e}");
        assert!(Zone::parse("America/New_York").is_ok());
        // A zero duration is never active (config validation rejects it).
        let zero = Schedule {
            duration: Duration::ZERO,
            ..schedule("* * * * *", "1m", "UTC")
        };
        assert!(!zero.active(utc(2025, 6, 2, 7, 0)));
        // Out of jiff's range: inactive, not a panic.
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40);
        assert!(!schedule("* * * * *", "1m", "UTC").active(far));
    }
}
