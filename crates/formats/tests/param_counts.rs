//! Parameter counts of real models, to the parameter. Every expected value is either a count
//! published for the real checkpoint or derived by hand below from the model's config; none is
//! taken from vramscope's own output.

use vramscope_formats::model_source::{load_inline_config, load_model};
use vramscope_formats::presets;

fn count(preset: &str) -> u64 {
    let m = load_model(preset).unwrap_or_else(|e| panic!("{preset}: {e}"));
    m.params_total
}

/// GPT-2 small, published count 124,439,808 (`GPT2LMHeadModel.num_parameters()`, tied head).
/// wte 50257·768 = 38,597,376; wpe 1024·768 = 786,432; per layer: ln_1 1,536 + c_attn
/// 768·2304+2304 = 1,771,776 + c_proj 768·768+768 = 590,592 + ln_2 1,536 + c_fc 768·3072+3072 =
/// 2,362,368 + c_proj 3072·768+768 = 2,360,064 = 7,087,872; ×12 = 85,054,464; ln_f 1,536.
#[test]
fn gpt2() {
    assert_eq!(38_597_376 + 786_432 + 12 * 7_087_872 + 1_536, 124_439_808);
    assert_eq!(count("gpt2"), 124_439_808);
    assert_eq!(count("openai-community/gpt2"), 124_439_808);
}

/// bert-base-uncased: its config names `BertForMaskedLM` → 109,514,298; the bare `BertModel`
/// (encoder + pooler) → 109,482,240 (both published, e.g. in the contract).
/// Embeddings 30522·768 + 512·768 + 2·768 + LN 1,536 = 23,837,184; 12 layers × 7,087,872 (same
/// layer as GPT-2) = 85,054,464; pooler 768·768+768 = 590,592 → BertModel 109,482,240.
/// MLM: no pooler, + transform dense 590,592 + LN 1,536 + decoder bias 30,522 (tied decoder).
#[test]
fn bert_base() {
    assert_eq!(23_837_184 + 85_054_464 + 590_592, 109_482_240);
    assert_eq!(
        23_837_184 + 85_054_464 + 590_592 + 1_536 + 30_522,
        109_514_298
    );
    assert_eq!(count("bert-base-uncased"), 109_514_298);
    let p = presets::find("bert-base-uncased").unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(p.config).unwrap();
    cfg["architectures"] = serde_json::json!(["BertModel"]);
    assert_eq!(load_inline_config(&cfg).unwrap().params_total, 109_482_240);
}

/// A Llama-shaped dense decoder by hand (transformers `LlamaForCausalLM` and its look-alikes):
/// the token table `vocab·h` (twice when the head is untied); per layer q and o `h·q` (`q` =
/// heads · head dim), k and v `h·kv` (`kv` = KV heads · head dim), gate/up/down `3·h·ffn` and
/// `norms` norms of `h`; the final norm `h`. Returns (one layer, the whole model).
fn llama_shaped(
    vocab: u64,
    tied: bool,
    h: u64,
    layers: u64,
    (q, kv, ffn, norms): Widths,
) -> (u64, u64) {
    let layer = 2 * h * q + 2 * h * kv + 3 * h * ffn + norms * h;
    let tables = if tied { 1 } else { 2 };
    (layer, tables * vocab * h + layers * layer + h)
}

/// q width, KV width, FFN, norms per layer.
type Widths = (u64, u64, u64, u64);

/// Presets, vocab, tied, h, layers, widths, one layer by hand, the published count.
type DenseRow = (
    &'static [&'static str],
    u64,
    bool,
    u64,
    u64,
    Widths,
    u64,
    u64,
);

