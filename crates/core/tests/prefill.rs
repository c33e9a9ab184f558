//! HF `generate`'s prefill, layer by layer (`estimate/prefill_walk.rs`, `alloc_events/infer.rs`),
//! on the tiny Gemma 4 text model of `validation/cpu-measured-gemma4audio-prefill.json`
//! (`scripts/measure_gemma4audio_prefill.py`: `Gemma4ForCausalLM`, fp32, SDPA, batch 2, one new
//! token; hidden 256, MLP 512 (1,024 on the two kv-sharing layers), 4 heads, 2 KV heads of 64
//! on the sliding layers 0, 1, 3 and of 128 on the full layer 2, layers 4 and 5 reading layers
//! 3's and 2's keys, per-layer inputs of 6 × 64, window 128). Every figure is derived below
//! from `modeling_gemma4.py` / `cache_utils.py` (transformers 5.24) and set beside the
//! profile of the measured call (each tensor live at its peak, read off `torch.profiler`'s
//! allocation events with the op that made it: `scripts/generate_live_at_peak.py`); and Gemma
//! 3n's tiny text model's prefill peak (`gemma3n_text_prefill_peak_by_hand`).

mod common;

use serde_json::{json, Value};
use vramscope_core::job::Job;

/// The job of the text model's measured run at `prompt`.
fn text_job(rec: &Value, prompt: u64) -> Job {
    job_of(rec, "gemma4_text", prompt)
}

/// The job of `model`'s measured run at `prompt` (batch 2, one new token, fp32, SDPA).
fn job_of(rec: &Value, model: &str, prompt: u64) -> Job {
    serde_json::from_value(json!({
        "model": {"hf_config": rec["hf_configs"][model]}, "task": "infer", "batch": 2,
        "seq": prompt, "new_tokens": 1, "precision": "fp32", "attention": "sdpa"}))
    .unwrap()
}

