//! Serving engines' own memory budgets: vLLM preallocates a KV pool from what is left of
//! `gpu_memory_utilization` after weights, a profiled forward and CUDA graphs; llama.cpp splits
//! layers between GPU and host by `n_gpu_layers`.

use super::activations::forward;
use crate::error::CoreError;
use crate::job::{ResolvedJob, Task};
use crate::model::{AttentionKind, ModelSpec};
pub use crate::report::VllmBudget;
use serde::Serialize;

pub use crate::engines::vllm::settings::{
    VLLM_BLOCK_SIZE, VLLM_GPU_MEMORY_UTILIZATION, VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS,
};
/// Largest batch vLLM captures a CUDA graph for (`max_capture_size`, 512 by default, capped by
/// `max_num_seqs`).
pub const VLLM_MAX_CAPTURE_SIZE: u64 = 512;

/// `engine.gpu_memory_utilization` (checked to lie in (0, 1] in resolution), or vLLM's 0.9.
pub fn gpu_memory_utilization(job: &ResolvedJob) -> f64 {
    job.engine.utilization_or_default()
}

/// KV bytes per token on one GPU, summed over the layers this rank holds (the first pipeline
/// stage), with `tokens` held per layer (window-capped) and the engine's paging.
pub fn kv_bytes_per_gpu(
    spec: &ModelSpec,
    job: &ResolvedJob,
    sequences: u64,
    tokens: u64,
) -> Result<u64, CoreError> {
    let (block_bytes, block_values) = super::kv::kv_width(job);
    let page = crate::engines::settings::spec(job.framework).map_or(1, |e| e.kv_page(&job.engine));
    let tp = job.parallel.tp.max(1);
    let pp = job.parallel.pp.max(1);
    let layers = &spec.decoder.layers;
    let per_stage = layers.len().div_ceil(pp as usize);
    let mut total: u128 = 0;
    // Llama-3.2-Vision's cross-attention layers hold the images' vision tokens per sequence.
    let cross = super::mllama::cross_tokens(spec, job);
    for layer in layers.iter().take(per_stage) {
        let held = if layer.attention.vision_cross {
            cross
        } else {
            layer.attention.kv_held(tokens)
        };
        let held = held.div_ceil(page) * page;
        // KV heads split over TP ranks (replicated when there are fewer heads than ranks); an MLA
        // latent is replicated on every rank.
        let values = match layer.attention.kind {
            AttentionKind::Standard {
                kv_heads, head_dim, ..
            } => 2 * (kv_heads / tp).max(1) * head_dim,
            // A DSA layer's indexer keys (one `index_head_dim` key per token, replicated like
            // the latent) are counted at the KV width; vLLM keeps them in fp8 with a scale.
            AttentionKind::Latent {
                kv_lora_rank,
                qk_rope_head_dim,
                indexer,
                ..
            } => {
                kv_lora_rank
                    + qk_rope_head_dim
                    + indexer.filter(|ix| ix.own()).map_or(0, |ix| ix.head_dim)
            }
            // State-space layers hold state per sequence, added below.
            AttentionKind::StateSpace(_) => 0,
        };
        let v = values as u128 * held as u128 * sequences as u128;
        total += v.div_ceil(block_values as u128) * block_bytes as u128;
        // A state-space layer's recurrent state, per sequence, in the model dtype, its inner
        // channels split over TP ranks as vLLM's `MambaMixer2` shards them.
        for ssm in layer.ssm_mixers() {
            let (conv, state) = ssm.state_values();
            let per_seq = ((conv + state) * job.precision.compute_bytes()).div_ceil(tp);
            total += per_seq as u128 * sequences as u128;
        }
    }
    u64::try_from(total).map_err(|_| CoreError::Overflow {
        what: "KV cache bytes".into(),
    })
}

