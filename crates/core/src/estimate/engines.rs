//! What the serving engines' budgets share: the KV bytes per GPU (paged as the engine pages
//! them), a forward's working set without gradients, the note on replicas. Each engine's own
//! budget is in its module: vLLM's pool `engines/vllm/budget.rs`, SGLang's
//! `engines/sglang/budget.rs`, llama.cpp's split `engines/llamacpp/split.rs`.

use super::activations::forward;
use crate::error::CoreError;
use crate::job::{ResolvedJob, Task};
use crate::model::{AttentionKind, ModelSpec};
pub use crate::report::VllmBudget;

pub use crate::engines::vllm::settings::{
    VLLM_BLOCK_SIZE, VLLM_GPU_MEMORY_UTILIZATION, VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS,
};
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
        let mut add = |kind: AttentionKind, held: u64| {
            let v = engine_values(kind, tp) as u128 * held as u128 * sequences as u128;
            total += v.div_ceil(block_values as u128) * block_bytes as u128;
        };
        add(layer.attention.kind, held);
        // Zamba2's hybrid layer: the shared block's own K/V at this layer (vLLM's
        // `models/zamba2.py` gives each hybrid layer's attention its own cache).
        if let Some(sb) = &layer.shared_block {
            let held = sb.attention.kv_held(tokens).div_ceil(page) * page;
            add(sb.attention.kind, held);
        }
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

/// Values one token caches in one layer of `kind` on one rank: KV heads split over TP ranks
/// (replicated when there are fewer heads than ranks); an MLA latent replicated on every rank.
fn engine_values(kind: AttentionKind, tp: u64) -> u64 {
    match kind {
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
        // State-space layers hold state per sequence, added by the caller.
        AttentionKind::StateSpace(_) => 0,
    }
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
