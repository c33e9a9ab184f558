//! Llama 4 (`llama4`, `Llama4ForConditionalGeneration`) in an estimate: the KV cache of its
//! chunked and NoPE layers with image tokens in the sequence, and tiny text-only training steps
//! measured on the CPU through `Llama4ForConditionalGeneration` (`validation/cpu-measured-llama4.json`,
//! made with `scripts/measure_llama4.py` over `../shared/measure/measure.py`; validation/README.md).

mod measured;

use serde_json::{json, Value};

fn scout() -> Value {
    json!({"hf_config": measured::formats_fixture("vlm/llama-4-scout-17b-16e.json")})
}

/// KV bytes of one bf16 inference job.
fn kv(job: Value) -> u64 {
    let mut j = json!({"model": scout(), "task": "infer", "precision": "bf16"});
    j.as_object_mut()
        .unwrap()
        .extend(job.as_object().unwrap().clone());
    measured::run(j).per_gpu.components.kv_cache
}

/// Scout's language model caches as `llama4_text` does (`moe_families.rs`): 8 KV heads of 128,
/// 4,096 B per token and layer in bf16; transformers' cache keeps a `"chunked_attention"` layer
/// as a sliding layer of `attention_chunk_size` (`cache_utils.py` `DynamicSlidingWindowLayer`),
/// so at 32,768 tokens the 36 RoPE layers hold 8,192 and the 12 NoPE layers every token:
/// 4,096 · (36 · 8,192 + 12 · 32,768) = 2,818,572,288 B.
///
/// One 336 × 336 image adds its 147 tokens to the sequence (`processing_llama4.py`: start,
/// `<|image|>`, 144 patch tokens, end): at 4,096 text tokens all 48 layers hold 4,243 tokens,
/// 48 · 4,243 · 4,096 = 834,207,744 B.
#[test]
fn kv_cache_of_chunked_layers_and_image_tokens() {
    assert_eq!(kv(json!({"batch": 1, "seq": 32_768})), 2_818_572_288);
    let image = json!({"count": 1, "width": 336, "height": 336});
    assert_eq!(48 * 4_243 * 4_096, 834_207_744u64);
    assert_eq!(
        kv(json!({"batch": 1, "seq": 4_096, "images": image})),
        834_207_744
    );
}
