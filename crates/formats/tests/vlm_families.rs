//! The newer vision-language families read natively: Mistral 3 (Pixtral tower), SmolVLM /
//! Idefics3 (SigLIP tower, pixel-shuffle connector, image splitting) and Qwen3-VL (DeepStack
//! mergers) — each counted to the parameter against transformers, per component, and each
//! family's image tokens worked by hand from its processor's code.
//!
//! Every expected count is transformers 5.24's own, built from the fixture on the meta device:
//! `cfg = AutoConfig.for_model(**json.load(open(path)))`; `with torch.device("meta"): m =
//! AutoModelForImageTextToText.from_config(cfg)`; unique parameters summed, a name under
//! `visual.merger.` / `visual.deepstack_merger_list.` / `multi_modal_projector.` /
//! `connector.` being the projector and one under `visual.` / `vision_tower.` /
//! `vision_model.` the tower. The configs' sources are in `fixtures/vlm/README.md`.

use vramscope_core::vision::{ImageTokens, Part};
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/vlm/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// (total, vision tower, projector, language model) as the inventory counts them.
fn parts(name: &str) -> (u64, u64, u64, u64) {
    let m = load_model(&fixture(name)).unwrap();
    assert!(
        m.warnings.iter().all(|w| !w.contains("multimodal")),
        "{name}: {:?}",
        m.warnings
    );
    let inv = m.inventory.as_ref().unwrap();
    let by = inv.by_part();
    let get = |p: Part| by.get(&p).map_or(0, |t| t.params);
    (
        m.params_total,
        get(Part::Vision),
        get(Part::Projector),
        get(Part::Language),
    )
}

/// Mistral-Small-3.1-24B. The config names no top-level `tie_word_embeddings`; transformers
/// 5.24 then defaults it to true and, from the config alone, ties `lm_head` to the embeddings
/// (23,340,272,640), but the checkpoint stores both and `from_pretrained` unties them
/// ("both are present in the checkpoints with different values, so we will NOT tie them"):
/// the loaded model — and the model page's 24 B — is the untied count, built on meta with
/// `tie_word_embeddings=False`: 24,011,361,280 = 23,340,272,640 + 131,072·5,120.
/// Tower by hand: patch_conv 1024·3·14·14 = 602,112, ln_pre 1,024; a layer = 2 RMSNorms
/// 2,048 + q/k/v/o 4·1024² + SwiGLU 3·1024·4096 = 16,779,264, × 24 = 402,702,336 → 403,305,472.
/// Projector: norm 1,024 + merging_layer 4096·1024 + linear_1 1024·5120 + linear_2 5120²
/// = 35,652,608.
#[test]
fn mistral_small_3_1_24b() {
    assert_eq!(23_340_272_640 + 131_072 * 5_120, 24_011_361_280u64);
    assert_eq!(
        602_112 + 1_024 + 24 * (2_048 + 4 * 1_024 * 1_024 + 3 * 1_024 * 4_096),
        403_305_472u64
    );
    assert_eq!(
        1_024 + 4_096 * 1_024 + 1_024 * 5_120 + 5_120 * 5_120,
        35_652_608u64
    );
    assert_eq!(
        parts("mistral-small-3.1-24b-instruct.json"),
        (
            24_011_361_280,
            403_305_472,
            35_652_608,
            22_901_314_560 + 671_088_640
        )
    );
}

/// SmolVLM2-500M-Video-Instruct: a SigLIP tower of `SmolVLMVisionConfig`'s default depth (12)
/// and MLP (3072) at 768 wide, 512 px / 16 px patches (1024 position rows); the connector
/// shuffles 4×4 patches: 768·16 = 12,288 → 960, no bias = 11,796,480.
#[test]
fn smolvlm2_500m() {
    assert_eq!(12_288 * 960, 11_796_480u64);
    assert_eq!(
        parts("smolvlm2-500m-video-instruct.json"),
        (507_482_304, 86_433_024, 11_796_480, 409_252_800)
    );
}

