//! Llama-3.2-Vision (`mllama`) read natively: the tower, the projector and the language model
//! with its cross-attention layers, each counted to the parameter against transformers.
//!
//! The expected counts are transformers 5.24's own, built from the fixtures on the meta device:
//! `cfg = AutoConfig.for_model(**json.load(open(path)))`; `with torch.device("meta"): m =
//! MllamaForConditionalGeneration(cfg)`; `sum(p.numel())` over `named_parameters()` (unique
//! tensors), a name under `model.vision_model.` being the tower and
//! `model.multi_modal_projector.` the projector. It printed 10,670,220,835 (tower 863,567,379,
//! projector 31,461,376, language 9,775,192,080; `embed_tokens` [128264, 4096], `lm_head`
//! [128256, 4096]) for 11B and 88,593,355,323 (projector 62,922,752, language
//! 87,666,865,192) for 90B — the model card's "11B (10.6)" and the ~88.6 B quoted for 90B.
//! The fixtures' sources are in `fixtures/vlm/README.md`.

mod common;

use common::vlm::{fixture, parts};
use vramscope_core::vision::mllama;
use vramscope_formats::model_source::load_model;

crate::parts_tests! {
    llama_3_2_11b_vision_instruct: "llama-3.2-11b-vision-instruct.json" => (10_670_220_835, 863_567_379, 31_461_376, 9_775_192_080);
    llama_3_2_90b_vision_instruct: "llama-3.2-90b-vision-instruct.json" => (88_593_355_323, 863_567_379, 62_922_752, 87_666_865_192);
}

/// The tower by hand (`MllamaVisionModel.__init__`, 1280 wide, 14 px patches, 560 px tiles,
/// 4 tiles, 8 aspect ratios + the padding id):
/// - patch_embedding 1280·3·14·14 = 752,640; class_embedding 1,280;
/// - gated_positional_embedding: gate 1, embedding 1601·1280 = 2,049,280, tile_embedding
///   9 · (4·1601·1280) = 73,774,080;
/// - pre/post tile embeddings: 2 · (9 · 4·1280 + 1 gate) = 92,162; layernorm_pre/post 2·2560;
/// - a local layer: q/k/v/o 4·1280² = 6,553,600, fc1 1280·5120 + 5120 = 6,558,720, fc2
///   5120·1280 + 1280 = 6,554,880, two LayerNorms 5,120: 19,672,320 (× 32); a global layer
///   adds gate_attn and gate_ffn: 19,672,322 (× 8).
#[test]
fn tower_by_hand() {
    let layer = 4 * 1280 * 1280 + (1280 * 5120 + 5120) + (5120 * 1280 + 1280) + 4 * 1280;
    assert_eq!(layer, 19_672_320u64);
    let tower = 1280 * 3 * 14 * 14
        + 1280
        + 1
        + 1601 * 1280
        + 9 * 4 * 1601 * 1280
        + 2 * (9 * 4 * 1280 + 1)
        + 2 * 2 * 1280
        + 32 * layer
        + 8 * (layer + 2);
    assert_eq!(tower, 863_567_379u64);
    // Projector: 7680 · 4096 + 4096.
    assert_eq!(7680 * 4096 + 4096, 31_461_376u64);
}

/// The language model as transformers names and shapes it: 8 extra embedding rows, the head
/// at the vocabulary, cross-attention layers with per-head q/k norms and two scalar gates and
/// no self-attention.
#[test]
fn language_model_tensors() {
    let m = common::vlm::counted_model("llama-3.2-11b-vision-instruct.json");
    let inv = m.inventory.as_ref().unwrap();
    let shape = |n: &str| common::shape(&m, n);
    assert_eq!(shape("model.embed_tokens.weight"), vec![128_264, 4096]);
    assert_eq!(shape("lm_head.weight"), vec![128_256, 4096]);
    assert_eq!(
        shape("model.layers.3.cross_attn.q_proj.weight"),
        vec![4096, 4096]
    );
    assert_eq!(
        shape("model.layers.3.cross_attn.k_proj.weight"),
        vec![1024, 4096]
    );
    assert_eq!(shape("model.layers.3.cross_attn.q_norm.weight"), vec![128]);
    assert_eq!(shape("model.layers.3.cross_attn_attn_gate"), vec![1]);
    assert_eq!(shape("model.layers.38.cross_attn_mlp_gate"), vec![1]);
    assert!(inv
        .tensors
        .iter()
        .all(|t| !t.name.starts_with("model.layers.3.self_attn")));
    assert_eq!(
        shape("model.layers.4.self_attn.k_proj.weight"),
        vec![1024, 4096]
    );
    let g = "model.vision_model.global_transformer.layers.7.gate_ffn";
    assert_eq!(shape(g), vec![1]);
    // transformers' tensor count on the meta device: 906.
    assert_eq!(inv.tensors.len(), 906);
    let spec = m.spec.as_ref().unwrap();
    let cross = spec
        .decoder
        .layers
        .iter()
        .filter(|l| l.attention.vision_cross);
    assert_eq!(cross.count(), 8);
}