/// What `--gpus N` means for a serving engine when the model is not split over them (tensor ×
/// pipeline parallel below N): N replicas, each GPU holding the whole model, the figures being
/// one GPU's. vLLM and SGLang run one copy per GPU unless told to split it
/// (`--tensor-parallel-size` / `--tp`; `--data-parallel-size` for replicas); llama.cpp and
/// ollama spread one model's layers over every visible GPU by default (`--split-mode layer`),
/// which this estimate does not model. `None` for other jobs.
pub fn replicas_note(job: &ResolvedJob) -> Option<String> {
    let (gpus, tp, pp) = (
        job.parallel.gpus,
        job.parallel.tp.max(1),
        job.parallel.pp.max(1),
    );
    if job.task != Task::Infer || gpus <= tp * pp {
        return None;
    }
    let replicas = gpus / (tp * pp);
    let engine = crate::engines::settings::spec(job.framework)?;
    if let Some(flag) = engine.tp_flag() {
        return Some(format!(
            "--gpus {gpus} with {} and tp {tp}: {replicas} replicas, each with the full \
             weights on its own GPU (the figures are one GPU's); to split one model over \
             the {gpus} GPUs give --tp {} (the engine's {flag})",
            job.framework.as_str(),
            gpus / pp
        ));
    }
    engine.layers_flag()?;
    Some(format!(
        "--gpus {gpus} with {}: the figures are one GPU holding the whole model; the engine \
         spreads one model's layers over every visible GPU by default (--split-mode layer), \
         which this estimate does not model",
        job.framework.as_str()
    ))
}

/// The longest request vLLM accepts with a KV pool of `pool` bytes, at most `cap` tokens: the
/// largest `max_model_len` for which one request's blocks fit the pool, as vLLM's start-up
/// check computes it (`vllm/v1/core/kv_cache_utils.py`: `check_enough_kv_cache_memory` refuses
/// to start when one request of `max_model_len` tokens does not fit, and
/// `estimate_max_model_len` binary-searches the longest that does, the figure its error names).
/// `None` when not even one token fits.
pub fn vllm_longest_request(
    spec: &ModelSpec,
    job: &ResolvedJob,
    pool: u64,
    cap: u64,
) -> Result<Option<u64>, CoreError> {
    crate::search::largest(cap.max(1), |t| {
        Ok(kv_bytes_per_gpu(spec, job, 1, t)? <= pool)
    })
}

/// The most requests of `tokens` tokens each that vLLM runs at once in a pool of `pool` bytes:
/// its scheduler admits a waiting request while the pool has free blocks for it and fewer than
/// `max_num_seqs` run (`vllm/v1/core/sched/scheduler.py` `schedule`: the waiting loop stops
/// at `len(self.running) == self.max_num_running_reqs` or when
/// `kv_cache_manager.allocate_slots` returns `None`), so the pool is shared block by block,
/// not split per sequence: ⌊pool / (⌈tokens / block_size⌉ blocks per request)⌋.
pub fn vllm_concurrent_requests(
    spec: &ModelSpec,
    job: &ResolvedJob,
    pool: u64,
    tokens: u64,
) -> Result<u64, CoreError> {
    Ok(pool / kv_bytes_per_gpu(spec, job, 1, tokens)?.max(1))
}

/// The forward working set (no grad) of `tokens` tokens in `sequences` sequences: the largest
/// block's transient plus the hidden states, and the sampler's fp32 logits and probabilities
/// for one position per sequence.
pub(crate) fn forward_peak(
    spec: &ModelSpec,
    job: &ResolvedJob,
    sequences: u64,
    tokens: u64,
) -> Result<u64, CoreError> {
    let probe = ResolvedJob {
        task: Task::Infer,
        batch: 1,
        seq: tokens.max(1),
        new_tokens: 0,
        ..job.clone()
    };
    let mut w = Vec::new();
    let p = forward(spec, &probe, &mut w)?;
    let block = p.layers.iter().map(|l| l.forward_peak).max().unwrap_or(0);
    let tp = job.parallel.tp.max(1);
    let sampler = super::overhead::round_size(sequences.min(tokens) * spec.vocab_size * 4) * 2;
    Ok(block / tp + p.embedding.kept + sampler)
}

