//! RFC 3339 timestamps as OpenStack writes them (`2024-05-01T10:00:00Z`,
//! `2024-05-01T10:00:00.123456Z`, `2024-05-01T10:00:00+02:00`, or no zone meaning UTC).

use std::time::{Duration, SystemTime};

/// Parses a timestamp; `None` when it is not RFC 3339-like.
pub fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    if s.len() < 19 || !s.is_char_boundary(19) {
        return None;
    }
    let (head, tail) = s.split_at(19);
    // Split the fractional part from a trailing zone offset.
    let zone_start = tail.find(['Z', 'z', '+', '-']).unwrap_or(tail.len());
    let (frac, zone) = tail.split_at(zone_start);
    let offset_secs: i64 = match zone {
        "" | "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            if digits.len() != 4 || !digits.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let h: i64 = digits[..2].parse().ok()?;
            let m: i64 = digits[2..].parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    let utc_like = format!("{head}{frac}Z");
    let t = humantime::parse_rfc3339_weak(&utc_like).ok()?;
    // Local time = UTC + offset, so UTC = local - offset.
    if offset_secs >= 0 {
        t.checked_sub(Duration::from_secs(offset_secs.unsigned_abs()))
    } else {
        t.checked_add(Duration::from_secs(offset_secs.unsigned_abs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openstack_forms() {
        let base = parse_timestamp("2024-05-01T10:00:00Z").unwrap();
        assert_eq!(parse_timestamp("2024-05-01T10:00:00"), Some(base));
        assert_eq!(parse_timestamp("2024-05-01T12:00:00+02:00"), Some(base));
        assert_eq!(parse_timestamp("2024-05-01T08:30:00-01:30"), Some(base));
        assert_eq!(
            parse_timestamp("2024-05-01T10:00:00.500000Z"),
            Some(base + Duration::from_millis(500))
        );
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2024-05-01T10:00:00+2"), None);
    }
}
