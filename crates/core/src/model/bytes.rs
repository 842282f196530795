//! Byte sizes in config (memory targets, VM memory and RAM, host reserves), all read
//! by one rule so that no provider reads `8192` as MiB while another reads it as bytes:
//!
//! - binary units, with or without a space and `B`: `8 GiB`, `8GiB`, `8Gi`, `512 MiB`,
//!   `512Mi`, `1.5 GiB`, `4096 B` (units are case-insensitive);
//! - a bare number is refused (is `8` bytes or GiB? is `8192` MiB?), except `0`;
//! - decimal units (`8GB`, `8G`, `500M`, `1kB`) are refused with what they mean:
//!   `8GB` is 8,000,000,000 bytes, 7.45 GiB, and a pod asking for 7.5 GiB never fits.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes, read from `8 GiB` or `8Gi` (see the module docs for the rule).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Parses `text` by the rule above; the error says what was found and what to write.
    pub fn parse(text: &str) -> Result<Bytes, String> {
        parse(text).map(Bytes)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", bytesize::ByteSize(self.0).display().iec())
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{} B", self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = super::quantity::scalar_text(d)?;
        Bytes::parse(&text).map_err(serde::de::Error::custom)
    }
}

const KIB: f64 = 1024.0;

/// Binary units by their case-folded spelling, as powers of 1024.
fn binary_unit(unit: &str) -> Option<i32> {
    Some(match unit {
        "b" => 0,
        "ki" | "kib" => 1,
        "mi" | "mib" => 2,
        "gi" | "gib" => 3,
        "ti" | "tib" => 4,
        "pi" | "pib" => 5,
        "ei" | "eib" => 6,
        _ => return None,
    })
}

/// Decimal units by their case-folded spelling, as powers of 1000.
fn decimal_unit(unit: &str) -> Option<(i32, &'static str)> {
    Some(match unit {
        "k" | "kb" => (1, "KiB"),
        "m" | "mb" => (2, "MiB"),
        "g" | "gb" => (3, "GiB"),
        "t" | "tb" => (4, "TiB"),
        "p" | "pb" => (5, "PiB"),
        "e" | "eb" => (6, "EiB"),
        _ => return None,
    })
}

/// `8000000000` as `8,000,000,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A readable binary size with two decimals at most (`7.45 GiB`).
fn iec(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes;
    let mut i = 0;
    while v >= KIB && i + 1 < units.len() {
        v /= KIB;
        i += 1;
    }
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {}", units[i])
}

fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number = number.replace('_', "");
    let unit = unit.trim();
    let value: f64 = match number.parse() {
        Ok(v) if !number.is_empty() => v,
        _ => {
            return Err(format!(
                "`{t}` is not a size; expected a number and a binary unit such as `8 GiB`, `512 MiB` or `16Gi`"
            ))
        }
    };
    if unit.is_empty() {
        if value == 0.0 {
            return Ok(0);
        }
        let example = if value >= 1024.0 && value.fract() == 0.0 {
            format!(
                "`{number} MiB` if you mean MiB ({}), or `{number} B` for bytes",
                iec(value * KIB * KIB)
            )
        } else {
            format!("`{number} GiB` if you mean GiB, or `{number} MiB` or `{number} B`")
        };
        return Err(format!(
            "`{t}` has no unit, which would be read as bytes; write e.g. {example} (binary units: B, KiB, MiB, GiB, TiB, or Ki, Mi, Gi, Ti)"
        ));
    }
    let folded = unit.to_ascii_lowercase();
    if let Some(power) = binary_unit(&folded) {
        let bytes = value * KIB.powi(power);
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(format!("`{t}` is too large; expected at most 16 EiB"));
        }
        return Ok(bytes.round() as u64);
    }
    // `M` is mega in Kubernetes quantities; a lowercase `m` is milli there, never a size.
    if unit == "m" {
        return Err(format!(
            "`{t}` is in thousandths of a byte (`m` is milli); write e.g. `{number} MiB`"
        ));
    }
    if let Some((power, binary)) = decimal_unit(&folded) {
        let bytes = value * 1000f64.powi(power);
        let meant = value * KIB.powi(power);
        return Err(format!(
            "`{t}` is in decimal units: {} bytes ({}), not {}; write `{number} {binary}` if you mean {} bytes, or `{}` for the decimal amount",
            grouped(bytes.round() as u64),
            iec(bytes),
            iec(meant),
            grouped(meant.round() as u64),
            iec(bytes)
        ));
    }
    Err(format!(
        "`{t}` has an unknown unit `{unit}`; expected a binary unit: B, KiB, MiB, GiB, TiB (or Ki, Mi, Gi, Ti), e.g. `8 GiB`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units_in_either_spelling() {
        for (text, want) in [
            ("8 GiB", 8u64 << 30),
            ("8GiB", 8 << 30),
            ("8Gi", 8 << 30),
            ("8 gib", 8 << 30),
            ("512 MiB", 512 << 20),
            ("512Mi", 512 << 20),
            ("1.5 GiB", 3 << 29),
            ("4096 B", 4096),
            ("0", 0),
            ("0 B", 0),
            ("1_024 KiB", 1 << 20),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bare_numbers_are_refused_with_an_example() {
        let e = parse("8").unwrap_err();
        assert!(e.contains("no unit") && e.contains("`8 GiB`"), "{e}");
        let e = parse("8192").unwrap_err();
        assert!(e.contains("`8192 MiB`") && e.contains("8 GiB"), "{e}");
    }

    #[test]
    fn decimal_units_say_what_they_mean() {
        let e = parse("8GB").unwrap_err();
        assert!(e.contains("8,000,000,000 bytes (7.45 GiB)"), "{e}");
        assert!(e.contains("write `8 GiB`"), "{e}");
        for t in ["8G", "500M", "1kB", "2 TB"] {
            assert!(parse(t).unwrap_err().contains("decimal"), "{t}");
        }
        assert!(parse("8m").unwrap_err().contains("milli"));
        assert!(parse("eight").unwrap_err().contains("not a size"));
        assert!(parse("8 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse("1e30 GiB").is_err());
    }
}
