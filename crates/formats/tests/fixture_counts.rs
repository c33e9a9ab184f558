//! No model config among the project's fixtures and presets is counted differently from
//! transformers: each file the reader accepts, against the count transformers 5.24.0 gives for the
//! same config and class on the meta device (`fixtures/defaults/fixture-counts-5.24.0.json`,
//! written by `fixtures/defaults/count_fixtures.py`, which says how each was built). The
//! fixtures the reader refuses are the refusal tests' (`unknown_families.rs`,
//! `hybrid_counts.rs`).

use serde_json::Value;
use vramscope_formats::model_source::load_model;

/// Where the loaded model is not the config-only one, and why: (path, parameters to add to
/// transformers' config-only count). Mistral-Small-3.1's config names no top-level
/// `tie_word_embeddings`, so `Mistral3Config` ties the head from the config alone, but the
/// checkpoint stores both matrices and `from_pretrained` unties them (`vlm_families.rs`): the
/// loaded model has one more vocab × hidden matrix, 131,072 · 5,120 = 671,088,640.
const LOADED_NOT_CONFIG_ONLY: &[(&str, u64)] = &[(
    "crates/formats/tests/fixtures/vlm/mistral-small-3.1-24b-instruct.json",
    671_088_640,
)];

#[test]
fn every_fixture_config_counts_as_transformers_does() {
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let table: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/tests/fixtures/defaults/fixture-counts-5.24.0.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(table["transformers"], "5.24.0");
    let rows = table["rows"].as_array().unwrap();
    assert!(rows.len() >= 80, "{} rows", rows.len());
    let mut wrong = Vec::new();
    for r in rows {
        let path = r["path"].as_str().unwrap();
        let extra = LOADED_NOT_CONFIG_ONLY
            .iter()
            .find(|(p, _)| *p == path)
            .map_or(0, |(_, n)| *n);
        let expected = r["params"].as_u64().unwrap() + extra;
        let m = load_model(&format!("{root}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"));
        if m.params_total != expected {
            wrong.push(format!(
                "{path}: {} vs transformers {expected}",
                m.params_total
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
