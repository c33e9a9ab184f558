//! Inference rates at the job's batch: prefill is compute-bound (the prompt's matmuls at the
//! achievable matmul rate, or reading the weights once, whichever is longer); decode is
//! memory-bandwidth-bound (every generated token reads the weights and the sequence's keys and
//! values once: Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2; Kwon et
//! al. 2023, vLLM, §2.2), or compute-bound at batches large enough that 2·N·batch FLOPs take
//! longer. Tensor-parallel communication is not counted.

use super::compute::attention_forward_flops;
use super::hardware::Hardware;
use super::shape::ModelShape;
use super::InferThroughput;
use crate::job::ResolvedJob;
use crate::report::PerGpu;

/// Prefill and decode tokens per second of the job's batch, from the estimate's per-GPU
/// weights and KV cache.
pub fn rates(
    shape: &ModelShape,
    job: &ResolvedJob,
    hw: &Hardware,
    per_gpu: &PerGpu,
) -> InferThroughput {
    let gpus = (job.parallel.tp * job.parallel.pp * job.parallel.cp).max(1) as f64;
    let (b, s, new) = (job.batch as f64, job.seq, job.new_tokens);
    let weights = per_gpu.components.parameters as f64;
    // Prefill: the prompt's matmuls and its causal attention core (half the score matrix).
    let flops_mm = 2.0 * shape.matmul_params * b * s as f64 / gpus;
    let flops_attn = b * attention_forward_flops(shape, s) * 0.5 / gpus;
    let prefill_s = (hw.matmul_s(flops_mm) + hw.attention_s(flops_attn)).max(hw.memory_s(weights));
    // Decode: the KV cache read at the mean context of the generation.
    let context = (s + new).max(1) as f64;
    let kv_mean = per_gpu.components.kv_cache as f64 * (s as f64 + new as f64 / 2.0) / context;
    let read_s = hw.memory_s(weights + kv_mean);
    let compute_s = hw.matmul_s(2.0 * shape.matmul_params * b / gpus);
    InferThroughput {
        prefill_tokens_per_s: b * s as f64 / prefill_s,
        decode_tokens_per_s: b / read_s.max(compute_s),
    }
}
