//! Gemma 3n's and Gemma 4's text readers (`gemma3n_text`, `gemma4_text`) held to transformers
//! 5.24 by one piece of code each check: the parameter counts, the tensor names and shapes, the
//! estimator's inventory against the reader's tensor list, and the `DynamicCache` of these
//! kv-sharing models. The family files (`gemma3n.rs`, `gemma4.rs`) keep what only one family
//! has (the wrappers, towers, bad configs).
//!
//! Meta-device counts: `/work/main/.venv-test/bin/python` with
//! `Gemma3nForCausalLM(Gemma3nTextConfig(**cfg))` or `Gemma4ForCausalLM(Gemma4TextConfig(**cfg))`
//! under `torch.device("meta")`, `sum(p.numel() for p in model.parameters())`
//! (fixtures/gemma3n/README.md, fixtures/gemma4/README.md).

mod common;

use common::gemma::{assert_inventory_is_reader, assert_named_parameters, by_name, config};
use serde_json::{Map, Value};
use vramscope_formats::error::Result;
use vramscope_formats::hf_config::gemma3n::{self, CacheLayers, NamedTensor};
use vramscope_formats::hf_config::gemma4;

type Count = fn(&Map<String, Value>, &str) -> Result<u64>;
type Tensors = fn(&Map<String, Value>, &str) -> Result<Vec<NamedTensor>>;
type Cache = fn(&Map<String, Value>, &str) -> Result<CacheLayers>;

/// A family's readers by its fixture folder: the count, the tensor list, the cache layers.
fn readers(dir: &str) -> (Count, Tensors, Cache) {
    match dir {
        "gemma3n" => (
            gemma3n::text_params,
            gemma3n::text_tensors,
            gemma3n::cache_layers,
        ),
        _ => (
            gemma4::text_params,
            gemma4::text_tensors,
            gemma4::cache_layers,
        ),
    }
}

/// The text fixtures (folder, file) and their parameter counts, derived in
/// [`text_counts_as_transformers`].
const COUNTS: [(&str, &str, u64); 5] = [
    ("gemma3n", "gemma-3n-e2b-text.json", 4_435_182_688),
    ("gemma3n", "gemma-3n-e4b-text.json", 6_835_235_568),
    ("gemma3n", "tiny-bias-untied-text.json", 148_076),
    ("gemma4", "gemma-4-e2b-text.json", 4_628_569_344),
    ("gemma4", "tiny-moe-keqv-text.json", 582_536),
];

