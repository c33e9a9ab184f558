//! Parameter counts of the MoE families of issue 21 from their real configs
//! (`tests/fixtures/moe/`, sources in its README), to the parameter. Each expected total is
//! derived by hand below from the config's shapes, and equals the count transformers 5.24
//! gives for the model class instantiated on the meta device (`sum(p.numel() for p in
//! model.parameters())`, run in the project's venv on 2026-12-02; the class named in each test).

mod common;

use vramscope_core::model::{AttentionKind, Mlp, NormKind};
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/moe/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> vramscope_formats::model_source::LoadedModel {
    load_model(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// allenai/OLMoE-1B-7B-0924 (`OlmoeForCausalLM`, transformers: 6,919,161,856; the model page's
/// "7B"). h 2048, 16 layers, 16 heads of 128 (MHA), 64 experts of 1024, vocab 50304, untied.
/// Per layer: q/k/v/o 4 · 2048² = 16,777,216; q_norm and k_norm over the whole projections
/// 2 · 2048 = 4,096; two RMSNorms 4,096; router 64 · 2048 = 131,072; experts 64 · 3 · 2048 ·
/// 1024 = 402,653,184 → 419,569,664. × 16 = 6,713,114,624; embeddings and head 2 · 50304 ·
/// 2048 = 206,045,184; final norm 2,048.
#[test]
fn olmoe_1b_7b() {
    let layer: u64 = 16_777_216 + 4_096 + 4_096 + 131_072 + 402_653_184;
    assert_eq!(layer, 419_569_664);
    let total = 16 * layer + 206_045_184 + 2_048;
    assert_eq!(total, 6_919_161_856);
    let m = load("olmoe-1b-7b-0924.json");
    assert_eq!(m.params_total, total);
    common::assert_shapes(
        &m,
        &[
            ("model.layers.0.self_attn.q_norm.weight", vec![2048]),
            ("model.layers.0.self_attn.k_norm.weight", vec![2048]),
        ],
    );
    let spec = m.spec.as_ref().unwrap();
    match &spec.decoder.layers[0].mlp {
        Mlp::Moe(moe) => {
            assert_eq!((moe.experts, moe.top_k, moe.expert.ffn), (64, 8, 1024));
            assert!(moe.shared.is_none());
        }
        other => panic!("{other:?}"),
    }
}

/// microsoft/Phi-3.5-MoE-instruct (`PhimoeForCausalLM`, transformers: 41,873,153,344; the
/// model page's "41.9B"). h 4096, 32 layers, 32 heads of 128, 8 KV heads, 16 experts of 6400,
/// vocab 32064, attention and head biases, LayerNorms with bias. Per layer: q and o 4096² +
/// 4096 = 16,781,312 each; k and v 4096 · 1024 + 1024 = 4,195,328 each; two LayerNorms 2 · 2 ·
/// 4096 = 16,384; router 16 · 4096 = 65,536; experts 16 · 3 · 4096 · 6400 = 1,258,291,200 →
/// 1,300,326,400. × 32 = 41,610,444,800; embeddings and head 2 · 32064 · 4096 = 262,668,288;
/// head bias 32,064; final LayerNorm 8,192.
#[test]
fn phi_3_5_moe() {
    let layer: u64 = 2 * 16_781_312 + 2 * 4_195_328 + 16_384 + 65_536 + 1_258_291_200;
    assert_eq!(layer, 1_300_326_400);
    let total = 32 * layer + 262_668_288 + 32_064 + 8_192;
    assert_eq!(total, 41_873_153_344);
    let m = load("phi-3.5-moe-instruct.json");
    assert_eq!(m.params_total, total);
    let inv = m.inventory.as_ref().unwrap();
    assert!(inv.get("lm_head.bias").is_some());
    assert!(inv.get("model.norm.bias").is_some());
    assert!(inv
        .get("model.layers.0.block_sparse_moe.experts.15.w1.weight")
        .is_some());
    let spec = m.spec.as_ref().unwrap();
    assert!(matches!(
        spec.decoder.layers[0].norms[0].1.kind,
        NormKind::LayerNorm { bias: true }
    ));
}

/// zai-org/GLM-4.5-Air (`Glm4MoeForCausalLM`, transformers: 106,852,245,504; the model page's
/// "106B total"). h 4096, 46 layers, 96 heads of 128, 8 KV heads, q/k/v biases (o none), layer
/// 0 dense (10944), then 128 experts of 1408 and one shared expert of 1408; vocab 151552.
/// Attention: q 4096 · 12288 + 12288 = 50,343,936; k, v 4096 · 1024 + 1024 = 4,195,328 each;
/// o 12288 · 4096 = 50,331,648 → 109,066,240; norms 8,192. Dense MLP 3 · 4096 · 10944 =
/// 134,479,872; MoE: router 128 · 4096 = 524,288, experts 128 · 17,301,504 = 2,214,592,512,
/// shared 17,301,504 → 2,232,418,304. Layer 0: 243,554,304; MoE layers 2,341,492,736 × 45;
/// embeddings and head 2 · 151552 · 4096 = 1,241,513,984; final norm 4,096. The router's
/// `e_score_correction_bias` is a buffer and the MTP layer (`num_nextn_predict_layers` 1) is not
/// built by transformers: neither counts.
#[test]
fn glm_4_5_air() {
    let attention: u64 = 50_343_936 + 2 * 4_195_328 + 50_331_648;
    assert_eq!(attention, 109_066_240);
    let moe: u64 = 524_288 + 2_214_592_512 + 17_301_504;
    let total =
        (attention + 8_192 + 134_479_872) + 45 * (attention + 8_192 + moe) + 1_241_513_984 + 4_096;
    assert_eq!(total, 106_852_245_504);
    let m = load("glm-4.5-air.json");
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert_eq!(spec.decoder.layers.len(), 46);
    assert!(matches!(spec.decoder.layers[0].mlp, Mlp::Dense(_)));
    let a = &spec.decoder.layers[1].attention;
    assert!(a.bias.q && a.bias.k && a.bias.v && !a.bias.o);
    assert!(a.qk_norm.is_none());
    let inv = m.inventory.as_ref().unwrap();
    assert!(inv
        .get("model.layers.1.mlp.shared_experts.gate_proj.weight")
        .is_some());
}

/// meta-llama/Llama-4-Scout-17B-16E's language model (`Llama4ForCausalLM`, transformers:
/// 107,769,861,120; the model page's 109B includes the vision tower). h 5120, 48 layers, all
/// MoE, 40 heads of 128, 8 KV heads, 16 experts of 8192 and a shared expert of 8192, vocab
/// 202048. Per layer: q and o 5120² = 26,214,400 each, k and v 5120 · 1024 = 5,242,880 each
/// (62,914,560); norms 10,240; router 16 · 5120 = 81,920; experts 16 · 3 · 5120 · 8192 =
/// 2,013,265,920; shared 125,829,120 → 2,202,101,760. × 48 = 105,700,884,480; embeddings and
/// head 2 · 202048 · 5120 = 2,068,971,520; final norm 5,120. The L2 q/k norm has no weight.
#[test]
fn llama_4_scout_text() {
    let layer: u64 = 62_914_560 + 10_240 + 81_920 + 2_013_265_920 + 125_829_120;
    assert_eq!(layer, 2_202_101_760);
    let total = 48 * layer + 2_068_971_520 + 5_120;
    assert_eq!(total, 107_769_861_120);
    let m = load("llama-4-scout-17b-16e-text.json");
    assert_eq!(m.params_total, total);
    let gate_up = common::shape(&m, "model.layers.0.feed_forward.experts.gate_up_proj");
    assert_eq!(gate_up, vec![16, 5120, 16384]);
    let inv = m.inventory.as_ref().unwrap();
    assert!(inv
        .get("model.layers.0.feed_forward.shared_expert.down_proj.weight")
        .is_some());
    // no_rope_layers [1, 1, 1, 0] × 12: layers 3, 7, ... are NoPE and attend globally; the
    // rest use RoPE, chunks of 8192 and the L2 q/k norm.
    let spec = m.spec.as_ref().unwrap();
    for (i, l) in spec.decoder.layers.iter().enumerate() {
        let nope = i % 4 == 3;
        assert_eq!(l.attention.nope, nope, "{i}");
        assert_eq!(l.attention.qk_l2_norm, !nope, "{i}");
        let chunk = if nope { None } else { Some(8192) };
        assert_eq!(l.attention.attention_chunk, chunk, "{i}");
    }
}

/// A Llama 4 config without `moe_layers` or `no_rope_layers` takes Llama4TextConfig's rules:
/// MoE on every `interleave_moe_layer_step`-th layer from `step - 1` (Maverick's 2: layers 1,
/// 3, ...; the others dense at `intermediate_size_mlp`), NoPE on every
/// `no_rope_layer_interval`-th layer (`(i + 1) % 4 == 0`).
#[test]
fn llama_4_rules_without_lists() {
    let text = r#"{"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 32, "intermediate_size_mlp": 96, "num_local_experts": 4,
        "interleave_moe_layer_step": 2, "vocab_size": 100, "attention_chunk_size": 16}"#;
    let spec = vramscope_formats::hf_config::parse_config_str(text, "t")
        .unwrap()
        .spec;
    let kinds: Vec<&str> = spec
        .decoder
        .layers
        .iter()
        .map(|l| match &l.mlp {
            Mlp::Dense(d) if d.ffn == 96 => "dense",
            Mlp::Moe(m) if m.expert.ffn == 32 && m.shared.is_some() => "moe",
            _ => "?",
        })
        .collect();
    assert_eq!(kinds, ["dense", "moe", "dense", "moe"]);
    let nope: Vec<bool> = spec
        .decoder
        .layers
        .iter()
        .map(|l| l.attention.nope)
        .collect();
    assert_eq!(nope, [false, false, false, true]);
    // Hand count (transformers 5.24 on meta: 161,344): embeddings + head 2 · 100 · 64 = 12,800; attention q/o 64² each, k/v 64 · 32
    // each = 12,288; norms 128; dense 3 · 64 · 96 = 18,432; MoE router 4 · 64 = 256, experts
    // 4 · 3 · 64 · 32 = 24,576, shared 6,144; final norm 64.
    let total = 12_800 + 4 * (12_288 + 128) + 2 * 18_432 + 2 * (256 + 24_576 + 6_144) + 64;
    let inv = vramscope_core::inventory::build_inventory(&spec).unwrap();
    assert_eq!(inv.params(), total);
}

/// moonshotai/Kimi-K2-Instruct-0905 (`model_type` kimi_k2, `DeepseekV3ForCausalLM`;
/// transformers' DeepseekV3ForCausalLM from this config: 1,026,408,209,408; the model page's
/// "1T total"). h 7168, 61 layers, layer 0 dense (18432), then 384 experts of 2048 and one
/// shared; 64 heads of MLA (q_lora 1536, kv_lora 512, nope 128, rope 64, v 128); vocab 163840.
/// Attention: q_a 7168 · 1536 = 11,010,048 + norm 1,536 + q_b 1536 · 64 · 192 = 18,874,368;
/// kv_a 7168 · 576 = 4,128,768 + norm 512 + kv_b 512 · 64 · 256 = 8,388,608; o 8192 · 7168 =
/// 58,720,256 → 101,124,096; norms 14,336. Dense 3 · 7168 · 18432 = 396,361,728; MoE: router
/// 384 · 7168 = 2,752,512, experts 384 · 44,040,192 = 16,911,433,728, shared 44,040,192 →
/// 16,958,226,432. Embeddings and head 2 · 163840 · 7168 = 2,348,810,240; final norm 7,168.
#[test]
fn kimi_k2() {
    let attention: u64 = 11_010_048 + 1_536 + 18_874_368 + 4_128_768 + 512 + 8_388_608;
    let attention = attention + 58_720_256;
    assert_eq!(attention, 101_124_096);
    let moe: u64 = 2_752_512 + 16_911_433_728 + 44_040_192;
    let total = (attention + 14_336 + 396_361_728)
        + 60 * (attention + 14_336 + moe)
        + 2_348_810_240
        + 7_168;
    assert_eq!(total, 1_026_408_209_408);
    let m = load("kimi-k2-instruct-0905.json");
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert!(matches!(
        spec.decoder.layers[0].attention.kind,
        AttentionKind::Latent { heads: 64, .. }
    ));
}

/// Hostile values in any field of the five real configs (and the Llama 4 lists) give a clear
/// one-line error or a reading, never a panic.
#[test]
fn hostile_fields_never_panic() {
    use serde_json::{json, Value};
    let bad = [
        json!(null),
        json!(-1),
        json!(0),
        json!("x"),
        json!([]),
        json!([1, 2]),
        json!([99, -3]),
        json!({}),
        json!(true),
        json!(1e30),
        json!(4_611_686_018_427_387_904u64),
    ];
    let names = [
        "olmoe-1b-7b-0924.json",
        "phi-3.5-moe-instruct.json",
        "glm-4.5-air.json",
        "llama-4-scout-17b-16e-text.json",
        "kimi-k2-instruct-0905.json",
    ];
    let mut checked = 0;
    for name in names {
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        let base: Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<String> = base.as_object().unwrap().keys().cloned().collect();
        keys.extend(["moe_layers", "no_rope_layers", "layer_types"].map(String::from));
        for key in &keys {
            for v in &bad {
                let mut cfg = base.clone();
                cfg[key.as_str()] = v.clone();
                let text = cfg.to_string();
                let got = std::panic::catch_unwind(|| {
                    vramscope_formats::hf_config::parse_config_str(&text, "c.json")
                        .map(|p| p.spec.num_layers())
                });
                let got = got.unwrap_or_else(|_| panic!("{name}: {key} = {v} panicked"));
                if let Err(e) = got {
                    let msg = e.to_string();
                    assert!(!msg.contains('\n'), "{name}: {key} = {v}: {msg}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

/// The Llama 4 multimodal wrapper (`llama4`, `Llama4ForConditionalGeneration`) is read natively
/// (`vlm_llama4.rs` counts the published Scout and Maverick): its language model exactly as
/// `llama4_text` (107,769,861,120, `llama_4_scout_text`) plus the tower and projector, with no
/// "multimodal: only the language model" warning. This wrapper names only some vision fields;
/// the rest take `Llama4VisionConfig`'s defaults (transformers 5.24 `configuration_llama4.py`):
/// 16 heads, MLP 5632, adapter 4096 → 4096 — the published tower, 850,960,896 by hand in
/// `vlm_llama4.rs` — and `vision_output_dim` 7680 (the published configs say 4096), so the
/// projector is 7680 · 5120 = 39,321,600: 107,769,861,120 + 850,960,896 + 39,321,600 =
/// 108,660,143,616 — what transformers 5.24 prints for this wrapper on the meta device
/// (`Llama4ForConditionalGeneration(Llama4Config.from_dict(wrapper))`, `sum(p.numel())`).
#[test]
fn llama4_wrapper_read_natively() {
    let text: serde_json::Value = common::read_json(&fixture("llama-4-scout-17b-16e-text.json"));
    let wrapper = serde_json::json!({
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": text,
        "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                          "num_hidden_layers": 34, "image_size": 336, "patch_size": 14},
    })
    .to_string();
    let parsed = vramscope_formats::hf_config::parse_config_str(&wrapper, "c.json").unwrap();
    common::assert_never_warns(&parsed.warnings, "vision tower");
    let inv = vramscope_core::inventory::build_inventory(&parsed.spec).unwrap();
    assert_eq!(
        107_769_861_120u64 + 850_960_896 + 7680 * 5120,
        108_660_143_616
    );
    assert_eq!(inv.params(), 108_660_143_616);
}
