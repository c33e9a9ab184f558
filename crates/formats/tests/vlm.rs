//! Vision-language models read natively: the vision tower, the projector and the language
//! model as components, each counted to the parameter against transformers, and the image
//! tokens each family's processor makes.
//!
//! Every expected count below is transformers 5.24's own: the model built from the fixture's
//! config on the meta device and its unique parameters summed per component —
//! `cfg = AutoConfig.for_model(**json.load(open(path)))`; `with torch.device("meta"): m =
//! AutoModelForImageTextToText.from_config(cfg)`; `sum(p.numel())` over `named_parameters()`
//! (tied tensors once), a name under `visual.merger.` / `multi_modal_projector.` /
//! `image_newline` being the projector and one under `visual.` / `vision_tower.` the tower.
//! The totals agree with the model pages (Qwen2.5-VL-7B 8.29 B, Qwen2.5-VL-3B 3.75 B,
//! LLaVA-1.5-7B 7.06 B, LLaVA-NeXT-Mistral-7B 7.57 B, Gemma-3-4B 4.3 B). The configs' sources
//! are in `fixtures/vlm/README.md`.

mod common;

use common::vlm::{fixture, parts, tokens};
use vramscope_core::vision::{ImageTokens, Part};
use vramscope_formats::model_source::load_model;

/// The projectors by hand (the counts in the rows below):
/// - Qwen2.5-VL-7B: ln_q 1280 (RMSNorm) + mlp.0 5120·5120 + 5120 + mlp.2 3584·5120 + 3584
///   = 1,280 + 26,219,520 + 18,353,664 = 44,574,464;
/// - LLaVA-1.5-7B: linear_1 1024·4096 + 4096, linear_2 4096·4096 + 4096 = 20,979,712;
///   LLaVA-NeXT-Mistral-7B adds `image_newline` (4096): 20,979,712 + 4,096 = 20,983,808;
/// - Gemma-3-4B: mm_input_projection_weight 1152·2560 + mm_soft_emb_norm 1152.
#[test]
fn projectors_by_hand() {
    assert_eq!(
        1_280 + 5_120 * 5_120 + 5_120 + 3_584 * 5_120 + 3_584,
        44_574_464u64
    );
    assert_eq!(1_024 * 4_096 + 4_096 + 4_096 * 4_096 + 4_096, 20_979_712u64);
    assert_eq!(20_979_712 + 4_096, 20_983_808u64);
    assert_eq!(1_152 * 2_560 + 1_152, 2_950_272u64);
}

crate::parts_tests! {
    qwen2_5_vl_7b_instruct: "qwen2.5-vl-7b-instruct.json" => (8_292_166_656, 631_975_680, 44_574_464, 7_615_616_512);
    qwen2_5_vl_3b_instruct: "qwen2.5-vl-3b-instruct.json" => (3_754_622_976, 631_975_680, 36_708_608, 3_085_938_688);
    llava_1_5_7b: "llava-1.5-7b-hf.json" => (7_063_427_072, 303_507_456, 20_979_712, 6_738_939_904);
    llava_v1_6_mistral_7b: "llava-v1.6-mistral-7b-hf.json" => (7_566_747_648, 303_507_456, 20_983_808, 7_242_256_384);
    gemma_3_4b_it: "gemma-3-4b-it.json" => (4_300_079_472, 416_866_032, 2_950_272, 3_880_263_168);
}

#[test]
fn vlm_configs_read_without_warnings_about_uncounted_parts() {
    for f in [
        "qwen2.5-vl-7b-instruct.json",
        "qwen2.5-vl-3b-instruct.json",
        "llava-1.5-7b-hf.json",
        "llava-v1.6-mistral-7b-hf.json",
        "gemma-3-4b-it.json",
    ] {
        let m = common::vlm::counted_model(f);
        assert!(m.spec.as_ref().unwrap().vision.is_some(), "{f}");
    }
}

