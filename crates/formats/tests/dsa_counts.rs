//! Parameter counts of the DeepSeek Sparse Attention families (DeepSeek-V3.2 `deepseek_v32`,
//! GLM-5 `glm_moe_dsa`) from configs in `tests/fixtures/dsa/` (sources in its README), to the
//! parameter. Each expected total is derived by hand below from the config's shapes and
//! `modeling_deepseek_v32.py` / `modeling_glm_moe_dsa.py` (transformers 5.24.0), and equals the
//! count transformers 5.24.0 gives on the meta device: `/work/main/.venv-test/bin/python
//! crates/formats/tests/fixtures/defaults/count_fixtures.py PATH:Architecture` (`with
//! torch.device("meta"): cls(AutoConfig.for_model(**json))`, `sum(p.numel() for p in
//! m.parameters())`; run 2026-12-05; the numbers quoted in each test).
//!
//! Per layer, as `AXK1Attention` and `DeepseekV32Indexer` build them (h hidden, n heads, q/kv
//! latents `ql`/`kvl`, head dims nope/rope/v, indexer `ih` heads of `id`):
//! MLA = h·ql + ql (q_a_layernorm) + ql·n·(nope+rope) + h·(kvl+rope) + kvl (kv_a_layernorm) +
//! kvl·n·(nope+v) + n·v·h; indexer = ql·ih·id (wq_b) + h·id (wk) + 2·id (k_norm LayerNorm
//! weight and bias) + h·ih (weights_proj); two RMSNorms 2·h; dense MLP 3·h·ffn; MoE E·3·h·eff
//! (experts) + 3·h·eff (one shared expert) + E·h (router; `e_score_correction_bias` is a buffer).

mod common;

use vramscope_core::model::{AttentionKind, Mlp};
use vramscope_formats::model_source::{load_model, LoadedModel};

fn load(name: &str) -> LoadedModel {
    let path = format!("{}/tests/fixtures/dsa/{name}", env!("CARGO_MANIFEST_DIR"));
    load_model(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn shape(m: &LoadedModel, name: &str) -> Vec<u64> {
    m.inventory
        .as_ref()
        .unwrap()
        .get(name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
        .shape
        .clone()
}

fn has(m: &LoadedModel, name: &str) -> bool {
    m.inventory.as_ref().unwrap().get(name).is_some()
}

/// DeepSeek-V3.2-Exp: h 7168, 128 heads, ql 1536, kvl 512, 128/64/128, indexer 64 × 128,
/// ffn 18432, 256 experts of 2048, 61 layers (3 dense), vocab 129280.
/// MLA = 11,010,048 + 1,536 + 37,748,736 + 4,128,768 + 512 + 16,777,216 + 117,440,512 =
/// 187,107,328; indexer = 12,582,912 + 917,504 + 256 + 458,752 = 13,959,424; norms 14,336.
/// Dense MLP 396,361,728; MoE 11,274,289,152 + 44,040,192 + 1,835,008 = 11,320,164,352.
/// 61 · (187,107,328 + 13,959,424 + 14,336) = 12,265,946,368; 3 · 396,361,728 = 1,189,085,184;
/// 58 · 11,320,164,352 = 656,569,532,416; embedding and head 2 · 926,679,040; final norm 7,168.
/// Total 671,877,929,216 (transformers: 671,877,929,216).
#[test]
fn deepseek_v32_exp_counts_as_transformers() {
    let m = load("deepseek-v3.2-exp.json");
    assert_eq!(m.params_total, 671_877_929_216);
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.indexer.wq_b.weight"),
        [8192, 1536]
    );
    assert_eq!(
        shape(&m, "model.layers.60.self_attn.indexer.wk.weight"),
        [128, 7168]
    );
    assert_eq!(
        shape(&m, "model.layers.5.self_attn.indexer.k_norm.bias"),
        [128]
    );
    assert_eq!(
        shape(&m, "model.layers.5.self_attn.indexer.weights_proj.weight"),
        [64, 7168]
    );
    common::assert_never_warns(&m.warnings, "not known");
}

/// GLM-5: h 6144, 64 heads, ql 2048, kvl 512, 192/64/256, indexer 32 × 128, ffn 12288, 256
/// experts of 2048, 78 layers (3 dense), vocab 154880.
/// q_b = 2,048 · 64 · (192 + 64) = 33,554,432; kv_b = 512 · 64 · (192 + 256) = 14,680,064;
/// o = 64 · 256 · 6,144 = 100,663,296:
/// MLA = 12,582,912 + 2,048 + 33,554,432 + 3,538,944 + 512 + 14,680,064 + 100,663,296 =
/// 165,022,208. Indexer = 8,388,608 + 786,432 + 256 + 196,608 = 9,371,904; norms 12,288.
/// Dense MLP 226,492,416; MoE 9,663,676,416 + 37,748,736 + 1,572,864 = 9,702,998,016.
/// 78 · 174,406,400 = 13,603,699,200; 3 · 226,492,416 = 679,477,248; 75 · 9,702,998,016 =
/// 727,724,851,200; embedding and head 2 · 951,582,720; final norm 6,144.
/// Total 743,911,199,232 (transformers: 743,911,199,232).
#[test]
fn glm5_counts_as_transformers() {
    let m = load("glm-5.json");
    assert_eq!(m.params_total, 743_911_199_232);
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.q_b_proj.weight"),
        [16384, 2048]
    );
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.kv_b_proj.weight"),
        [28672, 512]
    );
    assert_eq!(
        shape(&m, "model.layers.0.self_attn.indexer.wq_b.weight"),
        [4096, 2048]
    );
    assert_eq!(
        shape(&m, "model.layers.77.self_attn.indexer.weights_proj.weight"),
        [32, 6144]
    );
}

