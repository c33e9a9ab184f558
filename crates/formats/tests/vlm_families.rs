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

mod common;

use common::vlm::{self, fixture, tokens};
use vramscope_core::vision::ImageTokens;
use vramscope_formats::model_source::load_model;

/// (total, vision tower, projector, language model) as the inventory counts them, the model
/// read without a warning about a multimodal part left uncounted.
fn parts(name: &str) -> (u64, u64, u64, u64) {
    vlm::parts_of(&vlm::counted_model(name))
}

/// The counts of the rows below by hand.
/// - Mistral-Small-3.1-24B. The config names no top-level `tie_word_embeddings`; transformers
///   5.24 then defaults it to true and, from the config alone, ties `lm_head` to the embeddings
///   (23,340,272,640), but the checkpoint stores both and `from_pretrained` unties them ("both
///   are present in the checkpoints with different values, so we will NOT tie them"): the
///   loaded model — and the model page's 24 B — is the untied count, built on meta with
///   `tie_word_embeddings=False`: 24,011,361,280 = 23,340,272,640 + 131,072·5,120 (language
///   22,901,314,560 + 671,088,640). Tower: patch_conv 1024·3·14·14 = 602,112, ln_pre 1,024; a
///   layer = 2 RMSNorms 2,048 + q/k/v/o 4·1024² + SwiGLU 3·1024·4096 = 16,779,264, × 24 =
///   402,702,336 → 403,305,472. Projector: norm 1,024 + merging_layer 4096·1024 + linear_1
///   1024·5120 + linear_2 5120² = 35,652,608.
/// - SmolVLM2-500M-Video-Instruct: a SigLIP tower of `SmolVLMVisionConfig`'s default depth
///   (12) and MLP (3072) at 768 wide, 512 px / 16 px patches (1024 position rows); the
///   connector shuffles 4×4 patches: 768·16 = 12,288 → 960, no bias = 11,796,480.
/// - Qwen3-VL-4B-Instruct (tied embeddings). Projector: the merger = LayerNorm 2·1024 +
///   linear_fc1 4096² + 4096 + linear_fc2 2560·4096 + 2560 = 27,271,680; each of the 3
///   DeepStack mergers normalises the merged width instead (2·4096): 27,277,824 → 81,833,472;
///   together 109,105,152.
#[test]
fn counts_by_hand() {
    assert_eq!(23_340_272_640 + 131_072 * 5_120, 24_011_361_280u64);
    assert_eq!(
        602_112 + 1_024 + 24 * (2_048 + 4 * 1_024 * 1_024 + 3 * 1_024 * 4_096),
        403_305_472u64
    );
    assert_eq!(
        1_024 + 4_096 * 1_024 + 1_024 * 5_120 + 5_120 * 5_120,
        35_652_608u64
    );
    assert_eq!(12_288 * 960, 11_796_480u64);
    let fc = 4_096 * 4_096 + 4_096 + 2_560 * 4_096 + 2_560;
    assert_eq!(2_048 + fc + 3 * (8_192 + fc), 109_105_152u64);
}

