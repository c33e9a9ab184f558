//! The MoE families of issue 21 and the per-layer attention patterns of the newer models in an
//! estimate: KV held per layer kind at long context (Llama 4's chunked layers, gpt-oss's
//! alternating windows, Gemma-2/3 local/global layers), each hand-derived below, and measured
//! training steps of a tiny OLMoE (`validation/cpu-measured-moe.json`).

mod common;
mod measured;

use serde_json::{json, Value};

fn fixture(path: &str) -> Value {
    measured::formats_fixture(path)
}

use measured::run;

/// KV bytes at the last decode step of a bf16 generation whose cache reaches `seq` tokens
/// there: a 16-token prompt and `seq − 15` new tokens (the last sampled one never fed back),
/// where each layer holds what its cache class keeps of the context
/// (`measured::last_decode_kv`). (A long prompt's prefill holds more, a sliding layer keeping
/// the whole prompt: [`prefill_holds_the_prompt_on_every_layer`].)
fn kv(model: Value, batch: u64, seq: u64) -> u64 {
    measured::last_decode_kv(&run(
        json!({"model": model, "task": "infer", "batch": batch, "seq": 16,
               "new_tokens": seq - 15, "precision": "bf16"}),
    ))
}

/// Gemma-2-2B (4,096 B per token and layer in bf16, below) given an 8,192-token prompt: its
/// peak is the prefill's, where all 26 layers hold the whole prompt — the 13 local ones too,
/// as transformers 5.24's `DynamicSlidingWindowLayer.update` keeps
/// `full_key_states[:, :, -sliding_window + 1:, :]`, a view of the prompt's `torch.cat`, until
/// the first decode step: 26 · 4,096 · 8,192 = 872,415,232 B (the window-capped figure below,
/// 654,311,424, is what stays after that step).
#[test]
fn prefill_holds_the_prompt_on_every_layer() {
    let r = run(
        json!({"model": "gemma-2-2b", "task": "infer", "batch": 1, "seq": 8_192,
                       "new_tokens": 16, "precision": "bf16"}),
    );
    assert_eq!(r.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
    assert_eq!(r.per_gpu.components.kv_cache, 872_415_232);
}

/// Llama 4 Scout: 8 KV heads of 128, 2 · 8 · 128 · 2 B = 4,096 B per token and layer in bf16.
/// Its 36 RoPE layers attend in chunks of 8,192 and transformers caches them as sliding layers
/// of that size (`cache_utils.py`: `"chunked_attention"` → `DynamicSlidingWindowLayer` with
/// `sliding_window = attention_chunk_size`), so at 32,768 tokens they hold 8,192 tokens and the
/// 12 NoPE layers all 32,768: 4,096 · (36 · 8,192 + 12 · 32,768) = 2,818,572,288 B per
/// sequence. Below the chunk all 48 layers hold every token: 48 · 4,096 · 4,096 B at 4,096.
#[test]
fn llama4_chunked_layers_hold_one_chunk() {
    let model = json!({"hf_config": fixture("moe/llama-4-scout-17b-16e-text.json")});
    assert_eq!(4_096 * (36 * 8_192 + 12 * 32_768), 2_818_572_288u64);
    assert_eq!(kv(model.clone(), 1, 32_768), 2_818_572_288);
    assert_eq!(kv(model.clone(), 2, 32_768), 2 * 2_818_572_288);
    assert_eq!(kv(model, 1, 4_096), 48 * 4_096 * 4_096);
}

/// gpt-oss-20b at its full 131,072-token context: 12 sliding layers hold 128 tokens, 12 full
/// layers all of them, 2,048 B per token and layer in bf16 (8 KV heads of 64):
/// 12 · 128 · 2,048 + 12 · 131,072 · 2,048 = 3,145,728 + 3,221,225,472 B.
#[test]
fn gpt_oss_windows_at_long_context() {
    let model = json!({"hf_config": fixture("unsupported/gpt-oss-20b.json")});
    assert_eq!(kv(model, 1, 131_072), 3_145_728 + 3_221_225_472);
}

/// Gemma-2-2B (preset, its config.json): 26 layers, even ones local over `sliding_window`
/// 4,096, 4 KV heads of 256: 2 · 4 · 256 · 2 B = 4,096 B per token and layer in bf16. At its
/// 8,192-token context 13 local layers hold 4,096 tokens and 13 global ones 8,192:
/// 13 · 4,096 · (4,096 + 8,192) = 654,311,424 B. transformers' `DynamicSlidingWindowLayer`
/// holds `min(seq_len, sliding_window)` tokens once a decode step has run (its `update`
/// concatenates its kept `window − 1` tokens with the new one).
#[test]
fn gemma2_local_layers_hold_the_window() {
    assert_eq!(kv(json!("gemma-2-2b"), 1, 8_192), 654_311_424);
}

/// Gemma-3-1B (preset): 26 layers, every 6th global (`sliding_window_pattern` 6: layers 5, 11,
/// 17, 23), the other 22 local over 512 tokens; one KV head of 256: 1,024 B per token and layer
/// in bf16. At 32,768 tokens: 22 · 512 · 1,024 + 4 · 32,768 · 1,024 = 11,534,336 + 134,217,728.
#[test]
fn gemma3_pattern_at_long_context() {
    assert_eq!(kv(json!("gemma-3-1b"), 1, 32_768), 11_534_336 + 134_217_728);
}
