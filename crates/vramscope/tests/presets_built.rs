//! The built binary carries the whole preset catalog: every entry of the crate's
//! `data/presets/index.json` is listed by `vramscope models --json` with its repo, and every one
//! loads (a build that silently embedded zero presets once shipped; this test would have failed).

mod common;

use std::collections::BTreeSet;

#[test]
fn models_lists_every_preset_in_the_index() {
    let index_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../formats/data/presets/index.json"
    );
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(index_path).expect("index.json")).unwrap();
    let want: BTreeSet<(String, String)> = index
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_string(),
                e["repo"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(want.len() >= 40, "index lists {} presets", want.len());
    let rows = common::run_json(&["models", "--json"]);
    let got: BTreeSet<(String, String)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r["params_total"].as_u64().unwrap() > 0, "{r}");
            (
                r["id"].as_str().unwrap().to_string(),
                r["repo"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got, want);
}
