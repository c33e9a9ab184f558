//! Parameter counts of this season's nearly-Llama families (SmolLM3, OLMo-2, OLMo-3, EXAONE-4)
//! from configs in `tests/fixtures/season/` (sources in its README), to the parameter. Each
//! expected total is derived by hand below from the config's shapes and the family's modelling
//! file (transformers 5.24.0), and equals the count transformers 5.24.0 gives on the meta device:
//! `/work/main/.venv-test/bin/python`, `cfg = AutoConfig.for_model(**json.load(f))`; `with
//! torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)`; `sum(p.numel() for p in
//! m.parameters())` (run 2026-12-04; the numbers quoted in each test).

mod common;

use common::shape;

use vramscope_core::model::NormSlot;
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::{load_model, model_of_config, LoadedModel};

fn fixture(name: &str) -> String {
    common::fixture_path("season", name)
}

fn load(name: &str) -> LoadedModel {
    load_model(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The fixture with one top-level key set (or removed with `null` meaning "remove").
fn load_edited(name: &str, key: &str, value: Option<serde_json::Value>) -> LoadedModel {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let obj = v.as_object_mut().unwrap();
    match value {
        Some(x) => obj.insert(key.to_string(), x),
        None => obj.remove(key),
    };
    let parsed = parse_config_str(&v.to_string(), name).unwrap();
    model_of_config(parsed, name).unwrap()
}

/// No "model_type not known … check the parameter count" note on a family read natively.
fn assert_no_unknown_note(m: &LoadedModel) {
    common::assert_never_warns(&m.warnings, "not known");
}

/// The fixture, checked to count `total` parameters (worked by hand in the test) and to read
/// with no note about an unknown key; a failure names the fixture.
fn load_counted(name: &str, total: u64) -> LoadedModel {
    let m = load(name);
    assert_eq!(m.params_total, total, "{name}");
    assert_no_unknown_note(&m);
    m
}

/// HuggingFaceTB/SmolLM3-3B: the published config names no `tie_word_embeddings`, and
/// `SmolLM3Config` defaults it to True (the checkpoint index's `total_parameters`:
/// 3,075,098,624; transformers: 3,075,098,624). h 2048, 36 layers, 16 heads of 128, 4 KV heads,
/// MLP 11008, vocab 128256. Per layer: q and o 2048² = 4,194,304 each; k and v 2048 · 512 =
/// 1,048,576 each; MLP 3 · 2048 · 11008 = 67,633,152; two RMSNorms 4,096 → 78,123,008. × 36 =
/// 2,812,428,288; one tied embedding 128256 · 2048 = 262,668,288; final norm 2,048.
#[test]
fn smollm3_3b_is_tied_by_its_class_default() {
    let layer: u64 = 2 * 4_194_304 + 2 * 1_048_576 + 67_633_152 + 4_096;
    assert_eq!(layer, 78_123_008);
    let total = 36 * layer + 262_668_288 + 2_048;
    assert_eq!(total, 3_075_098_624);
    let m = load("smollm3-3b.json");
    assert_eq!(m.params_total, total);
    assert!(m
        .inventory
        .as_ref()
        .unwrap()
        .get("lm_head.weight")
        .is_none());
    assert_no_unknown_note(&m);
    // Untied on request: one more vocab × hidden matrix.
    let untied = load_edited("smollm3-3b.json", "tie_word_embeddings", Some(false.into()));
    assert_eq!(untied.params_total, total + 262_668_288);
}

/// SmolLM3's positions: `no_rope_layers` [1, 1, 1, 0] × 9, so layers 3, 7, …, 35 are NoPE; the
/// config's `use_sliding_window` false leaves every layer global. Without `no_rope_layers` the
/// class default (every 4th layer NoPE) gives the same; with `use_sliding_window` and a window
/// and no `layer_types`, the NoPE layers slide (`SmolLM3Config.__post_init__`).
#[test]
fn smollm3_nope_layers_and_windows() {
    let m = load("smollm3-3b.json");
    let layers = &m.spec.as_ref().unwrap().decoder.layers;
    for (i, l) in layers.iter().enumerate() {
        assert_eq!(l.attention.nope, i % 4 == 3, "layer {i}");
        assert_eq!(l.attention.sliding_window, None, "layer {i}");
    }
    let text = std::fs::read_to_string(fixture("smollm3-3b.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("no_rope_layers");
    o.remove("layer_types");
    o.insert("use_sliding_window".into(), true.into());
    o.insert("sliding_window".into(), 4096.into());
    let spec = parse_config_str(&v.to_string(), "smollm3").unwrap().spec;
    for (i, l) in spec.decoder.layers.iter().enumerate() {
        let nope = i % 4 == 3;
        assert_eq!(l.attention.nope, nope, "layer {i}");
        assert_eq!(
            l.attention.sliding_window,
            nope.then_some(4096),
            "layer {i}"
        );
    }
}

/// allenai/OLMo-2-1124-13B (`Olmo2ForCausalLM`; its `model.safetensors.index.json`
/// `total_size` 54,864,793,600 bytes of float32 = 13,716,198,400 parameters; transformers:
/// 13,716,198,400). h 5120, 40 layers, 40 heads of 128 (MHA), MLP 13824, vocab 100352, untied.
/// Per layer: q/k/v/o 4 · 5120² = 104,857,600; `q_norm` over 40 · 128 and `k_norm` over 40 · 128
/// = 10,240; MLP 3 · 5120 · 13824 = 212,336,640; post-attention and post-feedforward norms 10,240
/// → 317,214,720. × 40 = 12,688,588,800; embedding and head 2 · 100352 · 5120 = 1,027,604,480;
/// final norm 5,120.
#[test]
fn olmo2_13b_whole_projection_qk_norms() {
    let layer: u64 = 104_857_600 + 10_240 + 212_336_640 + 10_240;
    assert_eq!(layer, 317_214_720);
    let total = 40 * layer + 1_027_604_480 + 5_120;
    assert_eq!(total, 13_716_198_400);
    assert_eq!(54_864_793_600 / 4, total);
    let m = load_counted("olmo-2-1124-13b.json", total);
    // The checkpoint's tensor names (its index's weight_map).
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.q_norm.weight"),
        vec![5120]
    );
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.k_norm.weight"),
        vec![5120]
    );
    assert_eq!(
        shape(&m, "model.layers.0.post_feedforward_layernorm.weight"),
        vec![5120]
    );
    assert!(m
        .inventory
        .as_ref()
        .unwrap()
        .get("model.layers.0.input_layernorm.weight")
        .is_none());
    let slots: Vec<NormSlot> = m.spec.as_ref().unwrap().decoder.layers[0]
        .norms
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(slots, vec![NormSlot::PostAttention, NormSlot::PostMlp]);
    // `Olmo2MLP` hard-codes bias=False: an `mlp_bias` key changes nothing.
    let with_key = load_edited("olmo-2-1124-13b.json", "mlp_bias", Some(true.into()));
    assert_eq!(with_key.params_total, total);
}

/// OLMo-3 (`Olmo3ForCausalLM`): a toy config of a Megatron-Bridge parity harness (the README
/// says which), GQA so `k_norm` is narrower than `q_norm` (transformers: 18,863,616). h 512,
/// 8 layers, 8 heads of 64, 2 KV heads, MLP 1024, vocab 1000, untied. Per layer: q and o 512² =
/// 262,144 each; k and v 512 · 128 = 65,536 each; `q_norm` 512 + `k_norm` 128 = 640; MLP 3 · 512
/// · 1024 = 1,572,864; two norms 1,024 → 2,229,888. × 8 = 17,839,104; embedding and head 2 · 1000
/// · 512 = 1,024,000; final norm 512.
#[test]
fn olmo3_gqa_qk_norms_and_sliding_pattern() {
    let layer: u64 = 2 * 262_144 + 2 * 65_536 + 640 + 1_572_864 + 1_024;
    assert_eq!(layer, 2_229_888);
    let total = 8 * layer + 1_024_000 + 512;
    assert_eq!(total, 18_863_616);
    let m = load_counted("olmo3-toy-gqa.json", total);
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.k_norm.weight"),
        vec![128]
    );
    // No `layer_types`: `Olmo3Config.__post_init__` slides every layer but each 4th.
    let layers = &m.spec.as_ref().unwrap().decoder.layers;
    for (i, l) in layers.iter().enumerate() {
        let full = i % 4 == 3;
        assert_eq!(
            l.attention.sliding_window,
            (!full).then_some(64),
            "layer {i}"
        );
        assert!(!l.attention.nope, "layer {i}");
    }
    // Without `sliding_window`, the class default 4096.
    let default_window = load_edited("olmo3-toy-gqa.json", "sliding_window", None);
    let l0 = &default_window.spec.as_ref().unwrap().decoder.layers[0];
    assert_eq!(l0.attention.sliding_window, Some(4096));
}

/// LGAI-EXAONE/EXAONE-4.0-1.2B's shapes (a fine-tune's export, README; transformers:
/// 1,279,391,488). h 2048, 30 layers, 32 heads of 64, 8 KV heads, MLP 4096, vocab 102400, tied.
/// Per layer: q and o 2048² = 4,194,304 each; k and v 2048 · 512 = 1,048,576 each; `q_norm` and
/// `k_norm` over one head, 2 · 64 = 128; MLP 3 · 2048 · 4096 = 25,165,824; two norms 4,096 →
/// 35,655,808. × 30 = 1,069,674,240; tied embedding 102400 · 2048 = 209,715,200; final norm
/// 2,048.
#[test]
fn exaone4_1_2b_per_head_qk_norms() {
    let layer: u64 = 2 * 4_194_304 + 2 * 1_048_576 + 128 + 25_165_824 + 4_096;
    assert_eq!(layer, 35_655_808);
    let total = 30 * layer + 209_715_200 + 2_048;
    assert_eq!(total, 1_279_391_488);
    let m = load_counted("exaone-4.0-1.2b.json", total);
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.q_norm.weight"),
        vec![64]
    );
    // `sliding_window: null`: every layer global and with RoPE.
    for l in &m.spec.as_ref().unwrap().decoder.layers {
        assert_eq!(l.attention.sliding_window, None);
        assert!(!l.attention.nope);
    }
    // `Exaone4Attention` hard-codes bias=False.
    let biased = load_edited("exaone-4.0-1.2b.json", "attention_bias", Some(true.into()));
    assert_eq!(biased.params_total, total);
}

