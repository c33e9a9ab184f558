//! Families without a preset, read from the fields of their real config.json files, and the
//! strictness of the config reader. Expected counts are published figures re-derived by hand.

mod common;

use serde_json::{json, Value};
use vramscope_formats::hf_config::{
    parse_config_value, parse_config_value_with, ReadOptions, SUPPORTED_TYPES,
};
use vramscope_formats::model_source::load_inline_config;

fn params(cfg: serde_json::Value) -> u64 {
    load_inline_config(&cfg).unwrap().params_total
}

fn err(cfg: serde_json::Value) -> String {
    match parse_config_value(&cfg, "config.json") {
        Ok(_) => panic!("accepted {cfg}"),
        Err(e) => e.to_string(),
    }
}

/// tiiuae/falcon-7b, published 6,921,720,704: multi-query, parallel attention, one LayerNorm per
/// block, no biases, tied head. Embedding 65024·4544; per layer qkv 4544·(4544 + 2·64), dense
/// 4544², MLP 2·4544·18176, LayerNorm 2·4544; ln_f 2·4544.
#[test]
fn falcon_7b() {
    let layer: u64 = 4544 * 4672 + 4544 * 4544 + 2 * 4544 * 18176 + 2 * 4544;
    assert_eq!(65024 * 4544 + 32 * layer + 2 * 4544, 6_921_720_704);
    let cfg = json!({"architectures": ["FalconForCausalLM"], "model_type": "falcon",
        "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
        "vocab_size": 65024, "multi_query": true, "parallel_attn": true, "bias": false,
        "alibi": false, "new_decoder_architecture": false, "torch_dtype": "bfloat16"});
    assert_eq!(params(cfg), 6_921_720_704);
}

/// EleutherAI/pythia-160m (gpt_neox), published 162,322,944: untied embed_in/embed_out
/// 50304·768 each; 12 layers of two LayerNorms 3,072 + qkv 768·2304+2304 + dense 768²+768 +
/// MLP 768·3072+3072 + 3072·768+768 = 7,087,872; final LayerNorm 1,536.
#[test]
fn pythia_160m() {
    assert_eq!(2 * 50304 * 768 + 12 * 7_087_872 + 1536, 162_322_944u64);
    let cfg = json!({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
        "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
        "num_hidden_layers": 12, "vocab_size": 50304, "rotary_pct": 0.25,
        "use_parallel_residual": true, "tie_word_embeddings": false, "torch_dtype": "float16"});
    assert_eq!(params(cfg), 162_322_944);
}

/// bigcode/starcoder2-3b, published 3,030,371,328: tied 49152·3072; 30 layers with biased
/// q/o 3072²+3072, k/v 3072·256+256 (2 KV heads of 128), c_fc 3072·12288+12288, c_proj
/// 12288·3072+3072, two LayerNorms with bias 4·3072; final LayerNorm 2·3072.
#[test]
fn starcoder2_3b() {
    let layer: u64 = 2 * (3072 * 3072 + 3072)
        + 2 * (3072 * 256 + 256)
        + (3072 * 12288 + 12288)
        + (12288 * 3072 + 3072)
        + 4 * 3072;
    assert_eq!(49152 * 3072 + 30 * layer + 2 * 3072, 3_030_371_328);
    let cfg = json!({"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
        "hidden_size": 3072, "intermediate_size": 12288, "num_attention_heads": 24,
        "num_key_value_heads": 2, "num_hidden_layers": 30, "vocab_size": 49152,
        "use_bias": true, "sliding_window": 4096, "max_position_embeddings": 16384,
        "torch_dtype": "bfloat16"});
    assert_eq!(params(cfg), 3_030_371_328);
}

/// facebook/opt-350m, published 331,196,416: the only OPT with `word_embed_proj_dim` (512) ≠
/// width (1024) and post-norm blocks (no final LayerNorm): tokens 50272·512, positions
/// 2050·1024, project_in/out 2·512·1024, 24 layers of 4·(1024²+1024) + 2·2048 +
/// (1024·4096+4096) + (4096·1024+1024); tied head over the 512-wide projection.
#[test]
fn opt_350m() {
    let layer: u64 =
        4 * (1024 * 1024 + 1024) + 2 * 2048 + (1024 * 4096 + 4096) + (4096 * 1024 + 1024);
    assert_eq!(
        50272 * 512 + 2050 * 1024 + 2 * 512 * 1024 + 24 * layer,
        331_196_416
    );
    let cfg = json!({"architectures": ["OPTForCausalLM"], "model_type": "opt",
        "hidden_size": 1024, "ffn_dim": 4096, "num_attention_heads": 16,
        "num_hidden_layers": 24, "vocab_size": 50272, "max_position_embeddings": 2048,
        "word_embed_proj_dim": 512, "do_layer_norm_before": false, "torch_dtype": "float16"});
    assert_eq!(params(cfg), 331_196_416);
}

