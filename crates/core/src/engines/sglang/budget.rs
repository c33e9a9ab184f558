//! SGLang's memory at start-up (`framework: "sglang"`), from its sources (SGLang v0.5 series):
//!
//! - `python/sglang/srt/server_args.py` `_handle_gpu_memory_settings`: `chunked_prefill_size`
//!   and `cuda_graph_max_bs` chosen by the GPU's memory (MiB, as nvidia-smi reports it) and the
//!   TP size, then `mem_fraction_static = round((gpu_mem − reserved_mem) / gpu_mem, 3)` with
//!   `reserved_mem = 512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2 +
//!   tp × pp / 8 × 1024` MiB, at least 10 GiB on GPUs over 60 GiB. `context_length` defaults to
//!   the model's maximum positions.
//! - `python/sglang/srt/model_executor/model_runner.py` `profile_max_num_token`: the static
//!   share (weights + the token-level KV pool the radix cache lives in) is
//!   `mem_fraction_static` of the memory free at start-up; the pool holds
//!   `(free_after_weights − free_at_start × (1 − mem_fraction_static)) / cell_size` tokens, one
//!   cell = K and V of one token over all layers, and SGLang refuses to start when that is not
//!   positive ("Not enough memory. Please try to increase --mem-fraction-static"). The
//!   request-to-token table beside it holds `max_running_requests + 1` rows of
//!   `context_length + 4` int32 slots, with `max_running_requests` defaulting to
//!   `clamp(pool_tokens / context_length × 512, 2048, 4096)`.
//! - What is left, `1 − mem_fraction_static`, is for the activations of one prefill chunk of
//!   `chunked_prefill_size` tokens and the CUDA graphs captured up to `cuda_graph_max_bs`
//!   (`model_executor/cuda_graph_runner.py`).

use crate::error::CoreError;
use crate::estimate::engines::{forward_peak, kv_bytes_per_gpu};
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use serde::Serialize;

const MIB: u64 = 1 << 20;

/// SGLang's start-up budget on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangBudget {
    /// The GPU's memory in MiB, as SGLang reads it to choose its defaults.
    pub gpu_mem_mib: u64,
    pub mem_fraction_static: f64,
    pub chunked_prefill_size: u64,
    pub cuda_graph_max_bs: u64,
    pub context_length: u64,
    pub max_running_requests: u64,
    /// Memory free when the engine starts (capacity − reserve − CUDA context).
    pub free_at_start: u64,
    pub weights: u64,
    /// Bytes of one token's K and V over this GPU's layers.
    pub cell_bytes: u64,
    /// `max_total_num_tokens`: the token pool the radix cache lives in.
    pub max_total_tokens: u64,
    pub kv_pool: u64,
    /// The request-to-token index table.
    pub req_to_token: u64,
    /// Torch peak of one prefill chunk.
    pub activations: u64,
    /// The CUDA-graph pool of the largest captured decode batch.
    pub cuda_graphs: u64,
    pub non_torch: u64,
}

/// `chunked_prefill_size` and `cuda_graph_max_bs` by GPU memory (MiB) and TP size
/// (`server_args.py` `_handle_gpu_memory_settings`, CUDA GPUs).
pub fn default_chunk_and_graphs(gpu_mem_mib: u64, tp: u64) -> (u64, u64) {
    let small_tp = tp < 4;
    let gib = 1024;
    if gpu_mem_mib < 20 * gib {
        (2048, 8)
    } else if gpu_mem_mib < 35 * gib {
        (2048, if small_tp { 24 } else { 80 })
    } else if gpu_mem_mib < 60 * gib {
        (4096, if small_tp { 32 } else { 160 })
    } else if gpu_mem_mib < 160 * gib {
        (8192, if small_tp { 256 } else { 512 })
    } else {
        (16384, 512)
    }
}

/// SGLang's default `mem_fraction_static` (`server_args.py`, see the module doc), rounded to
/// three decimals as SGLang rounds it.
pub fn default_mem_fraction_static(
    gpu_mem_mib: u64,
    chunk: u64,
    graph_bs: u64,
    tp: u64,
    pp: u64,
) -> f64 {
    let mut reserved = 512.0
        + chunk.max(2048) as f64 * 1.5
        + graph_bs as f64 * 2.0
        + (tp * pp) as f64 / 8.0 * 1024.0;
    if gpu_mem_mib > 60 * 1024 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    let m = gpu_mem_mib as f64;
    ((m - reserved) / m * 1000.0).round() / 1000.0
}

