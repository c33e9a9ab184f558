//! Inference time: one `generate` call of the job — the prompt's prefill, then `new_tokens − 1`
//! decode steps — and its rates, by how the framework runs it:
//!
//! - **eager PyTorch** (`framework: pytorch`, Hugging Face `generate`; the training frameworks'
//!   inference too): every op of every layer issued from Python for every token, so a decode
//!   step takes the longer of the host's time to issue it and the GPU's to read the weights,
//!   plus the decode attention over the cache, which SDPA's kernels run far below bandwidth at
//!   one query token ([`eager`]);
//! - **vLLM, SGLang**: decode steps replayed as CUDA graphs (no per-op host cost), so a step
//!   reads the weights and the sequences' keys and values once at the GPU's bandwidth (Pope et
//!   al. 2022, "Efficiently Scaling Transformer Inference", §2; Kwon et al. 2023, vLLM, §2.2),
//!   or is compute-bound when 2·N·batch FLOPs take longer;
//! - **llama.cpp, ollama**: the GPU's layers at the GPU's bandwidth, the CPU's at the host's,
//!   one after the other ([`split`]).
//!
//! Prefill is compute-bound: the prompt's matmuls (the LM head on the last position only:
//! `generate` passes `logits_to_keep=1`, vLLM and llama.cpp compute logits for the sampled
//! position), its attention core and memory-bound ops, or reading the weights once, whichever
//! is longer. Tensor-parallel communication is not counted.

pub mod eager;
pub mod split;

use super::compute::attention_forward_flops;
use super::hardware::Hardware;
use super::shape::ModelShape;
use super::InferThroughput;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use crate::report::PerGpu;

/// What an inference job's time is bound by (the contract's `throughput.bound`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The host issuing ops (eager PyTorch).
    Launch,
    /// Reading weights and cache at the GPU's bandwidth.
    Memory,
    /// Matmuls at the GPU's rate.
    Compute,
    /// Layers read from host RAM (llama.cpp's CPU layers).
    Offload,
}

impl Bound {
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Launch => "launch",
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Offload => "offload",
        }
    }
}

/// One decode step: its seconds and what bounds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub seconds: f64,
    pub bound: Bound,
}

/// The report's inference throughput of a job: one `generate` call and its rates.
/// `engine`: the report's `engine` object (llama.cpp's split of layers between GPU and host).
pub fn rates(
    spec: Option<&ModelSpec>,
    shape: &ModelShape,
    job: &ResolvedJob,
    hw: &Hardware,
    per_gpu: &PerGpu,
    engine: Option<&serde_json::Value>,
) -> InferThroughput {
    let kv = Kv::of(spec, job, per_gpu);
    let masked = job.engine.static_cache();
    let served = crate::engines::settings::spec(job.framework);
    let (prefill_s, step) = match served {
        Some(e) if e.layers_flag().is_some() => {
            let placement = split::Placement::of(engine, per_gpu, kv.mean);
            split::times(shape, job, hw, &placement)
        }
        Some(e) if e.cuda_graphs() => (
            prefill_s(shape, job, hw, per_gpu.components.parameters as f64, None),
            // The fused MoE kernels read the experts some token is routed to.
            graph_step(
                shape,
                job,
                hw,
                per_gpu.components.parameters as f64 * shape.decode_weight_share(job.batch)
                    + kv.mean,
            ),
        ),
        _ => {
            let attended = masked.then_some(job.seq + job.new_tokens);
            let prefill = prefill_s(
                shape,
                job,
                hw,
                per_gpu.components.parameters as f64,
                attended,
            );
            let host = spec.map_or(0.0, |s| eager::host_s(s, masked, job.batch));
            let cache = if masked { kv.full } else { kv.mean };
            let step = eager::decode_step(shape, job, hw, per_gpu, host, cache);
            // The prefill's forward is issued like any other: the host's time is its floor.
            (prefill.max(host), step)
        }
    };
    report(job, prefill_s, step)
}

/// The contract's figures from the prefill and a decode step: one `generate` call is the
/// prefill (which yields the first new token) and `new_tokens − 1` steps.
pub fn report(job: &ResolvedJob, prefill_s: f64, step: Step) -> InferThroughput {
    let b = job.batch as f64;
    let steps = job.new_tokens.saturating_sub(1) as f64;
    InferThroughput {
        prefill_tokens_per_s: b * job.seq as f64 / prefill_s,
        decode_tokens_per_s: b / step.seconds,
        generate_s: prefill_s + steps * step.seconds,
        prefill_s,
        decode_step_s: step.seconds,
        bound: step.bound.as_str(),
    }
}