/// The measured call's peak over its start.
fn measured(rec: &Value, model: &str, prompt: u64) -> u64 {
    rec["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == model && r["prompt"] == prompt)
        .unwrap()["peak_over_call_start"]
        .as_u64()
        .unwrap()
}

/// The walk's peak over the call's start (the weights, the prompt's ids and mask and the BLAS
/// workspace left out), and the cache at each of its marks.
fn walk(job: &Job) -> (u64, Vec<(String, u64)>) {
    let r = common::estimate_job(job);
    let start = r.timeline[0].allocated;
    let kv = r
        .timeline
        .iter()
        .map(|p| {
            let bytes = p.by_category.get("kv_cache").copied().unwrap_or(0);
            (p.label.to_string(), bytes)
        })
        .collect();
    (r.per_gpu.peaks.peak_allocated.unwrap() - start, kv)
}

/// `DynamicCache` makes each layer's keys and values at that layer's first `update`: none at
/// the call's start, then per token (2 sequences) a sliding layer's keys and values 2 heads ·
/// 64 · 4 B · 2 = 1,024 B and the full layer's 2 · 128 · 4 · 2 = 2,048 B; the kv-sharing layers
/// 4 and 5 make none (`Gemma4TextAttention.forward`: `shared_kv_states`, no `cache.update`).
/// At 2 × 256 = 512 tokens: 524,288 after layer 0, 1,048,576 after layer 1, 2,097,152 after
/// layer 2, 2,621,440 from layer 3 on (measured: the four `aten::cat` pairs under
/// `cache_utils.py update`, 262,144 B each on a sliding layer, 524,288 B on the full one).
#[test]
fn prefill_cache_grows_layer_by_layer() {
    let rec: Value = common::validation("cpu-measured-gemma4audio-prefill.json");
    let (_, kv) = walk(&text_job(&rec, 256));
    let at = |label: &str| kv.iter().find(|(l, _)| l == label).unwrap().1;
    assert_eq!(kv[0].1, 0);
    let want = [
        524_288, 1_048_576, 2_097_152, 2_621_440, 2_621_440, 2_621_440,
    ];
    for (i, w) in want.into_iter().enumerate() {
        assert_eq!(at(&format!("layer {i}")), w, "layer {i}");
    }
    assert_eq!(at("final norm and head"), 2_621_440);
}

/// The text model's prefill peak, by hand, per token `t` = 2 · prompt (fp32):
///
/// - held by `Gemma4TextModel.forward` through every layer: `inputs_embeds` 256 · 4 = 1,024 B;
///   the combined per-layer inputs `[t, 6, 64]` 1,536 B (under `no_grad` the lookup, the
///   projection, its scaled copy and the norm's input die in `project_per_layer_inputs`); the
///   rotary tables, cos and sin per layer type, 2 · (64 + 128) · 4 = 1,536 B; the sliding
///   layers' bool SDPA mask (measured 65,536 B at prompt 256, 1,048,576 B at 1,024);
/// - the caches of layers 0–3, 3 · 1,024 + 2,048 = 5,120 B;
/// - layer 3's input (layer 2's output, held by the loop) 1,024 B.
///
/// At prompt 256 the top is layer 3's MLP: the residual after attention and the
/// `pre_feedforward_layernorm` output (held by the layer's `hidden_states` while the MLP
/// runs), 2 · 1,024 B, and `act(gate) · up`'s three `[t, 512]` tensors, 3 · 2,048 B:
/// 512 · (1,024 + 1,536 + 1,536 + 5,120 + 1,024 + 2,048 + 6,144) + 65,536 = 9,502,720. The
/// measurement adds generate's bookkeeping (two int64 `[2, 256]` position tensors, 8,192 B,
/// and 3,584 B of small ones): 9,514,496.
///
/// At prompt 1,024 the top is layer 3's attention kernel: beside the held tensors and caches,
/// the layer's input, the normed input (held while the attention module runs) and the rotated
/// query `[t, 4 · 64]`, 1,024 B each; `repeat_kv`'s copies of the cached keys and values at 4
/// heads, 2 · 1,024 B; SDPA's output 1,024 B; the sliding mask; and the mask
/// `scaled_dot_product_attention` converts to the query's dtype, `[2, 1, 1,024, 1,024]` · 4 =
/// 8,388,608 B, alive through the kernel: 2,048 · (1,024 + 1,536 + 1,536 + 5,120 +
/// 3 · 1,024 + 2 · 1,024 + 1,024) + 1,048,576 + 8,388,608 = 40,894,464. The measurement adds the CPU
/// flash kernel's scratch (32,768 + 591,872 B) and generate's bookkeeping (2 · 16,384 +
/// 3,584 B): 41,555,456.
#[test]
fn gemma4_text_prefill_peak_by_hand() {
    let rec: Value = common::validation("cpu-measured-gemma4audio-prefill.json");
    let held = 1_024 + 1_536 + 1_536 + 5_120;
    let by_hand = [
        (
            256,
            512 * (held + 1_024 + 2 * 1_024 + 3 * 2_048) + 65_536,
            8_192 + 3_584,
        ),
        (
            1024,
            2_048 * (held + 3 * 1_024 + 2 * 1_024 + 1_024) + 1_048_576 + 8_388_608,
            32_768 + 591_872 + 2 * 16_384 + 3_584,
        ),
    ];
    for (prompt, want, not_modelled) in by_hand {
        let job = text_job(&rec, prompt);
        let (peak, _) = walk(&job);
        assert_eq!(peak, want, "walk at {prompt}");
        assert_eq!(common::stream_call_peak(&job), want, "stream at {prompt}");
        assert_eq!(measured(&rec, "gemma4_text", prompt), want + not_modelled);
    }
}

/// Gemma 3n's tiny text model (`validation/cpu-measured-generate-gemma3n.json`,
/// `scripts/measure_generate_gemma3n_cpu.py`: `Gemma3nForCausalLM`, hidden 256, 4 AltUp
/// streams, 2 KV heads of 64, layers 0, 1, 3 sliding and 2 full, layers 4 and 5 reading the
/// keys of 3 and 2, per-layer inputs of 6 × 64), its prefill peak by hand from
/// `modeling_gemma3n.py` (transformers 5.24), per token `t` = 2 · 256 (fp32):
///
/// - held by `Gemma3nTextModel.forward` through every layer: `inputs_embeds` 256 · 4 =
///   1,024 B (`hidden_states_0`, the first entry of `temp_hidden_states`); the combined
///   per-layer inputs `[6, 64]` 1,536 B (`project_per_layer_inputs`' intermediates die under
///   `no_grad`); the three rescaled AltUp streams left in `temp_hidden_states`, 3 · 1,024 B,
///   and the last `altup_proj`, 1,024 B; the rotary tables, cos and sin for each of the two
///   layer types at head dim 64, 4 · 64 · 4 = 1,024 B; per `[t, 1]` `target_magnitude` and
///   the last `new_magnitude`, 4 B each; the sliding layers' bool SDPA mask (measured
///   65,536 B at prompt 256);
/// - the caches of layers 0–3, keys and values of 2 heads · 64 · 4 B each: 4 · 1,024 B;
/// - layer 3, inside `altup.correct` at the multiply: its input (layer 2's output, the
///   `[4, t, 256]` stack: the first stack, made by `torch.stack`, died as the loop rebound
///   it after layer 0) and `predictions`, 2 · 4,096 B; the decoder layer's nine `[t, 256]`
///   locals (`active_prediction_normed`, `laurel_output`, `attn`, `attn_gated`,
///   `attn_laurel`, `attn_norm`, `attn_ffw`, `attn_ffw_norm`, `attn_ffw_laurel_gated`),
///   9 · 1,024 B; `innovation` repeated to the four streams 4,096 B and the product
///   `corrected` 4,096 B; `modalities` and `all_coefs` `[t, 4]`, 16 B each.
///
/// 512 · (1,024 + 1,536 + 3 · 1,024 + 1,024 + 1,024 + 4 + 4 + 4 · 1,024 + 2 · 4,096 +
/// 9 · 1,024 + 2 · 4,096 + 2 · 16) + 65,536 = 19,222,528. The measurement adds generate's bookkeeping
/// (two int64 `[2, 256]` position tensors, 8,192 B, and 3,584 B of small ones): 19,234,304.
#[test]
fn gemma3n_text_prefill_peak_by_hand() {
    let rec: Value = common::validation("cpu-measured-generate-gemma3n.json");
    let held = 1_024 + 1_536 + 3 * 1_024 + 1_024 + 1_024 + 4 + 4;
    let layer3 = 2 * 4_096 + 9 * 1_024 + 2 * 4_096 + 2 * 16;
    let want = 512 * (held + 4 * 1_024 + layer3) + 65_536;
    let job = job_of(&rec, "gemma3n_text", 256);
    let (peak, _) = walk(&job);
    assert_eq!(peak, want, "walk");
    assert_eq!(common::stream_call_peak(&job), want, "stream");
    assert_eq!(measured(&rec, "gemma3n_text", 256), want + 8_192 + 3_584);
}