/// SGLang's budget for `job` on a GPU of `capacity` bytes (`usable` of them left by the user's
/// reserve), with `weights` on this GPU and `non_torch` bytes outside PyTorch.
pub fn sglang_budget(
    spec: &ModelSpec,
    job: &ResolvedJob,
    capacity: u64,
    usable: u64,
    weights: u64,
    non_torch: u64,
) -> Result<SglangBudget, CoreError> {
    let e = &job.engine;
    let gpu_mem_mib = capacity / MIB;
    let tp = job.parallel.tp.max(1);
    let (chunk0, graphs0) = default_chunk_and_graphs(gpu_mem_mib, tp);
    let chunk = e.chunked_prefill_size.unwrap_or(chunk0);
    let graph_bs = e.cuda_graph_max_bs.unwrap_or(graphs0);
    let mfs = e.mem_fraction_static.unwrap_or_else(|| {
        default_mem_fraction_static(gpu_mem_mib, chunk, graph_bs, tp, job.parallel.pp.max(1))
    });
    let context_length = e
        .context_length
        .or(spec.max_position_embeddings)
        .unwrap_or(job.seq + job.new_tokens);
    let free_at_start = usable.saturating_sub(non_torch);
    let cell_bytes = kv_bytes_per_gpu(spec, job, 1, 1)?.max(1);
    let rest = (free_at_start as f64 * mfs) as i128 - weights as i128;
    let max_total_tokens = if rest > 0 {
        rest as u64 / cell_bytes
    } else {
        0
    };
    let estimated = (max_total_tokens as f64 / context_length.max(1) as f64 * 512.0) as u64;
    let max_running_requests = e
        .max_running_requests
        .unwrap_or(estimated.clamp(2048, 4096))
        .min((max_total_tokens / 2).max(1));
    let req_to_token = (max_running_requests + 1) * (context_length + 4) * 4;
    Ok(SglangBudget {
        gpu_mem_mib,
        mem_fraction_static: mfs,
        chunked_prefill_size: chunk,
        cuda_graph_max_bs: graph_bs,
        context_length,
        max_running_requests,
        free_at_start,
        weights,
        cell_bytes,
        max_total_tokens,
        kv_pool: max_total_tokens * cell_bytes,
        req_to_token,
        activations: forward_peak(spec, job, job.batch.min(chunk), chunk)?,
        cuda_graphs: forward_peak(spec, job, graph_bs, graph_bs)?,
        non_torch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults read off `server_args.py` for three GPUs, by hand:
    /// - H100 80GB (nvidia-smi 81559 MiB), TP 1: chunk 8192, graphs 256; reserved = 512 +
    ///   8192 × 1.5 + 256 × 2 + 1/8 × 1024 = 512 + 12288 + 512 + 128 = 13440 MiB (over the
    ///   10 GiB floor); (81559 − 13440) / 81559 = 0.83521… → 0.835.
    /// - RTX 4090 (24564 MiB), TP 1: chunk 2048, graphs 24; reserved = 512 + 3072 + 48 + 128 =
    ///   3760; (24564 − 3760) / 24564 = 0.84693… → 0.847.
    /// - A100 40GB (40960 MiB), TP 4: chunk 4096, graphs 160; reserved = 512 + 6144 + 320 +
    ///   512 = 7488; (40960 − 7488) / 40960 = 0.81718… → 0.817.
    #[test]
    fn defaults_follow_server_args() {
        assert_eq!(default_chunk_and_graphs(81559, 1), (8192, 256));
        assert_eq!(default_mem_fraction_static(81559, 8192, 256, 1, 1), 0.835);
        assert_eq!(default_chunk_and_graphs(24564, 1), (2048, 24));
        assert_eq!(default_mem_fraction_static(24564, 2048, 24, 1, 1), 0.847);
        assert_eq!(default_chunk_and_graphs(40960, 4), (4096, 160));
        assert_eq!(default_mem_fraction_static(40960, 4096, 160, 4, 1), 0.817);
        // A small GPU: 16 GiB (16384 MiB), TP 1: chunk 2048, graphs 8; reserved = 512 + 3072 +
        // 16 + 128 = 3728; (16384 − 3728) / 16384 = 0.77246… → 0.772.
        assert_eq!(default_chunk_and_graphs(16384, 1), (2048, 8));
        assert_eq!(default_mem_fraction_static(16384, 2048, 8, 1, 1), 0.772);
    }
}
