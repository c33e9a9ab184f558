//! LLaVA-OneVision (`llava_onevision`) and Pixtral-12B (`llava` over a `pixtral` tower): each
//! counted to the parameter against transformers, per component, and each image-token rule
//! worked by hand from the processor's code.
//!
//! Every expected count is transformers 5.24's own, built from the fixture on the meta device:
//! `cfg = AutoConfig.for_model(**json.load(open(path)))`; `with torch.device("meta"): m =
//! AutoModelForImageTextToText.from_config(cfg)`; unique parameters summed, a name under
//! `multi_modal_projector.` or `image_newline` being the projector and one under
//! `vision_tower.` the tower. The fixtures' sources are in `fixtures/vlm/README.md`.

mod common;

use common::vlm::{self, fixture};
use vramscope_formats::model_source::load_model;

/// (total, vision tower, projector, language model) as the inventory counts them, the config
/// at `path` read without a warning.
fn parts(path: &str) -> (u64, u64, u64, u64) {
    let m = load_model(path).unwrap();
    assert!(m.warnings.is_empty(), "{path}: {:?}", m.warnings);
    vlm::parts_of(&m)
}

/// (tokens, tower images, tower sequence) of `count` `w × h` images in one sequence.
fn tokens(name: &str, count: u64, w: u64, h: u64) -> (u64, u64, u64) {
    let spec = vlm::model(name).spec.expect("a spec");
    let c = spec
        .vision
        .expect("a vision tower")
        .tokens
        .cost_for(count, w, h);
    let c = c.unwrap();
    (c.tokens, c.tower_images, c.tower_seq)
}

/// The SO400M tower by hand: patch embedding 1152·3·14·14 + 1152 = 678,528; 729 position rows
/// · 1152 = 839,808; a layer = two LayerNorms 4·1152 + q/k/v/out 4·(1152² + 1152) + MLP
/// 1152·4304 + 4304 + 4304·1152 + 1152 = 15,239,504, × 26 = 396,227,104; post_layernorm 2,304:
/// 397,747,744. Projector: linear_1 1152·896 + 896, linear_2 896² + 896, image_newline 896 =
/// 1,837,696. Qwen2-0.5B (tied): 494,032,768. transformers: 893,618,208 (the page's 894M).
#[test]
fn llava_onevision_qwen2_0_5b() {
    assert_eq!(678_528 + 839_808 + 26 * 15_239_504 + 2_304, 397_747_744u64);
    assert_eq!(1_152 * 896 + 896 + 896 * 896 + 896 + 896, 1_837_696u64);
    assert_eq!(
        parts(&fixture("llava-onevision-qwen2-0.5b-ov-hf.json")),
        (893_618_208, 397_747_744, 1_837_696, 494_032_768)
    );
}

/// The 7B: the same tower; projector 1152·3584 + 3584 + 3584² + 3584 + 3584 = 16,984,576;
/// Qwen2-7B untied 7,615,616,512. transformers: 8,030,348,832 (the page's 8.03B).
#[test]
fn llava_onevision_qwen2_7b() {
    assert_eq!(
        1_152 * 3_584 + 3_584 + 3_584 * 3_584 + 3_584 + 3_584,
        16_984_576u64
    );
    assert_eq!(
        parts(&fixture("llava-onevision-qwen2-7b-ov-hf.json")),
        (8_030_348_832, 397_747_744, 16_984_576, 7_615_616_512)
    );
}