/// vLLM's start-up accounting (`vllm/v1/worker/gpu_worker.py` `determine_available_memory`,
/// `vllm/utils` `memory_profiling`): KV pool = capacity × utilization − weights − torch peak of
/// the profile run − non-torch memory − CUDA graphs, cut into blocks of `block_size` tokens.
pub fn vllm_budget(
    spec: &ModelSpec,
    job: &ResolvedJob,
    capacity: u64,
    weights: u64,
    non_torch: u64,
) -> Result<VllmBudget, CoreError> {
    let util = gpu_memory_utilization(job);
    let usable = (capacity as f64 * util) as u64;
    let block_size = job.engine.block_size_or_default();
    let mnbt = job.engine.max_num_batched_tokens_or_default();
    let max_seqs = job.engine.max_num_seqs_or_default();
    let max_model_len = job
        .engine
        .max_model_len
        .or(spec.max_position_embeddings)
        .unwrap_or(job.seq + job.new_tokens);
    let profile_peak = forward_peak(spec, job, max_seqs, mnbt)?;
    let capture = max_seqs.min(VLLM_MAX_CAPTURE_SIZE);
    let cuda_graphs = forward_peak(spec, job, capture, capture)?;
    let block_bytes = kv_bytes_per_gpu(spec, job, 1, block_size)?;
    let kv_pool = usable
        .saturating_sub(weights)
        .saturating_sub(profile_peak)
        .saturating_sub(non_torch)
        .saturating_sub(cuda_graphs);
    let num_blocks = kv_pool / block_bytes.max(1);
    let per_request = kv_bytes_per_gpu(spec, job, 1, max_model_len)?.max(1);
    let max_concurrency = (num_blocks * block_bytes) as f64 / per_request as f64;
    Ok(VllmBudget {
        usable,
        weights,
        profile_peak,
        cuda_graphs,
        non_torch,
        kv_pool: num_blocks * block_bytes,
        block_size,
        block_bytes,
        num_blocks,
        max_model_len,
        max_concurrency,
    })
}

/// llama.cpp's split of one model between GPU and host (`src/llama-model.cpp`
/// `load_tensors`: the last `n_gpu_layers` blocks go to the GPU, the output layer too once
/// `n_gpu_layers` exceeds the block count, the token embedding stays on the host; the KV
/// cache of offloaded layers is on the GPU, `f16` by default).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaCppSplit {
    pub n_gpu_layers: u64,
    pub layers_on_gpu: u64,
    pub gpu_weights: u64,
    pub gpu_kv: u64,
    /// The compute graph's buffer on the GPU (one micro-batch of `n_ubatch` tokens).
    pub gpu_compute: u64,
    pub host_weights: u64,
    pub host_kv: u64,
    /// Host RAM needed: weights and KV left on the host.
    pub host_total: u64,
    /// The token embedding's bytes (part of `host_weights`: it stays on the host): a token
    /// reads one row of it (`get_rows`), not the table, so the decode time leaves it out
    /// (`throughput::infer::split`).
    pub host_embedding: u64,
}

/// `n_ubatch`, llama.cpp's physical batch (`common/common.h`, default 512).
pub const LLAMACPP_UBATCH: u64 = 512;

/// The split for `n_gpu_layers` (`engine.n_gpu_layers`, default all, as llama.cpp's
/// `-ngl` default of -1 now means).
pub fn llamacpp_split(
    spec: &ModelSpec,
    inventory: &crate::inventory::Inventory,
    stored_bytes: impl Fn(&crate::inventory::Tensor) -> Result<u64, CoreError>,
    job: &ResolvedJob,
) -> Result<LlamaCppSplit, CoreError> {
    let layers = spec.num_layers();
    let ngl = job.engine.n_gpu_layers.unwrap_or(layers + 1);
    let on_gpu = ngl.min(layers);
    let first_gpu = layers - on_gpu;
    let output_on_gpu = ngl > layers;
    let (gpu_w, host_w, embedding) =
        split_weights(inventory, &stored_bytes, first_gpu, output_on_gpu)?;
    let ctx = job
        .batch
        .saturating_mul(job.seq.saturating_add(job.new_tokens));
    let kv_all = super::kv::kv_cache_bytes(
        spec,
        &ResolvedJob {
            batch: 1,
            seq: ctx,
            new_tokens: 0,
            kv_dtype: job.kv_dtype.clone().or(Some(crate::job::Spelled::new(
                super::kv::KvDtype::Half,
                "fp16",
            ))),
            ..job.clone()
        },
        ctx,
    )?;
    let per_layer = kv_all / layers.max(1);
    let gpu_kv = per_layer * on_gpu;
    let host_kv = kv_all - gpu_kv;
    let gpu_compute = if on_gpu > 0 {
        llamacpp_compute_buffer(spec, job, ctx)
    } else {
        cpu_layers_compute_buffer(spec, inventory, &stored_bytes, job, ctx)?
    };
    Ok(LlamaCppSplit {
        n_gpu_layers: ngl,
        layers_on_gpu: on_gpu,
        gpu_weights: gpu_w,
        gpu_kv,
        gpu_compute,
        host_weights: host_w,
        host_kv,
        host_total: host_w + host_kv,
        host_embedding: embedding,
    })
}

