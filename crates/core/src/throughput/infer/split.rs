//! llama.cpp (and ollama, which runs it) with layers split between GPU and host by `-ngl`
//! (`engines::llamacpp::split::llamacpp_split`): a decode step runs the layers in order, the host's on
//! the CPU and the GPU's on the GPU, so its time is the sum of the two shares, each read at its
//! own memory's bandwidth — a token reads every weight it passes once (the rule vLLM's
//! maintainers give for CPU decode, vllm-project/vllm#7379: tokens/s = memory bandwidth /
//! weight bytes). Host bandwidth is far below the GPU's, so each layer moved to the CPU makes
//! a step slower: decode tokens/s never rises as `-ngl` falls.
//!
//! Prefill: llama.cpp runs a micro-batch of at least 32 tokens on the GPU even for the host's
//! layers, copying their weights over the host link once per micro-batch of `n_ubatch` tokens
//! (`ggml-cuda.cu` `ggml_backend_cuda_device_offload_op`, `min_batch_size = 32`; the
//! scheduler's split inputs), so the prompt costs its compute plus those copies.

use super::{Bound, Step};
use crate::engines::llamacpp::split::{LLAMACPP_OFFLOAD_MIN_BATCH, LLAMACPP_UBATCH};
use crate::job::ResolvedJob;
use crate::report::PerGpu;
use crate::throughput::hardware::{Hardware, MEMORY_FRACTION};
use crate::throughput::shape::ModelShape;

/// The host's memory bandwidth when the job does not give one (`engine.host_memory_gbps`):
/// dual-channel DDR5-5600, the common desktop configuration (JEDEC JESD79-5: 5,600 MT/s × 8
/// bytes per 64-bit channel = 44.8 GB/s a channel; two channels 89.6 GB/s).
pub const DEFAULT_HOST_MEMORY_GBPS: f64 = 89.6;

/// Fraction of the host's bandwidth a decode step reads at: the GPU's memory-bound fraction
/// ([`MEMORY_FRACTION`]), an assumption for CPUs (STREAM-like reads; not measured here).
pub const HOST_MEMORY_FRACTION: f64 = MEMORY_FRACTION;

/// Bytes a decode step reads on each side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// Weights on the GPU (the layers `-ngl` puts there, the output layer with `-ngl` past the
    /// block count).
    pub gpu_weights: f64,
    pub gpu_kv: f64,
    /// Weights on the host that a token reads: the CPU's layers (and the output layer below
    /// the block count + 1); the token embedding is one row per token and is left out.
    pub host_weights: f64,
    pub host_kv: f64,
}

impl Placement {
    /// From the report's `engine` object (`LlamaCppSplit`); the KV at the call's mean context
    /// `kv_mean` shared in the split's proportion. Without a split, everything on the GPU.
    pub fn of(engine: Option<&serde_json::Value>, per_gpu: &PerGpu, kv_mean: f64) -> Placement {
        let get = |k: &str| engine.and_then(|e| e.get(k)).and_then(|v| v.as_u64());
        match (get("gpu_weights"), get("host_weights")) {
            (Some(gw), Some(hw)) => {
                let (gk, hk) = (get("gpu_kv").unwrap_or(0), get("host_kv").unwrap_or(0));
                let share = |k: u64| match gk + hk {
                    0 => 0.0,
                    all => kv_mean * k as f64 / all as f64,
                };
                Placement {
                    gpu_weights: gw as f64,
                    gpu_kv: share(gk),
                    host_weights: hw.saturating_sub(get("host_embedding").unwrap_or(0)) as f64,
                    host_kv: share(hk),
                }
            }
            _ => Placement {
                gpu_weights: per_gpu.components.parameters as f64,
                gpu_kv: kv_mean,
                host_weights: 0.0,
                host_kv: 0.0,
            },
        }
    }

    /// The GPU's share of the bytes a step reads.
    fn gpu_share(&self) -> f64 {
        let all = self.gpu_weights + self.host_weights + self.gpu_kv + self.host_kv;
        if all > 0.0 {
            (self.gpu_weights + self.gpu_kv) / all
        } else {
            1.0
        }
    }
}

/// Bytes per second the host's layers are read at: the job's `engine.host_memory_gbps`, else
/// [`DEFAULT_HOST_MEMORY_GBPS`], at [`HOST_MEMORY_FRACTION`].
pub fn host_bandwidth(job: &ResolvedJob) -> f64 {
    job.engine
        .host_memory_gbps
        .unwrap_or(DEFAULT_HOST_MEMORY_GBPS)
        * 1e9
        * HOST_MEMORY_FRACTION
}

/// One decode step: the GPU's layers (their bytes at the GPU's bandwidth, or the batch's
/// FLOPs over them at its matmul rate) then the host's (their bytes at the host's bandwidth).
/// The one function `estimate` and `fit` read llama.cpp's speed from.
pub fn decode_step(shape: &ModelShape, job: &ResolvedJob, hw: &Hardware, p: &Placement) -> Step {
    let gpu_read = hw.memory_s(p.gpu_weights + p.gpu_kv);
    let gpu_compute = hw.matmul_s(2.0 * shape.matmul_params * job.batch as f64 * p.gpu_share());
    let host = (p.host_weights + p.host_kv) / host_bandwidth(job);
    let gpu = gpu_read.max(gpu_compute);
    let bound = if host > gpu {
        Bound::Offload
    } else if gpu_compute > gpu_read {
        Bound::Compute
    } else {
        Bound::Memory
    };
    Step {
        seconds: gpu + host,
        bound,
    }
}

/// The prefill and a decode step of the job under its split.
pub fn times(shape: &ModelShape, job: &ResolvedJob, hw: &Hardware, p: &Placement) -> (f64, Step) {
    let step = decode_step(shape, job, hw, p);
    let tokens = job.batch * job.seq;
    // The whole prompt's compute on the GPU (its weights read once at least) ...
    let compute = super::prefill_s(shape, job, hw, p.gpu_weights + p.host_weights, None);
    // ... and the host's layers copied in once per micro-batch, or, below the offload
    // threshold, run on the CPU at its bandwidth.
    let host_layers = if tokens >= LLAMACPP_OFFLOAD_MIN_BATCH {
        tokens.div_ceil(LLAMACPP_UBATCH) as f64 * hw.host_s(p.host_weights)
    } else {
        (p.host_weights + p.host_kv) / host_bandwidth(job)
    };
    (compute + host_layers, step)
}
