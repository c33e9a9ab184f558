//! JSON files of this repository read by the tests (validation cases and measured specs,
//! another crate's fixtures) by their path from the repository root: the one place that knows
//! where the root lies and how a missing or broken file is reported. Shared with the formats
//! tests and `tests/measured` by `#[path]`.

use serde::de::DeserializeOwned;

/// The JSON file at `path`, read as `T`; a missing or broken file panics naming it.
pub fn read_json<T: DeserializeOwned>(path: &str) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The path of `rel` from the repository root (every crate's manifest is two folders below).
pub fn repo_path(rel: &str) -> String {
    format!("{}/../../{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// The JSON file `rel` (from the repository root), read as `T`.
pub fn repo_json<T: DeserializeOwned>(rel: &str) -> T {
    read_json(&repo_path(rel))
}

/// The path of `validation/<rel>` in this repository.
pub fn validation_path(rel: &str) -> String {
    repo_path(&format!("validation/{rel}"))
}

/// The JSON file `validation/<rel>` of this repository (cases, records, specs), read as `T`.
pub fn validation<T: DeserializeOwned>(rel: &str) -> T {
    read_json(&validation_path(rel))
}
