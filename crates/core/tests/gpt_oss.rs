//! gpt-oss from its published config (`crates/formats/tests/fixtures/unsupported/gpt-oss-20b.json`):
//! KV per layer kind, MXFP4 weights in an inference job. Every expected number is derived by
//! hand below from the model's shapes.

mod common;
mod measured;

use serde_json::{json, Value};

fn config() -> Value {
    measured::formats_fixture("unsupported/gpt-oss-20b.json")
}

use measured::run;

/// gpt-oss-20b caches 8 KV heads of 64 per layer: 2 · 8 · 64 · 2 B = 2,048 B per token and
/// layer in bf16. Its 12 sliding layers (`layer_types`, `sliding_window` 128) hold at most 128
/// tokens, its 12 full layers every token: at 4,096 tokens 12 · 128 · 2,048 + 12 · 4,096 ·
/// 2,048 = 3,145,728 + 100,663,296 B per sequence once decoding; below the window all 24
/// layers hold all. A 4,096-token prompt peaks in its prefill, where the sliding layers hold
/// the whole prompt too (`DynamicSlidingWindowLayer` keeps a view of the prompt's
/// `torch.cat`): 24 · 4,096 · 2,048 = 201,326,592 B.
#[test]
fn kv_cache_per_layer_kind() {
    let kv = |batch: u64, seq: u64| measured::kv_cache_decoded(&config(), batch, seq);
    assert_eq!(kv(1, 4096), 3_145_728 + 100_663_296);
    assert_eq!(kv(2, 4096), 2 * (3_145_728 + 100_663_296));
    assert_eq!(kv(1, 100), 24 * 100 * 2_048);
    assert_eq!(measured::kv_cache(&config(), 1, 4096), 201_326_592);
}

/// An inference job on the published checkpoint holds its weights as published: MXFP4 experts
/// and bf16 elsewhere, 13,761,264,768 B (the checkpoint index's `total_size`; the arithmetic is
/// in crates/formats/tests/param_counts.rs `gpt_oss_20b`), each tensor rounded up to the
/// caching allocator's 512 B: per layer the o_proj bias (5,760 B → +384), the sinks (128 B →
/// +384), the router bias (64 B → +448) and two norms (+384 each), 1,984 B × 24, and the final
/// norm (+384): 48,000 B; every other tensor is a multiple of 512 B (the MXFP4 blocks
/// 32 · 5,760 · 90 · 17 B = 550,800 · 512).
#[test]
fn weights_are_the_mxfp4_checkpoint() {
    let r = run(
        json!({"model": {"hf_config": config()}, "task": "infer", "batch": 1,
                       "seq": 1, "precision": "bf16"}),
    );
    assert_eq!(24 * (384 + 384 + 448 + 2 * 384) + 384, 48_000);
    assert_eq!(r.per_gpu.model_states.parameters, 13_761_264_768 + 48_000);
}
