//! llama.cpp's memory: the split of the layers between GPU and host by `n_gpu_layers`.

use crate::error::CoreError;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;
use serde::Serialize;

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
    let kv_all = crate::estimate::kv::kv_cache_bytes(
        spec,
        &ResolvedJob {
            batch: 1,
            seq: ctx,
            new_tokens: 0,
            kv_dtype: job.kv_dtype.clone().or(Some(crate::job::Spelled::new(
                crate::estimate::kv::KvDtype::Half,
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
