//! torchtune's `LinearCrossEntropyLoss` (`loss: "linear-ce"`, `estimate/linear_ce.rs`): the
//! ignored tokens masked out, the projection and an fp32 cross-entropy per chunk of 8 through
//! autograd. Figures derived by hand from torchtune's source and the shapes, or measured
//! (`validation/specs/cpu-tiny-llama-bf16-adamw-sdpa-linearce-b2s256.json`,
//! `../shared/measure/measure.py` patched by `scripts/measure_linear_ce.patch`, result
//! `validation/results/cpu-tiny-llama-bf16-adamw-sdpa-linearce-b2s256.json`), never taken from
//! vramscope's own output.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::blocks::Numerics;
use vramscope_core::estimate::linear_ce::{loss_memory, LinearCe};
use vramscope_core::estimate::overhead::blas_workspaces_bytes;

use common::run_job as run;

fn tiny_llama(loss: &str, extra: Value) -> Value {
    let mut job = common::spec_job(
        "cpu-tiny-llama-bf16-adamw-sdpa-linearce-b2s256",
        json!({"task": "train", "loss": loss}),
        &common::SPEC_KEYS,
    );
    for (k, v) in extra.as_object().unwrap() {
        job[k] = v.clone();
    }
    job
}

/// The measured step (4-layer Llama, hidden 256, vocabulary 8,192, pure bf16, AdamW, SDPA,
/// batch 2 × 256; torch 2.15.0 on the CPU, 2026-12-06): step-2 peak 94,587,904 B (the c10
/// series, `steps.step2.r512.peak_raw`) in the backward, at the head weight's second
/// contribution (`aten::add` under `TBackward0`: three 8192 × 256 bf16 tensors live). The
/// estimate, net of the two cuBLAS workspaces a CPU run lacks, within 1 %, in the same phase.
#[test]
fn measured_linear_ce_step() {
    let r = run(tiny_llama("linear-ce", json!({})));
    let got = r.per_gpu.peaks.peak_allocated.unwrap() - blas_workspaces_bytes(None, true);
    let measured = 94_587_904u64;
    let err = (got as f64 - measured as f64) / measured as f64;
    eprintln!("linear-ce: estimate {got} B, measured {measured} B ({err:+.4})");
    assert!(err.abs() <= 0.01, "{got} vs {measured} ({err:+.4})");
    assert_eq!(r.per_gpu.peaks.peak_phase.as_deref(), Some("backward"));
}

/// The tiny Llama's architecture (hidden 256, vocabulary 8,192).
fn tiny_spec() -> vramscope_core::model::ModelSpec {
    let (model, _) = common::prepared_json(&tiny_llama("linear-ce", json!({})));
    model.spec.unwrap()
}

fn num(compile: bool) -> Numerics {
    common::bf16_numerics(compile)
}

/// What the eager loss saves at 2 × 256 (N = 2 × 255 = 510 rows: 64, 64, 64, 64, 64, 64, 63,
/// 63): per chunk its fp32 log-softmax (64 × 8192 × 4 = 2,097,152 B; 63 × 8192 × 4 = 2,064,384
/// B, the measured `_log_softmax` sizes) and `nll_loss`'s `total_weight` (a scalar, one
/// 512 B block): 6 × 2,097,152 + 2 × 2,064,384 + 8 × 512 = 16,715,776 B; the masked targets
/// and the indices (510 × 8 = 4,080 → 4,096 B each); the masked hidden state the matmuls save
/// for the head's weight (510 × 256 × 2 = 261,120 B). 16,715,776 + 8,192 + 261,120 =
/// 16,985,088 B. A frozen head (LoRA) saves no hidden: 16,723,968 B.
#[test]
fn saved_bytes_per_chunk() {
    let spec = tiny_spec();
    let trained = LinearCe::new(&spec, 2, 256, num(false), true);
    assert_eq!(trained.chunks, vec![64, 64, 64, 64, 64, 64, 63, 63]);
    assert_eq!(trained.chunk_saved(64), 2_097_152 + 512);
    assert_eq!(trained.chunk_saved(63), 2_064_384 + 512);
    assert_eq!(loss_memory(&trained).saved, 16_985_088);
    let frozen = LinearCe::new(&spec, 2, 256, num(false), false);
    assert_eq!(loss_memory(&frozen).saved, 16_723_968);
}

/// Compiled (`training.compile_loss` → `apply_compile_strategy`: `compute_cross_entropy`
/// compiled): per chunk its 16-bit logits (64 × 8192 × 2 = 1,048,576 B; 63 rows 1,032,192 B)
/// and two fp32 statistics per row (64 × 4 = 256 → 512 B each): 6 × (1,048,576 + 1,024) + 2 ×
/// (1,032,192 + 1,024) = 8,364,032 B, with the same 8,192 B of indices and targets and
/// 261,120 B of hidden: 8,633,344 B.
#[test]
fn compiled_chunks_save_16_bit_logits() {
    let spec = tiny_spec();
    let c = LinearCe::new(&spec, 2, 256, num(true), true);
    assert_eq!(loss_memory(&c).saved, 8_633_344);
}
