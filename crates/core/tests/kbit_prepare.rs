//! PEFT's `prepare_model_for_kbit_training` (`peft/utils/other.py`, PEFT 0.21): every fp16/bf16
//! parameter that is not a `Params4bit` cast to fp32 (not for GPTQ models), and with
//! bitsandbytes or GPTQ weights gradient checkpointing turned on. The job says so with
//! `kbit_prepare`.

mod common;

use serde_json::{json, Value};
use vramscope_core::job::Checkpointing;

fn job(weights: &str, kbit: bool, checkpointing: Option<&str>) -> Value {
    let mut j = json!({
        "model": "llama-3.1-8b", "precision": "bf16", "optimizer": "adamw",
        "batch": 1, "seq": 512, "weights": weights, "gpu": "h100",
        "peft": {"method": "lora", "rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"]},
        "kbit_prepare": kbit
    });
    if let Some(c) = checkpointing {
        j["checkpointing"] = json!(c);
    }
    j
}

fn parameters(j: &Value) -> u64 {
    common::run_job(j.clone()).per_gpu.model_states.parameters
}

/// Llama-3.1-8B under NF4 (bitsandbytes quantizes every linear of the 32 layers and leaves
/// `lm_head` alone): the 16-bit tensors left are `embed_tokens` and `lm_head`, 128,256 · 4096 =
/// 525,336,576 elements each, and 65 RMSNorm weights of 4096 (two per layer, the final one).
/// Cast from 2 to 4 bytes: (2 · 525,336,576 + 65 · 4096) · 2 = 1,050,939,392 · 2 =
/// 2,101,878,784 B more (every tensor a multiple of 512 B, so no rounding moves it). The
/// 4-bit weights, their absmax and the adapters (made after the cast) do not change.
#[test]
fn nf4_casts_the_unquantized_weights_to_fp32() {
    let plain = parameters(&job("nf4-dq", false, Some("full")));
    let cast = parameters(&job("nf4-dq", true, Some("full")));
    assert_eq!(cast - plain, 2_101_878_784);
}

/// Without quantization PEFT casts the whole model: 8,030,261,248 parameters (the model
/// card's count, tied weights none) from 2 to 4 bytes = 16,060,522,496 B more.
#[test]
fn an_unquantized_base_is_cast_whole() {
    let plain = parameters(&job("none", false, None));
    let cast = parameters(&job("none", true, None));
    assert_eq!(cast - plain, 16_060_522_496);
}

/// GPTQ models are not cast (`is_gptq_quantized`); Llama-3.1-8B has no GPTQ file here, so
/// the rule is read off the resolved job: checkpointing turns on for bitsandbytes and GPTQ
/// weights (`loaded_in_kbit or is_gptq_quantized`) and only when the job leaves it unsaid.
#[test]
fn checkpointing_defaults_to_full_under_kbit_weights() {
    let resolved = |j: Value| common::prepared_json(&j).1;
    // (weights, kbit_prepare, the job's checkpointing, what PEFT leaves): on for 4- and
    // 8-bit bitsandbytes weights under the preparation, off without it, on unquantized
    // weights, or where the job names its own.
    for (weights, prepare, said, want) in [
        ("nf4-dq", true, None, Checkpointing::Full),
        ("int8", true, None, Checkpointing::Full),
        ("none", true, None, Checkpointing::None),
        ("nf4-dq", false, None, Checkpointing::None),
        ("nf4-dq", true, Some("none"), Checkpointing::None),
    ] {
        assert_eq!(
            resolved(job(weights, prepare, said)).checkpointing,
            want,
            "{weights} prepare {prepare} checkpointing {said:?}"
        );
    }
}

/// A job without adapters cannot ask for it: a one-line error naming the field.
#[test]
fn kbit_prepare_needs_peft() {
    let mut j = job("nf4-dq", true, None);
    j["peft"] = Value::Null;
    let parsed: vramscope_core::job::Job = serde_json::from_value(j).unwrap();
    let err = parsed.resolve(None).unwrap_err().to_string();
    assert!(err.contains("kbit_prepare"), "{err}");
}

/// The cast also makes the residual stream between the blocks fp32 (measured on the CPU,
/// `validation/kbit-prepare/`), which the blocks' tapes do not model: the report says so
/// whenever the cast applies, and not otherwise.
#[test]
fn the_unmodelled_fp32_residual_stream_is_said() {
    let said = |j: Value| {
        common::run_job(j)
            .warnings
            .iter()
            .any(|w| w.contains("kbit_prepare") && w.contains("residual stream"))
    };
    assert!(said(job("nf4-dq", true, Some("full"))));
    assert!(!said(job("nf4-dq", false, Some("full"))));
}
