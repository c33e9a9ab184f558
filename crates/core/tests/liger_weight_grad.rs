//! Liger-Kernel's current release (0.8.2; the same from 0.6.2) accumulates the head weight's
//! gradient per chunk as `grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()`
//! when it runs without autocast (`liger_kernel/ops/fused_linear_cross_entropy.py`,
//! `fused_linear_cross_entropy_forward`): a bf16 model holds the V·H bf16 product and its fp32
//! copy at once, on top of one chunk of logits. Every figure below is derived by hand from
//! that source and the job's shapes, not read off the estimate.

mod common;

use serde_json::json;
use vramscope_core::report::Report;

/// The step's allocated bytes at the forward's timeline point `label`.
fn forward_at(r: &Report, label: &str) -> u64 {
    r.timeline
        .iter()
        .find(|p| p.phase == "forward" && p.label == label)
        .unwrap_or_else(|| panic!("no forward point {label}"))
        .allocated
}

fn llama_8b(peft: serde_json::Value) -> Report {
    common::run_job(json!({
        "model": "llama-3.1-8b", "precision": "bf16", "optimizer": "adamw",
        "batch": 4, "seq": 2048, "gpu": "h200", "loss": "chunked", "peft": peft
    }))
}

/// Llama-3.1-8B (H 4096, V 128,256, untied head), bf16, b4 × 2048: BT = 8192, ⌈V/H⌉ = 32,
/// chunks of ⌈8192/32⌉ = 256 rows, a chunk of logits 256·128,256·2 = 65,667,072 B.
/// What the loss adds over the head's point, by hand:
/// - kept to backward: `grad_input` 8192·4096·2 = 67,108,864; `loss_1d` 8192·4 = 32,768; the
///   padded labels 4·2049·8 = 65,568 → 66,048 (512-byte blocks); the shifted 8192·8 = 65,536;
///   `grad_weight` V·H·2 = 1,050,673,152 — 1,117,946,368 B;
/// - the per-chunk transient: one chunk of logits and the weight gradient's bf16 product
///   V·H·2 = 1,050,673,152 with its fp32 copy V·H·4 = 2,101,346,304: 3,217,686,528 B (Liger ≤
///   0.6.1's in-place `addmm` held two chunks of logits instead, 131,334,144 B: the loss's
///   point is 3,086,352,384 B higher now).
///
/// 1,117,946,368 + 3,217,686,528 = 4,335,632,896 B, and the step's peak is that point: the
/// forward's end, all 32 layers' activations live, now above the backward's.
#[test]
fn the_current_release_holds_the_product_and_its_fp32_copy() {
    let r = llama_8b(json!(null));
    let head = forward_at(&r, "final norm and head");
    let loss = forward_at(&r, "loss");
    assert_eq!(loss - head, 4_335_632_896);
    assert_eq!(r.per_gpu.peaks.peak_allocated, Some(loss));
    assert_eq!(r.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
}

/// Under LoRA the head is frozen (`grad_weight` is `None`): no weight gradient, no product.
/// Kept: 67,108,864 + 32,768 + 66,048 + 65,536 = 67,273,216 B; transient: two chunks of
/// logits, 131,334,144 B; 198,607,360 B over the head's point.
#[test]
fn a_frozen_head_has_no_weight_step() {
    let lora = json!({"method": "lora", "rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"]});
    let r = llama_8b(lora);
    let head = forward_at(&r, "final norm and head");
    assert_eq!(forward_at(&r, "loss") - head, 198_607_360);
}
