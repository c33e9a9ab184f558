//! Bytes of model states per parameter (Adam, one step), by framework × precision × optimizer
//! sharding, against the frameworks' own documentation tables. Every expected figure is read
//! from the cited table or text, never from vramscope.
//!
//! The job is a bare count of P = 8·10⁹ parameters on d = 8 data-parallel ranks; the metric is
//! the contract's `model_states` sum (each state's maximum over the step), divided by P.

use serde_json::json;
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

const P: f64 = 8e9;
const D: f64 = 8.0;

fn bytes_per_param(framework: &str, precision: &str, zero: u64) -> f64 {
    let job: Job = serde_json::from_value(json!({
        "model": {"params": P}, "task": "train", "optimizer": "adam",
        "precision": precision, "framework": framework,
        "parallel": {"gpus": D as u64, "zero": zero},
    }))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let r = estimate(&model.into_input(), &job.resolve(None).unwrap()).unwrap();
    let s = r.per_gpu.model_states;
    (s.parameters + s.gradients + s.optimizer_states + s.master_weights) as f64 / P
}

fn check(framework: &str, precision: &str, zero: u64, expected: f64) {
    let got = bytes_per_param(framework, precision, zero);
    assert!(
        (got - expected).abs() < 1e-9,
        "{framework} {precision} zero {zero}: expected {expected} B/param, got {got}"
    );
}

/// Megatron-LM `docs/api-guide/dist_optimizer.md` (NVIDIA/Megatron-LM, commit 9fc93771),
/// "theoretical number of bytes per parameter (where d is the data parallel size)":
///
/// |                                     | Non-distributed optim | Distributed optim |
/// | `fp16` parameters, `fp16` gradients | 20                    | 4 + 16/d          |
/// | `bf16` parameters, `fp32` gradients | 18                    | 6 + 12/d          |
/// | `fp32` parameters, `fp32` gradients | 16                    | 8 + 8/d           |
///
/// `parallel.zero` 1 is Megatron's distributed optimizer (contract).
#[test]
fn megatron_dist_optimizer_table() {
    check("megatron", "fp16-mixed", 0, 20.0);
    check("megatron", "fp16-mixed", 1, 4.0 + 16.0 / D);
    check("megatron", "bf16-mixed", 0, 18.0);
    check("megatron", "bf16-mixed", 1, 6.0 + 12.0 / D);
    check("megatron", "fp32", 0, 16.0);
    check("megatron", "fp32", 1, 8.0 + 8.0 / D);
}

/// DeepSpeed: the ZeRO paper (Rajbhandari et al. 2020, §3.1 and Table 1), which DeepSpeed's
/// documentation points to for its memory figures: mixed-precision Adam keeps 2Ψ fp16
/// parameters, 2Ψ fp16 gradients and KΨ = 12Ψ of fp32 parameters, momentum and variance (16
/// B/param); P_os (stage 1) divides the 12 by N_d: 4 + 12/N_d. DeepSpeed's bf16 path keeps the
/// same states (its ZeRO optimizer is one class for fp16 and bf16, `stage_1_and_2.py`). In
/// fp32 without ZeRO there are no 16-bit copies: 4Ψ parameters, 4Ψ gradients, 8Ψ of moments
/// (the same §3.1 accounting with K = 8): 16. With ZeRO-1/2 the optimizer still clones its
/// fp32 partition of the parameters (`stage_1_and_2.py` `__init__`:
/// `single_partition_of_fp32_groups` is the partition's `.detach().clone()`, a copy when the
/// model is fp32 too; measured on the CPU with DeepSpeed 0.19.8, `validation/
/// cpu-measured-zero.json` `z2-fp32`: the flat buffer F·4, then the clone P·4): K = 12 on the
/// partition, 8 + 12/N_d at stage 1.
#[test]
fn deepspeed_zero_paper_table() {
    for precision in ["fp16-mixed", "bf16-mixed"] {
        check("deepspeed", precision, 0, 16.0);
        check("deepspeed", precision, 1, 4.0 + 12.0 / D);
        // Stage 2 (P_os+g): 2 + 14/N_d; stage 3 (P_os+g+p): 16/N_d (Table 1's columns).
        check("deepspeed", precision, 2, 2.0 + 14.0 / D);
        check("deepspeed", precision, 3, 16.0 / D);
    }
    check("deepspeed", "fp32", 0, 16.0);
    check("deepspeed", "fp32", 1, 8.0 + 12.0 / D);
}

/// FSDP: PyTorch's `MixedPrecision` docs (torch.distributed.fsdp): "Outside forward and
/// backward, the sharded parameters are kept in full precision (e.g. for the optimizer step)",
/// and gradients are upcast to full precision for the step unless `keep_low_precision_grads`;
/// the 16-bit parameters exist only unsharded around each unit's compute. So fp32 and
/// fp16/bf16-mixed alike hold 4 (parameters) + 4 (gradients) + 8 (Adam) = 16 B/param, all of
/// it divided by d under FULL_SHARD (`zero` 3) and replicated under NO_SHARD (`zero` 0).
#[test]
fn fsdp_mixed_precision_keeps_full_precision_shards() {
    for precision in ["fp32", "fp16-mixed", "bf16-mixed"] {
        check("fsdp", precision, 0, 16.0);
        check("fsdp", precision, 3, 16.0 / D);
    }
}
