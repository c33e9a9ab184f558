//! Serde for the vocabulary's named values (dtypes, ggml types, the job's enums): written as
//! their name, read back through their parser, so the JSON spelling is the one the parser
//! accepts and the one `Display` prints.

/// `Serialize` as `self.$name()`; with a parser (`fn(&str) -> Option<Self>`) and what the
/// value is called, `Deserialize` through it too, an unknown name refused as
/// `unknown <what> '<name>'`.
macro_rules! serde_by_name {
    ($t:ty, $name:ident) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.$name())
            }
        }
    };
    ($t:ty, $name:ident, $parse:path, $what:literal) => {
        $crate::serde_name::serde_by_name!($t, $name);

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as serde::Deserialize>::deserialize(d)?;
                $parse(&s)
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown {} '{s}'", $what)))
            }
        }
    };
}

pub(crate) use serde_by_name;