/// Image tokens by each family's processor rule, worked by hand: (config, width, height) →
/// (tokens, tower images, patches per tower image).
#[test]
fn image_tokens_per_family() {
    let rows = [
        // Qwen2.5-VL, 1024×768 (factor 28): round(768/28)=27 → 756, round(1024/28)=37 → 1036;
        // 756·1036 = 783,216 ≤ max_pixels 1,003,520; patches (756/14)·(1036/14) = 54·74 = 3996;
        // tokens 3996 / 4 = 999.
        ("qwen2.5-vl-7b-instruct.json", 1024, 768, (999, 1, 3996)),
        // 4000×3000 exceeds max_pixels: beta = √(12,000,000 / 1,003,520) = 3.45804…;
        // h = floor(3000/β/28)·28 = floor(30.98)·28 = 840, w = floor(4000/β/28)·28 =
        // floor(41.31)·28 = 1148; patches 60·82 = 4920, tokens 1230.
        ("qwen2.5-vl-7b-instruct.json", 4000, 3000, (1230, 1, 4920)),
        // LLaVA-1.5: any image resized to 336: (336/14)² = 576 tokens; the tower sees 577 with
        // CLIP's class token.
        ("llava-1.5-7b-hf.json", 1024, 768, (576, 1, 577)),
        // Gemma 3: 896 px → (896/14)² = 4096 patches pooled to 256 tokens.
        ("gemma-3-4b-it.json", 640, 480, (256, 1, 4096)),
        // LLaVA-NeXT, 672×672: best pinpoint (672, 672), 2×2 tiles + the base image = 5 tower
        // images; grid 48×48 with no padding: 48·48 + 48 newlines + 576 base = 2928.
        ("llava-v1.6-mistral-7b-hf.json", 672, 672, (2928, 5, 577)),
        // LLaVA-NeXT, 800×600 (w×h). Each pinpoint (h, w) keeps min(800·600, the downscaled
        // area): (336, 672) scale min(672/800, 336/600) = 0.56 → 448·336 = 150,528; (672, 336)
        // 0.42 → 336·252 = 84,672; (672, 672) 0.84 → 672·504 = 338,688; (1008, 336) 0.42 →
        // 84,672; (336, 1008) 0.56 → 150,528. Best (672, 672): 2×2 tiles, grid 48×48. The image
        // is wider (800/600 > 1), so new_h = round(600·48/800) = 36, padding (48−36)/2 = 6,
        // height 48 − 12 = 36:
        // 36·48 + 36 + 576 = 2340.
        ("llava-v1.6-mistral-7b-hf.json", 800, 600, (2340, 5, 577)),
    ];
    for (file, w, h, want) in rows {
        assert_eq!(tokens(file, w, h), want, "{file} at {w}×{h}");
    }
}

#[test]
fn preprocessor_config_sets_qwen_pixel_bounds() {
    let mut m = load_model(&fixture("qwen2.5-vl-7b-instruct.json")).unwrap();
    let spec = m.spec.as_mut().unwrap();
    vramscope_formats::hf_config::apply_preprocessor(
        spec,
        r#"{"min_pixels": 3136, "max_pixels": 200704}"#,
        "preprocessor_config.json",
    )
    .unwrap();
    // max_pixels 200,704 = 256·28·28: a 1024×768 image → beta = √(786,432/200,704) =
    // 1.97949…; h = floor(768/β/28)·28 = floor(13.86)·28 = 364, w = floor(1024/β/28)·28 =
    // floor(18.47)·28 = 504; patches 26·36 = 936, tokens 234.
    let v = spec.vision.as_ref().unwrap();
    assert!(matches!(
        v.tokens,
        ImageTokens::QwenDynamic {
            max_pixels: 200_704,
            ..
        }
    ));
    assert_eq!(v.tokens.cost(1024, 768).unwrap().tokens, 234);
    let bad = vramscope_formats::hf_config::apply_preprocessor(spec, "[1]", "p.json");
    assert!(bad.is_err());
}