crate::parts_tests! {
    mistral_small_3_1_24b: "mistral-small-3.1-24b-instruct.json" => (24_011_361_280, 403_305_472, 35_652_608, 22_901_314_560 + 671_088_640);
    smolvlm2_500m: "smolvlm2-500m-video-instruct.json" => (507_482_304, 86_433_024, 11_796_480, 409_252_800);
    qwen3_vl_4b_instruct: "qwen3-vl-4b-instruct.json" => (4_437_815_808, 306_242_560, 109_105_152, 4_022_468_096);
    /// Qwen3-VL-8B-Instruct (untied; the 36 text layers restored, see the README).
    qwen3_vl_8b_instruct: "qwen3-vl-8b-instruct.json" => (8_767_123_696, 415_891_440, 160_496_896, 8_190_735_360);
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
    assert_eq!(
        tokens("qwen3-vl-4b-instruct.json", 1024, 768),
        (768, 1, 3072)
    );
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
    let text = std::fs::read_to_string(fixture(
        "smolvlm2-500m-video-instruct.preprocessor_config.json",
    ))
    .unwrap();
    let apply = |spec: &mut vramscope_core::model::ModelSpec, t: &str| {
        vramscope_formats::hf_config::apply_preprocessor(spec, t, "preprocessor_config.json")
    };
    apply(spec, &text).unwrap();
    let cost = |spec: &vramscope_core::model::ModelSpec| {
        let c = vlm::cost(spec, 1024, 768);
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
    let c = vlm::cost(spec, 4000, 3000);
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

/// `idefics3` (Idefics3-8B's family) on a tiny config written for this test, inline:
/// transformers 5.24 counts 246,752 = tower 36,512 + connector 8,192 + language 202,048 (the
/// command in the header, on this JSON). Tower by hand: patch embedding 32·3·14·14 + 32 =
/// 18,848, positions (56/14)² = 16 rows · 32 = 512; a layer = norms 4·32 + q/k/v/out 4·(32² +
/// 32) + fc1 64·32 + 64 + fc2 32·64 + 32 = 8,544, × 2 = 17,088; post_layernorm 64 → 36,512.
/// Connector: 2×2 shuffle, 32·4 = 128 → 64 without bias = 8,192. Tokens: tiles of 56 px,
/// longest edge 4·56 = 224 (the processor's default ratio), seq (56/14)²/2² = 4: a 112×28
/// image (w×h) → 224 × 56 → 1 row × 4 cols → 4·(4 + 2) + 1 + 4 + 3 = 32 tokens, 5 tower images.
#[test]
fn tiny_idefics3() {
    let text = r#"{"model_type": "idefics3", "architectures": ["Idefics3ForConditionalGeneration"],
        "scale_factor": 2, "vision_config": {"hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "image_size": 56, "patch_size": 14},
        "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 1000}}"#;
    assert_eq!(18_848 + 512 + 2 * 8_544 + 64, 36_512u64);
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let m = vramscope_formats::model_source::load_inline_config(&v).unwrap();
    assert_eq!(vlm::parts_of(&m), (246_752, 36_512, 8_192, 202_048));
    let c = vlm::cost(m.spec.as_ref().unwrap(), 112, 28);
    assert_eq!((c.tokens, c.tower_images, c.tower_seq), (32, 5, 16));
}

fn resolve(
    name: &str,
    job: serde_json::Value,
) -> (
    vramscope_core::estimate::ModelInput,
    vramscope_core::job::ResolvedJob,
) {
    let m = load_model(&fixture(name)).unwrap();
    let max = m.spec.as_ref().unwrap().max_position_embeddings;
    let job: vramscope_core::job::Job = serde_json::from_value(job).unwrap();
    (m.into_input(), job.resolve(max).unwrap())
}

/// The images' tokens lengthen the sequence by each family's rule (worked in
/// `image_tokens_per_family`): two 1024×768 images on Mistral 3 add 2·1064 to seq 512 → 2640;
/// `freeze: ["vision"]` on Qwen3-VL-4B leaves 4,437,815,808 − 306,242,560 = 4,131,573,248
/// trainable (transformers' counts, above), and a frozen tower saves nothing, so the
/// trained one keeps more.
#[test]
fn images_and_freezing_in_the_step() {
    let (input, job) = resolve(
        "mistral-small-3.1-24b-instruct.json",
        serde_json::json!({"task": "infer", "seq": 512,
            "images": {"count": 2, "width": 1024, "height": 768}}),
    );
    let r = vramscope_core::estimate::estimate(&input, &job).unwrap();
    assert_eq!((r.job.seq, r.job.image_tokens), (2_640, 2_128));
    let step = |freeze: serde_json::Value| {
        let (input, job) = resolve(
            "qwen3-vl-4b-instruct.json",
            serde_json::json!({"seq": 256, "precision": "bf16", "freeze": freeze,
                "images": {"count": 1, "width": 512, "height": 512}}),
        );
        vramscope_core::estimate::estimate(&input, &job).unwrap()
    };
    let (full, frozen) = (
        step(serde_json::json!([])),
        step(serde_json::json!(["vision"])),
    );
    assert_eq!(frozen.model.params_trainable, 4_131_573_248);
    // What the embeddings stage (the tower and projector run there) keeps for backward.
    let kept = |r: &vramscope_core::report::Report| {
        let spec = load_model(&fixture("qwen3-vl-4b-instruct.json"))
            .unwrap()
            .spec
            .unwrap();
        let f = vramscope_core::estimate::activations::forward;
        f(&spec, &r.job, &mut Vec::new()).unwrap().embedding.kept
    };
    // A trained tower keeps at least each of its 24 blocks' input: 512×512 px → 32·32 = 1024
    // patches × 1024 wide × 2 B = 2 MiB per block.
    assert!(kept(&full) >= kept(&frozen) + 24 * 1024 * 1024 * 2);
}

/// `fit` answers "how many images of this size fit at this context" for a new family: for
/// Qwen3-VL-8B with LoRA at seq 1024 on an H100, the answer n is checked against the
/// estimator itself — n 1024×768 images per sequence fit the GPU, n + 1 do not.
#[test]
fn fit_answers_max_images_for_qwen3_vl() {
    let base = serde_json::json!({"seq": 1024, "gpu": "h100-80gb",
        "peft": {"method": "lora", "rank": 16},
        "images": {"count": 1, "width": 1024, "height": 768}});
    let (input, job) = resolve("qwen3-vl-8b-instruct.json", base.clone());
    let answer = vramscope_core::fit::fit(&input, &job).unwrap();
    let n = answer.max_images.flatten().unwrap();
    assert!(n >= 1);
    let fits = |count: u64| {
        let mut j = base.clone();
        j["images"]["count"] = count.into();
        let (input, job) = resolve("qwen3-vl-8b-instruct.json", j);
        let r = vramscope_core::estimate::estimate(&input, &job).unwrap();
        r.fit.unwrap().fits
    };
    assert!(fits(n), "{n} images");
    assert!(!fits(n + 1), "{} images", n + 1);
}

/// InternVL (`internvl`): the real InternViT-300M `vision_config` that OpenGVLab's
/// conversion to the transformers format writes into every InternVL 3 / 3.5 checkpoint below
/// 38 B (`vit_300m_config`, source in the README), with a tiny Qwen2 text model written for
/// this test. transformers 5.24 counts 304,489,152 = tower 304,012,288 + projector 274,560 +
/// language 202,304. Tower by hand: cls 1,024 + positions 1,025·1,024 + patch conv
/// 1,024·3·14·14 + 1,024 = 1,653,760; a layer = λ₁, λ₂ 2,048 + q/k/v/projection 4·(1,024² +
/// 1,024) + fc1 4,096·1,024 + 4,096 + fc2 1,024·4,096 + 1,024 + 2 LayerNorms 4,096 =
/// 12,598,272, × 24 → 304,012,288 (InternViT-300M). Projector: LayerNorm 2·4,096 + linear_1
/// 4,096·64 + 64 + linear_2 64·64 + 64 = 274,560.
#[test]
fn internvl_vit_300m() {
    let layer = 2_048 + 4 * (1_024 * 1_024 + 1_024) + 4_096 * 1_024 + 4_096 + 1_024 * 4_096;
    assert_eq!(
        1_024 + 1_025 * 1_024 + 1_024 * 3 * 196 + 1_024 + 24 * (layer + 1_024 + 4_096),
        304_012_288u64
    );
    assert_eq!(
        parts("internvl-vit300m-tiny-text.json"),
        (304_489_152, 304_012_288, 274_560, 202_304)
    );
    // Tiles (`get_optimal_tiled_canvas`, checked with transformers'
    // `GotOcr2ImageProcessorPil.get_number_of_image_patches`: 13, 1, 10): 1024×768 has the
    // aspect ratio of the 4 × 3 grid exactly → 12 tiles + thumbnail, 2 + 256·13 = 3330 tokens;
    // 448×448 stays one tile (the 2 × 2 grid ties at ratio 1 but 448² is not more than half
    // its 4·448² area): 258; 1000×1000 goes to 2 × 2 (10⁶ > 401,408) then 3 × 3 (10⁶ >
    // 903,168) → 9 + 1 tiles, 2562 tokens. Each tile: (448/14)² + class token = 1025.
    let t = "internvl-vit300m-tiny-text.json";
    assert_eq!(tokens(t, 1024, 768), (3_330, 13, 1_025));
    assert_eq!(tokens(t, 448, 448), (258, 1, 1_025));
    assert_eq!(tokens(t, 1000, 1000), (2_562, 10, 1_025));
    // The repo's preprocessor config sets the grid: with `max_patches` 4, 1024×768 (ratio
    // 1.333) meets 1 × 1 first (off by 0.333), no closer grid of ≤ 4 tiles, then 2 × 2 ties
    // at 0.333 and wins as 786,432 > 0.5·448²·4 = 401,408 → 4 tiles + thumbnail, 2 + 256·5 =
    // 1282 tokens (transformers: 5 patches).
    let mut m = load_model(&fixture(t)).unwrap();
    let spec = m.spec.as_mut().unwrap();
    vramscope_formats::hf_config::apply_preprocessor(spec, r#"{"max_patches": 4}"#, "p.json")
        .unwrap();
    let c = vlm::cost(spec, 1024, 768);
    assert_eq!((c.tokens, c.tower_images), (1_282, 5));
}

proptest::proptest! {
    /// Any preprocessor config the new families may meet — the keys they read with any JSON
    /// value, or any text — is applied or refused with an error, never a panic, and a cost
    /// after it is a cost or an error (InternVL's grid search stays bounded).
    #[test]
    fn preprocessor_configs_never_panic(
        key in proptest::sample::select(vec!["size", "max_image_size", "do_image_splitting",
            "min_patches", "max_patches", "crop_to_patches", "min_pixels", "max_pixels"]),
        n in proptest::option::of(0u64..1_000_000_000),
        inner in proptest::sample::select(vec!["longest_edge", "shortest_edge", "height"]),
        text in ".{0,32}",
        w in 1u64..50_000,
        h in 1u64..50_000,
    ) {
        let value = match n {
            Some(n) => format!(r#"{{"{key}": {{"{inner}": {n}}}, "{inner}": {n}, "x": {n}}}"#),
            None => format!(r#"{{"{key}": {text:?}}}"#),
        };
        let flat = n.map(|n| format!(r#"{{"{key}": {n}}}"#)).unwrap_or_default();
        for f in ["mistral-small-3.1-24b-instruct.json", "smolvlm2-500m-video-instruct.json",
                  "qwen3-vl-4b-instruct.json", "internvl-vit300m-tiny-text.json"] {
            let mut m = load_model(&fixture(f)).unwrap();
            let spec = m.spec.as_mut().unwrap();
            for t in [&value, &flat, &text] {
                let _ = vramscope_formats::hf_config::apply_preprocessor(spec, t, "p.json");
                let _ = spec.vision.as_ref().unwrap().tokens.cost(w, h);
            }
        }
    }
}