/// Keys and values a decode step reads, bytes on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kv {
    /// The whole cache at the end of the call (prompt + new tokens of every sequence).
    pub full: f64,
    /// At the call's mean context (prompt + half the new tokens).
    pub mean: f64,
}

impl Kv {
    /// From the model's KV layout, else the estimate's KV cache in proportion.
    fn of(spec: Option<&ModelSpec>, job: &ResolvedJob, per_gpu: &PerGpu) -> Kv {
        let (s, new) = (job.seq, job.new_tokens);
        let split = (job.parallel.tp * job.parallel.pp * job.parallel.cp).max(1) as f64;
        let bytes = |t: u64| {
            spec.and_then(|sp| crate::estimate::kv::kv_cache_bytes(sp, job, t).ok())
                .map(|b| b as f64 / split)
        };
        let full = bytes(s + new).unwrap_or(per_gpu.components.kv_cache as f64);
        let mean = bytes(s + new / 2)
            .unwrap_or(full * (s as f64 + new as f64 / 2.0) / (s + new).max(1) as f64);
        Kv { full, mean }
    }
}

/// A decode step with no per-op host cost: `bytes` read at the GPU's bandwidth, or the
/// batch's 2·N FLOPs at its matmul rate.
pub fn graph_step(shape: &ModelShape, job: &ResolvedJob, hw: &Hardware, bytes: f64) -> Step {
    let gpus = (job.parallel.tp * job.parallel.pp * job.parallel.cp).max(1) as f64;
    let read = hw.memory_s(bytes);
    let compute = hw.matmul_s(2.0 * shape.matmul_params * job.batch as f64 / gpus);
    if compute > read {
        Step {
            seconds: compute,
            bound: Bound::Compute,
        }
    } else {
        Step {
            seconds: read,
            bound: Bound::Memory,
        }
    }
}

/// Elements one token's memory-bound ops read and write per layer in an inference forward,
/// each op reading its input and writing its output once (`modeling_llama.py`'s forward):
/// the norms (read h, write h), two residual adds (read 2h, write h), rotary on q and k (read
/// and write each) and the MLP's activation (gated: read 2f, write f; else read f, write f).
fn prefill_elements_per_token(o: &super::shape::LayerOps) -> f64 {
    let h = o.hidden;
    let norms = (o.rms_norms + o.layer_norms) * 2.0 * h;
    let residual = 2.0 * 3.0 * h;
    let rotary = 2.0 * o.rotary_width;
    let act = o.act_width * if o.gated { 3.0 } else { 2.0 };
    norms + residual + rotary + act
}

/// The prompt's forward on the GPU, reading `weights` bytes at least once. `attended`: the
/// static cache's length, over which the masked attention runs whole (no causal half
/// skipped); `None`: causal attention over the prompt (FlashAttention skips the masked half).
pub fn prefill_s(
    shape: &ModelShape,
    job: &ResolvedJob,
    hw: &Hardware,
    weights: f64,
    attended: Option<u64>,
) -> f64 {
    let gpus = (job.parallel.tp * job.parallel.pp * job.parallel.cp).max(1) as f64;
    let (b, s) = (job.batch as f64, job.seq);
    let tokens = b * s as f64;
    let head = ((shape.vocab * shape.hidden) as f64).min(shape.matmul_params);
    let flops_mm = 2.0 * ((shape.matmul_params - head) * tokens + head * b) / gpus;
    let attn = b * attention_forward_flops(shape, s) / gpus;
    let flops_attn = match attended {
        Some(l) => attn * l as f64 / s.max(1) as f64,
        None => attn * 0.5,
    };
    let width = job.precision.compute_bytes() as f64;
    let per_token = prefill_elements_per_token(&shape.layer_ops) * width;
    let elementwise = tokens * per_token * shape.layers as f64 / gpus;
    (hw.matmul_s(flops_mm) + hw.attention_s(flops_attn) + hw.memory_s(elementwise))
        .max(hw.memory_s(weights))
}
