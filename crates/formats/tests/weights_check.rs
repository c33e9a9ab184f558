//! A model directory with config.json and safetensors: the family reader's count is checked
//! against the weights' own. Agreement gives the file's exact tensors; what transformers itself
//! does not build (multi-token-prediction layers, a tied head saved twice) is left out, said so;
//! a quantized layout is told apart; any other disagreement is an error naming both numbers.

mod common;

use common::{safetensors_file, TempDir};

use serde_json::json;
use std::fs;

use vramscope_formats::model_source::{load_model, LoadedModel};

/// A safetensors file (format README: u64 LE header length, the JSON header, zero data) of
/// `(name, dtype, shape)` tensors, 2 or 4 bytes an element.
fn st_file(tensors: &[(String, &str, Vec<u64>)]) -> Vec<u8> {
    let sized = tensors.iter().map(|(name, dtype, shape)| {
        let size = if *dtype == "I32" || *dtype == "F32" {
            4
        } else {
            2
        };
        (
            name.as_str(),
            *dtype,
            shape.as_slice(),
            shape.iter().product::<u64>() * size,
        )
    });
    let (header, len) = safetensors_file::header_json(sized, None);
    let mut out = safetensors_file::head_bytes(&header);
    out.resize(out.len() + len as usize, 0);
    out
}

/// An OLMo-2 of 2 layers, hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocab 100, untied.
fn olmo2_config() -> serde_json::Value {
    json!({"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 100, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16"})
}

/// The tensors `Olmo2ForCausalLM` holds for [`olmo2_config`] with `layers` decoder layers (the
/// names and shapes of `modeling_olmo2.py`, written out here by hand): per layer q [64, 64],
/// k and v [32, 64], o [64, 64], q_norm [64], k_norm [32], gate and up [128, 64], down [64, 128],
/// two post-sublayer norms [64].
fn olmo2_tensors(layers: u64) -> Vec<(String, &'static str, Vec<u64>)> {
    let mut t = vec![
        (
            "model.embed_tokens.weight".to_string(),
            "BF16",
            vec![100, 64],
        ),
        ("model.norm.weight".to_string(), "BF16", vec![64]),
        ("lm_head.weight".to_string(), "BF16", vec![100, 64]),
    ];
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![64, 64]),
            ("self_attn.k_proj.weight", vec![32, 64]),
            ("self_attn.v_proj.weight", vec![32, 64]),
            ("self_attn.o_proj.weight", vec![64, 64]),
            ("self_attn.q_norm.weight", vec![64]),
            ("self_attn.k_norm.weight", vec![32]),
            ("mlp.gate_proj.weight", vec![128, 64]),
            ("mlp.up_proj.weight", vec![128, 64]),
            ("mlp.down_proj.weight", vec![64, 128]),
            ("post_attention_layernorm.weight", vec![64]),
            ("post_feedforward_layernorm.weight", vec![64]),
        ] {
            t.push((format!("{p}.{n}"), "BF16", s));
        }
    }
    t
}

/// Per layer: 64·64·2 + 32·64·2 + 64 + 32 + 128·64·3 + 64·2 = 8,192 + 4,096 + 96 + 24,576 + 128
/// = 37,088; embedding and head 2 · 100 · 64 = 12,800; final norm 64.
const OLMO2_LAYER: u64 = 37_088;
const OLMO2_REST: u64 = 12_864;

fn load_dir(
    config: &serde_json::Value,
    tensors: &[(String, &str, Vec<u64>)],
) -> Result<LoadedModel, String> {
    let d = TempDir::new("m");
    fs::write(d.0.join("config.json"), config.to_string()).unwrap();
    fs::write(d.0.join("model.safetensors"), st_file(tensors)).unwrap();
    load_model(d.0.to_str().unwrap()).map_err(|e| e.to_string())
}

/// The OLMo-2 config with `edits` made, over a checkpoint of `layers` OLMo-2 layers.
fn load_olmo2(edits: &[(&str, serde_json::Value)], layers: u64) -> Result<LoadedModel, String> {
    let mut cfg = olmo2_config();
    for (key, value) in edits {
        cfg[*key] = value.clone();
    }
    load_dir(&cfg, &olmo2_tensors(layers))
}

#[test]
fn agreeing_weights_give_the_files_tensors() {
    assert_eq!(8_192 + 4_096 + 96 + 24_576 + 128, OLMO2_LAYER);
    let m = load_olmo2(&[], 2).unwrap();
    assert_eq!(m.params_total, 2 * OLMO2_LAYER + OLMO2_REST);
    common::assert_never_warns(&m.warnings, "checkpoint");
}

/// The same weights under a config that reads them as Llama (input norms, no q/k norms): the
/// reader's 2 · (37,088 − 96) + 12,864 = 86,848 against the file's 87,040, refused naming both.
#[test]
fn a_disagreeing_architecture_is_an_error_naming_both_counts() {
    let llama = [
        ("model_type", json!("llama")),
        ("architectures", json!(["LlamaForCausalLM"])),
    ];
    let err = load_olmo2(&llama, 2).unwrap_err();
    let file = 2 * OLMO2_LAYER + OLMO2_REST;
    let built = 2 * (OLMO2_LAYER - 96) + OLMO2_REST;
    assert_eq!((file, built), (87_040, 86_848));
    assert!(
        err.contains(&file.to_string()) && err.contains(&built.to_string()),
        "{err}"
    );
    assert!(err.contains("first difference"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}

/// A third layer in a 2-layer model's checkpoint (a multi-token-prediction layer, as GLM-4.5's
/// `model.layers.46.*`): transformers does not build it, so it is left out, with a note.
#[test]
fn layers_past_the_config_are_left_out() {
    let m = load_olmo2(&[], 3).unwrap();
    assert_eq!(m.params_total, 2 * OLMO2_LAYER + OLMO2_REST);
    common::assert_warns(&m.warnings, "model.layers.2");
}

/// A tied head saved anyway is the embedding's one parameter in transformers.
#[test]
fn a_tied_head_saved_twice_counts_once() {
    let m = load_olmo2(&[("tie_word_embeddings", json!(true))], 2).unwrap();
    assert_eq!(m.params_total, 2 * OLMO2_LAYER + OLMO2_REST - 6_400);
    common::assert_warns(&m.warnings, "lm_head.weight");
}

/// Packed integer weights (GPTQ-style `qweight`): element counts are not parameters, so the
/// difference is told as a quantized layout, not refused.
#[test]
fn a_quantized_layout_is_told_apart() {
    let mut t = olmo2_tensors(2);
    t.retain(|(n, _, _)| n != "model.layers.0.mlp.up_proj.weight");
    t.push((
        "model.layers.0.mlp.up_proj.qweight".into(),
        "I32",
        vec![8, 128],
    ));
    let m = load_dir(&olmo2_config(), &t).unwrap();
    common::assert_warns(&m.warnings, "quantized layout");
}