/// FacebookAI/roberta-base as RobertaForMaskedLM, 124,697,433: embeddings 50265·768 +
/// 514·768 + 1·768 + LN 1,536; 12 BERT layers of 7,087,872; lm_head dense 768²+768, LayerNorm
/// 1,536 and bias 50,265 (decoder tied).
#[test]
fn roberta_base() {
    let emb: u64 = 50265 * 768 + 514 * 768 + 768 + 1536;
    assert_eq!(emb + 12 * 7_087_872 + 590_592 + 1536 + 50265, 124_697_433);
    let cfg = json!({"architectures": ["RobertaForMaskedLM"], "model_type": "roberta",
        "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
        "num_hidden_layers": 12, "vocab_size": 50265, "max_position_embeddings": 514,
        "type_vocab_size": 1});
    assert_eq!(params(cfg), 124_697_433);
}

/// google/flan-t5-base: gated-gelu MLP (wi_0, wi_1, wo) and an untied lm_head. d_model 768,
/// d_ff 2048, 12+12 layers, 12 heads of 64, vocab 32128. Encoder layer 4·768² + 3·768·2048 +
/// 2·768 = 7,080,960; decoder layer adds cross-attention 4·768² and a norm: 9,441,024;
/// relative bias 32·12 per stack; final norms 768 each; shared and lm_head 32128·768 each.
/// = 247,577,856 (the published Flan-T5-base size).
#[test]
fn flan_t5_base() {
    let enc: u64 = 12 * (4 * 768 * 768 + 3 * 768 * 2048 + 2 * 768) + 384 + 768;
    let dec: u64 = 12 * (8 * 768 * 768 + 3 * 768 * 2048 + 3 * 768) + 384 + 768;
    assert_eq!(2 * 32128 * 768 + enc + dec, 247_577_856);
    let cfg = json!({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
        "d_model": 768, "d_ff": 2048, "d_kv": 64, "num_heads": 12, "num_layers": 12,
        "num_decoder_layers": 12, "feed_forward_proj": "gated-gelu", "vocab_size": 32128,
        "tie_word_embeddings": false});
    assert_eq!(params(cfg), 247_577_856);
}

/// bigcode/gpt_bigcode-santacoder: multi-query GPTBigCode, Linear weights. wte 49280·2048, wpe
/// 2048·2048, 24 layers of two LayerNorms 8,192 + c_attn 2048·(2048+2·128)+2304 + c_proj
/// 2048²+2048 + c_fc 2048·8192+8192 + c_proj 8192·2048+2048; ln_f 4,096. = 1,124,886,528.
#[test]
fn santacoder() {
    let layer: u64 = 8192
        + (2048 * 2304 + 2304)
        + (2048 * 2048 + 2048)
        + (2048 * 8192 + 8192)
        + (8192 * 2048 + 2048);
    assert_eq!(
        49280 * 2048 + 2048 * 2048 + 24 * layer + 4096,
        1_124_886_528
    );
    assert_eq!(
        vramscope_formats::model_source::load_model("gpt_bigcode-santacoder")
            .unwrap()
            .params_total,
        1_124_886_528
    );
}

