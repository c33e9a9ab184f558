//! Every `model_type` the config reader accepts, read with nothing but its `model_type` — every
//! other field the family's class default — against what transformers 5.24.0 builds from the
//! same class defaults: the table `fixtures/defaults/transformers-5.24.0.json`, written by
//! `fixtures/defaults/read_defaults.py` (each row names the configuration class and its file).
//! One test per row: the parameter count to the parameter, the tied head, each layer's sliding
//! window and NoPE flag, and layer 0's attention and norm tensors (names and shapes) where the
//! family names them as Llama does. A row the reader cannot count exactly is refused instead,
//! and says why ([`REFUSED`]).

mod common;

use serde_json::Value;
use std::sync::OnceLock;
use vramscope_core::model::Head;
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::{model_of_config, LoadedModel};

fn table() -> &'static Value {
    static TABLE: OnceLock<Value> = OnceLock::new();
    TABLE.get_or_init(|| common::fixture_json("defaults", "transformers-5.24.0.json"))
}

fn row(model_type: &str) -> &'static Value {
    table()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model_type"] == model_type)
        .unwrap_or_else(|| panic!("no row for {model_type}"))
}

/// Class defaults the reader refuses rather than count: (model_type, a word of the refusal).
/// `glm4_moe`: `Glm4MoeConfig` has 96 heads over 4096 and no `head_dim`; transformers floors
/// 4096 / 96 to 42, a shape no checkpoint has. The VLM wrappers whose default sub-configs
/// are not their text family's own defaults (Qwen2-VL's 72B text config, Mistral 3's 24B,
/// Gemma 3's SigLIP-base tower, ...) and Mllama's (its default `cross_attention_layers` lie
/// beyond its default text depth) are refused when the config leaves a sub-config out.
/// `lfm2_moe`'s class defaults do not build in transformers (no `layer_types`).
const REFUSED: &[(&str, &str)] = &[
    ("glm4_moe", "head_dim"),
    ("gemma3", "text_config"),
    ("qwen2_vl", "text_config"),
    ("qwen2_5_vl", "text_config"),
    ("mistral3", "text_config"),
    ("internvl", "text_config"),
    ("qwen3_vl_moe", "text_config"),
    ("mllama", "text_config"),
    ("paligemma", "text_config"),
    // `Lfm2MoeConfig` derives no `layer_types`; `Lfm2MoeDecoderLayer` indexes it, so
    // transformers fails on the class defaults ("'NoneType' object is not subscriptable").
    ("lfm2_moe", "layer_types"),
];

fn read(model_type: &str) -> Result<LoadedModel, String> {
    let text = format!("{{\"model_type\": \"{model_type}\"}}");
    let parsed = parse_config_str(&text, model_type).map_err(|e| e.to_string())?;
    model_of_config(parsed, model_type).map_err(|e| e.to_string())
}

/// Layer 0's attention and norm tensors, relative to the layer (`self_attn.q_proj.weight`).
fn attention_and_norms(names: impl Iterator<Item = (String, Vec<u64>)>) -> Vec<(String, Vec<u64>)> {
    let mut out: Vec<_> = names
        .filter(|(n, _)| {
            (n.starts_with("self_attn.") || n.contains("layernorm")) && !n.contains("experts")
        })
        .collect();
    out.sort();
    out
}