/// A vision-language family not read natively is still refused naming its sub-configs (the
/// guard of `unknown.rs` stays for whatever comes next): Idefics2's `idefics2` (PaliGemma, the
/// earlier example here, is now read natively: `vlm_season.rs`).
#[test]
fn unread_vlm_families_stay_refused() {
    let text = r#"{"model_type": "idefics2", "architectures": ["Idefics2ForConditionalGeneration"],
        "text_config": {"hidden_size": 2048, "num_hidden_layers": 18,
            "num_attention_heads": 8, "vocab_size": 257216, "intermediate_size": 16384},
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27}}"#;
    let e = vramscope_formats::hf_config::parse_config_str(text, "config.json")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'idefics2'") && e.contains("vision_config"),
        "{e}"
    );
}

fn report(name: &str, job: serde_json::Value) -> vramscope_core::report::Report {
    let m = load_model(&fixture(name)).unwrap();
    let max = m.spec.as_ref().unwrap().max_position_embeddings;
    let input = m.into_input();
    let job: vramscope_core::job::Job = serde_json::from_value(job).unwrap();
    let r = job.resolve(max).unwrap();
    vramscope_core::estimate::estimate(&input, &r).unwrap()
}

/// The images' tokens lengthen each sequence: two 1024×768 images on Qwen2.5-VL add 2 · 999
/// tokens (worked in `image_tokens_per_family`) to seq 512 → 2510; the report echoes both.
#[test]
fn images_lengthen_the_sequence() {
    let r = report(
        "qwen2.5-vl-7b-instruct.json",
        serde_json::json!({"task": "infer", "seq": 512,
            "images": {"count": 2, "width": 1024, "height": 768}}),
    );
    assert_eq!(r.job.seq, 2_510);
    assert_eq!(r.job.image_tokens, 1_998);
    // Images given to a text-only model are an error naming the field.
    let m = load_model("gpt2").unwrap();
    let job: vramscope_core::job::Job = serde_json::from_value(
        serde_json::json!({"images": {"count": 1, "width": 64, "height": 64}}),
    )
    .unwrap();
    let e = vramscope_core::estimate::estimate(&m.into_input(), &job.resolve(None).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("images"), "{e}");
}

/// `freeze: ["vision"]`: the tower's 631,975,680 parameters (transformers' count, above) get
/// no gradient: trainable = 8,292,166,656 − 631,975,680 = 7,660,190,976; freezing the
/// projector too removes its 44,574,464 more: 7,615,616,512 — the language model's count.
#[test]
fn freezing_a_component_removes_its_gradients() {
    let base = serde_json::json!({"seq": 256, "precision": "bf16",
        "images": {"count": 1, "width": 448, "height": 448}});
    let with = |extra: serde_json::Value| {
        let mut j = base.clone();
        j.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        report("qwen2.5-vl-7b-instruct.json", j)
    };
    let full = with(serde_json::json!({}));
    let frozen = with(serde_json::json!({"freeze": ["vision"]}));
    let lm_only = with(serde_json::json!({"freeze": ["vision", "projector"]}));
    assert_eq!(full.model.params_trainable, 8_292_166_656);
    assert_eq!(frozen.model.params_trainable, 7_660_190_976);
    assert_eq!(lm_only.model.params_trainable, 7_615_616_512);
    // bf16 AdamW: the tower's gradients (2 B) and two states (2 · 2 B) go with it.
    let g = |r: &vramscope_core::report::Report| r.per_gpu.model_states.gradients;
    assert!(g(&full) - g(&frozen) >= 631_975_680 * 2);
    // A frozen tower saves nothing for backward: what the embeddings stage keeps is the
    // text embeddings' alone, as with no images at all.
    let kept = |r: &vramscope_core::report::Report| {
        let m = load_model(&fixture("qwen2.5-vl-7b-instruct.json")).unwrap();
        let spec = m.spec.unwrap();
        let mut text_only = r.job.clone();
        text_only.images = None;
        text_only.image_tokens = 0;
        let mut w = Vec::new();
        let f = vramscope_core::estimate::activations::forward;
        (
            f(&spec, &r.job, &mut w).unwrap().embedding.kept,
            f(&spec, &text_only, &mut w).unwrap().embedding.kept,
        )
    };
    let (with_tower, text) = kept(&lm_only);
    assert_eq!(with_tower, text);
    // With the projector training, it alone saves its inputs.
    let (with_tower, text) = kept(&frozen);
    assert!(with_tower > text && with_tower - text < 32 * 1024 * 1280 * 2);
    let (with_tower, text) = kept(&full);
    // A trained tower keeps, at least, each of its 32 layers' input: 1024 patches (448/14 = 32
    // per side) × 1280 × 2 B = 2,621,440 B per layer → 83,886,080 B.
    assert!(
        with_tower - text >= 32 * 1024 * 1280 * 2,
        "{with_tower} {text}"
    );
    // Components in the summary.
    let c = full.model.components.as_ref().unwrap();
    assert_eq!(c[&Part::Vision].params, 631_975_680);
}