/// Transformers 4.x and 5.x spellings give the same model.
#[test]
fn v4_and_v5_spellings() {
    let v4 = json!({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000,
        "torch_dtype": "bfloat16", "rope_theta": 500000.0});
    let v5 = json!({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000,
        "dtype": "bfloat16", "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}});
    let a = parse_config_value(&v4, "v4").unwrap().spec;
    let b = parse_config_value(&v5, "v5").unwrap().spec;
    assert_eq!(a.embedding, b.embedding);
    assert_eq!(a.dtype, b.dtype);
    assert_eq!(a.decoder, b.decoder);
}

/// An unknown family with the standard fields is refused (its class defaults decide the count),
/// and read as a Llama-style decoder, with a warning, when asked (`--assume-llama`).
#[test]
fn unknown_family_with_standard_fields() {
    let cfg = json!({"model_type": "brand_new", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100});
    let e = err(cfg.clone());
    assert!(
        e.contains("brand_new") && e.contains("--assume-llama"),
        "{e}"
    );
    let llama = ReadOptions { assume_llama: true };
    let parsed = parse_config_value_with(&cfg, "config.json", llama).unwrap();
    common::assert_warns(&parsed.warnings, "brand_new");
    // embed 100·64 + head 100·64 + 2·(4·64² + 3·64·128 + 2·64) + 64
    let expected = 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64;
    let m = vramscope_formats::model_source::model_of_config(parsed, "config.json").unwrap();
    assert_eq!(m.params_total, expected);
}

/// Even the Llama reading needs the standard fields: without them the refusal lists the
/// supported types.
#[test]
fn unknown_family_without_standard_fields_names_the_supported_types() {
    let cfg = json!({"model_type": "mystery", "d": 3});
    assert!(err(cfg.clone()).contains("mystery"));
    let llama = ReadOptions { assume_llama: true };
    let e = parse_config_value_with(&cfg, "config.json", llama)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mystery") && e.contains("llama") && e.contains("t5"),
        "{e}"
    );
}

#[test]
fn bad_sizes_are_named() {
    let base = || {
        json!({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
               "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100})
    };
    // (field, the value written in, what the error must say)
    let cases: [(&str, Value, &[&str]); 9] = [
        ("num_attention_heads", json!(0), &["num_attention_heads"]),
        ("hidden_size", json!(-64), &["hidden_size", "negative"]),
        (
            "intermediate_size",
            json!(127.5),
            &["intermediate_size", "whole"],
        ),
        (
            "num_key_value_heads",
            json!(3),
            &["num_key_value_heads", "divide"],
        ),
        ("vocab_size", json!("many"), &["vocab_size"]),
        (
            "num_hidden_layers",
            json!(1_000_000_000u64),
            &["num_hidden_layers"],
        ),
        ("hidden_size", json!(1e300), &["hidden_size"]),
        ("torch_dtype", json!("bfloat61"), &["bfloat61"]),
        // 4 heads do not divide 66 and no head_dim is given
        ("hidden_size", json!(66), &["divide"]),
    ];
    for (field, v, says) in cases {
        let mut c = base();
        c[field] = v.clone();
        let e = err(c);
        for part in says {
            assert!(e.contains(part), "{field} = {v}: {part:?} not in {e}");
        }
    }
    assert!(err(json!([1, 2, 3])).contains("object"));
}

/// Huge but individually valid sizes overflow cleanly instead of panicking.
#[test]
fn overflowing_products_are_errors() {
    let cfg = json!({"model_type": "llama", "hidden_size": 1u64 << 39,
        "intermediate_size": 1u64 << 39, "num_attention_heads": 1, "num_hidden_layers": 1,
        "vocab_size": 1u64 << 39});
    let e = load_inline_config(&cfg).unwrap_err().to_string();
    assert!(e.contains("overflow"), "{e}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            (-1e20f64..1e20).prop_map(|f| json!(f)),
            "[a-z_]{0,12}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop::collection::vec(inner, 0..6).prop_map(serde_json::Value::Array)
        })
    }

    const KEYS: &[&str] = &[
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "n_embd",
        "n_layer",
        "n_head",
        "n_inner",
        "d_model",
        "d_ff",
        "num_layers",
        "num_heads",
        "d_kv",
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_intermediate_size",
        "num_experts_per_tok",
        "first_k_dense_replace",
        "kv_lora_rank",
        "q_lora_rank",
        "tie_word_embeddings",
        "layer_types",
        "sliding_window",
        "torch_dtype",
        "dtype",
        "architectures",
        "word_embed_proj_dim",
        "mlp_only_layers",
        "decoder_sparse_step",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]
        /// Any config — right family, random field values — gives a model or an error, never a
        /// panic; when it gives a model, its inventory either builds or fails cleanly.
        #[test]
        fn random_configs_never_panic(
            ty in 0..=SUPPORTED_TYPES.len(),
            fields in prop::collection::vec((0..KEYS.len(), arb_json(), 1u64..5000), 0..12),
        ) {
            let mut obj = serde_json::Map::new();
            // Every family read natively, and one that is not.
            let model_type = SUPPORTED_TYPES.get(ty).copied().unwrap_or("other");
            obj.insert("model_type".into(), json!(model_type));
            for (k, v, small) in fields {
                // Half the time a plausible small size, so deeper code paths run.
                let value = if small % 2 == 0 { json!(small / 2) } else { v };
                obj.insert(KEYS[k].into(), value);
            }
            let _ = load_inline_config(&serde_json::Value::Object(obj));
        }

        #[test]
        fn random_text_never_panics(text in ".{0,200}") {
            let _ = vramscope_formats::hf_config::parse_config_str(&text, "x");
        }
    }
}

/// Python's `json.dumps` writes `inf` / `nan` as `Infinity` / `NaN` (Nemotron-H-56B's config
/// holds `"time_step_limit": [0.0, Infinity]`): such a config is read as Python reads it; a size
/// given as one is refused naming the field.
#[test]
fn python_non_finite_tokens_are_read() {
    let text = r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
        "time_step_limit": [0.0, Infinity], "initializer_range": NaN, "note": "NaN, Infinity"}"#;
    let parsed = vramscope_formats::hf_config::parse_config_str(text, "c.json").unwrap();
    assert_eq!(parsed.spec.hidden_size, 64);
    for token in ["Infinity", "NaN"] {
        let bad = text.replace("\"hidden_size\": 64", &format!("\"hidden_size\": {token}"));
        let e = vramscope_formats::hf_config::parse_config_str(&bad, "c.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hidden_size") && !e.contains("not valid JSON"),
            "{token}: {e}"
        );
    }
}