/// Qwen3-VL-4B-Instruct (tied embeddings). Projector by hand: the merger = LayerNorm 2·1024 +
/// linear_fc1 4096² + 4096 + linear_fc2 2560·4096 + 2560 = 27,271,680; each of the 3 DeepStack
/// mergers normalises the merged width instead (2·4096): 27,277,824 → 81,833,472; together
/// 109,105,152.
#[test]
fn qwen3_vl_4b_instruct() {
    let fc = 4_096 * 4_096 + 4_096 + 2_560 * 4_096 + 2_560;
    assert_eq!(2_048 + fc + 3 * (8_192 + fc), 109_105_152u64);
    assert_eq!(
        parts("qwen3-vl-4b-instruct.json"),
        (4_437_815_808, 306_242_560, 109_105_152, 4_022_468_096)
    );
}

/// Qwen3-VL-8B-Instruct (untied; the 36 text layers restored, see the README).
#[test]
fn qwen3_vl_8b_instruct() {
    assert_eq!(
        parts("qwen3-vl-8b-instruct.json"),
        (8_767_123_696, 415_891_440, 160_496_896, 8_190_735_360)
    );
}

fn tokens(name: &str, w: u64, h: u64) -> (u64, u64, u64) {
    let m = load_model(&fixture(name)).unwrap();
    let c = m.spec.unwrap().vision.unwrap().tokens.cost(w, h).unwrap();
    (c.tokens, c.tower_images, c.tower_seq)
}

/// Image tokens by each family's processor, worked by hand.
#[test]
fn image_tokens_per_family() {
    // Mistral 3 (patch 14, merge 2: 28 px cells, longest edge 1540), 1024×768: no shrink;
    // rows (768−1)//28 + 1 = 28, cols (1024−1)//28 + 1 = 37 → (37 + 1)·28 = 1064 tokens; the
    // tower sees 56·74 = 4144 patches.
    let m3 = "mistral-small-3.1-24b-instruct.json";
    assert_eq!(tokens(m3, 1024, 768), (1064, 1, 4144));
    // 4000×3000: ratio max(3000/1540, 4000/1540) = 2.5974…; floor(3000/2.5974) = 1155,
    // floor(4000/2.5974) = 1540; rows 1154//28 + 1 = 42, cols 1539//28 + 1 = 55 →
    // 56·42 = 2352 tokens; patches 84·110 = 9240.
    assert_eq!(tokens(m3, 4000, 3000), (2352, 1, 9240));
    // SmolVLM2 (tile 512, longest 2048, 16 px patches, scale 4): seq = (512/16)²/16 = 64.
    // 1024×768 → longest side to 2048: height int(2048/(1024/768)) = 1536; rows ⌈1536/512⌉ =
    // 3, cols 4 → 12 tiles + the global image = 13 tower images of 32² = 1024 patches;
    // tokens 12·(64 + 2) + 3 + 64 + 3 = 862.
    let smol = "smolvlm2-500m-video-instruct.json";
    assert_eq!(tokens(smol, 1024, 768), (862, 13, 1024));
    // A 300×500 portrait: height to 2048, width int(2048·0.6) = 1228 (even); rows 4, cols
    // ⌈1228/512⌉ = 3 → 12 tiles, 13 tower images, but four rows (four newlines):
    // 12·66 + 4 + 67 = 863.
    assert_eq!(tokens(smol, 300, 500), (863, 13, 1024));
    // Qwen3-VL (32 px factor), 1024×768: round(768/32) = 24 → 768, round(1024/32) = 32 →
    // 1024; 786,432 px within 65,536…16,777,216; patches 48·64 = 3072, tokens 768.
    assert_eq!(tokens("qwen3-vl-4b-instruct.json", 1024, 768), (768, 1, 3072));
    // 100×100 is below min_pixels 65,536: round(100/32) = 3 → 96, 96² = 9216 < 65,536;
    // beta = √(65,536/10,000) = 2.56; ceil(100·2.56/32) = ceil(8) = 8 → 256 px square:
    // patches 16·16 = 256, tokens 64.
    assert_eq!(tokens("qwen3-vl-8b-instruct.json", 100, 100), (64, 1, 256));
}

