//! Gemma 3n's and Gemma 4's E2B text models (`gemma3n_text`, `gemma4_text`) estimated, not
//! only counted: their KV caches (10 of Gemma 3n's 30 layers and 20 of Gemma 4's 35 reuse
//! another layer's keys and values and cache nothing), fit and a training step, each check run
//! on both by one piece of code. The families' measured steps are in `gemma3n.rs` and
//! `gemma4.rs`.

mod common;
mod measured;

use serde_json::{Map, Value};
use vramscope_formats::error::Result;
use vramscope_formats::hf_config::gemma3n::{self, CacheLayers};
use vramscope_formats::hf_config::gemma4;

/// Gemma-3n-E2B's text config (`crates/formats/tests/fixtures/gemma3n/`).
fn gemma3n_e2b() -> Value {
    measured::formats_fixture("gemma3n/gemma-3n-e2b-text.json")
}

/// Gemma-4-E2B's text config (`crates/formats/tests/fixtures/gemma4/`).
fn gemma4_e2b() -> Value {
    measured::formats_fixture("gemma4/gemma-4-e2b-text.json")
}

/// A family's reader of the layers a `DynamicCache` holds.
type CacheReader = fn(&Map<String, Value>, &str) -> Result<CacheLayers>;

/// The bf16 caches at 1 × 4,096 by hand (`cache_utils.py` `DynamicCache`); doubling the
/// context adds only the full layers' part.
///
/// Gemma 3n (`modeling_gemma3n.py`, a `Gemma3nTextConfig`): layers 20–29 are kv-sharing
/// consumers (`DummyLayer`, nothing stored); of layers 0–19, 4, 9, 14 and 19 are full (2 kv
/// heads of 256: K and V 2·2·256·4,096 values · 2 B = 8,388,608 B each, 33,554,432 B), the
/// other 16 sliding over the 512-token window (2·2·256·512 · 2 B = 1,048,576 B each,
/// 16,777,216 B). Total 50,331,648 B. (transformers' sliding layers keep `sliding_window - 1`
/// = 511 tokens, the estimator a whole window, as for every sliding family: 16 · 2·2·256 · 2 B
/// = 32,768 B more here.) That is the cache once decoding; at the end of a 4,096-token
/// prefill every owning layer still holds the whole prompt (a sliding layer's kept keys are a
/// view of the prompt's storage until its first decode step,
/// `DynamicSlidingWindowLayer.update`): 20 · 2·2·256·4,096 · 2 B = 167,772,160 B.
///
/// Gemma 4 (`modeling_gemma4.py`, a `Gemma4TextConfig`): layers 15–34 are kv-sharing
/// consumers; of layers 0–14, 4, 9 and 14 are full (1 kv head of 512: K and V 2·512·4,096
/// values · 2 B = 8,388,608 B each, 25,165,824 B), the other 12 sliding (1 kv head of 256 over
/// the 512-token window: 2·256·512 · 2 B = 524,288 B each, 6,291,456 B). Total 31,457,280 B.
/// That is the cache once decoding (a generation reaching 4,096 tokens from a short prompt:
/// transformers' sliding layers keep a view of `sliding_window − 1` = 511 tokens over the
/// storage of the last `torch.cat`, 511 + 1 = 512 tokens). A 4,096-token prompt peaks in its
/// prefill, where the 12 sliding layers hold the whole prompt too: 25,165,824 + 12 ·
/// 2·256·4,096 · 2 B = 25,165,824 + 50,331,648 = 75,497,472 B.
#[test]
fn e2b_kv_cache_by_hand() {
    let g3n = (50_331_648, 33_554_432, 167_772_160);
    let g4 = (31_457_280, 25_165_824, 75_497_472);
    for (cfg, (decoded, grown, prefill)) in [(gemma3n_e2b(), g3n), (gemma4_e2b(), g4)] {
        measured::assert_windowed_cache_at_4096(&cfg, decoded, grown, prefill);
    }
}

/// Below the window the estimator's cache equals the formats reader's `DynamicCache` model
/// (`cache_layers`, itself checked against a CPU-measured cache), in bf16, at 300 tokens:
/// Gemma 3n's 20 owning layers · 2·2·256·300 = 6,144,000 values, 12,288,000 B; Gemma 4's 12
/// sliding layers · 2·256·300 + 3 full · 2·512·300 = 2,764,800 values, 5,529,600 B.
#[test]
fn e2b_kv_cache_agrees_with_the_dynamic_cache_below_the_window() {
    let cases: [(Value, CacheReader, u64); 2] = [
        (gemma3n_e2b(), gemma3n::cache_layers, 6_144_000),
        (gemma4_e2b(), gemma4::cache_layers, 2_764_800),
    ];
    for (cfg, reader, want) in cases {
        let layers = reader(cfg.as_object().unwrap(), "e2b").unwrap();
        let elements = layers.elements(1, 300).unwrap();
        assert_eq!(elements, want);
        assert_eq!(measured::kv_cache(&cfg, 1, 300), 2 * elements);
    }
}

/// fit answers for E2B (bf16 inference on an H200): a largest batch at 4,096 tokens, and a
/// smaller one at a long context where the full layers' cache has grown: Gemma 3n at 32,768
/// tokens (the model's positions; its four full layers' cache eightfold), Gemma 4 at 65,536
/// (of 131,072 positions; its three full layers' cache sixteenfold).
#[test]
fn e2b_fit_answers() {
    for (cfg, positions, long) in [
        (gemma3n_e2b(), 32_768, 32_768),
        (gemma4_e2b(), 131_072, 65_536),
    ] {
        let fit = |seq: u64| measured::max_batch_bf16_h200(&cfg, seq, positions);
        let (short, long) = (fit(4096), fit(long));
        assert!(long >= 1 && short > long, "{short} {long}");
    }
}

/// Training E2B is estimated (no refusal): bf16-mixed AdamW at 1 × 2,048 with SDPA; the
/// parameters are the readers' counts (Gemma 3n 4,435,182,688, Gemma 4 4,628,569,344, each
/// derived by hand in the formats tests).
#[test]
fn e2b_training_is_estimated() {
    for (cfg, params) in [
        (gemma3n_e2b(), 4_435_182_688),
        (gemma4_e2b(), 4_628_569_344),
    ] {
        let r = measured::train_step(&cfg, "sdpa");
        assert!(r.per_gpu.components.activations > 0);
        assert_eq!(r.model.params_total, params);
    }
}
