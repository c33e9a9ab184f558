//! Gemma 4 without its audio tower (`gemma4`, `audio_config` null: the 26B-A4B and 31B) in an
//! estimate: the KV cache with an image's tokens in the sequence, a training step with images
//! (the tower over its padded patches), `fit`, and tiny training steps measured on the CPU
//! through `Gemma4ForConditionalGeneration` (`validation/cpu-measured-gemma4vis.json`, held to
//! 3 % in `cpu_measured.rs`; made with `scripts/measure_gemma4vis.py` over
//! `../shared/measure/measure.py`).

mod common;
mod measured;

use serde_json::{json, Value};

fn model(name: &str) -> Value {
    json!({"hf_config": measured::formats_fixture(&format!("gemma4/{name}"))})
}

fn with(base: Value, extra: Value) -> Value {
    let mut j = base;
    j.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    j
}

/// The 31B's cache in bf16 (`cache_utils.py`: a sliding layer keeps its last
/// `sliding_window − 1` = 1,023 tokens, a full layer every token; keys and values separate even
/// with keys as values): 50 sliding layers of 16 KV heads of 256, 2 · 16 · 256 · 2 = 16,384 B a
/// token; 10 full layers of 4 KV heads of 512, 2 · 4 · 512 · 2 = 8,192 B a token. One
/// 1024 × 1024 image is 258 tokens (`Gemma4ImageProcessor`: resized to 768², 48² patches / 9 =
/// 256 soft tokens, `<boi>`, `<eoi>`), so 4,096 text tokens become 4,354. The estimator holds a
/// whole window on a sliding layer, as for every sliding family (one token more than
/// transformers keeps: `tests/gemma4.rs`), so 50 · 1,024 · 16,384 + 10 · 4,354 · 8,192 =
/// 838,860,800 + 356,679,680 = 1,195,540,480 for 4,354 tokens once decoding. The job's one
/// decode step (two new tokens, the second never fed back) holds the first new token too on
/// the full layers: 838,860,800 plus 10 · 4,355 · 8,192 = 356,761,600, so 1,195,622,400. The
/// peak is the prefill's end, where a sliding layer's kept keys are still a view of the whole
/// prompt's storage (`DynamicSlidingWindowLayer.update`, `tests/generate_sliding.rs`): 50 ·
/// 4,354 · 16,384 = 3,566,796,800, plus 356,679,680, so 3,923,476,480.
#[test]
fn kv_cache_with_image_tokens() {
    let job = json!({"model": model("gemma-4-31b.json"), "task": "infer", "precision": "bf16",
        "batch": 1, "seq": 4096, "new_tokens": 2,
        "images": {"count": 1, "width": 1024, "height": 1024}});
    let r = measured::run(job);
    assert_eq!(r.per_gpu.components.kv_cache, 3_923_476_480);
    assert_eq!(measured::last_decode_kv(&r), 1_195_622_400);
}

/// The most activation bytes the step's timeline holds at once.
fn top_activations(job: Value) -> u64 {
    let r = serde_json::to_value(measured::run(job)).unwrap();
    r["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["by_category"]["activations"].as_u64())
        .max()
        .unwrap_or(0)
}

/// A training step of the 26B-A4B with one image a sequence: the tower runs over 2,520 padded
/// patches whatever the image's size, and the processor resizes a square of any size to the
/// budget's 768² (`get_aspect_ratio_preserving_size`: a 96 px square scales up by
/// √(645,120 / 9,216) = 8.37 to 803 → 16 · 48; a 2,048 px one down to 803 → 768), so both cost
/// 258 tokens and the same activations. The activations of a
/// step with a small image exceed those of the text alone by at least the tower's 27 layers,
/// each keeping at least its 19 fp32 tensors of 2,520 · 1,152 · 4 B (the fp32 saved set of
/// `vision_gemma4.rs`): 27 · 19 · 11,612,160 = 5,957,038,080 B.
#[test]
fn training_with_images_runs_the_padded_tower() {
    let base = json!({"model": model("gemma-4-26b-a4b.json"), "task": "train",
        "precision": "fp32", "batch": 1, "seq": 512, "optimizer": "adamw"});
    let text = top_activations(base.clone());
    let small = json!({"images": {"count": 1, "width": 96, "height": 96}});
    let large = json!({"images": {"count": 1, "width": 2048, "height": 2048}});
    let with_small = top_activations(with(base.clone(), small));
    let with_large = top_activations(with(base, large));
    assert_eq!(27 * 19 * 2520 * 1152 * 4u64, 5_957_038_080);
    assert!(text > 0);
    assert!(with_small >= text + 5_957_038_080, "{text} {with_small}");
    assert_eq!(with_large, with_small);
}

/// `fit` on the 31B in bf16 inference with an image a sequence on one H200 finds a longest
/// context, and a config with an audio tower (E2B) is refused when loaded.
#[test]
fn fit_and_audio_refused() {
    let job: vramscope_core::job::Job = serde_json::from_value(json!({
        "model": model("gemma-4-31b.json"), "task": "infer", "precision": "bf16",
        "batch": 1, "seq": 4096, "gpu": "H200",
        "images": {"count": 1, "width": 1024, "height": 1024}}))
    .unwrap();
    let m = vramscope_formats::model_source::load_job_model(job.model.as_ref().unwrap()).unwrap();
    let max = m.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved = job.resolve(max).unwrap();
    let answer = vramscope_core::fit::fit(&m.into_input(), &resolved).unwrap();
    assert!(answer.max_context.is_some_and(|c| c > 4096));
    let audio = json!({"hf_config": measured::formats_fixture("gemma4/gemma-4-e2b.json")});
    let err =
        vramscope_formats::model_source::load_job_model(&serde_json::from_value(audio).unwrap())
            .unwrap_err()
            .to_string();
    assert!(err.contains("audio tower is not modelled"), "{err}");
}