/// The rows of [`llama_shaped_dense_decoders`], each with its hand derivation.
const DENSE_ROWS: &[DenseRow] = &[
    // Llama-2-7b, published 6,738,415,616: 2·32000·4096 (untied) + 32·(4·4096² +
    // 3·4096·11008 + 2·4096) + 4096 (MHA: the KV width is h); a layer 33,554,432 ·2 +
    // 135,266,304 + 8,192 = 202,383,360.
    (
        &["llama-2-7b"],
        32000,
        false,
        4096,
        32,
        (4096, 4096, 11008, 2),
        202_383_360,
        6_738_415_616,
    ),
    // Meta-Llama-3-8B, published 8,030,261,248: GQA with 8 KV heads of 128:
    // 2·128256·4096 + 32·(2·4096² + 2·4096·1024 + 3·4096·14336 + 2·4096) + 4096; a layer
    // 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000.
    (
        &["llama-3-8b", "llama-3.1-8b"],
        128256,
        false,
        4096,
        32,
        (4096, 1024, 14336, 2),
        218_112_000,
        8_030_261_248,
    ),
    // Llama-3.2-3B, published 3,212,749,824: tied embedding 128256·3072; 28 layers of
    // 2·3072² + 2·3072·1024 + 3·3072·8192 + 2·3072 = 18,874,368 + 6,291,456 + 75,497,472 +
    // 6,144 = 100,669,440; final norm 3072.
    (
        &["llama-3.2-3b"],
        128256,
        true,
        3072,
        28,
        (3072, 1024, 8192, 2),
        100_669_440,
        3_212_749_824,
    ),
    // Llama-3.1-405B (Llama 3 paper, Table 3: 126 layers, width 16,384, FFN 53,248, 128
    // heads, 8 KV heads; vocabulary 128,256): 2·128256·16384 + 126·(2·16384² +
    // 2·16384·1024 + 3·16384·53248 + 2·16384) + 16384 = 405,853,388,800; a layer
    // 536,870,912 + 33,554,432 + 2,617,245,696 + 32,768 = 3,187,703,808.
    (
        &["llama-3.1-405b"],
        128256,
        false,
        16384,
        126,
        (16384, 1024, 53248, 2),
        3_187_703_808,
        405_853_388_800,
    ),
    // Mistral-7B-v0.1, published 7,241,732,096: 2·32000·4096 + 32·(2·4096² + 2·4096·1024 +
    // 3·4096·14336 + 2·4096) + 4096; the layer is Llama-3-8B's, 218,112,000.
    (
        &["mistral-7b-v0.1"],
        32000,
        false,
        4096,
        32,
        (4096, 1024, 14336, 2),
        218_112_000,
        7_241_732_096,
    ),
    // Gemma-2B: tied 256000·2048; 18 layers, 8 heads of 256 with one KV head (MQA): q and o
    // 2048·2048, k and v 2048·256; GeGLU 3·2048·16384; two norms; final norm.
    // = 524,288,000 + 18 × 110,104,576 + 2048 = 2,506,172,416.
    (
        &["gemma-2b"],
        256000,
        true,
        2048,
        18,
        (2048, 256, 16384, 2),
        110_104_576,
        2_506_172_416,
    ),
    // Gemma-2-9B: tied 256000·3584; 42 layers, 16 heads of 256 (q 3584·4096, o 4096·3584),
    // 8 KV heads (k, v 3584·2048), GeGLU 3·3584·14336, four norms; final norm.
    // = 917,504,000 + 42 × 198,195,200 + 3584 = 9,241,705,984.
    (
        &["gemma-2-9b"],
        256000,
        true,
        3584,
        42,
        (4096, 2048, 14336, 4),
        198_195_200,
        9_241_705_984,
    ),
    // Phi-3-mini-4k: untied 32064·3072 twice; 32 layers of fused qkv 3072·9216 (q, k and v
    // 3072 wide each), o 3072², gate_up 3072·16384 and down 8192·3072 (FFN 8192), two
    // norms; final norm. = 197,001,216 + 32 × 113,252,352 + 3072 = 3,821,079,552.
    (
        &["phi-3-mini-4k-instruct"],
        32064,
        false,
        3072,
        32,
        (3072, 3072, 8192, 2),
        113_252_352,
        3_821_079_552,
    ),
];

/// Dense Llama-shaped checkpoints: [`llama_shaped`] of each row's config gives its layer as
/// worked in the row's comment and its published count, and so does each named preset.
#[test]
fn llama_shaped_dense_decoders() {
    for &(ids, vocab, tied, h, layers, widths, per_layer, published) in DENSE_ROWS {
        let (layer, total) = llama_shaped(vocab, tied, h, layers, widths);
        assert_eq!((layer, total), (per_layer, published), "{ids:?}: by hand");
        for id in ids {
            assert_eq!(count(id), published, "{id}");
        }
    }
}

/// Mixtral-8x7B, published 46,702,792,704: Mistral's attention, 8 experts of 3·4096·14336 and a
/// 4096·8 router per layer.
#[test]
fn mixtral_8x7b() {
    let layer: u64 = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 3 * 4096 * 14336 + 4096 * 8 + 2 * 4096;
    assert_eq!(2 * 32000 * 4096 + 32 * layer + 4096, 46_702_792_704);
    assert_eq!(count("mixtral-8x7b"), 46_702_792_704);
}

/// Qwen2.5-7B, published 7,615,616,512: untied 152064·3584 twice; 28 heads / 4 KV heads of 128
/// with q/k/v biases: q 3584·3584+3584, k and v 3584·512+512, o 3584²; MLP 3·3584·18944;
/// norms 2·3584.
#[test]
fn qwen2_5_7b() {
    let attn: u64 = 3584 * 3584 + 3584 + 2 * (3584 * 512 + 512) + 3584 * 3584;
    let layer = attn + 3 * 3584 * 18944 + 2 * 3584;
    assert_eq!(2 * 152064 * 3584 + 28 * layer + 3584, 7_615_616_512);
    assert_eq!(count("qwen2.5-7b"), 7_615_616_512);
}