/// A `vision_config` without `vision_use_head` gets `SiglipVisionConfig`'s default (true) and
/// transformers builds the attention-pooling head: probe 1152, `in_proj` 3·1152² + 3·1152,
/// `out_proj` 1152² + 1152, LayerNorm 2,304, MLP 9,921,872 = 15,238,352 more in the tower
/// (transformers: 908,856,560 in all).
#[test]
fn siglip_pooling_head_when_the_config_leaves_it_on() {
    let text = std::fs::read_to_string(fixture("llava-onevision-qwen2-0.5b-ov-hf.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["vision_config"]
        .as_object_mut()
        .unwrap()
        .remove("vision_use_head");
    let dir = common::TempDir::new("ov-head");
    let path = dir.write("config.json", v.to_string().as_bytes());
    let head = 1_152 + 3 * 1_152 * 1_152 + 3 * 1_152 + 1_152 * 1_152 + 1_152 + 2_304 + 9_921_872;
    assert_eq!(head, 15_238_352u64);
    assert_eq!(
        parts(path.to_str().unwrap()),
        (
            908_856_560,
            397_747_744 + 15_238_352,
            1_837_696,
            494_032_768
        )
    );
}

/// Pixtral-12B by hand: tower patch_conv 1024·3·16·16 = 786,432, ln_pre 1,024, a layer 2,048 +
/// 4·1024² + 3·1024·4096 = 16,779,264 × 24: 403,489,792; the LLaVA projector (no patch
/// merger) 1024·5120 + 5120 + 5120² + 5120 = 31,467,520; Mistral-NeMo 12,247,782,400.
/// transformers: 12,682,739,712 (the page's 12.7B).
#[test]
fn pixtral_12b() {
    assert_eq!(
        786_432 + 1_024 + 24 * (2_048 + 4 * 1_024 * 1_024 + 3 * 1_024 * 4_096),
        403_489_792u64
    );
    assert_eq!(
        parts(&fixture("pixtral-12b.json")),
        (12_682_739_712, 403_489_792, 31_467_520, 12_247_782_400)
    );
}

/// LLaVA-OneVision's tokens by hand from `processing_llava_onevision.py`
/// (`_get_number_of_features`, `_get_unpadded_features`, 384 px tiles, side 27, 729 base tokens),
/// each also printed by that code in transformers 5.24:
///
/// - 1024 × 768 (w × h): `select_best_resolution` picks (768, 1152): scale min(1152/1024,
///   768/768) = 1 keeps all 786,432 px with the least waste; grid 2 × 3 → map 54 × 81. The
///   image (4:3) is narrower than the map (3:2): new width int(1024 · 54/768) = 72, padding
///   (81 − 72) // 2 = 4, width 81 − 8 = 73. ratio sqrt(54·73 / (9·729)) = 0.78 ≤ 1.1: kept.
///   54·73 + 54 newlines + 729 = 4725 tokens; the tower sees 1 + 6 crops of 729 patches.
/// - 4000 × 3000: (1920, 2304), grid 5 × 6 → map 135 × 162; the image (4:3) is wider than the
///   map (6:5): new height int(3000 · 162/4000) = 121, padding 7, height 121. ratio
///   sqrt(121·162 / 6561) = 1.7285 > 1.1: bilinear to int(121 // 1.7285) = 70 by
///   int(162 // 1.7285) = 93: 70·93 + 70 + 729 = 7309 tokens; 1 + 30 crops.
/// - two images in one sequence are not tiled: 729 + 1 newline each, one crop each.
#[test]
fn onevision_image_tokens_by_hand() {
    assert_eq!(54 * 73 + 54 + 729, 4_725);
    assert_eq!(70 * 93 + 70 + 729, 7_309);
    let f = "llava-onevision-qwen2-0.5b-ov-hf.json";
    assert_eq!(tokens(f, 1, 1024, 768), (4_725, 7, 729));
    assert_eq!(tokens(f, 1, 4000, 3000), (7_309, 31, 729));
    assert_eq!(tokens(f, 2, 1024, 768), (730, 1, 729));
}

/// Pixtral-12B's tokens (`image_processing_pixtral.py` with 16 px cells, `processing_pixtral.py`):
/// 1024 × 768 fits the 1024 px longest edge, 64 × 48 cells → 48 rows of 64 `[IMG]` and one
/// `[IMG_BREAK]`/`[IMG_END]`: 48 · 65 = 3120 tokens, 3072 tower patches. 2048 × 512 is shrunk
/// by 2 to 1024 × 256: 16 rows · 65 = 1040 tokens, 1024 patches.
#[test]
fn pixtral_12b_image_tokens_by_hand() {
    assert_eq!(tokens("pixtral-12b.json", 1, 1024, 768), (3_120, 1, 3_072));
    assert_eq!(tokens("pixtral-12b.json", 1, 2048, 512), (1_040, 1, 1_024));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Any image size gives an answer or a one-line error, never a panic, for both families.
    #[test]
    fn costs_never_panic(w in 1u64..200_000, h in 1u64..200_000, n in 1u64..5) {
        for f in ["llava-onevision-qwen2-0.5b-ov-hf.json", "pixtral-12b.json"] {
            let m = load_model(&fixture(f)).unwrap();
            if let Ok(c) = m.spec.unwrap().vision.unwrap().tokens.cost_for(n, w, h) {
                proptest::prop_assert!(c.tokens > 0 && c.tower_images > 0);
            }
        }
    }
}

/// Qwen3-VL-MoE (`qwen3_vl_moe`): Qwen3-VL's tower and mergers over a Qwen3-MoE language model
/// (`modeling_qwen3_vl_moe.py`: routed experts with fused `gate_up_proj`, no shared expert). A
/// tiny config written for this test (`fixtures/vlm/tiny-qwen3-vl-moe.json`); transformers:
/// 920,128 = tower 169,408 + mergers 198,016 + language 552,704. By hand: language
/// embeddings and head 2 · 1000 · 128, final norm 128, a layer = q 128·128 + k, v 2 · 128·64 +
/// o 128·128 + q/k norms 2 · 32 + two norms 2 · 128 + router 4 · 128 + experts 4 · 2·64 · 128 +
/// 4 · 128 · 64 = 148,288; tower: patch 64·3·2·16·16 + 64, positions 64·64, a block 2 · 128 +
/// qkv 64·192 + 192 + proj 64·64 + 64 + fc1 64·128 + 128 + fc2 128·64 + 64 = 33,472; mergers
/// (merged width 256): norm 128 + 256² + 256 + 256·128 + 128, DeepStack norm 512 + the same.
#[test]
fn tiny_qwen3_vl_moe() {
    assert_eq!(
        2 * 128_000 + 128 + 2 * (16_384 + 2 * 8_192 + 16_384 + 64 + 256 + 512 + 65_536 + 32_768),
        552_704u64
    );
    assert_eq!(98_368 + 4_096 + 2 * 33_472, 169_408u64);
    assert_eq!(128 + 65_792 + 32_896 + 512 + 65_792 + 32_896, 198_016u64);
    assert_eq!(
        parts(&fixture("tiny-qwen3-vl-moe.json")),
        (920_128, 169_408, 198_016, 552_704)
    );
}
