//! vLLM's start-up budget as the report shows it (`rl.generator.budget`); it is computed by
//! `engines::vllm::budget::vllm_budget`.

use serde::Serialize;

/// What vLLM does with the GPU at start-up, per GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmBudget {
    /// capacity × gpu_memory_utilization.
    pub usable: u64,
    pub weights: u64,
    /// Torch peak of the profiling forward over `max_num_batched_tokens` tokens.
    pub profile_peak: u64,
    /// The CUDA-graph pool: the working set of the largest captured decode batch.
    pub cuda_graphs: u64,
    /// CUDA context and NCCL buffers (outside the allocator).
    pub non_torch: u64,
    /// The preallocated KV pool.
    pub kv_pool: u64,
    pub block_size: u64,
    /// Bytes of one block over this GPU's layers.
    pub block_bytes: u64,
    pub num_blocks: u64,
    pub max_model_len: u64,
    /// vLLM's "Maximum concurrency for {max_model_len} tokens per request".
    pub max_concurrency: f64,
}
