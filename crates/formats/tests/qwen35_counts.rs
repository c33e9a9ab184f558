//! Qwen3.5 (`qwen3_5`) and Qwen3.5-MoE (`qwen3_5_moe`): the parameter count of the published
//! configs (`fixtures/qwen35/`, sources in its README) derived by hand from the tensor shapes
//! of transformers 5.24's `modeling_qwen3_5.py` / `modeling_qwen3_5_moe.py` (the language model
//! as Qwen3-Next's hybrid, the vision tower as Qwen3-VL's without DeepStack), and checked
//! against transformers building the class the config names on the meta device:
//!
//! ```text
//! d = json.load(open(path)); cfg = AutoConfig.for_model(d.pop("model_type"), **d)
//! with torch.device("meta"): m = AutoModelForImageTextToText.from_config(cfg)
//! sum(p.numel() for p in m.parameters())          # 27356728560 / 35107181936
//! sum(p.numel() for p in m.model.visual.parameters())  # 460730096 / 446571248
//! ```
//!
//! (`fixtures/defaults/count_fixtures.py` gives the same two numbers.)

mod common;

use vramscope_core::model::{Head, Mlp, SsmVersion};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    common::fixture_path("qwen35", &format!("{name}.json"))
}

/// The Qwen3-VL vision tower without DeepStack (`Qwen3_5VisionModel`): width 1152, 27 blocks,
/// MLP 4304, 16 px patches × 2 frames, 2304 learned positions, 2 × 2 merge to `out`.
/// - patch_embed Conv3d 3·2·16·16·1152 + bias 1152 = 1,770,624; pos_embed 2304·1152 =
///   2,654,208.
/// - a block: two LayerNorms 4·1152 = 4,608; qkv 1152·3456 + 3456 = 3,984,768; proj 1152² +
///   1152 = 1,328,256; fc1 1152·4304 + 4304 = 4,962,512; fc2 4304·1152 + 1152 = 4,959,360:
///   15,239,504.
/// - merger: LayerNorm 2·1152 = 2,304; fc1 4608·4608 + 4608 = 21,238,272; fc2 4608·out + out.
fn vision(out: u64) -> u64 {
    let block = 4 * 1152
        + (1152 * 3456 + 3456)
        + (1152 * 1152 + 1152)
        + (1152 * 4304 + 4304)
        + (4304 * 1152 + 1152);
    assert_eq!(block, 15_239_504);
    let merger = 2 * 1152 + (4608 * 4608 + 4608) + (4608 * out + out);
    1536 * 1152 + 1152 + 2304 * 1152 + 27 * block + merger
}

/// Qwen/Qwen3.5-27B: h 5120, 64 layers, every 4th full attention (16), 48 gated DeltaNet; a
/// SwiGLU MLP of 17408 on every layer; vocab 248320, untied.
/// - DeltaNet (nk 16, nv 48, d_k = d_v 128: key_dim 2048, value_dim 6144, conv_dim 10240):
///   in_proj_qkv 10240·5120 = 52,428,800; in_proj_z 6144·5120 = 31,457,280; in_proj_b and
///   in_proj_a 48·5120 each = 491,520; conv1d 10240·4 = 40,960; dt_bias + A_log 96; norm 128;
///   out_proj 5120·6144 = 31,457,280: 115,876,064.
/// - Gated attention (24 heads × 256, 4 KV heads): q_proj 2·6144·5120 = 62,914,560; k_proj
///   and v_proj 1024·5120 each = 10,485,760; o_proj 5120·6144 = 31,457,280; q/k norms 512:
///   104,858,112.
/// - MLP 3·17408·5120 = 267,386,880; two norms 2·5120 per layer.
/// - Text: 48·115,876,064 + 16·104,858,112 + 64·(267,386,880 + 10,240) + 2·248320·5120 +
///   5120 = 26,895,998,464; vision (out 5120) 460,730,096: 27,356,728,560.
#[test]
fn qwen3_5_27b() {
    let h = 5120u64;
    let delta = 10240 * h + 6144 * h + 2 * 48 * h + 10240 * 4 + 96 + 128 + h * 6144;
    assert_eq!(delta, 115_876_064);
    let attn = 2 * 6144 * h + 2 * 1024 * h + h * 6144 + 512;
    assert_eq!(attn, 104_858_112);
    let text = 48 * delta + 16 * attn + 64 * (3 * 17408 * h + 2 * h) + 2 * 248_320 * h + h;
    assert_eq!(text, 26_895_998_464);
    assert_eq!(vision(5120), 460_730_096);
    let m = load_model(&fixture("qwen3.5-27b")).unwrap();
    assert_eq!(m.params_total, text + vision(5120));
    assert_eq!(m.params_total, 27_356_728_560);
    let spec = m.spec.as_ref().unwrap();
    assert_eq!(spec.architecture, "Qwen3_5ForConditionalGeneration");
    let full = common::attention_layers(&m);
    assert_eq!(full, (0..16).map(|k| 4 * k + 3).collect::<Vec<_>>());
    let ssm = common::ssm_of(&m, 0);
    assert_eq!(
        (ssm.version, ssm.heads, ssm.groups, ssm.d_state, ssm.d_inner),
        (SsmVersion::GatedDeltaNet, 48, 16, 128, 6144)
    );
    // Names and shapes as transformers 5.24 builds them (`model.language_model.` in the
    // VLM; vramscope names the language model as the text class does).
    common::assert_shapes(
        &m,
        &[
            (
                "model.layers.0.linear_attn.in_proj_qkv.weight",
                vec![10_240, 5_120],
            ),
            (
                "model.layers.0.linear_attn.in_proj_z.weight",
                vec![6_144, 5_120],
            ),
            (
                "model.layers.0.linear_attn.in_proj_b.weight",
                vec![48, 5_120],
            ),
            (
                "model.layers.0.linear_attn.in_proj_a.weight",
                vec![48, 5_120],
            ),
            (
                "model.layers.0.linear_attn.conv1d.weight",
                vec![10_240, 1, 4],
            ),
            (
                "model.layers.3.self_attn.q_proj.weight",
                vec![12_288, 5_120],
            ),
            ("model.layers.3.mlp.gate_proj.weight", vec![17_408, 5_120]),
        ],
    );
}