/// Gemma-3n-E2B's text config. transformers on the meta device: 4,435,182,688.
/// By hand (`modeling_gemma3n.py`): hidden 2048, 30 layers, 8 heads of 256, 2 kv heads,
/// layers 20–29 reuse kv, MLP 8192, per-layer inputs 256, 4 AltUp streams, LAuReL rank 64.
/// - top: embed 262400·2048 = 537,395,200; per-layer embed 262144·(30·256) = 2,013,265,920;
///   per_layer_model_projection 2048·7680 = 15,728,640; its norm 256; AltUp projections and
///   unembed projections 6·2048² = 25,165,824; final norm 2048 → 2,591,557,888
/// - attention with own kv (20 layers): q and o 2·2048², k and v 2·2048·512, q/k norms 512:
///   10,486,272 each → 209,725,440; shared (10 layers): q, o, q norm 8,388,864 → 83,888,640
/// - every layer: MLP 3·2048·8192 = 50,331,648; four norms 8,192; AltUp scale 2048,
///   correction 16, prediction 64, router 8,192, router norm 2048 (12,368); LAuReL
///   2·2048·64 + 2048 = 264,192; per-layer gate, projection and norm 2·2048·256 + 2048 =
///   1,050,624 → 51,667,024 · 30 = 1,550,010,720
/// - total 2,591,557,888 + 209,725,440 + 83,888,640 + 1,550,010,720 = 4,435,182,688
///
/// Gemma-3n-E4B's text config. transformers on the meta device: 6,835,235,568.
/// By hand: 35 layers, layers 20–34 reuse kv, MLP 16384.
/// - top: 537,395,200 + 262144·8960 = 2,348,810,240 + 2048·8960 = 18,350,080 + 256 +
///   25,165,824 + 2048 → 2,929,723,648
/// - attention: 20 · 10,486,272 = 209,725,440; 15 · 8,388,864 = 125,832,960
/// - every layer: 3·2048·16384 = 100,663,296 + 8,192 + 12,368 + 264,192 + 1,050,624 =
///   101,998,672 · 35 = 3,569,953,520
/// - total 2,929,723,648 + 209,725,440 + 125,832,960 + 3,569,953,520 = 6,835,235,568 (also
///   `Gemma3nTextConfig()`'s class defaults: the defaults table's `gemma3n_text` row)
///
/// Gemma 3n's tiny config (`tiny-bias-untied-text.json`), exercising what the published
/// ones do not: per-layer MLP widths (MatFormer),
/// attention biases, three AltUp streams with the active one at 1, a per-layer vocabulary
/// smaller than the token one, an untied head, full layers not on the default pattern.
/// transformers on the meta device: 148,076. By hand (hidden 48, 4 heads of 16, 2 kv heads,
/// layers 3–4 reuse kv):
/// - embed and head 2·300·48 = 28,800; final norm 48; per-layer table 200·40 = 8,000, its
///   projection 48·40 = 1,920 and norm 8; AltUp projections 4·48² = 9,216 → 47,992
/// - own kv (layers 0–2): q 3,136, k 1,568, v 1,568, o 3,120, norms 32: 9,424 · 3 = 28,272;
///   shared (3–4): 3,136 + 3,120 + 16 = 6,272 · 2 = 12,544
/// - MLPs 3·48·(96 + 64 + 96 + 64 + 32) = 50,688
/// - every layer: norms 192, AltUp 48 + 9 + 27 + 144 + 48 = 276, LAuReL 2·48·4 + 48 = 432,
///   per-layer branch 2·48·8 + 48 = 816: 1,716 · 5 = 8,580
/// - total 148,076
///
/// Gemma-4-E2B's text config. transformers on the meta device: 4,628,569,344.
/// By hand (`modeling_gemma4.py`): 35 layers, full at 4, 9, …, 34; layers 15–34 reuse kv.
/// - top: embed 262144·1536 = 402,653,184; per-layer embed 262144·(35·256) = 2,348,810,240;
///   per_layer_model_projection 1536·8960 = 13,762,560; per-layer norm 256; final norm 1536
///   → 2,765,227,776
/// - attention, sliding, own kv (12 layers): q 1536·2048, o 2048·1536, k and v 2·1536·256,
///   q/k norms 2·256: 7,078,400 each
/// - full, own kv (3 layers, head 512): q and o 2·1536·4096, k and v 2·1536·512, norms
///   2·512: 14,156,800 each
/// - sliding shared (16 layers): q and o 2·3,145,728, q norm 256: 6,291,712 each
/// - full shared (4 layers): q and o 2·6,291,456, q norm 512: 12,583,424 each
/// - attention sum: 84,940,800 + 42,470,400 + 100,667,392 + 50,333,696 = 278,412,288
/// - MLP: 15 · 3·1536·6144 = 424,673,280; 20 shared, double wide, 20 · 3·1536·12288 =
///   1,132,462,080
/// - per layer: 4 norms 6,144, PLE gate and projection 2·1536·256, PLE norm 1536: 794,112,
///   times 35 is 27,793,920
/// - total 2,765,227,776 + 278,412,288 + 1,557,135,360 + 27,793,920 = 4,628,569,344
///
/// Gemma 4's tiny config (`tiny-moe-keqv-text.json`), exercising what E2B does not: keys-as-values global layers with their own kv
/// head count, attention biases, the expert block, no per-layer inputs, an untied head, and a
/// last layer forced to full attention. transformers on the meta device: 582,536.
/// By hand (biases included):
/// - embed and head 2·64,000, final norm 64: 128,064
/// - sliding, own kv (layers 0, 1, 3): q 4,160, k 2,080, v 2,080, o 4,160, norms 32:
///   12,512 each, 37,536
/// - full, own kv (layer 2; head 32, one kv head, no v): q 8,320, k 2,080, o 8,256, norms 64:
///   18,720
/// - sliding shared (layer 4): 8,336; full shared (layer 5, forced full): 16,608
/// - MLP 3·64·128 · 6 = 147,456; layer norms 256 · 6 = 1,536
/// - experts per layer: router 256, scale 64, per-expert scale 4, gate_up 4·96·64, down
///   4·64·48, three norms 192: 37,380 · 6 = 224,280
/// - total 582,536
#[test]
fn text_counts_as_transformers() {
    for (dir, name, count) in COUNTS {
        let params = readers(dir).0;
        assert_eq!(params(&config(dir, name), name).unwrap(), count, "{name}");
    }
}

/// Each text config is read into a model the estimator takes (`ModelSpec`), whose inventory
/// is the same tensor list, name by name and shape by shape, as the reader's own count (which
/// the tests here hold to transformers): Gemma 3n's E2B, E4B and tiny config (AltUp, LAuReL,
/// per-layer widths, biases, an untied head), Gemma 4's E2B (per-layer inputs, kv-shared
/// layers, the double-wide MLP) and tiny MoE config (keys as values, experts beside the MLP,
/// biases, an untied head).
#[test]
fn text_is_read_for_the_estimator() {
    for (dir, name, count) in COUNTS {
        let cfg = config(dir, name);
        let reader = readers(dir).1(&cfg, name).unwrap();
        assert_inventory_is_reader(&cfg, name, count, reader);
    }
}

