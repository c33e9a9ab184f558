//! Gemma 4 (`gemma4`) in an estimate: without its audio tower (`audio_config` null: the 26B-A4B
//! and 31B) the KV cache with an image's tokens in the sequence, a training step with images
//! (the tower over its padded patches), `fit`; with it (E2B) the tower loaded and not run; tiny training steps measured on the CPU
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
/// context; on E2B (with its audio tower; weights fp32, the fixture naming no dtype) in
/// bf16-mixed training on one H200 a largest batch.
#[test]
fn fit_31b_and_e2b() {
    let fit = |job: Value| {
        let (m, resolved) = common::prepared_json(&job);
        vramscope_core::fit::fit(&m, &resolved).unwrap()
    };
    let answer = fit(json!({
        "model": model("gemma-4-31b.json"), "task": "infer", "precision": "bf16",
        "batch": 1, "seq": 4096, "gpu": "H200",
        "images": {"count": 1, "width": 1024, "height": 1024}}));
    assert!(answer.max_context.is_some_and(|c| c > 4096));
    let answer = fit(json!({"model": model("gemma-4-e2b.json"), "task": "train",
        "precision": "bf16-mixed", "seq": 1024, "gpu": "H200"}));
    assert!(answer.max_batch.is_some_and(|b| b >= 1), "{answer:?}");
}

/// E2B (`gemma-4-e2b.json`, `audio_config` set) estimated, not refused: the whole model's
/// 5,104,297,504 parameters loaded (counted by hand in the formats crate's `tests/gemma4.rs`,
/// equal to transformers on the meta device), of which the language model's 4,628,569,344 train
/// on text; with images the vision tower's 167,364,608 and `embed_vision`'s 1,179,648 train too
/// (4,797,113,600). The audio tower and `embed_audio` (304,824,608 + 2,359,296 = 307,183,904)
/// never run (`Gemma4Model.forward` calls `get_audio_features` only on `input_features`): no
/// gradient, no AdamW state, one note. The 26B's tower likewise trains only with images:
/// 25,233,141,760 of 25,805,933,872 on text (the meta-device parts in `vlm_gemma4.rs`).
#[test]
fn e2b_audio_loaded_not_run() {
    let job = |name: &str, images: bool| {
        let mut j = json!({"model": model(name), "task": "train", "precision": "fp32",
            "batch": 1, "seq": 512, "optimizer": "adamw"});
        if images {
            j["images"] = json!({"count": 1, "width": 512, "height": 512});
        }
        measured::run(j)
    };
    let text = job("gemma-4-e2b.json", false);
    assert_eq!(text.model.params_total, 5_104_297_504);
    assert_eq!(text.model.params_trainable, 4_628_569_344);
    let note = "audio inputs are not modelled: the audio tower's 307183904 parameters are \
                loaded, not run";
    assert!(
        text.warnings.iter().any(|w| w == note),
        "{:?}",
        text.warnings
    );
    // fp32 AdamW: the weights as loaded (4 B each, at least), two fp32 states per trained one.
    let c = &text.per_gpu.components;
    assert!(c.parameters >= 4 * 5_104_297_504);
    assert_eq!(c.optimizer_states, 2 * 4 * 4_628_569_344);
    let images = job("gemma-4-e2b.json", true);
    assert_eq!(images.model.params_trainable, 4_797_113_600);
    // Each state tensor is 512-rounded: the tower's 16 layers' `q_norm` and `k_norm` ([64],
    // 256 B in fp32) take 512 B each, 32 · 2 states · 256 B = 16,384 B more.
    assert_eq!(
        images.per_gpu.components.optimizer_states,
        2 * 4 * 4_797_113_600 + 32 * 2 * 256
    );
    // The tower that never runs adds no matmul to the step time: the same config without
    // `audio_config` times its forward and backward the same. (The optimizer step's time is
    // still modelled over every parameter of a full fine-tune, frozen or not run included.)
    let timed = |cfg: Value| {
        let r = measured::run(json!({"model": {"hf_config": cfg}, "task": "train",
            "precision": "fp32", "batch": 8, "seq": 4096, "optimizer": "adamw", "gpu": "H200"}));
        (
            r.model.params_total,
            r.throughput.expect("a GPU named: a step time"),
        )
    };
    let with_audio = measured::formats_fixture("gemma4/gemma-4-e2b.json");
    let mut no_audio = with_audio.clone();
    no_audio["audio_config"] = Value::Null;
    let (all, t) = timed(with_audio);
    let (bare, t_bare) = timed(no_audio);
    assert_eq!(all - bare, 307_183_904);
    let (t, t_bare) = (
        serde_json::to_value(t).unwrap(),
        serde_json::to_value(t_bare).unwrap(),
    );
    for k in ["forward_s", "backward_s"] {
        assert!(t[k].is_number(), "{t}");
        assert_eq!(t[k], t_bare[k]);
    }
    assert_eq!(
        job("gemma-4-26b-a4b.json", false).model.params_trainable,
        25_233_141_760
    );
    assert_eq!(
        job("gemma-4-26b-a4b.json", true).model.params_trainable,
        25_805_933_872
    );
}

