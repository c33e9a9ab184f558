//! Helpers shared by this crate's integration tests (the same `shared()` as
//! `crates/formats/tests/common`: both crates' tests read ../shared).

/// `path` in ../shared, or a panic naming the missing path: these tests read the shared
/// fixtures and validation cases from ../shared beside the repository.
pub fn shared<P: AsRef<std::path::Path>>(path: P) -> P {
    assert!(
        path.as_ref().exists(),
        "missing {}: the tests read ../shared (fixtures, validation cases) beside the repository",
        path.as_ref().display()
    );
    path
}

/// The shared H200 results file's runs that finished (`type: result`, `status: ok`), one JSON
/// object per line (`../shared/fixtures/gpu-h200/README.md`).
#[allow(dead_code)] // Not every test binary that includes this module reads the results.
pub fn h200_results() -> Vec<serde_json::Value> {
    let path = format!(
        "{}/../../../shared/fixtures/gpu-h200/results-h200-2026-12-04.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(shared(path))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "result" && r["status"] == "ok")
        .collect()
}