/// SmolVLM2's own `preprocessor_config.json` (fixture, published beside its config) names the
/// same bounds the config carries (longest edge 2048, tiles of 512): tokens unchanged; a
/// smaller `size.longest_edge` (1024) makes a 1024×768 image 2 × 2 tiles: height
/// int(1024·0.75) = 768 → ⌈768/512⌉ = 2 rows, 2 cols → 4·66 + 2 + 67 = 333 tokens, 5 tower
/// images; `do_image_splitting: false` leaves one 512 px image: 64 + 3 = 67.
#[test]
fn preprocessor_config_sets_the_tiling() {
    let smol = "smolvlm2-500m-video-instruct.json";
    let mut m = load_model(&fixture(smol)).unwrap();
    let spec = m.spec.as_mut().unwrap();
    let text =
        std::fs::read_to_string(fixture("smolvlm2-500m-video-instruct.preprocessor_config.json"))
            .unwrap();
    let apply = |spec: &mut vramscope_core::model::ModelSpec, t: &str| {
        vramscope_formats::hf_config::apply_preprocessor(spec, t, "preprocessor_config.json")
    };
    apply(spec, &text).unwrap();
    let cost = |spec: &vramscope_core::model::ModelSpec| {
        let c = spec.vision.as_ref().unwrap().tokens.cost(1024, 768).unwrap();
        (c.tokens, c.tower_images)
    };
    assert_eq!(cost(spec), (862, 13));
    apply(spec, r#"{"size": {"longest_edge": 1024}}"#).unwrap();
    assert_eq!(cost(spec), (333, 5));
    apply(spec, r#"{"do_image_splitting": false}"#).unwrap();
    assert_eq!(cost(spec), (67, 1));
    assert!(matches!(
        spec.vision.as_ref().unwrap().tokens,
        ImageTokens::Idefics3 { split: false, .. }
    ));
    assert!(apply(spec, r#"{"do_image_splitting": 3}"#).is_err());
    // Mistral 3: `size.longest_edge` 1024 shrinks 4000×3000 by 3.90625: 768 × 1024 →
    // rows 767//28 + 1 = 28, cols 1023//28 + 1 = 37 → 1064 tokens.
    let mut m = load_model(&fixture("mistral-small-3.1-24b-instruct.json")).unwrap();
    let spec = m.spec.as_mut().unwrap();
    apply(spec, r#"{"size": {"longest_edge": 1024}}"#).unwrap();
    let c = spec.vision.as_ref().unwrap().tokens.cost(4000, 3000).unwrap();
    assert_eq!(c.tokens, 1064);
}

proptest::proptest! {
    /// Any image size gives a cost or a one-line error, never a panic; Mistral 3's tower
    /// patches are always a multiple of merge² and its tokens the merged cells plus one per
    /// row; SmolVLM's tower images are one or rows·cols + 1 ≥ 3.
    #[test]
    fn new_family_costs_never_panic(w in 1u64..100_000, h in 1u64..100_000) {
        for f in ["mistral-small-3.1-24b-instruct.json", "smolvlm2-500m-video-instruct.json",
                  "qwen3-vl-4b-instruct.json"] {
            let m = load_model(&fixture(f)).unwrap();
            let Ok(c) = m.spec.unwrap().vision.unwrap().tokens.cost(w, h) else { continue };
            proptest::prop_assert!(c.tokens > 0 && c.tower_seq > 0);
            if f.starts_with("mistral") {
                proptest::prop_assert_eq!(c.tower_seq % 4, 0);
                proptest::prop_assert!(c.tokens > c.tower_seq / 4);
            }
            if f.starts_with("smol") {
                proptest::prop_assert!(c.tower_images == 1 || c.tower_images >= 3);
            }
        }
    }
}
