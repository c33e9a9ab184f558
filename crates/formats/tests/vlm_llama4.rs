//! Llama 4 (`llama4`, `Llama4ForConditionalGeneration`) read natively: the vision tower with
//! its pixel-shuffle adapter, the projector and the `llama4_text` language model (interleaved
//! MoE layers with a shared expert, NoPE layers, chunked attention, the L2 q/k norm), each
//! counted to the parameter against transformers.
//!
//! The expected counts are transformers 5.24's own, built from the fixtures on the meta device
//! (`/work/main/.venv-test/bin/python`): `cfg = Llama4Config.from_dict(json.load(open(path)))`;
//! `with torch.device("meta"): m = Llama4ForConditionalGeneration(cfg)`; `sum(p.numel())` over
//! `m.parameters()`, per top-level module. It printed 108,641,793,536 for Scout
//! (`vision_model` 850,960,896, `multi_modal_projector` 20,971,520, `language_model`
//! 107,769,861,120; `lm_head` not tied to `embed_tokens`) and 401,583,781,376 for Maverick
//! (language 400,711,848,960) — the model cards' "109B" and "400B" totals. The fixtures'
//! sources are in `fixtures/vlm/README.md`.

mod common;

use common::vlm::{parts, tokens};

crate::parts_tests! {
    llama_4_scout: "llama-4-scout-17b-16e.json" => (108_641_793_536, 850_960_896, 20_971_520, 107_769_861_120);
    /// Maverick: MoE on every second layer (`interleave_moe_layer_step` 2: layers 1, 3, …, 47),
    /// 128 experts; the other 24 layers dense MLPs of `intermediate_size_mlp` 16384.
    llama_4_maverick: "llama-4-maverick-17b-128e.json" => (401_583_781_376, 850_960_896, 20_971_520, 400_711_848_960);
}

/// The tower by hand (`Llama4VisionModel.__init__`, 1408 wide, 34 layers, 14 px patches,
/// 336 px tiles, MLP 5632, adapter 5632 → 4096 → 4096):
/// - `patch_embedding.linear` 3·14·14·1408 = 827,904; `class_embedding` 1,408;
///   `positional_embedding_vlm` ((336/14)² + 1)·1408 = 577·1408 = 812,416;
///   `layernorm_pre`/`_post` 4·1408 = 5,632;
/// - a layer: q/k/v/o 4·(1408² + 1408) = 7,935,488, fc1 1408·5632 + 5632 = 7,935,488, fc2
///   5632·1408 + 1408 = 7,931,264, two LayerNorms 5,632: 23,807,872 (× 34 = 809,467,648);
/// - `vision_adapter.mlp.fc1` 5632·4096 = 23,068,672, `fc2` 4096² = 16,777,216.
///
/// Projector `linear_1`: 4096·5120 = 20,971,520.
#[test]
fn tower_by_hand() {
    let layer: u64 =
        4 * (1408 * 1408 + 1408) + (1408 * 5632 + 5632) + (5632 * 1408 + 1408) + 4 * 1408;
    assert_eq!(layer, 23_807_872);
    let tower =
        3 * 14 * 14 * 1408 + 1408 + 577 * 1408 + 4 * 1408 + 34 * layer + 5632 * 4096 + 4096 * 4096;
    assert_eq!(tower, 850_960_896);
    assert_eq!(4096 * 5120, 20_971_520u64);
}

/// Scout's language model by hand (48 layers, all MoE: `interleave_moe_layer_step` 1):
/// - embeddings and the untied head: 2 · 202,048 · 5120 = 2,068,971,520;
/// - attention per layer: q 5120·5120, k and v 5120·1024 each, o 5120·5120 = 62,914,560;
/// - MoE per layer: router 16·5120 = 81,920, experts `gate_up_proj` 16·5120·16384 +
///   `down_proj` 16·8192·5120 = 2,013,265,920, shared expert 3·5120·8192 = 125,829,120;
/// - two RMSNorms 10,240 per layer and the final norm 5,120.
///
/// 48 · (62,914,560 + 81,920 + 2,013,265,920 + 125,829,120 + 10,240) = 105,700,884,480;
/// + 2,068,971,520 + 5,120 = 107,769,861,120.
#[test]
fn scout_language_by_hand() {
    let layer: u64 = 2 * 5120 * 5120
        + 2 * 5120 * 1024
        + 16 * 5120
        + 16 * 5120 * 2 * 8192
        + 16 * 8192 * 5120
        + 3 * 5120 * 8192
        + 2 * 5120;
    assert_eq!(48 * layer + 2 * 202_048 * 5120 + 5120, 107_769_861_120);
}

/// The tensors as transformers names and shapes them, the layers' attention as the text
/// config sets it: every fourth layer NoPE without chunking or the L2 norm.
#[test]
fn tensors_and_layers() {
    let m = common::vlm::counted_model("llama-4-scout-17b-16e.json");
    let shape = |n: &str| common::shape(&m, n);
    assert_eq!(
        shape("vision_model.patch_embedding.linear.weight"),
        vec![1408, 588]
    );
    assert_eq!(
        shape("vision_model.positional_embedding_vlm"),
        vec![577, 1408]
    );
    assert_eq!(
        shape("vision_model.model.layers.33.self_attn.o_proj.bias"),
        vec![1408]
    );
    assert_eq!(
        shape("vision_model.vision_adapter.mlp.fc1.weight"),
        vec![4096, 5632]
    );
    assert_eq!(
        shape("multi_modal_projector.linear_1.weight"),
        vec![5120, 4096]
    );
    let spec = m.spec.as_ref().unwrap();
    let layers = &spec.decoder.layers;
    assert_eq!(layers.len(), 48);
    for (i, l) in layers.iter().enumerate() {
        let nope = (i + 1) % 4 == 0;
        assert_eq!(l.attention.nope, nope, "layer {i}");
        assert_eq!(l.attention.qk_l2_norm, !nope, "layer {i}");
        let chunk = if nope { None } else { Some(8192) };
        assert_eq!(l.attention.attention_chunk, chunk, "layer {i}");
    }
}

/// Image tokens as `Llama4ImageProcessor` and `Llama4Processor` make them (336 px tiles,
/// 14 px patches, ratio 0.5: 24² / 4 = 144 tokens a tile; 577 tower positions a tile):
/// - 336 × 336 fits one tile: `<|image_start|>`, `<|image|>`, 144, `<|image_end|>` = 147, one
///   tower image, no global tile;
/// - 1000 wide × 700 high: canvases of ≤ 16 tiles; the smallest upscale ≥ 1 is 672/700 < 1 for
///   2 rows, so rows = 3 (1008 ≥ 700, scale 1.44) needs 1008 / 1000 ≥ 1 wide: 3 columns, scale
///   min(1008/700, 1008/1000) = 1.008; 3 × 3 = 9 tiles + the global tile = 10 tower images;
///   tokens 1 + 9·144 + 3·2 x-separators + 3 y-separators + 1 + 144 + 1 = 1452.
#[test]
fn image_tokens() {
    let name = "llama-4-scout-17b-16e.json";
    assert_eq!(tokens(name, 336, 336), (147, 1, 577));
    assert_eq!(tokens(name, 1000, 700), (1452, 10, 577));
}