/// Qwen3-30B-A3B (qwen3_moe): tied = false, 151936·2048 twice; 48 layers of attention (32 heads,
/// 4 KV heads of 128: q 2048·4096, k,v 2048·512, o 4096·2048, q_norm/k_norm 128 each) + two
/// norms + router 128·2048 + 128 experts × 3·2048·768; final norm 2048.
/// = 622,329,856 + 48 × 623,120,640 + 2048 = 30,532,122,624.
#[test]
fn qwen3_30b_a3b() {
    let attn: u64 = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128;
    let moe: u64 = 128 * 2048 + 128 * 3 * 2048 * 768;
    let layer = attn + 2 * 2048 + moe;
    assert_eq!(layer, 623_120_640);
    let total = 2 * 151936 * 2048 + 48 * layer + 2048;
    assert_eq!(total, 30_532_122_624);
    assert_eq!(count("qwen3-30b-a3b"), total);
}

/// OPT-125m: 50272·768 tokens + (2048+2)·768 positions (offset 2), 12 layers of 7,087,872
/// (four biased 768² projections, two LayerNorms, fc1/fc2 with biases), final LayerNorm 1,536,
/// tied head. = 125,239,296.
#[test]
fn opt_125m() {
    assert_eq!(
        50272 * 768 + 2050 * 768 + 12 * 7_087_872 + 1536,
        125_239_296u64
    );
    assert_eq!(count("opt-125m"), 125_239_296);
}

/// T5-small (`T5ForConditionalGeneration`, tied head): shared 32128·512 = 16,449,536; encoder
/// layer q,k,v,o 4·512² + FFN 2·512·2048 + 2 norms 1,024 = 3,146,752, ×6, + relative bias
/// 32·8 + final norm 512; decoder layer adds cross-attention 4·512² and a norm: 4,195,840, ×6,
/// + 256 + 512. = 60,506,624.
#[test]
fn t5_small() {
    let enc = 6 * 3_146_752 + 256 + 512;
    let dec = 6 * 4_195_840 + 256 + 512;
    assert_eq!(16_449_536 + enc + dec, 60_506_624u64);
    assert_eq!(count("t5-small"), 60_506_624);
}

/// DeepSeek-V3 (`DeepseekV3ForCausalLM`; the MTP module is not part of the class, and
/// `e_score_correction_bias` is a buffer): 129280·7168 embedding and head; per layer MLA
/// q_a 7168·1536 + q_a_norm 1536 + q_b 1536·(128·192) + kv_a 7168·576 + kv_a_norm 512 +
/// kv_b 512·(128·256) + o (128·128)·7168 = 187,107,328, two norms 14,336; 3 dense layers with
/// 3·7168·18432; 58 MoE layers with router 256·7168 + 257 experts (256 routed + 1 shared) of
/// 3·7168·2048. = 671,026,404,352 (the "671B" of the paper).
#[test]
fn deepseek_v3() {
    let attn: u64 =
        7168 * 1536 + 1536 + 1536 * 24576 + 7168 * 576 + 512 + 512 * 32768 + 16384 * 7168;
    assert_eq!(attn, 187_107_328);
    let dense = attn + 14_336 + 3 * 7168 * 18432;
    let moe = attn + 14_336 + 256 * 7168 + 257 * 3 * 7168 * 2048;
    let total = 2 * 129280 * 7168 + 7168 + 3 * dense + 58 * moe;
    assert_eq!(total, 671_026_404_352);
    assert_eq!(count("deepseek-v3"), total);
}

/// DeepSeek-V2-Lite: no query compression (q_lora_rank null): q_proj 2048·(16·192); kv_a
/// 2048·576 + norm 512; kv_b 512·(16·256); o 2048²; first layer dense 3·2048·10944; 26 MoE
/// layers with router 64·2048, 64 experts of 3·2048·1408 and 2 shared (one MLP of 2816).
/// = 15,706,484,224.
#[test]
fn deepseek_v2_lite() {
    let attn: u64 = 2048 * 3072 + 2048 * 576 + 512 + 512 * 4096 + 2048 * 2048;
    let dense = attn + 4096 + 3 * 2048 * 10944;
    let moe = attn + 4096 + 64 * 2048 + 64 * 3 * 2048 * 1408 + 3 * 2048 * 2816;
    let total = 2 * 102400 * 2048 + 2048 + dense + 26 * moe;
    assert_eq!(total, 15_706_484_224);
    assert_eq!(count("deepseek-v2-lite"), total);
}