/// Every tensor name and shape equals `model.named_parameters()` on the meta device
/// (`gemma3n/tiny-bias-untied-tensors.json` and `gemma4/tiny-moe-keqv-tensors.json`, written by
/// transformers 5.24).
#[test]
fn tensor_names_and_shapes_match_transformers() {
    for (dir, name, tensors) in [
        (
            "gemma3n",
            "tiny-bias-untied-text.json",
            "tiny-bias-untied-tensors.json",
        ),
        (
            "gemma4",
            "tiny-moe-keqv-text.json",
            "tiny-moe-keqv-tensors.json",
        ),
    ] {
        let ours = by_name(readers(dir).1(&config(dir, name), "tiny").unwrap());
        assert_named_parameters(&ours, dir, tensors);
    }
}

/// Gemma 3n:
/// The `DynamicCache` after a prefill, as measured on the CPU with transformers 5.24 (the tiny
/// config, batch 2, 20 tokens, then one more: the cache layers' `keys.numel() +
/// values.numel()` summed, 6,400 then 6,528; layers DynamicSlidingWindowLayer,
/// DynamicLayer, DynamicSlidingWindowLayer, DummyLayer ×2). By hand: sliding owners 0 and 2
/// keep min(20, 16 − 1) = 15 tokens, 2·2·2·15·16 = 1,920 each; the full owner 1 keeps 20,
/// 2·2·2·20·16 = 2,560 → 6,400; a token more: 3,840 + 2·2·2·21·16 = 6,528.
///
/// Gemma 4:
/// The `DynamicCache` after a prefill, as measured on the CPU with transformers 5.24 (the tiny
/// config with `sliding_window: 8` and `hidden_size_per_layer_input: 4` — per-layer inputs do
/// not touch the cache, and 5.24 fails on kv sharing without them — batch 2, 20 tokens, then
/// one more: the cache layers' `keys.numel() + values.numel()` summed, 5,248 then 5,376;
/// layers are DynamicSlidingWindowLayer ×2, DynamicLayer, DynamicSlidingWindowLayer,
/// DummyLayer ×2). By hand: sliding owners 0, 1, 3 keep min(20, 8 − 1) = 7 tokens,
/// 2·2·2·7·16 = 896 each; the full owner 2 (one global kv head of 32) 2·2·1·20·32 = 2,560;
/// layers 4 and 5 reuse → 3·896 + 2,560 = 5,248; a token more: 2,688 + 2·2·21·32 = 5,376.
#[test]
fn dynamic_cache_matches_transformers() {
    let mut g4 = config("gemma4", "tiny-moe-keqv-text.json");
    g4.insert("sliding_window".into(), 8.into());
    let g3n = config("gemma3n", "tiny-bias-untied-text.json");
    for (dir, cfg, after_20, after_21) in
        [("gemma3n", g3n, 6_400, 6_528), ("gemma4", g4, 5_248, 5_376)]
    {
        let cache = readers(dir).2(&cfg, "t").unwrap();
        assert_eq!(cache.elements(2, 20).unwrap(), after_20, "{dir}");
        assert_eq!(cache.elements(2, 21).unwrap(), after_21, "{dir}");
    }
}

/// Gemma 3n:
/// E2B, one sequence of 4,096 tokens: only layers 0–19 hold a cache. 16 sliding layers keep
/// 511 tokens of two 256-wide kv heads: 2·2·511·256 = 523,264 each, 8,372,224; 4 full layers
/// keep 4,096: 2·2·4096·256 = 4,194,304 each, 16,777,216 → 25,149,440 elements.
///
/// Gemma 4:
/// E2B, one sequence of 4,096 tokens: only layers 0–14 hold a cache. 12 sliding layers keep
/// 511 tokens of one 256-wide kv head: 2·511·256 = 261,632 each, 3,139,584; 3 full layers keep
/// 4,096 of one 512-wide head: 2·4096·512 = 4,194,304 each, 12,582,912 → 15,722,496 elements
/// (31.4 MB in bf16), where 35 layers without sharing would hold far more.
#[test]
fn e2b_cache_by_hand() {
    for (dir, name, elements) in [
        ("gemma3n", "gemma-3n-e2b-text.json", 25_149_440),
        ("gemma4", "gemma-4-e2b-text.json", 15_722_496),
    ] {
        let cache = readers(dir).2(&config(dir, name), "e2b").unwrap();
        assert_eq!(cache.elements(1, 4096).unwrap(), elements, "{dir}");
    }
}
