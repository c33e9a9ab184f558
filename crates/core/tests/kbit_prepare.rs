//! PEFT's `prepare_model_for_kbit_training` (`peft/utils/other.py`, PEFT 0.21): every fp16/bf16
//! parameter that is not a `Params4bit` cast to fp32 (not for GPTQ models), and with
//! bitsandbytes or GPTQ weights gradient checkpointing turned on. The job says so with
//! `kbit_prepare`.

mod common;

use common::per_layer;
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

/// The two-layer Llama of `validation/cpu-measured-kbit-prepare.json` (hidden 256, GQA 4/2,
/// MLP 768, vocabulary 8192), LoRA r 16 on every linear, batch 2 × 256, loaded in bf16.
fn tiny(precision: &str, checkpointing: &str, kbit: bool) -> Value {
    let cases: Vec<Value> = common::validation("cpu-measured-kbit-prepare.json");
    let mut j = cases[0]["job"].clone();
    j["precision"] = json!(precision);
    j["checkpointing"] = json!(checkpointing);
    j["kbit_prepare"] = json!(kbit);
    j
}

/// Under full checkpointing a block keeps its input only: b · s · h = 2 · 256 · 256 = 131,072
/// elements, 262,144 B in bf16. After the cast the residual stream is fp32 (the embedding's
/// output and every decoder layer's, `residual + hidden_states` with an fp32 operand), so
/// 524,288 B, with or without autocast: under autocast the frozen fp32 weights' 16-bit copies
/// are made per call (autocast caches only leaves that require grad), not held through the
/// forward — before, 4 · (256·256 + 2 · 128·256 + 256·256 + 3 · 256·768) · 2 B = 1,572,864 B of
/// copies a block would have added. The fp32 adapters are leaves that require grad, so
/// autocast caches their 16-bit copies for the whole forward: r · (in + out) per module, 16 ·
/// (512 + 384 + 384 + 512 + 1024 + 1024 + 1024) = 77,824 elements, 155,648 B, a block
/// 524,288 + 155,648 = 679,936 B. Measured (CPU, the file above): 532,992 B and 688,640 B
/// (the rest: 8,704 B the CPU run adds to every block).
#[test]
fn a_checkpointed_block_keeps_its_fp32_input() {
    assert_eq!(per_layer(tiny("bf16", "full", false)), 262_144);
    assert_eq!(per_layer(tiny("bf16", "full", true)), 524_288);
    assert_eq!(per_layer(tiny("bf16-mixed", "full", true)), 679_936);
}

/// QLoRA on Llama-3.1-8B (NF4), full checkpointing, batch 1 × 512: a block keeps its input,
/// 512 · 4096 elements: 4,194,304 B in bf16, 8,388,608 B once the cast makes the stream fp32
/// (the norms' fp32 weights promote their outputs, bitsandbytes' `Linear4bit` returns its
/// input's dtype: `.to(inp_dtype)`).
#[test]
fn a_qlora_block_keeps_an_fp32_input() {
    assert_eq!(per_layer(job("nf4-dq", false, Some("full"))), 4_194_304);
    assert_eq!(per_layer(job("nf4-dq", true, Some("full"))), 8_388_608);
}

/// The measured steps of `validation/cpu-measured-kbit-prepare.json` (`validation/README.md`:
/// PEFT's preparation on the model loaded in bf16, with and without autocast, with and without
/// full checkpointing): each step-2 peak within 3 % of the estimate net of the two cuBLAS
/// workspaces (2 × 8,519,680 B) a CPU run lacks, and the fp32 block of the bf16 run within 1 %.
/// The expected figures are the measured ones.
#[test]
fn measured_kbit_prepare_steps() {
    let cases: Vec<Value> = common::validation("cpu-measured-kbit-prepare.json");
    let checked = common::assert_cpu_peaks_within(&cases, 0.03);
    assert_eq!(checked, 4);
    // One block of the pure-bf16 run without checkpointing, every op in fp32 after the cast
    // (measured 10,206,720 B; the file's `-act-per-layer` case), within 1 %.
    let id = "cpu-tiny-llama2-bf16-kbit-lora-r16-d0-adamw-sdpa-b2s256-act-per-layer";
    common::assert_per_layer_case_within(&cases, id, 0.01);
}