/// Tiny DeepSeek-V3.2: h 64, 4 heads, ql 32, kvl 16, 16/8/16, indexer 4 × 16, ffn 128, 4
/// experts of 32, 4 layers (1 dense), vocab 256. MLA = 2,048 + 32 + 3,072 + 1,536 + 16 + 2,048 +
/// 4,096 = 12,848; indexer = 2,048 + 1,024 + 32 + 256 = 3,360; norms 128; dense 24,576; MoE
/// 24,576 + 6,144 + 256 = 30,976. 4 · 16,336 + 24,576 + 3 · 30,976 + 2 · 16,384 + 64 =
/// 215,680 (transformers: 215,680).
#[test]
fn tiny_deepseek_v32_counts_as_transformers() {
    let m = load("tiny-deepseek-v32.json");
    assert_eq!(m.params_total, 215_680);
}

/// Tiny GLM-5 with `indexer_types` full/shared/full/shared and `mlp_layer_types`
/// dense/sparse/dense/sparse: the shared layers hold no indexer (`GlmMoeDsaAttention`:
/// `self.indexer = None if self.skip_topk`), and layer 2 is dense although it is past
/// `first_k_dense_replace` 1. 4 · (12,848 + 128) + 2 · 3,360 + 2 · 24,576 + 2 · 30,976 +
/// 32,768 + 64 = 202,560 (transformers: 202,560).
#[test]
fn glm5_shared_indexer_layers_and_explicit_mlp_types() {
    let m = load("tiny-glm-moe-dsa-shared.json");
    assert_eq!(m.params_total, 202_560);
    assert!(has(&m, "model.layers.0.self_attn.indexer.wk.weight"));
    assert!(!has(&m, "model.layers.1.self_attn.indexer.wk.weight"));
    assert!(has(&m, "model.layers.2.self_attn.indexer.wk.weight"));
    let spec = m.spec.as_ref().unwrap();
    let moe: Vec<bool> = spec
        .decoder
        .layers
        .iter()
        .map(|l| matches!(l.mlp, Mlp::Moe(_)))
        .collect();
    assert_eq!(moe, [false, true, false, true]);
    let shared: Vec<bool> = spec
        .decoder
        .layers
        .iter()
        .map(|l| match l.attention.kind {
            AttentionKind::Latent {
                indexer: Some(ix), ..
            } => ix.shared,
            _ => panic!("not DSA"),
        })
        .collect();
    assert_eq!(shared, [false, true, false, true]);
}

/// A `q_lora_rank: null` config is refused: `AXK1Attention` always builds `q_a_proj`, and the
/// indexer reads its latent.
#[test]
fn null_query_latent_is_refused() {
    let text = r#"{"model_type": "deepseek_v32", "q_lora_rank": null}"#;
    common::assert_refused(text, "q_lora_rank");
}

/// GLM-5's default indexer schedule (`GlmMoeDsaConfig.__post_init__`): with `index_topk_freq` 2
/// and `index_skip_topk_offset` 2, layer `i` runs its indexer when `max(i − 1, 0) % 2 == 0`:
/// full, full, shared, full, shared, full over 6 layers (transformers 5.24:
/// `['full', 'full', 'shared', 'full', 'shared', 'full']`). The tiny GLM-5 at 6 layers without
/// its explicit lists (1 dense layer, 5 MoE): 6 · 12,976 + 4 · 3,360 + 24,576 + 5 · 30,976 +
/// 32,768 + 64 = 303,584 (transformers on meta: 303,584).
#[test]
fn glm5_indexer_schedule_from_freq_and_offset() {
    let mut v = common::fixture_json("dsa", "tiny-glm-moe-dsa-shared.json");
    let o = v.as_object_mut().unwrap();
    o.remove("indexer_types");
    o.remove("mlp_layer_types");
    o.insert("num_hidden_layers".into(), 6.into());
    o.insert("index_topk_freq".into(), 2.into());
    o.insert("index_skip_topk_offset".into(), 2.into());
    let parsed = vramscope_formats::hf_config::parse_config_str(&v.to_string(), "cfg").unwrap();
    let m = vramscope_formats::model_source::model_of_config(parsed, "cfg").unwrap();
    assert_eq!(m.params_total, 303_584);
    let own: Vec<bool> = (0..6)
        .map(|i| has(&m, &format!("model.layers.{i}.self_attn.indexer.wk.weight")))
        .collect();
    assert_eq!(own, [true, true, false, true, false, true]);
}
