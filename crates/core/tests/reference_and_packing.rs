//! A DPO reference model in a plain training job (`reference_model`) and packed sequences
//! (`packing`), against figures derived by hand from the models' shapes (never from
//! vramscope's own output).

mod common;

use serde_json::{json, Value};
use vramscope_core::job::Job;

use common::run_job as run;

fn gpt2(extra: Value) -> Value {
    let mut v = json!({"model": "gpt2", "batch": 1, "seq": 128, "precision": "fp32",
                       "optimizer": "adamw", "attention": "flash"});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// GPT-2 small has 124,439,808 parameters; in fp32 the frozen reference copy is
/// 124,439,808 × 4 = 497,759,232 B (TRL loads it with the policy's dtype). It has no
/// gradients and no optimizer states, and it is held through the whole step. At batch 1 × 128
/// both steps peak in the optimizer step (five fp32 copies of the parameters: weights,
/// gradients, m, v, `sqrt(v)`), where the DPO step's activations and logits are gone, so the
/// peak carries exactly those bytes more.
#[test]
fn frozen_reference_adds_one_copy_of_the_weights() {
    let plain = run(gpt2(json!({})));
    let dpo = run(gpt2(json!({"reference_model": "frozen"})));
    let copy = 124_439_808u64 * 4;
    assert_eq!(
        dpo.per_gpu.components.parameters - plain.per_gpu.components.parameters,
        copy
    );
    assert_eq!(
        dpo.per_gpu.components.gradients,
        plain.per_gpu.components.gradients
    );
    assert_eq!(
        dpo.per_gpu.model_states.optimizer_states,
        plain.per_gpu.model_states.optimizer_states
    );
    assert_eq!(
        dpo.per_gpu.peaks.peak_allocated.unwrap() - plain.per_gpu.peaks.peak_allocated.unwrap(),
        copy
    );
    assert_eq!(
        serde_json::to_value(&dpo.job).unwrap()["reference_model"],
        json!("frozen")
    );
    common::assert_warns(&dpo.warnings, "reference model");
    // A job without one echoes nothing of it.
    assert!(serde_json::to_value(&plain.job)
        .unwrap()
        .get("reference_model")
        .is_none());
}

/// Precomputed reference log-probabilities (TRL `precompute_ref_log_probs`) and a LoRA policy
/// (TRL disables the adapters instead of copying) hold no reference weights. (Both peak in
/// the optimizer step at this size, where the DPO forward's rows are gone.)
#[test]
fn precomputed_or_peft_reference_holds_no_copy() {
    let plain = run(gpt2(json!({})));
    let pre = run(gpt2(json!({"reference_model": "precomputed"})));
    assert_eq!(
        pre.per_gpu.peaks.peak_allocated,
        plain.per_gpu.peaks.peak_allocated
    );
    let lora = json!({"peft": {"method": "lora", "rank": 8, "alpha": 16,
                               "targets": ["c_attn"]}});
    let mut with_ref = lora.clone();
    with_ref["reference_model"] = json!(true);
    let a = run(gpt2(lora));
    let b = run(gpt2(with_ref));
    assert_eq!(
        a.per_gpu.model_states.parameters,
        b.per_gpu.model_states.parameters
    );
}

#[test]
fn reference_model_values_are_checked() {
    let e = serde_json::from_value::<Job>(json!({"reference_model": "twice"}))
        .unwrap()
        .resolve(None)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("reference_model"), "{e}");
    // An RL step names its reference model in rl.reference_model.
    let e = serde_json::from_value::<Job>(json!({"task": "rl", "reference_model": "frozen"}))
        .unwrap()
        .resolve(None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rl.reference_model"), "{e}");
}

/// Packing brings one int64 `[b, s]` tensor more, `position_ids`: at batch 2 × seq 128 that is
/// 256 × 8 = 2,048 B (a multiple of 512), live from the step's start through the backward, so
/// every moment before the optimizer step carries 2,048 B more. GPT-2 small in fp32 with AdamW
/// peaks in the optimizer step (params, grads, m, v and foreach's sqrt(v): 5 × 497,759,232 B,
/// against at most 4 × 497,759,232 B plus a few MB of activations in the backward), after the
/// inputs are freed: the peak does not move. With flash attention nothing else changes.
#[test]
fn packing_adds_the_position_ids() {
    let plain = run(gpt2(json!({"batch": 2})));
    let packed = run(gpt2(json!({"batch": 2, "packing": true})));
    assert_eq!(
        packed.timeline[0].allocated - plain.timeline[0].allocated,
        2048
    );
    assert_eq!(plain.per_gpu.peaks.peak_phase.as_deref(), Some("optimizer"));
    assert_eq!(
        packed.per_gpu.peaks.peak_allocated,
        plain.per_gpu.peaks.peak_allocated
    );
    assert_eq!(
        serde_json::to_value(&packed.job).unwrap()["packing"],
        json!(true)
    );
    assert!(packed.warnings.iter().any(|w| w.starts_with("packing")));
    // Without flash attention transformers builds a block-causal mask: said, not hidden.
    let sdpa = run(gpt2(
        json!({"batch": 2, "packing": true, "attention": "sdpa"}),
    ));
    assert!(common::warns_of(&sdpa.warnings, "block-causal mask"));
}
