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
mod tests;