fn check(model_type: &str) {
    let mut r = row(model_type);
    if let Some((_, word)) = REFUSED.iter().find(|(t, _)| *t == model_type) {
        let err = read(model_type).err().unwrap_or_else(|| {
            panic!(
                "{model_type}: read instead of refused ({} in transformers)",
                r["params"]
            )
        });
        assert!(err.contains(word), "{model_type}: {err}");
        assert!(!err.contains('\n'), "{model_type}: one line: {err}");
        return;
    }
    if r.get("error").is_some() {
        // kimi_k2 is remote code (not in transformers): its `modeling_deepseek.py` is
        // DeepSeek-V3's, read with DeepseekV3Config's defaults.
        assert_eq!(model_type, "kimi_k2");
        r = row("deepseek_v3");
    }
    let m = read(model_type).unwrap_or_else(|e| panic!("{model_type}: {e}"));
    assert_eq!(
        m.params_total,
        r["params"].as_u64().unwrap(),
        "{model_type}: params"
    );
    let spec = m.spec.as_ref().unwrap();
    if let Head::LanguageModel { tied, .. } = spec.head {
        assert_eq!(
            tied,
            r["tie_word_embeddings"].as_bool().unwrap(),
            "{model_type}: tied"
        );
    }
    let windows: Vec<Option<u64>> = r["layer_windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_u64)
        .collect();
    let layers = &spec.decoder.layers;
    if windows.len() == layers.len() {
        let ours: Vec<Option<u64>> = layers.iter().map(|l| l.attention.sliding_window).collect();
        assert_eq!(ours, windows, "{model_type}: sliding windows per layer");
        let nope: Vec<bool> = r["layer_nope"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        let ours: Vec<bool> = layers.iter().map(|l| l.attention.nope).collect();
        assert_eq!(ours, nope, "{model_type}: NoPE layers");
    }
    // Llama 4's wrapper keeps its language model as `language_model` (`Llama4ForCausalLM`).
    if matches!(
        r["layers_path"].as_str(),
        Some("model.layers" | "language_model.model.layers")
    ) {
        let theirs = attention_and_norms(r["layer0"].as_object().unwrap().iter().map(|(n, s)| {
            let shape = s.as_array().unwrap().iter().map(|d| d.as_u64().unwrap());
            (n.clone(), shape.collect())
        }));
        let inv = m.inventory.as_ref().unwrap();
        let ours = attention_and_norms(inv.tensors.iter().filter_map(|t| {
            let rest = t.name.strip_prefix("model.layers.0.")?;
            Some((rest.to_string(), t.shape.clone()))
        }));
        assert_eq!(ours, theirs, "{model_type}: layer 0's attention and norms");
    }
}

macro_rules! rows {
    ($($t:ident),* $(,)?) => {
        $(#[test] fn $t() { check(stringify!($t)); })*

        /// The rows above are every supported type, and the table holds each.
        #[test]
        fn every_supported_type_has_a_row() {
            let tested = [$(stringify!($t)),*];
            for t in vramscope_formats::hf_config::SUPPORTED_TYPES {
                assert!(tested.contains(t), "{t} has no test row");
                row(t);
            }
            assert_eq!(table()["transformers"], "5.24.0");
        }
    };
}

rows!(
    llama,
    mistral,
    mixtral,
    qwen2,
    qwen2_moe,
    qwen3,
    qwen3_moe,
    gemma,
    gemma2,
    gemma3,
    gemma3_text,
    phi3,
    gpt2,
    gpt_neox,
    opt,
    falcon,
    bert,
    roberta,
    t5,
    gpt_bigcode,
    starcoder2,
    deepseek_v2,
    deepseek_v3,
    gpt_oss,
    olmoe,
    phimoe,
    glm4_moe,
    llama4_text,
    llama4,
    kimi_k2,
    qwen2_vl,
    qwen2_5_vl,
    llava,
    llava_next,
    mistral3,
    idefics3,
    smolvlm,
    qwen3_vl,
    internvl,
    mllama,
    llava_onevision,
    qwen3_vl_moe,
    mamba,
    falcon_mamba,
    mamba2,
    jamba,
    falcon_h1,
    qwen3_next,
    nemotron_h,
    smollm3,
    olmo2,
    olmo3,
    exaone4,
    granitemoe,
    granitemoehybrid,
    bamba,
    lfm2,
    lfm2_moe,
    qwen3_5,
    qwen3_5_moe,
    qwen3_5_text,
    qwen3_5_moe_text,
    deepseek_v32,
    glm_moe_dsa,
    zamba2,
    paligemma,
    lfm2_vl,
    gemma3n_text,
);

/// A VLM whose text sub-config class has defaults of its own (transformers 5.24:
/// `Qwen2_5_VLTextConfig` `intermediate_size` 29568 against `Qwen2Config`'s 22016;
/// `MllamaTextConfig` `num_hidden_layers` 40 against `LlamaConfig`'s 32, read with
/// `AutoConfig.for_model(t).text_config` and `AutoConfig.for_model(inner)`): a real config with
/// one of those keys taken out is refused, naming the key and the class, not counted with the
/// inner family's default.
#[test]
fn vlm_text_keys_left_to_their_own_class_defaults_are_refused() {
    let cases = [
        (
            "vlm/qwen2.5-vl-7b-instruct.json",
            "intermediate_size",
            "Qwen2_5_VLTextConfig",
        ),
        (
            "vlm/llama-3.2-11b-vision-instruct.json",
            "num_hidden_layers",
            "MllamaTextConfig",
        ),
    ];
    for (file, key, class) in cases {
        let (dir, name) = file.split_once('/').expect("dir/name");
        let mut v = common::fixture_json(dir, name);
        assert!(
            parse_config_str(&v.to_string(), file).is_ok(),
            "{file} as published"
        );
        let text = if v.get("text_config").is_some_and(Value::is_object) {
            v["text_config"].as_object_mut().unwrap()
        } else {
            v.as_object_mut().unwrap()
        };
        assert!(text.remove(key).is_some(), "{file} states {key}");
        let err = parse_config_str(&v.to_string(), file)
            .unwrap_err()
            .to_string();
        assert!(err.contains(key) && err.contains(class), "{err}");
    }
}