/// The prefill of the tiny Gemma 4 with an audio tower in HF `generate`, one new token
/// (`validation/cpu-measured-gemma4audio-prefill.json`, `scripts/measure_gemma4audio_prefill.py`:
/// batch 2, fp32, SDPA; the `gemma4` wrapper and its text model alone, prompts 256 and 1,024).
///
/// The wrapper holds 2,572 B a token more than the text model, by hand from
/// `Gemma4Model.forward`: `llm_inputs_embeds` (the `torch.where` over the placeholders, 256 · 4
/// = 1,024 B) and the raw per-layer lookup it passes down (6 layers · 64 · 4 = 1,536 B: a local
/// of the wrapper's forward to its end, where the text model alone frees it once projected),
/// the `llm_input_ids` copy (8 B) and four bool masks (4 B): 512 · 2,572 = 1,316,864 and 2,048 ·
/// 2,572 = 5,267,456, the measured differences, and the estimate's (`stages.rs`
/// `gemma4_wrapper_locals`), walk and stream alike.
///
/// `Gemma4TextModel.forward` runs the kv-sharing layers (4 and 5) on the last token alone
/// (`_maybe_slice_kv_shared_inputs`, `logits_to_keep = 1`): in the walk their marks sit below
/// layer 0's, though their MLP is twice as wide (each of layer 0's three `[2, 256, 512]` fp32
/// MLP tensors alone is 1,048,576 B; a sliced layer's `[2, 1, 1024]` 8,192). The walk's peak
/// over the call's start is within 3 % of the measurement (−0.11 % / −1.41 % on the wrapper;
/// the text model's by hand in `tests/prefill.rs`), where it was +12.1 % / +5.4 % with the
/// whole cache held from the call's start, the per-layer inputs' training saves and no
/// wrapper locals.
#[test]
fn prefill_within_three_percent_on_the_wrapper() {
    let rec: Value = common::validation("cpu-measured-gemma4audio-prefill.json");
    let runs = rec["runs"].as_array().unwrap();
    let peak = |model: &str, prompt: u64| {
        let r = runs
            .iter()
            .find(|r| r["model"] == model && r["prompt"] == prompt)
            .unwrap();
        r["peak_over_call_start"].as_u64().unwrap()
    };
    for prompt in [256u64, 1024] {
        let extra = peak("gemma4", prompt) - peak("gemma4_text", prompt);
        assert_eq!(extra, 2 * prompt * (1024 + 1536 + 8 + 4));
        let walk_of = |model: &str| {
            let job = json!({"model": {"hf_config": rec["hf_configs"][model]},
                "task": "infer", "batch": 2, "seq": prompt, "new_tokens": 1,
                "precision": "fp32", "attention": "sdpa"});
            let r = measured::run(job.clone());
            let stream = common::stream_call_peak(&serde_json::from_value(job).unwrap());
            (
                r.per_gpu.peaks.peak_allocated.unwrap() - r.timeline[0].allocated,
                stream,
                r,
            )
        };
        let (walk, stream, r) = walk_of("gemma4");
        let (text_walk, text_stream, _) = walk_of("gemma4_text");
        assert_eq!(walk - text_walk, extra);
        assert_eq!(stream - text_stream, extra);
        let mark = |label: &str| {
            let t = r.timeline.iter().find(|t| t.label == label).unwrap();
            t.allocated
        };
        assert!(mark("layer 4") < mark("layer 0") && mark("layer 5") < mark("layer 0"));
        let want = peak("gemma4", prompt) as f64;
        for ours in [walk, stream] {
            let error = ours as f64 / want - 1.0;
            assert!(
                error.abs() < 0.03,
                "{prompt}: {ours} vs {want} ({error:+.4})"
            );
        }
    }
}