/// Qwen/Qwen3.5-35B-A3B: h 2048, 40 layers, 10 full attention, 30 gated DeltaNet; the sparse
/// block on every layer: 256 experts of 512, 8 per token, a gated shared expert of 512; vocab
/// 248320, untied.
/// - DeltaNet (nk 16, nv 32, d 128: key_dim 2048, value_dim 4096, conv_dim 8192): in_proj_qkv
///   8192·2048 = 16,777,216; in_proj_z 4096·2048 = 8,388,608; in_proj_b + in_proj_a 2·32·2048
///   = 131,072; conv1d 8192·4 = 32,768; dt_bias + A_log 64; norm 128; out_proj 2048·4096 =
///   8,388,608: 33,718,464.
/// - Gated attention (16 × 256, 2 KV heads): 2·4096·2048 + 2·512·2048 + 2048·4096 + 512 =
///   27,263,488.
/// - MoE: experts gate_up 256·1024·2048 + down 256·2048·512 = 805,306,368; gate 256·2048 =
///   524,288; shared expert 3·512·2048 = 3,145,728; shared_expert_gate 2048: 808,978,432.
/// - Text: 30·33,718,464 + 10·27,263,488 + 40·(808,978,432 + 4096) + 2·248320·2048 + 2048 =
///   34,660,610,688; vision (out 2048) 446,571,248: 35,107,181,936.
#[test]
fn qwen3_5_35b_a3b() {
    let h = 2048u64;
    let delta = 8192 * h + 4096 * h + 2 * 32 * h + 8192 * 4 + 64 + 128 + h * 4096;
    assert_eq!(delta, 33_718_464);
    let attn = 2 * 4096 * h + 2 * 512 * h + h * 4096 + 512;
    assert_eq!(attn, 27_263_488);
    let moe = 256 * 1024 * h + 256 * h * 512 + 256 * h + 3 * 512 * h + h;
    assert_eq!(moe, 808_978_432);
    let text = 30 * delta + 10 * attn + 40 * (moe + 2 * h) + 2 * 248_320 * h + h;
    assert_eq!(text, 34_660_610_688);
    assert_eq!(vision(2048), 446_571_248);
    let m = load_model(&fixture("qwen3.5-35b-a3b")).unwrap();
    assert_eq!(m.params_total, text + vision(2048));
    assert_eq!(m.params_total, 35_107_181_936);
    let spec = m.spec.as_ref().unwrap();
    assert!(spec
        .decoder
        .layers
        .iter()
        .all(|l| matches!(&l.mlp, Mlp::Moe(x) if x.top_k == 8 && x.experts == 256)));
    common::assert_shapes(
        &m,
        &[
            (
                "model.layers.0.mlp.experts.gate_up_proj",
                vec![256, 1_024, 2_048],
            ),
            (
                "model.layers.0.mlp.experts.down_proj",
                vec![256, 2_048, 512],
            ),
            ("model.layers.0.mlp.gate.weight", vec![256, 2_048]),
            (
                "model.layers.0.mlp.shared_expert.up_proj.weight",
                vec![512, 2_048],
            ),
            (
                "model.layers.0.mlp.shared_expert_gate.weight",
                vec![1, 2_048],
            ),
            (
                "model.layers.0.linear_attn.in_proj_qkv.weight",
                vec![8_192, 2_048],
            ),
        ],
    );
}

/// The head is tied by the top-level `tie_word_embeddings` (see `qwen3_5.rs`
/// `as_vlm`): the 27B with the top-level key `true` (the text config's left `false`)
/// counts one 248320 × 5120 matrix less, as transformers does (3,254,208,400 against
/// 4,525,606,800 at 4 layers: 1,271,398,400 = 248320 · 5120).
#[test]
fn top_level_key_ties_the_head() {
    let text = std::fs::read_to_string(fixture("qwen3.5-27b")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let untied = parse_config_str(&v.to_string(), "27b").unwrap().spec;
    v["tie_word_embeddings"] = true.into();
    let tied = parse_config_str(&v.to_string(), "27b").unwrap().spec;
    assert!(matches!(
        untied.head,
        Head::LanguageModel { tied: false, .. }
    ));
    assert!(matches!(tied.head, Head::LanguageModel { tied: true, .. }));
}
