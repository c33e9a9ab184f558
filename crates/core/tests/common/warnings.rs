//! Questions the tests ask of a report's or a reading's warnings (shared by every crate's
//! `tests/common`, which include this file).

/// Whether a warning of `warnings` starts with `prefix`.
pub fn warns_starting(warnings: &[String], prefix: &str) -> bool {
    warnings.iter().any(|w| w.starts_with(prefix))
}

/// Whether a warning of `warnings` contains `part`.
pub fn warns_of(warnings: &[String], part: &str) -> bool {
    warnings.iter().any(|w| w.contains(part))
}