/// Every preset whose index records a published count matches it exactly.
#[test]
fn presets_match_their_published_counts() {
    let mut checked = 0;
    for p in presets::all() {
        if let Some(expected) = p.published_params {
            assert_eq!(count(p.id), expected, "{}", p.id);
            checked += 1;
        }
    }
    assert!(
        checked >= 8,
        "only {checked} presets carry a published count"
    );
}

/// The catalog has what the contract and the issue name, all parseable without warnings about
/// unknown families.
#[test]
fn catalog_contents() {
    for id in [
        "gpt2",
        "bert-base-uncased",
        "llama-2-7b",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "mistral-7b-v0.1",
        "qwen2.5-7b",
        "meta-llama/Llama-3.1-8B",
    ] {
        assert!(presets::find(id).is_some(), "{id} missing");
    }
    assert!(presets::all().len() >= 30);
    for p in presets::all() {
        let parsed = presets::load(p).unwrap_or_else(|e| panic!("{}: {e}", p.id));
        assert!(
            parsed.warnings.iter().all(|w| !w.contains("not known")),
            "{}: {:?}",
            p.id,
            parsed.warnings
        );
    }
}

/// openai/gpt-oss-20b from its published config.json (`fixtures/unsupported/gpt-oss-20b.json`,
/// source in that folder's README). The model card (arXiv 2508.10925, Table 1) gives 20.91 B
/// total parameters and 3.61 B active; the exact count is the sum of the published checkpoint's
/// tensor shapes (`modeling_gpt_oss.py` parameters, the MXFP4 experts counted as their
/// unpacked `[E, in, out]` matrices):
/// - embed_tokens and lm_head (untied): 2 · 201088 · 2880 = 1,158,266,880;
/// - per layer: q 2880·4096 + 4096, k and v 2880·512 + 512 each, o 4096·2880 + 2880, sinks 64
///   → 26,550,144; router 32·2880 + 32 = 92,192; experts gate_up 32·2880·5760 + 32·5760 and
///   down 32·2880·2880 + 32·2880 → 796,538,880; two norms 5,760 → 823,186,976; × 24 layers;
/// - the final norm 2,880.
///
/// Active per token (the card's 3.61 B, which leaves the input embedding out): 4 of 32 experts
/// → 24 · (26,550,144 + 92,192 + 5,760 + 796,538,880 / 8) + 201088 · 2880 + 2880.
///
/// Checkpoint bytes: the published `model.safetensors.index.json` gives `metadata.total_size`
/// 13,761,264,768 (read from a public file vendoring it, code-index file id 31112482743). By
/// hand: the expert matrices, 24 · 32 · (2880·5760 + 2880·2880) = 19,110,297,600 weights in
/// MXFP4 at 17 bytes per 32 (16 bytes of E2M1 pairs + one E8M0 scale) = 10,152,345,600 B; the
/// other 1,804,459,584 parameters in bf16 = 3,608,919,168 B.
#[test]
fn gpt_oss_20b() {
    use vramscope_core::estimate::quant::{total_bytes, QuantContext, WeightFormat};
    let per_layer: u64 = 26_550_144 + 92_192 + 796_538_880 + 5_760;
    assert_eq!(per_layer, 823_186_976);
    let total: u64 = 1_158_266_880 + 24 * per_layer + 2_880;
    assert_eq!(total, 20_914_757_184);
    let active: u64 =
        24 * (26_550_144 + 92_192 + 5_760 + 796_538_880 / 8) + 201_088 * 2_880 + 2_880;
    assert_eq!(active, 3_608_307_264); // the card's 3.61 B
    assert_eq!(10_152_345_600u64 + 3_608_919_168, 13_761_264_768);

    let path = format!(
        "{}/tests/fixtures/unsupported/gpt-oss-20b.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let m = load_model(&path).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert_eq!(spec.quantization.as_deref(), Some("mxfp4"));
    // layer_types: even layers slide over 128 tokens, odd ones attend fully.
    let windows: Vec<Option<u64>> = spec
        .decoder
        .layers
        .iter()
        .map(|l| l.attention.sliding_window)
        .collect();
    assert_eq!(windows[0], Some(128));
    assert_eq!(windows[1], None);
    assert_eq!(windows.iter().filter(|w| w.is_some()).count(), 12);
    let inv = m.inventory.as_ref().unwrap();
    let ctx = QuantContext::from_spec(spec);
    assert_eq!(
        total_bytes(&WeightFormat::Mxfp4, &inv.tensors, &ctx).unwrap(),
        13_761_264_768
    );
    // Tensor names as the checkpoint has them (the experts as transformers holds them unpacked).
    for name in [
        "model.layers.0.self_attn.sinks",
        "model.layers.0.mlp.router.bias",
        "model.layers.23.mlp.experts.gate_up_proj",
        "model.layers.23.mlp.experts.down_proj_bias",
    ] {
        assert!(inv.get(name).is_some(), "{name}");
    }
}
