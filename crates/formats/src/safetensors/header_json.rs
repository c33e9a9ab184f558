//! The header's JSON, read by serde visitors: seeds carry the tensor name so that serde's
//! messages say which tensor is wrong; duplicate names are refused and file order is kept.

use super::{dtype_from_safetensors, StTensor};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use vramscope_core::DType;

/// A header as written: its tensors in file order and its `__metadata__`.
pub(super) struct RawHeader {
    pub(super) tensors: Vec<StTensor>,
    pub(super) metadata: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(HeaderVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object mapping tensor names to {dtype, shape, data_offsets}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
        let mut seen = HashSet::new();
        let mut tensors = Vec::new();
        let mut metadata = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if metadata.is_some() {
                    return Err(de::Error::custom("'__metadata__' appears twice"));
                }
                metadata = Some(map.next_value_seed(MetadataSeed)?);
                continue;
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("tensor '{key}' appears twice")));
            }
            let (dtype, shape, data_offsets) = map.next_value_seed(EntrySeed { name: &key })?;
            tensors.push(StTensor {
                name: key,
                dtype,
                shape,
                data_offsets,
            });
        }
        Ok(RawHeader {
            tensors,
            metadata: metadata.unwrap_or_default(),
        })
    }
}

/// `__metadata__`: an object of strings, or null.
struct MetadataSeed;

impl<'de> DeserializeSeed<'de> for MetadataSeed {
    type Value = BTreeMap<String, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'__metadata__' as an object of strings")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(BTreeMap::new())
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(k) = map.next_key::<String>()? {
            let what = format!("a string for '__metadata__' key '{k}'");
            let v = map.next_value_seed(StrSeed(&what))?;
            out.insert(k, v);
        }
        Ok(out)
    }
}

/// A JSON string; the `&str` says what it is for in the error.
struct StrSeed<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for StrSeed<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for StrSeed<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<String, E> {
        Ok(v.to_owned())
    }
}

/// One tensor entry: `{"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}`; other keys are
/// ignored, as the safetensors crate does.
struct EntrySeed<'a> {
    name: &'a str,
}

type Entry = (DType, Vec<u64>, (u64, u64));

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Entry;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Entry, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "an object {{dtype, shape, data_offsets}} for tensor '{}'",
            self.name
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Entry, A::Error> {
        let name = self.name;
        let mut dtype: Option<String> = None;
        let mut shape: Option<Vec<u64>> = None;
        let mut offsets: Option<Vec<u64>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let dup = || de::Error::custom(format!("tensor '{name}': '{key}' appears twice"));
            match key.as_str() {
                "dtype" => {
                    if dtype.is_some() {
                        return Err(dup());
                    }
                    let what = format!("a dtype string for tensor '{name}'");
                    dtype = Some(map.next_value_seed(StrSeed(&what))?);
                }
                "shape" | "data_offsets" => {
                    let slot = if key == "shape" {
                        &mut shape
                    } else {
                        &mut offsets
                    };
                    if slot.is_some() {
                        return Err(dup());
                    }
                    *slot = Some(map.next_value_seed(U64ListSeed { name, field: &key })?);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let missing = |f: &str| de::Error::custom(format!("tensor '{name}' has no '{f}'"));
        let dtype = dtype.ok_or_else(|| missing("dtype"))?;
        let dtype = dtype_from_safetensors(&dtype).ok_or_else(|| {
            de::Error::custom(format!("tensor '{name}': unknown dtype '{dtype}'"))
        })?;
        let shape = shape.ok_or_else(|| missing("shape"))?;
        let offsets = offsets.ok_or_else(|| missing("data_offsets"))?;
        let &[begin, end] = offsets.as_slice() else {
            return Err(de::Error::custom(format!(
                "tensor '{name}': data_offsets has {} entries, expected [begin, end]",
                offsets.len()
            )));
        };
        Ok((dtype, shape, (begin, end)))
    }
}

/// A list of non-negative integers (`shape`, `data_offsets`).
struct U64ListSeed<'a> {
    name: &'a str,
    field: &'a str,
}

impl<'de> DeserializeSeed<'de> for U64ListSeed<'_> {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Vec<u64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for U64ListSeed<'_> {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a list of non-negative integers for '{}' of tensor '{}'",
            self.field, self.name
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Vec<u64>, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(U64Seed(&self))? {
            out.push(v);
        }
        Ok(out)
    }
}

/// One entry of a [`U64ListSeed`] list: a JSON integer in 0..=u64::MAX. Negative numbers,
/// fractions and anything else fail with the list's description.
struct U64Seed<'a, 'b>(&'a U64ListSeed<'b>);

impl<'de> DeserializeSeed<'de> for U64Seed<'_, '_> {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<u64, D::Error> {
        d.deserialize_u64(self)
    }
}

impl<'de> Visitor<'de> for U64Seed<'_, '_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a non-negative integer in '{}' of tensor '{}'",
            self.0.field, self.0.name
        )
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<u64, E> {
        Ok(v)
    }
}
