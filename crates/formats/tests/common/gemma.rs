//! Helpers for the Gemma reader tests (`gemma3n.rs`, `gemma4.rs`): a fixture config read as
//! the reader takes it, tensor lists compared name by name with transformers'
//! `named_parameters()`, and the estimator's inventory held to the reader's own tensor list.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use vramscope_formats::hf_config::parse_config_str;

/// A tensor list keyed by name: what `named_parameters()` fixtures hold.
pub type Shapes = BTreeMap<String, Vec<u64>>;

/// The config `tests/fixtures/<dir>/<name>`, read as a JSON object.
pub fn config(dir: &str, name: &str) -> Map<String, Value> {
    super::read_json(&super::fixture_path(dir, name))
}

/// The text config `tests/fixtures/<dir>/<text>` wrapped as the `text_config` of a composite
/// `model_type` config (no towers), as JSON text.
pub fn wrapped(model_type: &str, dir: &str, text: &str) -> String {
    let text = serde_json::to_string(&config(dir, text)).unwrap();
    format!(r#"{{"model_type": "{model_type}", "text_config": {text}}}"#)
}

/// A reader's `(name, shape)` list keyed by name.
pub fn by_name(tensors: Vec<(String, Vec<u64>)>) -> Shapes {
    tensors.into_iter().collect()
}

/// Asserts that `ours` equals, name by name and shape by shape, the `named_parameters()` list
/// transformers wrote to `tests/fixtures/<dir>/<file>`.
pub fn assert_named_parameters(ours: &Shapes, dir: &str, file: &str) {
    let theirs: Shapes = super::read_json(&super::fixture_path(dir, file));
    assert_eq!(ours, &theirs, "{dir}/{file}");
}

/// Asserts that the config `cfg` (fixture `name`), read for the estimator, builds an inventory
/// of `count` parameters whose tensors are the reader's list `reader`, name by name and shape
/// by shape.
pub fn assert_inventory_is_reader(
    cfg: &Map<String, Value>,
    name: &str,
    count: u64,
    reader: Vec<(String, Vec<u64>)>,
) {
    let text = serde_json::to_string(cfg).unwrap();
    let spec = parse_config_str(&text, name).unwrap().spec;
    let inv = vramscope_core::inventory::build_inventory(&spec).unwrap();
    assert_eq!(inv.params(), count, "{name}");
    let ours: Shapes = inv
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone()))
        .collect();
    assert_eq!(ours, by_name(reader), "{name}");
}
