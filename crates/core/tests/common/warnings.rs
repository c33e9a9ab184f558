//! Questions the tests ask of a report's or a reading's warnings (shared by every crate's
//! `tests/common`, which include this file).

use std::fmt::Debug;

/// Whether a warning of `warnings` starts with `prefix`.
pub fn warns_starting(warnings: &[impl AsRef<str>], prefix: &str) -> bool {
    warnings.iter().any(|w| w.as_ref().starts_with(prefix))
}

/// Whether a warning of `warnings` contains `part`.
pub fn warns_of(warnings: &[impl AsRef<str>], part: &str) -> bool {
    warnings.iter().any(|w| w.as_ref().contains(part))
}

/// Asserts that a warning of `warnings` contains `part`; the message lists them all.
pub fn assert_warns(warnings: &[impl AsRef<str> + Debug], part: &str) {
    assert!(
        warns_of(warnings, part),
        "no warning contains {part:?}: {warnings:?}"
    );
}

/// Asserts that no warning of `warnings` contains `part`; the message names the one that does.
pub fn assert_never_warns(warnings: &[impl AsRef<str>], part: &str) {
    if let Some(w) = warnings.iter().find(|w| w.as_ref().contains(part)) {
        panic!("a warning contains {part:?}: {}", w.as_ref());
    }
}
