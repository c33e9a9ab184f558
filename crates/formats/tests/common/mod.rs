//! Helpers shared by this crate's integration tests.

#[path = "../../../core/tests/common/shared_dir.rs"]
#[allow(dead_code)] // Not every test binary that includes this module uses it.
mod shared_dir;
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use shared_dir::shared;
#[allow(dead_code)] // Not every test binary that includes this module writes a safetensors file.
pub mod safetensors_file;
#[path = "../../../core/tests/common/warnings.rs"]
#[allow(dead_code)] // Not every test binary that includes this module uses every helper.
mod warnings;
#[allow(unused_imports)] // Not every test binary that includes this module uses them.
pub use warnings::{assert_never_warns, assert_warns, warns_of};
#[path = "../../../core/tests/common/repo_json.rs"]
#[allow(dead_code)] // Not every test binary that includes this module uses every helper.
mod repo_json;
#[allow(unused_imports)] // Not every test binary that includes this module uses them.
pub use repo_json::{read_json, validation};
#[allow(dead_code)] // Only the Gemma reader tests use it.
pub mod gemma;
#[allow(dead_code)] // Only the tests that write GGUF headers use it.
pub mod gguf_bytes;
#[allow(dead_code)] // Only the tests that write files use it.
mod temp_dir;
#[allow(dead_code)] // Only the vision-language tests use it.
pub mod vlm;
#[allow(unused_imports)] // Only the tests that write files use it.
pub use temp_dir::TempDir;

use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::LoadedModel;

/// The path of `tests/fixtures/<dir>/<name>` in this crate.
#[allow(dead_code)]
pub fn fixture_path(dir: &str, name: &str) -> String {
    format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The JSON file `tests/fixtures/<dir>/<name>` of this crate, parsed.
#[allow(dead_code)]
pub fn fixture_json(dir: &str, name: &str) -> serde_json::Value {
    read_json(&fixture_path(dir, name))
}

/// The `hf_config` of a measured run's spec (`validation/specs/<run_id>.json`), read as a
/// job's `hf_config` is.
#[allow(dead_code)]
pub fn measured_config(run_id: &str) -> vramscope_formats::hf_config::ParsedConfig {
    let spec: serde_json::Value = validation(&format!("specs/{run_id}.json"));
    parse_config_str(&spec["hf_config"].to_string(), run_id).unwrap()
}

/// The error refusing the config `text`, checked to be one line; panics when the config reads.
#[allow(dead_code)]
pub fn refusal(text: &str) -> String {
    match parse_config_str(text, "config.json") {
        Ok(_) => panic!("read, not refused: {text}"),
        Err(e) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "not one line: {e}");
            e
        }
    }
}

/// Asserts that the config `text` is refused with a one-line error naming `field`.
#[allow(dead_code)]
pub fn assert_refused(text: &str, field: &str) {
    let e = refusal(text);
    assert!(e.contains(field), "{field}: {e}");
}

/// Asserts that every named tensor stands in `m`'s inventory with the given shape.
#[allow(dead_code)]
pub fn assert_shapes(m: &LoadedModel, want: &[(&str, Vec<u64>)]) {
    let inv = m.inventory.as_ref().expect("an inventory");
    for (name, shape) in want {
        let t = inv.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(&t.shape, shape, "{name}");
    }
}

/// A config fuzz: `rounds` configs of `model_type` with the `base` fields (`key=number` words),
/// each with three random `fields` (words) set to random JSON `values` (JSON tokens between
/// spaces) picked by a 64-bit LCG from `seed`, must parse or fail with an error, and a parsed
/// one must build an inventory without a panic.
#[allow(dead_code)]
pub fn fuzz_config_fields(
    model_type: &str,
    base: &str,
    (fields, values): (&str, &str),
    rounds: usize,
    mut seed: u64,
) {
    let fields: Vec<&str> = fields.split_whitespace().collect();
    let values: Vec<&str> = values.split_whitespace().collect();
    for _ in 0..rounds {
        let mut obj = serde_json::Map::new();
        obj.insert("model_type".into(), model_type.into());
        for kv in base.split_whitespace() {
            let (k, v) = kv.split_once('=').expect("key=number");
            obj.insert(k.into(), v.parse::<u64>().expect("a number").into());
        }
        for _ in 0..3 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = fields[(seed >> 33) as usize % fields.len()];
            let v = values[(seed >> 13) as usize % values.len()];
            obj.insert(f.into(), serde_json::from_str(v).unwrap());
        }
        let text = serde_json::Value::Object(obj).to_string();
        if let Ok(p) = parse_config_str(&text, "c.json") {
            let _ = vramscope_core::inventory::build_inventory(&p.spec);
        }
    }
}

/// The shape of the named tensor in `m`'s inventory; panics naming it when it is missing.
#[allow(dead_code)]
pub fn shape(m: &LoadedModel, name: &str) -> Vec<u64> {
    let inv = m.inventory.as_ref().expect("an inventory");
    let t = inv.get(name).unwrap_or_else(|| panic!("no tensor {name}"));
    t.shape.clone()
}

/// The state-space mixer of `m`'s decoder layer `i`; panics naming the layer when it has none.
#[allow(dead_code)]
pub fn ssm_of(m: &LoadedModel, i: usize) -> vramscope_core::model::Ssm {
    let layer = &m.spec.as_ref().expect("a spec").decoder.layers[i];
    let ssm = layer.attention.kind.state_space();
    *ssm.unwrap_or_else(|| panic!("layer {i} has no state-space mixer"))
}

/// The indices of `m`'s decoder layers whose token mixer is attention (no state-space mixer).
#[allow(dead_code)]
pub fn attention_layers(m: &LoadedModel) -> Vec<usize> {
    let spec = m.spec.as_ref().expect("a spec");
    let layers = spec.decoder.layers.iter().enumerate();
    let attention = layers.filter(|(_, l)| l.attention.kind.state_space().is_none());
    attention.map(|(i, _)| i).collect()
}
