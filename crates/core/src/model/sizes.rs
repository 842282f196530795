//! Node sizes a group may choose among: one name (`flavor: m1.large`), or several
//! (`flavor: [m1.small, m1.large]`) of which each scale-up takes the one that wastes
//! least for its pods. What one size of a group offers, as the provider tells it.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// Cloud-side metadata key naming the size (flavor, CPU/RAM) a VM of a group with several
/// sizes was created with, written in the create call, so a fresh process reading a booting
/// VM back knows what it will bring.
pub const SIZE_TAG: &str = "nodewright-size";

/// One name, or a list of them, as written in config. Never empty once validated; the
/// first is the group's default size (used where no scale-up chose one: `minSize`, warm
/// pools, headroom).
#[derive(Clone, PartialEq, Eq)]
pub struct Names(Vec<String>);

impl Names {
    pub fn one(name: impl Into<String>) -> Self {
        Names(vec![name.into()])
    }

    pub fn list(names: Vec<String>) -> Self {
        Names(names)
    }

    /// The default size: the first written (empty text when the list is, which validation
    /// refuses).
    pub fn first(&self) -> &str {
        self.0.first().map_or("", String::as_str)
    }

    pub fn all(&self) -> &[String] {
        &self.0
    }

    /// Whether more than one size is allowed.
    pub fn several(&self) -> bool {
        self.0.len() > 1
    }

    /// The names written twice, each once.
    pub fn duplicates(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (i, n) in self.0.iter().enumerate() {
            if self.0[..i].contains(n) && !out.contains(&n.as_str()) {
                out.push(n);
            }
        }
        out
    }
}

impl From<&str> for Names {
    fn from(s: &str) -> Self {
        Names::one(s)
    }
}

impl From<String> for Names {
    fn from(s: String) -> Self {
        Names::one(s)
    }
}

/// One name prints as the text it is (as the single `String` field it replaced did, which
/// the settings hash of earlier releases printed); several as a list.
impl fmt::Debug for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => fmt::Debug::fmt(one, f),
            many => fmt::Debug::fmt(many, f),
        }
    }
}

impl fmt::Display for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name, or a list of names such as `[m1.small, m1.large]`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Names, E> {
                Ok(Names::one(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
                let mut out = Vec::new();
                while let Some(n) = seq.next_element::<String>()? {
                    out.push(n);
                }
                Ok(Names(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// What one new VM of one size of a group offers, as the provider tells it (see
/// [`crate::model::GroupShape::sizes`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SizeShape {
    /// The size as the config names it (a flavor name, a Kamatera `cpu/ram`).
    pub name: String,
    /// vCPUs × 1000.
    pub cpu_milli: Option<u64>,
    /// RAM in bytes.
    pub memory: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_or_a_list_reads_and_one_prints_as_the_plain_text() {
        let one: Names = serde_json::from_str("\"m1.large\"").expect("one");
        assert_eq!(one.all(), ["m1.large"]);
        assert_eq!(format!("{one:?}"), "\"m1.large\"");
        let many: Names =
            serde_json::from_str("[\"m1.small\",\"m1.large\",\"m1.small\"]").expect("many");
        assert_eq!(many.first(), "m1.small");
        assert!(many.several());
        assert_eq!(many.duplicates(), ["m1.small"]);
    }
}
