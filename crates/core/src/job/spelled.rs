//! Job values parsed once in resolution that keep the user's spelling for the report's echo.

use super::weight_format::WeightFormat;
use serde::Serialize;
use std::fmt;

/// A job value parsed once in resolution and echoed in the report as the user wrote it
/// (`weights`, `kv_dtype`): the estimator reads the typed `value`, the report the spelling.
#[derive(Debug, Clone, PartialEq)]
pub struct Spelled<T> {
    pub value: T,
    text: String,
}

impl<T> Spelled<T> {
    /// `value` as spelled `text` (`text` must be a spelling that parses to `value`).
    pub fn new(value: T, text: impl Into<String>) -> Self {
        Spelled {
            value,
            text: text.into(),
        }
    }

    /// The spelling as written (the contract's value).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl<T> Serialize for Spelled<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<T> fmt::Display for Spelled<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Compares the spelling, as the contract's string did.
impl<T> PartialEq<&str> for Spelled<T> {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

/// The job's `weights`: the storage format and its spelling.
pub type Weights = Spelled<WeightFormat>;