/// LoRA aimed at one component: `language:q_proj` adapts the language model's 28 q_proj only;
/// a bare `qkv` reaches the tower's 32 fused projections. Rank 8 adapters: r·(in + out) each:
/// q_proj 8·(3584 + 3584) = 57,344 → 28 · 57,344 = 1,605,632; tower qkv 8·(1280 + 3840) =
/// 40,960 → 32 · 40,960 = 1,310,720.
#[test]
fn lora_targets_per_component() {
    let lora = |targets: serde_json::Value| {
        report(
            "qwen2.5-vl-7b-instruct.json",
            serde_json::json!({"seq": 256,
                "peft": {"method": "lora", "rank": 8, "targets": targets}}),
        )
        .model
        .params_trainable
    };
    assert_eq!(lora(serde_json::json!(["language:q_proj"])), 1_605_632);
    assert_eq!(lora(serde_json::json!(["vision:qkv"])), 1_310_720);
    assert_eq!(
        lora(serde_json::json!(["q_proj", "qkv"])),
        1_605_632 + 1_310_720
    );
}

/// Qwen2-VL's reader (LayerNorms with biases, `fc1`/`fc2` at `mlp_ratio · embed_dim`, the
/// merger's LayerNorm) on a tiny config written for this test (`fixtures/vlm/tiny-qwen2-vl.json`;
/// no published Qwen2-VL config was reachable). transformers 5.24 counts 227,712 (command in
/// the header). By hand: patch embed 32·3·2·14·14 = 37,632; a block = norms 4·32 + qkv
/// 96·32 + 96 + proj 32·32 + 32 + fc1 128·32 + 128 + fc2 32·128 + 32 = 12,704, × 2 → tower
/// 63,040; merger ln_q 2·32 + 128·128 + 128 + 64·128 + 64 = 24,832.
#[test]
fn tiny_qwen2_vl() {
    assert_eq!(37_632 + 2 * 12_704, 63_040u64);
    assert_eq!(
        parts("tiny-qwen2-vl.json"),
        (227_712, 63_040, 24_832, 139_840)
    );
}

proptest::proptest! {
    /// Any image size gives a cost or a one-line error, never a panic, and a Qwen-VL image
    /// always has its patches a multiple of merge² (the rule's invariant); any text given as a
    /// preprocessor config is read or refused.
    #[test]
    fn image_costs_and_preprocessors_never_panic(
        w in 1u64..200_000,
        h in 1u64..200_000,
        text in ".{0,64}",
    ) {
        for f in ["qwen2.5-vl-7b-instruct.json", "llava-v1.6-mistral-7b-hf.json",
                  "llava-1.5-7b-hf.json", "gemma-3-4b-it.json"] {
            let mut m = load_model(&fixture(f)).unwrap();
            let spec = m.spec.as_mut().unwrap();
            if let Ok(c) = spec.vision.as_ref().unwrap().tokens.cost(w, h) {
                if f.starts_with("qwen") {
                    proptest::prop_assert_eq!(c.tower_seq % 4, 0);
                    proptest::prop_assert_eq!(c.tokens * 4, c.tower_seq);
                }
            }
            let _ = vramscope_formats::hf_config::apply_preprocessor(spec, &text, "p.json");
        }
    }
}
