//! Kubernetes quantities (`4`, `500m`, `16Gi`): parsed once, here, for the config,
//! the cluster adapter and the simulators alike.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::resources::ceil_units;

/// Parses a Kubernetes quantity (`512Mi`, `1G`, `1.5Gi`, `129e6`, `100m`) into a whole
/// number of units, rounding up as the API server does for byte values.
pub fn parse_quantity(q: &str) -> Option<u64> {
    quantity_value(q).map(ceil_units)
}

/// The value of a Kubernetes quantity in units (`100m` is 0.1), with decimal (`n` to
/// `E`), binary (`Ki` to `Ei`) and exponent (`129e6`) forms; `None` when it is malformed,
/// negative or not finite.
pub fn quantity_value(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let (num, suffix) = match suffix.strip_prefix(['e', 'E']) {
        Some(exp)
            if !exp.is_empty()
                && exp
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '-' || c == '+') =>
        {
            let e: i32 = exp.parse().ok()?;
            (num.parse::<f64>().ok()? * 10f64.powi(e), "")
        }
        _ => (num.parse::<f64>().ok()?, suffix),
    };
    let factor: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    let v = num * factor;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some(v)
}

/// A Kubernetes quantity (`4`, `500m`, `16Gi`), checked when the config is read.
#[derive(Clone, PartialEq, Serialize)]
#[serde(into = "String")]
pub struct Quantity {
    text: String,
    value: f64,
}

impl Quantity {
    pub fn parse(text: &str) -> Result<Quantity, String> {
        quantity_value(text)
            .map(|value| Quantity {
                text: text.trim().to_string(),
                value,
            })
            .ok_or_else(|| {
                format!(
                    "`{text}` is not a Kubernetes quantity; expected e.g. `4`, `500m` or `16Gi`"
                )
            })
    }

    /// As written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// In base units: cores for CPU, bytes for memory.
    pub fn value(&self) -> f64 {
        self.value
    }

    pub fn milli(&self) -> u64 {
        ceil_units(self.value * 1000.0)
    }

    pub fn whole(&self) -> u64 {
        ceil_units(self.value)
    }
}

impl From<Quantity> for String {
    fn from(q: Quantity) -> String {
        q.text
    }
}

impl fmt::Debug for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = scalar_text(d)?;
        Quantity::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A YAML scalar as text, whether written as a string (`8 GiB`, `500m`) or a number
/// (`8`, `0.5`): the quantity parsers decide what it means and say so in their errors.
pub(crate) fn scalar_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Int(u64),
        Float(f64),
    }
    Ok(match <Raw as serde::Deserialize>::deserialize(d)? {
        Raw::Text(s) => s,
        Raw::Int(i) => i.to_string(),
        Raw::Float(f) => f.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("512Mi"), Some(512 << 20));
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000));
        assert_eq!(parse_quantity("129e6"), Some(129_000_000));
        assert_eq!(parse_quantity("128974848"), Some(128_974_848));
        assert_eq!(parse_quantity("100m"), Some(1));
        assert_eq!(parse_quantity("12Zi"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("-1Gi"), None);
    }
}
