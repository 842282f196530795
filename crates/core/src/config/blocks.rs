//! How a node group is read: its keys named after a provider of the registry
//! (`openstack:`, `proxmox:`, ...) are that provider's settings block, read by the
//! provider's own serde type; every other key goes to [`NodeGroupConfig`]'s derived
//! fields. Config thus lists no provider: a new row in [`crate::cloud::registry`] is a new
//! key here. Unknown keys, paths (`nodeGroups[0].proxmox.cores`) and line numbers are
//! reported as serde reports them for the derived fields.

use std::sync::OnceLock;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::NodeGroupConfig;
use crate::cloud::registry::{ProviderBlocks, ProviderKind, ProviderSettings, PROVIDERS};

const NAME: &str = "NodeGroupConfig";

impl<'de> Deserialize<'de> for NodeGroupConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The fields are told to `Keys`, which checks them; YAML does not read them here.
        d.deserialize_struct(NAME, &[], GroupVisitor)
    }
}

struct GroupVisitor;

impl<'de> Visitor<'de> for GroupVisitor {
    type Value = NodeGroupConfig;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("struct NodeGroupConfig")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<NodeGroupConfig, A::Error> {
        let mut blocks = ProviderBlocks::default();
        let mut group = NodeGroupConfig::deserialize(Fields {
            map,
            blocks: &mut blocks,
        })?;
        group.settings = blocks;
        Ok(group)
    }
}

/// Every key a group takes: its fields (`fields`, as serde lists them) with the provider
/// names after `price`, where they stood when they were fields of their own, so an unknown
/// key is explained with the same list as before.
fn all_keys(fields: &'static [&'static str]) -> &'static [&'static str] {
    static ALL: OnceLock<Vec<&'static str>> = OnceLock::new();
    ALL.get_or_init(|| {
        let at = fields
            .iter()
            .position(|f| *f == "price")
            .map_or(fields.len(), |i| i + 1);
        let mut all: Vec<&'static str> = fields[..at].to_vec();
        all.extend(PROVIDERS.iter().map(|p| p.name));
        all.extend_from_slice(&fields[at..]);
        all
    })
}

/// The group's map as the derived deserializer sees it.
struct Fields<'a, A> {
    map: A,
    blocks: &'a mut ProviderBlocks,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Fields<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        self.deserialize_struct(NAME, &[], visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(Keys {
            map: self.map,
            fields,
            blocks: self.blocks,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// Takes the provider blocks out of the group's keys; hands the rest on.
struct Keys<'a, A> {
    map: A,
    fields: &'static [&'static str],
    blocks: &'a mut ProviderBlocks,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Keys<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let key = self.map.next_key_seed(KeySeed {
                fields: self.fields,
            })?;
            match key {
                None => return Ok(None),
                Some(Key::Block(kind)) => {
                    let block = ProviderSettings::next_value(kind, &mut self.map)?;
                    if !self.blocks.insert(block) {
                        return Err(de::Error::duplicate_field(kind.as_str()));
                    }
                }
                Some(Key::Field(name)) => {
                    return seed.deserialize(name.into_deserializer()).map(Some);
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A key of a group: a provider's block, or one of the derived fields.
enum Key {
    Block(ProviderKind),
    Field(&'static str),
}

/// Reads a key, refusing an unknown one while the key is being read, so that the error
/// carries its path (`nodeGroups[0].maxSzie`) as the derived fields' own would.
struct KeySeed {
    fields: &'static [&'static str],
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        if let Some(kind) = ProviderKind::from_name(v) {
            return Ok(Key::Block(kind));
        }
        match self.fields.iter().find(|f| **f == v) {
            Some(field) => Ok(Key::Field(field)),
            None => Err(E::unknown_field(v, all_keys(self.fields))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    fn group(block: &str) -> String {
        format!(
            "clusterName: c\nfreeMemoryTarget: 1 GiB\nnodeGroups:\n- name: g\n  provider: proxmox\n  maxSize: 1\n  {block}\n  userData: {{template: x}}\n"
        )
    }

    /// A misspelt provider block is an unknown key at its own path, explained with every
    /// key a group takes (the provider names where they stood as fields).
    #[test]
    fn a_misspelt_provider_block_is_named_at_its_path_with_a_suggestion() {
        let e = Config::parse(&group("proxmx: {template: 9000}"), Path::new("/"))
            .expect_err("unknown key");
        let text = e.to_string();
        assert!(text.contains("nodeGroups[0].proxmx"), "{text}");
        assert!(text.contains("did you mean `proxmox`?"), "{text}");
        assert!(
            text.contains("price, openstack, proxmox, kamatera, warmPool"),
            "{text}"
        );
    }

    /// A bad value inside a block is reported at its path under the block.
    #[test]
    fn a_bad_value_in_a_provider_block_is_named_at_its_path() {
        let e = Config::parse(
            &group("proxmox: {template: 9000, cores: many}"),
            Path::new("/"),
        )
        .expect_err("bad cores");
        let text = e.to_string();
        assert!(text.contains("nodeGroups[0].proxmox.cores"), "{text}");
    }
}
