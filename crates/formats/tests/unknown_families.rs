//! An unknown `model_type` whose config changes the shapes is refused, naming the type and the
//! fields (real published configs in `fixtures/unsupported/`, sources in its README); the Llama
//! reading is still there on request; every supported family (all presets) still loads.

mod common;

use vramscope_formats::hf_config::{parse_config_str_with, ReadOptions};
use vramscope_formats::model_source::load_model;
use vramscope_formats::presets;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/unsupported/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn refusal(name: &str) -> String {
    let text = std::fs::read_to_string(fixture(name))
        .unwrap()
        .replace("\"zamba2\"", "\"zamba2_legacy\"");
    match parse_config_str_with(&text, name, ReadOptions::default()) {
        Ok(m) => panic!(
            "{name} was read ({} layers) instead of refused",
            m.spec.decoder.layers.len()
        ),
        Err(e) => e.to_string(),
    }
}

/// Each real config is refused, and the message names its model_type and the fields that a
/// person reading the config sees change the shapes.
#[test]
fn unknown_families_with_shape_fields_are_refused_naming_them() {
    let cases: &[(&str, &str, &[&str])] = &[(
        // Read off the file: the state size and Mamba2 head fields, and the layer kinds in
        // `layers_block_type` that are not attention ("hybrid" = Mamba2 + shared attention).
        // `zamba2` itself is read natively now (`zamba2_counts.rs`, which refuses this file
        // for its pre-transformers keys); renamed here to a type vramscope does not know.
        "zamba2-7b",
        "'zamba2_legacy'",
        &[
            "state_size",
            "mamba_headdim",
            "mamba_ngroups",
            "layers_block_type (hybrid, mamba)",
        ],
    )];
    for (name, ty, fields) in cases {
        let msg = refusal(name);
        assert!(msg.contains(ty), "{name}: {msg}");
        assert!(msg.contains("--assume-llama"), "{name}: {msg}");
        assert!(!msg.contains('\n'), "{name}: one line: {msg}");
        for f in *fields {
            assert!(msg.contains(f), "{name}: field {f} not named in: {msg}");
        }
    }
}

/// `layer_types` names the non-attention kinds it holds.
#[test]
fn hybrid_layer_types_are_named() {
    let cfg = r#"{"model_type": "some_hybrid", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128,
        "layer_types": ["linear_attention", "full_attention"]}"#;
    let err = parse_config_str_with(cfg, "c.json", ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("layer_types (linear_attention)"), "{err}");
    // Only attention kinds: nothing in the config changes the shapes, but its class defaults
    // and modelling code still decide the count: refused, naming the count-changing keys the
    // config leaves to them (it states none of the five), unless the Llama reading is asked for.
    let plain = cfg.replace("linear_attention", "sliding_attention");
    let err = parse_config_str_with(&plain, "c.json", ReadOptions::default())
        .unwrap_err()
        .to_string();
    for key in [
        "tie_word_embeddings",
        "head_dim",
        "attention_bias",
        "mlp_bias",
        "num_key_value_heads",
        "q/k norms",
        "--assume-llama",
    ] {
        assert!(err.contains(key), "{key} not named: {err}");
    }
    assert!(!err.contains('\n'), "one line: {err}");
    // A key the config states is not named as left to the defaults.
    let tied = plain.replace(
        "\"vocab_size\"",
        "\"tie_word_embeddings\": true, \"vocab_size\"",
    );
    let err = parse_config_str_with(&tied, "c.json", ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(!err.contains("tie_word_embeddings"), "{err}");
    let ok = parse_config_str_with(&plain, "c.json", ReadOptions { assume_llama: true }).unwrap();
    common::assert_warns(&ok.warnings, "--assume-llama");
}

/// `--assume-llama` forces the old reading of the configs that have the standard fields.
#[test]
fn assume_llama_forces_the_llama_reading() {
    // Granite 4.0-H's shape fields under a `model_type` vramscope does not know (`granitemoehybrid`
    // itself is read natively now: `granite_counts.rs`): refused by default, read as Llama on
    // request.
    let opts = ReadOptions { assume_llama: true };
    let name = "granite-4.0-h-tiny";
    let text = std::fs::read_to_string(fixture(name))
        .unwrap()
        .replace("\"granitemoehybrid\"", "\"granite_next_hybrid\"");
    let err = parse_config_str_with(&text, name, ReadOptions::default())
        .unwrap_err()
        .to_string();
    for f in [
        "'granite_next_hybrid'",
        "num_local_experts",
        "mamba_n_heads",
        "layer_types (mamba)",
    ] {
        assert!(err.contains(f), "{f} not named: {err}");
    }
    let parsed = parse_config_str_with(&text, name, opts).unwrap();
    let unknown = common::warns_of(&parsed.warnings, "not known to vramscope");
    assert!(unknown, "{name}: {:?}", parsed.warnings);
}

/// The families vramscope knows are read as before: every preset loads with default options.
#[test]
fn every_supported_family_still_loads() {
    let mut types = std::collections::BTreeSet::new();
    for p in presets::all() {
        let m = load_model(p.id).unwrap_or_else(|e| panic!("{}: {e}", p.id));
        types.insert(m.spec.unwrap().model_type);
    }
    // 44 presets over these families (ids in crates/formats/data/presets/index.json).
    assert!(types.len() >= 15, "{types:?}");
}
