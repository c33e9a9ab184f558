//! Model states checked against the frameworks' sources (issue 31, item 7): DeepSpeed's
//! ZeRO-Offload moves the gradients to the host, FSDP's mixed precision keeps no autocast
//! weight copies, and PEFT's `modules_to_save` trains full copies of the named modules.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::activations::forward;
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

fn report(job: Value) -> Report {
    let job: Job = serde_json::from_value(job).unwrap();
    common::estimate_job(&job)
}

/// Llama-3.1-8B: 8,030,261,248 parameters (Meta's model card; the preset's count).
const N: i64 = 8_030_261_248;

/// ZeRO-2 with `offload_optimizer` on one GPU (`stage_1_and_2.py`: each reduced gradient is
/// copied to its fp32 CPU partition and `param.grad = None`): no gradient stays on the GPU,
/// and the host holds the fp32 master (4 B), Adam's two fp32 moments (8 B) and the fp32
/// gradients (4 B): 16 B per parameter, up to the allocator's 512-byte rounding of each of
/// the 291 tensors' states.
#[test]
fn zero_offload_moves_the_gradients_to_the_host() {
    let job = |offload: &str| {
        json!({"model": "llama-3.1-8b", "gpu": "rtx4090-24gb", "framework": "deepspeed",
               "parallel": {"zero": 2, "offload": offload}, "checkpointing": "full"})
    };
    let off = report(job("optimizer"));
    assert_eq!(off.per_gpu.model_states.gradients, 0);
    assert_eq!(off.per_gpu.components.gradients, 0);
    let host = off.per_gpu.host_bytes.unwrap() as i64;
    assert!(
        (host - 16 * N).abs() < 1 << 20,
        "host {host}, 16 B × N = {}",
        16 * N
    );
    // Without offload the 16-bit gradients (2 B per parameter) stay on the GPU.
    let on = report(job("none"));
    let g = on.per_gpu.model_states.gradients as i64;
    assert!((g - 2 * N).abs() < 1 << 20, "{g}");
}

/// FSDP's `MixedPrecision(param_dtype=bf16)` gathers 16-bit weights, so its bf16-mixed
/// forward saves what DeepSpeed's (16-bit parameters) does, and no weight copies; plain
/// PyTorch's autocast casts each fp32 projection weight to bf16 and its backward keeps the
/// copy: 2 B × one Llama-3.1-70B layer's projection weights (q and o 8192² each, k and v
/// 8192 · 1024 each, gate/up/down 3 · 8192 · 28672) = 2 × 855,638,016 bytes.
#[test]
fn fsdp_mixed_precision_keeps_no_autocast_weight_copies() {
    let job = |framework: &str| {
        json!({"model": "llama-3.1-70b", "gpu": "h100-80gb", "framework": framework,
               "precision": "bf16-mixed", "seq": 4096, "parallel": {"gpus": 16, "zero": 3}})
    };
    let per_layer = |framework: &str| {
        report(job(framework))
            .per_gpu
            .peaks
            .activation_bytes_per_layer
            .unwrap()
    };
    assert_eq!(per_layer("fsdp"), per_layer("deepspeed"));
    let copies = |framework: &str| {
        let j: Job = serde_json::from_value(job(framework)).unwrap();
        let model = load_job_model(j.model.as_ref().unwrap()).unwrap();
        let spec = model.spec.clone().unwrap();
        let resolved = j.resolve(spec.max_position_embeddings).unwrap();
        let plan = forward(&spec, &resolved, &mut Vec::new()).unwrap();
        plan.layers[0].weight_copies + plan.layers[0].cached_copies
    };
    assert_eq!(copies("fsdp"), 0);
    assert_eq!(copies("pytorch"), 2 * 855_638_016);
}

/// LoRA r=16 on q,k,v,o of Llama-3-8B with `modules_to_save: [embed_tokens, lm_head]`: the
/// adapters are 32 layers × 16 × (2 · (4096 + 4096) + 2 · (4096 + 1024)) = 13,631,488; each
/// saved module is 128,256 × 4096 = 525,336,576 weights, copied in the base's bf16 (2 B) with
/// a bf16 gradient (2 B) and AdamW's two bf16 moments (4 B).
#[test]
fn modules_to_save_train_full_copies() {
    let job = |peft: Value| json!({"model": "llama-3-8b", "gpu": "h100-80gb", "optimizer": "adamw", "peft": peft});
    let plain = report(job(json!({"method": "lora", "rank": 16})));
    let saved = report(job(json!({"method": "lora", "rank": 16,
                                  "modules_to_save": ["embed_tokens", "lm_head"]})));
    let copies: u64 = 2 * 525_336_576;
    assert_eq!(plain.model.params_trainable, 13_631_488);
    assert_eq!(saved.model.params_trainable, 13_631_488 + copies);
    let (a, b) = (&plain.per_gpu.model_states, &saved.per_gpu.model_states);
    assert_eq!(b.parameters - a.parameters, 2 * copies);
    assert_eq!(b.gradients - a.gradients, 2 * copies);
    assert_eq!(b.optimizer_states - a.optimizer_states, 4 * copies);
}
