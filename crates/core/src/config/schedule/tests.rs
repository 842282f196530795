//! Tests of schedules: parsing, validation and the windows they open.

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