/// One `<|image|>` token per image; the tower sees all 4 tiles (padding tiles too, as
/// `pad_batches_and_tiles` stacks them) of 1601 positions padded to 1608: 6432; the
/// cross-attention layers attend over 4 · 1601 = 6404 vision tokens per image.
#[test]
fn image_rule() {
    let m = load_model(&fixture("llama-3.2-11b-vision-instruct.json")).unwrap();
    let v = m.spec.unwrap().vision.unwrap();
    let c = v.tokens.cost(1024, 768).unwrap();
    assert_eq!((c.tokens, c.tower_images, c.tower_seq), (1, 1, 6432));
    assert_eq!(v.cross_tokens_per_image(), 6404);
    assert_eq!(v.extra_embedding_rows(), 8);
    assert!(v.tokens.cost(0, 768).is_err());
}

/// `get_optimal_tiled_canvas` by hand, 560 px tiles, at most 4:
/// - 1024×768 (w×h): canvases (rows, cols) scale = min(560r/768, 560c/1024); the upscales ≥ 1
///   are (2,2) 1.09375, (2,3)… none smaller; (2,2) → 2×2 tiles.
/// - 560×560: (1,1) scale 1 exactly → one tile.
/// - 2000×300: no upscale (height 300 → scale ≥ 1 needs only 1 row, width 2000 needs 4 cols:
///   560·4/2000 = 1.12 ≥ 1) → (1, 4).
/// - 5000×5000: all downscales; the largest is (2,2) 1120/5000 → 2×2 tiles.
#[test]
fn optimal_canvas_by_hand() {
    assert_eq!(mllama::optimal_canvas(768, 1024, 4, 560), (2, 2));
    assert_eq!(mllama::optimal_canvas(560, 560, 4, 560), (1, 1));
    assert_eq!(mllama::optimal_canvas(300, 2000, 4, 560), (1, 4));
    assert_eq!(mllama::optimal_canvas(5000, 5000, 4, 560), (2, 2));
}

/// Bad configs are one-line errors naming the field, never a panic.
#[test]
fn bad_configs_are_refused() {
    let base: serde_json::Value = common::read_json(&fixture("llama-3.2-11b-vision-instruct.json"));
    let cases: [(&str, &str, serde_json::Value, &str); 5] = [
        (
            "text_config",
            "cross_attention_layers",
            serde_json::json!([3, 40]),
            "cross_attention_layers",
        ),
        (
            "text_config",
            "cross_attention_layers",
            serde_json::json!("x"),
            "cross_attention_layers",
        ),
        (
            "vision_config",
            "intermediate_layers_indices",
            serde_json::json!([32]),
            "intermediate_layers_indices",
        ),
        (
            "vision_config",
            "max_num_tiles",
            serde_json::json!(0),
            "max_num_tiles",
        ),
        (
            "vision_config",
            "supported_aspect_ratios",
            serde_json::json!([]),
            "supported_aspect_ratios",
        ),
    ];
    for (obj, key, val, field) in cases {
        let mut c = base.clone();
        c[obj][key] = val;
        common::assert_refused(&c.to_string(), field);
    }
}

/// Property-style: any small mutation of the config's numbers either reads or is a clean
/// error — never a panic.
#[test]
fn mutated_configs_never_panic() {
    let base: serde_json::Value = common::read_json(&fixture("llama-3.2-11b-vision-instruct.json"));
    let values = [
        serde_json::json!(0),
        serde_json::json!(1),
        serde_json::json!(-1),
        serde_json::json!(1u64 << 41),
        serde_json::json!(null),
        serde_json::json!([]),
        serde_json::json!("7"),
    ];
    for obj in ["text_config", "vision_config"] {
        let keys: Vec<String> = base[obj].as_object().unwrap().keys().cloned().collect();
        for k in keys {
            for v in &values {
                let mut c = base.clone();
                c[obj][&k] = v.clone();
                let _ = vramscope_formats::hf_config::parse_config_value(&c, "config.json")
                    .map(|p| vramscope_core::inventory::build_inventory(&p.spec));
            }
        }
    }
}
