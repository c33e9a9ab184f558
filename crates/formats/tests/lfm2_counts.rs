//! LFM2 and LFM2-MoE (`modeling_lfm2.py`, `modeling_lfm2_moe.py`): parameter counts derived by
//! hand from the tensor shapes and checked against transformers 5.24 building the model from
//! the same config on the meta device:
//!
//! ```text
//! /work/main/.venv-test/bin/python crates/formats/tests/fixtures/defaults/count_fixtures.py \
//!     crates/formats/tests/fixtures/hybrid/lfm2-1.2b.json:Lfm2ForCausalLM \
//!     crates/formats/tests/fixtures/hybrid/lfm2-8b-a1b.json:Lfm2MoeForCausalLM
//! ```
//! (`AutoConfig.for_model(type, **rest)`, `with torch.device("meta")`, the sum of
//! `p.numel()`): 1170340608 and 8339929856.

mod common;

use vramscope_core::model::{AttentionKind, Mlp, SsmVersion};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    common::fixture_path("hybrid", &format!("{name}.json"))
}

/// LiquidAI/LFM2-1.2B (`fixtures/hybrid/lfm2-1.2b.json`): h 2048, 16 layers, attention on
/// `full_attn_idxs` 2, 5, 8, 10, 12, 14 (6), short conv on the other 10; 32 heads of 64 over
/// 8 KV heads; `block_ff_dim` 12288 → int(2·12288/3) = 8192, × 1.0, rounded up to 256: 8192;
/// vocab 65536, tied (the class default).
/// Attention: q 2048² + k, v 2·512·2048 + out 2048² + q/k norms 2·64 = 10,485,888.
/// Short conv: in_proj 6144·2048 + conv 2048·3 + out_proj 2048² = 16,783,360.
/// MLP 3·2048·8192 = 50,331,648; norms 2·2048 = 4,096 per layer.
/// 6·10,485,888 + 10·16,783,360 + 16·(50,331,648 + 4,096) + embeddings 65536·2048 + final
/// norm 2048 = 1,170,340,608 (transformers 5.24 on meta: 1170340608; the model page: 1.17B).
#[test]
fn lfm2_1_2b() {
    let attn = 2048 * 2048 + 2 * 512 * 2048 + 2048 * 2048 + 2 * 64;
    let conv = 6144 * 2048 + 2048 * 3 + 2048 * 2048;
    let per_layer = 3 * 2048 * 8192 + 2 * 2048;
    let total = 6 * attn + 10 * conv + 16 * per_layer + 65_536 * 2048 + 2048;
    assert_eq!(total, 1_170_340_608);
    let m = load_model(&fixture("lfm2-1.2b")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    let attention: Vec<usize> = (0..16)
        .filter(|i| {
            matches!(
                spec.decoder.layers[*i].attention.kind,
                AttentionKind::Standard { .. }
            )
        })
        .collect();
    assert_eq!(attention, [2, 5, 8, 10, 12, 14]);
    let AttentionKind::StateSpace(s) = spec.decoder.layers[0].attention.kind else {
        panic!("layer 0 is a conv layer");
    };
    assert_eq!(
        (s.version, s.d_inner, s.d_conv),
        (SsmVersion::ShortConv, 2048, 3)
    );
    let inv = m.inventory.as_ref().unwrap();
    common::assert_shapes(
        &m,
        &[
            ("model.embed_tokens.weight", vec![65_536, 2_048]),
            ("model.layers.0.conv.in_proj.weight", vec![6_144, 2_048]),
            ("model.layers.0.conv.conv.weight", vec![2_048, 1, 3]),
            ("model.layers.0.conv.out_proj.weight", vec![2_048, 2_048]),
            ("model.layers.0.operator_norm.weight", vec![2_048]),
            ("model.layers.0.ffn_norm.weight", vec![2_048]),
            ("model.layers.0.feed_forward.w1.weight", vec![8_192, 2_048]),
            ("model.layers.0.feed_forward.w3.weight", vec![8_192, 2_048]),
            ("model.layers.0.feed_forward.w2.weight", vec![2_048, 8_192]),
            ("model.layers.2.self_attn.q_proj.weight", vec![2_048, 2_048]),
            ("model.layers.2.self_attn.k_proj.weight", vec![512, 2_048]),
            (
                "model.layers.2.self_attn.out_proj.weight",
                vec![2_048, 2_048],
            ),
            ("model.layers.2.self_attn.q_layernorm.weight", vec![64]),
            ("model.layers.2.self_attn.k_layernorm.weight", vec![64]),
            ("model.embedding_norm.weight", vec![2_048]),
        ],
    );
    assert!(inv.get("lm_head.weight").is_none(), "tied head");
    assert!(inv.get("model.layers.0.conv.conv.bias").is_none());
}

/// LiquidAI/LFM2-8B-A1B (`fixtures/hybrid/lfm2-8b-a1b.json`): h 2048, 24 layers, attention
/// on 2, 6, 10, 14, 18, 21 (6), conv on 18; 32 heads of 64 over 8; layers 0 and 1 dense
/// SwiGLU of `intermediate_size` 7168 as is (`Lfm2MoeMLP`); 22 MoE layers of 32 experts of
/// 1792 (top 4); vocab 65536, tied.
/// Attention 10,485,888 and conv 16,783,360 as for LFM2-1.2B; dense MLP 3·2048·7168 =
/// 44,040,192; MoE: experts 32·(2·1792·2048 + 2048·1792) = 352,321,536 + router 32·2048 =
/// 352,387,072 (the `expert_bias` is a buffer); norms 2·2048 per layer.
/// 6·10,485,888 + 18·16,783,360 + 2·44,040,192 + 22·352,387,072 + 24·4,096 + 65536·2048 +
/// 2048 = 8,339,929,856 (transformers 5.24 on meta: 8339929856; the model page: 8.3B).
#[test]
fn lfm2_8b_a1b() {
    let attn = 2048 * 2048 + 2 * 512 * 2048 + 2048 * 2048 + 2 * 64;
    let conv = 6144 * 2048 + 2048 * 3 + 2048 * 2048;
    let moe = 32 * (2 * 1792 * 2048 + 2048 * 1792) + 32 * 2048;
    let total = 6 * attn
        + 18 * conv
        + 2 * 3 * 2048 * 7168
        + 22 * moe
        + 24 * 2 * 2048
        + 65_536 * 2048
        + 2048;
    assert_eq!(total, 8_339_929_856);
    let m = load_model(&fixture("lfm2-8b-a1b")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert!(matches!(spec.decoder.layers[1].mlp, Mlp::Dense(_)));
    let Mlp::Moe(moe) = &spec.decoder.layers[2].mlp else {
        panic!("layer 2 is sparse");
    };
    assert_eq!((moe.experts, moe.top_k, moe.expert.ffn), (32, 4, 1792));
    common::assert_shapes(
        &m,
        &[
            ("model.layers.1.feed_forward.w1.weight", vec![7_168, 2_048]),
            ("model.layers.2.feed_forward.gate.weight", vec![32, 2_048]),
            (
                "model.layers.2.feed_forward.experts.gate_up_proj",
                vec![32, 3_584, 2_048],
            ),
            (
                "model.layers.2.feed_forward.experts.down_proj",
                vec![32, 2_048, 1_792],
            ),
            ("model.layers.21.self_attn.v_proj.weight", vec![512, 2_048]),
        ],
    );
}

/// The older spellings `Lfm2Config.__post_init__` pops (`block_ff_dim` over
/// `intermediate_size`, `tie_embedding` over `tie_word_embeddings`), `layer_types` over
/// `full_attn_idxs`, and the auto-adjust switches. Widths by hand from `Lfm2MLP.__init__`:
/// 3072 → int(2·3072/3) = 2048 → ×1.5 = 3072 → up to 512: 3072; with the multiplier null,
/// 2048 unrounded; without auto-adjust, 3072 as written.
#[test]
fn lfm2_spellings_and_widths() {
    let read = |extra: &str| {
        let text = format!(
            r#"{{"model_type": "lfm2", "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                "intermediate_size": 999, {extra}}}"#
        );
        parse_config_str(&text, "t").map(|p| p.spec)
    };
    let ffn = |extra: &str| match &read(extra).unwrap().decoder.layers[0].mlp {
        Mlp::Dense(d) => d.ffn,
        _ => panic!("dense"),
    };
    let base = r#""block_ff_dim": 3072"#;
    assert_eq!(
        ffn(&format!(
            r#"{base}, "block_ffn_dim_multiplier": 1.5, "block_multiple_of": 512"#
        )),
        3072
    );
    assert_eq!(
        ffn(&format!(r#"{base}, "block_ffn_dim_multiplier": null"#)),
        2048
    );
    assert_eq!(
        ffn(&format!(r#"{base}, "block_auto_adjust_ff_dim": false"#)),
        3072
    );
    // 999 → int(666) → rounded up to 256: 768.
    assert_eq!(ffn(r#""conv_bias": false"#), 768);
    let spec =
        read(r#""tie_embedding": false, "layer_types": ["conv", "full_attention"]"#).unwrap();
    assert!(matches!(
        spec.head,
        vramscope_core::model::Head::LanguageModel { tied: false, .. }
    ));
    assert!(spec.decoder.layers[0]
        .attention
        .kind
        .state_space()
        .is_some());
    let bad = read(r#""layer_types": ["conv", "sliding_attention"]"#).unwrap_err();
    assert!(bad.to_string().contains("layer_types"), "{bad}");
    common::assert_refused(
        r#"{"model_type": "lfm2_moe", "num_hidden_layers": 2}"#,
        "layer_types",
    );
}

/// LFM2-VL (`lfm2_vl`) is read natively (`hf_config/vision_season.rs`; the published configs
/// in `vlm_season.rs`): the LFM2-1.2B fixture as its `text_config` and a `vision_config` that
/// names only `hidden_size` 768, the rest `Siglip2VisionConfig`'s defaults (12 layers, MLP
/// 3072, 256 positions, 16 px patches, the pooling head: `vision_use_head` true). By hand:
/// tower = patch linear 768·768 + 768 = 590,592, positions 196,608, 12 layers × 7,087,872,
/// final norm 1,536, head (probe 768, packed in-proj 3·768² + 3·768, out-proj 768² + 768,
/// LayerNorm 1,536, MLP 768·3072 + 3072 + 3072·768 + 768) 7,087,104 → 92,930,304; projector
/// (3072 wide) LayerNorm 6,144 + 3072·2560 + 2560 + 2560·2048 + 2048 = 13,117,952; the text
/// side 1,170,340,608 (above): 1,276,388,864, as transformers 5.24 counts it on the meta
/// device (`fixtures/defaults/count_fixtures.py` on this config).
#[test]
fn lfm2_vl_read_natively() {
    let text = std::fs::read_to_string(fixture("lfm2-1.2b")).unwrap();
    let vl = format!(
        r#"{{"model_type": "lfm2_vl", "architectures": ["Lfm2VlForConditionalGeneration"],
            "text_config": {text},
            "vision_config": {{"model_type": "siglip2_vision_model", "hidden_size": 768}}}}"#
    );
    let head = 768 + 3 * 768 * 768 + 3 * 768 + 768 * 768 + 768 + 1_536;
    let head = head + 768 * 3072 + 3072 + 3072 * 768 + 768;
    assert_eq!(head, 7_087_104u64);
    let tower = 590_592 + 196_608 + 12 * 7_087_872 + 1_536 + head;
    assert_eq!(tower, 92_930_304u64);
    let projector = 6_144 + 3072 * 2560 + 2560 + 2560 * 2048 + 2048;
    assert_eq!(projector, 13_117_952u64);
    let read = parse_config_str(&vl, "vl").unwrap();
    assert!(read
        .warnings
        .iter()
        .all(|w| !w.contains("only its language")));
    let m = vramscope_formats::model_source::model_of_config(read, "vl").unwrap();
    assert_eq!(m.params_total, 1_170_340_608 + tower + projector);
    assert_eq!(m.params_total, 1_276_388_864);
}
