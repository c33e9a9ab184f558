//! Llama-3.2-Vision (`mllama`): the step against tiny mllama steps measured on the CPU tensor
//! by tensor (`validation/cpu-measured-vlm.json`, `../shared/measure/measure.py` patched as
//! `scripts/measure_mllama.patch`; validation/README.md), and the cross-attention cache of
//! the published 11B worked by hand from `modeling_mllama.py`.

mod common;
mod measured;

use measured::run;
use serde_json::{json, Value};

fn fixture(name: &str) -> Value {
    measured::formats_fixture(&format!("vlm/{name}"))
}

/// Every measured mllama case (peaks net of the cuBLAS workspaces a CPU run lacks, activations
/// at the peak, bytes per block) within its 3 %.
#[test]
fn measured_mllama_steps_within_tolerance() {
    let all = measured::compare("cpu-measured-vlm.json");
    let mine: Vec<_> = all.iter().filter(|c| c.id.contains("mllama")).collect();
    assert!(mine.len() >= 6, "{} mllama cases", mine.len());
    for c in mine {
        assert!(
            c.error.abs() <= c.tolerance,
            "{}: {:+.2} %",
            c.id,
            100.0 * c.error
        );
    }
}

/// The cache as the whole generation leaves it: the most `kv_cache` bytes over the timeline
/// (a dynamic cache holds only the prompt's keys through the prefill, where the peak of a
/// short generation is, and all of them at the last decode step).
fn infer(images: Value, new_tokens: u64) -> u64 {
    let r = run(
        json!({"model": {"hf_config": fixture("llama-3.2-11b-vision-instruct.json")},
               "task": "infer", "batch": 1, "seq": 1000, "new_tokens": new_tokens,
               "images": images}),
    );
    r.timeline
        .iter()
        .map(|p| p.by_category.of(vramscope_core::report::Category::KvCache))
        .max()
        .unwrap_or(0)
}

/// The 11B's cache, bf16, batch 1, 1000 text tokens: each self-attention layer holds k and v
/// of 8 KV heads × 128 per token, 2 · 8 · 128 · 2 B = 4,096 B; 32 of the 40 layers are
/// self-attention. With one image the text is one `<|image|>` token longer (1001) and each of
/// the 8 cross-attention layers holds the image's 4 tiles × 1601 = 6404 vision tokens
/// (`_prepare_static_cache`: `num_images · max_num_tiles · num_patches`), whatever the
/// generated length: 32 · 1001 · 4096 + 8 · 6404 · 4096 = 131,203,072 + 209,846,272 B. Without
/// images transformers skips the cross-attention layers: 32 · 1000 · 4096 B.
#[test]
fn cross_attention_cache_by_hand() {
    let one = json!({"count": 1, "width": 1024, "height": 768});
    assert_eq!(infer(one.clone(), 0), 32 * 1001 * 4096 + 8 * 6404 * 4096);
    assert_eq!(infer(one, 0), 341_049_344);
    assert_eq!(infer(Value::Null, 0), 32 * 1000 * 4096);
    let two = json!({"count": 2, "width": 300, "height": 300});
    assert_eq!(infer(two, 0), 32 * 1002 * 4096 + 8 * 2 * 6404 * 4096);
}

/// The cross-attention cache does not grow with the generated tokens: 500 new tokens add
/// 32 · 499 · 4096 B, the self-attention layers' share only (the last sampled token is never
/// fed back, so the cache ends 499 tokens longer: `kv::generate_cache_tokens`).
#[test]
fn cross_attention_cache_is_constant_in_generation() {
    let one = json!({"count": 1, "width": 1024, "height": 768});
    let grown = infer(one.clone(), 500) - infer(one, 0);
    assert_eq!(grown, 32 * 499 * 4096);
}

/// The image's size does not change the step: every image is padded to `max_num_tiles` tiles
/// (`pad_batches_and_tiles`), so a 560×560 image (one tile) costs what a 1120×1120 one (four)
/// does.
#[test]
fn image_size_does_not_change_the_step() {
    let job = |w: u64, h: u64| {
        run(
            json!({"model": {"hf_config": fixture("llama-3.2-11b-vision-instruct.json")},
                   "task": "train", "batch": 1, "seq": 512, "precision": "bf16-mixed",
                   "freeze": ["vision"], "peft": {"method": "lora", "rank": 8,
                   "targets": ["language:q_proj", "language:v_proj"]},
                   "images": {"count": 1, "width": w, "height": h}}),
        )
        .per_gpu
        .peaks
        .peak_allocated
    };
    assert_eq!(job(560, 560), job(1120, 1120));
}
