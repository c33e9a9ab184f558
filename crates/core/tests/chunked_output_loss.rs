//! torchtune's `CEWithChunkedOutputLoss` (`loss: "chunked-output"`): 16-bit logits in 8 chunks,
//! each upcast and cross-entropied in turn. Figures derived by hand from the shapes or
//! measured (`validation/specs/cpu-tiny-llama-bf16-adamw-sdpa-chunkedout-b2s256.json`,
//! `../shared/measure/measure.py` patched by `scripts/measure_chunked_output.patch`), never
//! taken from vramscope's own output.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::overhead::blas_workspaces_bytes;
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

use common::run_job as run;

fn tiny_llama(loss: &str) -> Value {
    common::spec_job(
        "cpu-tiny-llama-bf16-adamw-sdpa-chunkedout-b2s256",
        json!({"task": "train", "loss": loss}),
        &common::SPEC_KEYS,
    )
}

/// The measured step (4-layer Llama, hidden 256, vocabulary 8,192, pure bf16, AdamW, SDPA,
/// batch 2 × 256; torch 2.15.0 on the CPU, 2026-12-02): step-2 peak 96,881,152 B (the c10
/// series, `steps.step2.r512.peak_raw`) in the forward, in the last chunk's cross-entropy;
/// the estimate net of the two cuBLAS workspaces a CPU run lacks within 3 %, in the same phase.
#[test]
fn measured_chunked_output_step() {
    let r = run(tiny_llama("chunked-output"));
    let got = r.per_gpu.peaks.peak_allocated.unwrap() - blas_workspaces_bytes(None, true);
    let measured = 96_881_152u64;
    let err = (got as f64 - measured as f64) / measured as f64;
    eprintln!("chunked-output: estimate {got} B, measured {measured} B ({err:+.4})");
    assert!(err.abs() <= 0.03, "{got} vs {measured} ({err:+.4})");
    assert_eq!(r.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
}

/// At the loss's end the eight fp32 log-softmax chunks are saved: [2 × 32, 8192] × 4 B =
/// 2,097,152 B each (the measured `_log_softmax` allocations), 16,777,216 B in all, against the
/// standard loss's one [512, 8192] fp32 log-softmax of the same size; the difference is in the
/// transients: the standard loss's whole fp32 upcast (16,777,216 B) against one chunk's
/// (2,097,152 B), and in backward one chunk's two fp32 gradients (2 × 2,097,152 B) against
/// the whole logits' two (2 × 16,777,216 B). So the chunked step's peak is lower.
#[test]
fn chunks_lower_the_loss_transients() {
    let standard = run(tiny_llama("standard"));
    let chunked = run(tiny_llama("chunked-output"));
    let at = |r: &Report, label: &str| {
        r.timeline
            .iter()
            .find(|p| p.label == label)
            .unwrap()
            .allocated
    };
    let head = |r: &Report| at(r, "final norm and head");
    // Loss moment minus head moment: saved log-softmax + labels + the loss's transients − the
    // head's transient (the logits, 2 × 256 × 8192 × 2 B = 8,388,608 B, live at both).
    // chunked: 16,777,216 + labels (2 × 256 × 8 = 4,096, and 8 flattened chunks of 512) +
    // 8,388,608 + 2,097,152 − 8,388,608.
    assert_eq!(
        at(&chunked, "loss") - head(&chunked),
        16_777_216 + 4_096 + 8 * 512 + 2_097_152
    );
    assert!(chunked.per_gpu.peaks.peak_allocated < standard.per_gpu.peaks.peak_allocated);
    assert_eq!(
        serde_json::to_value(&chunked.job).unwrap()["loss"],
        json!("chunked-output")
    );
}

/// A compiled recipe compiles the loss's per-chunk cross-entropy (torchtune
/// `training.compile_loss`): the partitioner saves each chunk's 16-bit logits (2 × 32 × 8192 ×
/// 2 B = 1,048,576 B, 8,388,608 B for the eight) and two fp32 statistics per token (2 × 512 × 4
/// = 4,096 B) instead of the eight fp32 log-softmax chunks (16,777,216 B): the loss saves
/// 16,777,216 − 8,388,608 − 4,096 = 8,384,512 B less than eager's, the labels alike.
#[test]
fn compiled_chunks_save_the_16_bit_logits() {
    use vramscope_core::estimate::{compile, stages};
    let j: Job = serde_json::from_value(tiny_llama("chunked-output")).unwrap();
    let model = load_job_model(j.model.as_ref().unwrap()).unwrap();
    let spec = model.spec.clone().unwrap();
    let eager = stages::loss_chunked_output(&spec, 2, 256, 2);
    let num = common::bf16_numerics;
    // The first chunk: 2 × ⌈256 / 8⌉ = 64 rows of 8,192 bf16 logits = 1,048,576 B.
    let chunk = stages::largest_output_chunk(2, 256, spec.vocab_size, 2);
    assert_eq!(chunk, 2 * 32 * 8192 * 2);
    let compiled = compile::chunked_output_loss(eager, num(true), 512, spec.vocab_size, chunk);
    assert_eq!(eager.saved - compiled.saved, 8_384_512);
    assert_eq!(compiled.forward_transient, 0);
    // Backward: one chunk's bf16 gradient, where eager holds a chunk's two fp32 gradients
    // (2 × 64 × 8,192 × 4 = 4,194,304 B) and more.
    assert_eq!(compiled.backward_transient, 1_048_576);
    assert!(eager.backward_transient >= 4_194_304);
    assert_eq!(
        compile::chunked_output_loss(eager, num(false), 512, 8192, chunk),
        eager
    );
}