/// EXAONE-4.0-32B's layer shapes, cut to 4 layers and a window of 4 by TensorRT-LLM's test
/// (README; transformers: 2,983,245,824). h 5120, 40 heads of 128, 8 KV heads, MLP 27392, vocab
/// 102400, untied. Per layer: q and o 5120² = 26,214,400 each; k and v 5120 · 1024 = 5,242,880
/// each; q/k norms 2 · 128 = 256; MLP 3 · 5120 · 27392 = 420,741,120; two norms 10,240 →
/// 483,666,176. × 4 = 1,934,664,704; embedding and head 2 · 102400 · 5120 = 1,048,576,000; final
/// norm 5,120. (The 64-layer 32B: 64 · 483,666,176 + 1,048,581,120 = 32,003,216,384.)
#[test]
fn exaone4_32b_shapes_sliding_and_global_nope() {
    let layer: u64 = 2 * 26_214_400 + 2 * 5_242_880 + 256 + 420_741_120 + 10_240;
    assert_eq!(layer, 483_666_176);
    let total = 4 * layer + 1_048_576_000 + 5_120;
    assert_eq!(total, 2_983_245_824);
    let m = load("exaone-4.0-32b-4layers.json");
    assert_eq!(m.params_total, total);
    // `sliding_window_pattern` 4: layers 0–2 local (window 4, RoPE), layer 3 global and NoPE.
    let layers = &m.spec.as_ref().unwrap().decoder.layers;
    for (i, l) in layers.iter().enumerate() {
        let global = i == 3;
        assert_eq!(
            l.attention.sliding_window,
            (!global).then_some(4),
            "layer {i}"
        );
        assert_eq!(l.attention.nope, global, "layer {i}");
    }
    // The published 32B spells the pattern "LLLG": the same layers.
    let letters = load_edited(
        "exaone-4.0-32b-4layers.json",
        "sliding_window_pattern",
        Some("LLLG".into()),
    );
    let l = &letters.spec.as_ref().unwrap().decoder.layers;
    assert_eq!(l[2].attention.sliding_window, Some(4));
    assert_eq!(l[3].attention.sliding_window, None);
    assert!(l[3].attention.nope);
}