/// Stored weight bytes on the GPU and in host RAM: the last `ngl` blocks on the GPU (from
/// `first_gpu` on), the token embedding on the host, the output layer on the GPU when `ngl`
/// exceeds the block count (llama.cpp's `-ngl` counts it as one more layer). Returns the GPU's
/// bytes, the host's, and the token embedding's (among the host's).
fn split_weights(
    inventory: &crate::inventory::Inventory,
    stored_bytes: &impl Fn(&crate::inventory::Tensor) -> Result<u64, CoreError>,
    first_gpu: u64,
    output_on_gpu: bool,
) -> Result<(u64, u64, u64), CoreError> {
    let mut gpu_w = 0u64;
    let mut host_w = 0u64;
    let mut embedding = 0u64;
    for t in &inventory.tensors {
        let b = stored_bytes(t)?;
        let gpu = match (t.layer, t.component) {
            (Some(l), _) => u64::from(l) >= first_gpu,
            (None, crate::inventory::Component::Embedding) => {
                embedding += b;
                false
            }
            (None, _) => output_on_gpu,
        };
        if gpu {
            gpu_w += b;
        } else {
            host_w += b;
        }
    }
    Ok((gpu_w, host_w, embedding))
}

/// The smallest physical batch whose ops llama.cpp's CUDA backend takes from host-resident
/// weights (`ggml/src/ggml-cuda/ggml-cuda.cu`, `ggml_backend_cuda_device_offload_op`:
/// `min_batch_size = 32` over `get_op_batch_size`).
pub const LLAMACPP_OFFLOAD_MIN_BATCH: u64 = 32;

/// The GPU compute buffer with every layer in host RAM (`-ngl 0`): the weights and the KV stay
/// on the host (`src/llama-kv-cache.cpp` puts each layer's KV on that layer's device; the CUDA
/// build's host buffer is `CUDA_Host`), but the scheduler still runs the ops of a micro-batch of
/// at least 32 tokens on the GPU (`ggml_backend_cuda_device_offload_op`) and copies the weights
/// they read into the GPU's compute buffer as split inputs (`ggml/src/ggml-backend.cpp`,
/// `ggml_backend_sched_split_graph`). The buffer is then the offloaded ops' intermediates (as
/// with layers on the GPU) plus one layer's weights, the most a split copies in at once; below
/// 32 tokens per micro-batch nothing runs there.
fn cpu_layers_compute_buffer(
    spec: &ModelSpec,
    inventory: &crate::inventory::Inventory,
    stored_bytes: &impl Fn(&crate::inventory::Tensor) -> Result<u64, CoreError>,
    job: &ResolvedJob,
    ctx: u64,
) -> Result<u64, CoreError> {
    if LLAMACPP_UBATCH.min(ctx.max(1)) < LLAMACPP_OFFLOAD_MIN_BATCH {
        return Ok(0);
    }
    let mut per_layer = std::collections::BTreeMap::<u32, u64>::new();
    for t in &inventory.tensors {
        if let Some(l) = t.layer {
            *per_layer.entry(l).or_default() += stored_bytes(t)?;
        }
    }
    let largest_layer = per_layer.values().copied().max().unwrap_or(0);
    Ok(llamacpp_compute_buffer(spec, job, ctx) + largest_layer)
}

/// llama.cpp's GPU compute buffer over a context of `ctx` tokens: one micro-batch's largest
/// intermediates (fp32 in ggml's CUDA graphs): hidden states and the FFN pair, the attention
/// scores against the whole context unless flash attention is on, and the logits of the
/// sequences' last positions.
fn llamacpp_compute_buffer(spec: &ModelSpec, job: &ResolvedJob, ctx: u64) -> u64 {
    let ub = LLAMACPP_UBATCH.min(ctx.max(1));
    let h = spec.hidden_size;
    let (heads, ffn) = spec
        .all_layers()
        .next()
        .map(|l| {
            let f = match &l.mlp {
                crate::model::Mlp::Dense(d) => d.ffn,
                crate::model::Mlp::Moe(m) => m.expert.ffn * m.top_k,
                crate::model::Mlp::None => 0,
            };
            (l.attention.kind.heads(), f)
        })
        .unwrap_or((1, 4 * h));
    let scores = if job.attention == crate::job::AttentionKernel::Eager {
        ub * ctx * heads * 4
    } else {
        0
    };
    ub * (4 * h + 2 * ffn) * 4 + scores + job.batch * spec.vocab_size * 4
}
