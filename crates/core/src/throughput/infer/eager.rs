//! Hugging Face `generate` in eager PyTorch (`framework: pytorch`, and the training frameworks'
//! inference): the host issues every op of every layer, one at a time, for every new token.
//! A decode step of a few-billion-parameter model reads its weights in a few milliseconds on an
//! HBM GPU but issues over a thousand ops, so it is bound by the host (launch-bound), not by
//! bandwidth, until the batch or the cache is large.
//!
//! - **ops per layer**: counted from `transformers/models/llama/modeling_llama.py`
//!   (`LlamaDecoderLayer`, `LlamaAttention`, `LlamaRMSNorm`, `apply_rotary_pos_emb`, `LlamaMLP`)
//!   and `integrations/sdpa_attention.py` (`repeat_kv`, `use_gqa_in_sdpa`), per kind of block
//!   ([`layer_ops`]);
//! - **per-op host time** [`OP_HOST_S`]: gpt-fast's eager starting point (PyTorch blog
//!   "Accelerating Generative AI with PyTorch II: GPT, Fast", 2023-11-30: Llama-2-7B, batch 1,
//!   bf16, A100, no compile: 25.5 tokens/s, "overhead-bound") over the ops its decode step issues
//!   (`pytorch-labs/gpt-fast` `model.py` / `generate.py` at 790d30c, counted in [`OP_HOST_S`]);
//! - **Hugging Face's own Python per layer** [`HF_LAYER_PYTHON_S`]: what HF's modules and
//!   `generate` add on top of the ops (module calls with keyword plumbing, the attention
//!   interface's dispatch, output dataclasses): read off the H200 run
//!   `llama8b-infer-static-b4-p1024-n128` (`../shared/fixtures/gpu-h200/`), the run with the
//!   smallest cache; the other two generate runs validate it (`tests/generate_time.rs`);
//! - **decode attention** [`DECODE_ATTENTION_SLOWDOWN`]: at one query token SDPA's fused
//!   kernels (FlashAttention, memory-efficient) spread the work over batch × heads thread
//!   blocks only and stream each head's cache serially, far below the bandwidth a split-KV
//!   kernel reaches. Its time adds to the host's: on the H200 the static cache at 4,096 prompt
//!   tokens takes 22 ms a step more than at 1,024 for 1.6 GB more cache, where hidden under the
//!   host's issuing it would add nothing.
//!
//! A step: `max(host, weights at the GPU's bandwidth or the batch's FLOPs) + attention`.

use super::{Bound, Step};
use crate::job::ResolvedJob;
use crate::model::{Layer, Mlp, ModelSpec, NormKind};
use crate::report::PerGpu;
use crate::throughput::hardware::Hardware;
use crate::throughput::shape::ModelShape;

/// Host seconds eager PyTorch spends per op issued: gpt-fast's eager decode, 1/25.5 s = 39.2
/// ms per token, over the 1,912 ops of its step — per layer 59: two RMSNorms of 8 (`x.float()`,
/// `x*x`, `mean`, `+eps`, `rsqrt`, `x*`, `type_as`, `*weight`), `wqkv`, rotary on q and k (9
/// each: `float`, four products, a difference, a sum, `stack`, `type_as`), two `index_put_`
/// into the cache, two `repeat_interleave` (index and gather, 2 each), the math SDPA it forces
/// in decode (bool mask to float, 3; q and k scaled, 2; `matmul`, `+mask`, `softmax`, `matmul`),
/// the output's `contiguous`, `wo`, the residual add, the MLP's 5 (`w1`, `silu`, `w3`, `*`,
/// `w2`) and its residual add; then 12 for the model (mask and frequency lookups, embedding,
/// final norm, output), 9 for sampling (`logits_to_probs` with top-k, the exponential trick,
/// `argmax`) and 3 for the loop (`input_pos += 1`, two clones). 39.2 ms / 1,912 = 20.5 µs.
pub const OP_HOST_S: f64 = 20.5e-6;

/// Host seconds Hugging Face's Python adds per decoder layer per forward beyond its ops: the
/// H200 static-cache run at batch 4, 1,024 + 128 tokens measured 5.149 s for one `generate`;
/// less its modelled prefill (0.085 s) that is 5.064 s / 127 steps = 39.87 ms a step. Its decode
/// attention reads the 603,979,776-byte static cache (4 × 1,152 tokens × 32 layers × 2 × 8 heads
/// × 128 × 2 B) at 1/50 of 4.08 TB/s (4.8 × 0.85): 7.40 ms; its ops (`token_ops`: 44 a layer,
/// 28 for the model, 25 for the loop: 1,461) take 1,461 × 20.5 µs = 29.95 ms. The other 2.52 ms
/// over 32 layers is 79 µs a layer.
pub const HF_LAYER_PYTHON_S: f64 = 79e-6;

/// How far below the GPU's memory-bound rate eager decode attention reads the cache: 50×,
/// Flash-Decoding's measured gain over FlashAttention-2 at one query token (Dao, Haziza, Massa,
/// Sizov 2023, "Flash-Decoding for long-context inference": "the attention itself is up to 50x
/// faster than FlashAttention", FlashAttention parallelizing over batch and query blocks only,
/// Flash-Decoding reading the cache at close to bandwidth). The H200 runs agree: 22.3 ms a step
/// more for 1.61 GB more static cache is 72 GB/s, 1/57 of 4.08 TB/s.
pub const DECODE_ATTENTION_SLOWDOWN: f64 = 50.0;

/// One eager decode step: the host issuing it (`host`, [`host_s`]) or the GPU reading the
/// weights a step touches (an MoE's routed experts only where some sequence's token goes:
/// transformers' eager experts loop over the experts hit, `ModelShape::decode_weight_share`)
/// (or computing the batch's 2·N FLOPs), whichever is longer, then the attention over
/// `cache` bytes at 1/[`DECODE_ATTENTION_SLOWDOWN`] of the bandwidth.
pub fn decode_step(
    shape: &ModelShape,
    job: &ResolvedJob,
    hw: &Hardware,
    per_gpu: &PerGpu,
    host: f64,
    cache: f64,
) -> Step {
    let weights = per_gpu.components.parameters as f64 * shape.decode_weight_share(job.batch);
    let gpu = super::graph_step(shape, job, hw, weights);
    let attention = hw.memory_s(cache * DECODE_ATTENTION_SLOWDOWN);
    let overlapped = host.max(gpu.seconds);
    let bound = if attention > overlapped {
        Bound::Memory
    } else if host >= gpu.seconds {
        Bound::Launch
    } else {
        gpu.bound
    };
    Step {
        seconds: overlapped + attention,
        bound,
    }
}

/// Ops `LlamaRMSNorm.forward` issues: `to(float32)`, `pow`, `mean`, `+ eps`, `rsqrt`, `*`,
/// `to(dtype)`, `weight *`. A LayerNorm is one fused `native_layer_norm`.
fn norm_ops(kind: NormKind) -> f64 {
    match kind {
        NormKind::RmsNorm => 8.0,
        NormKind::LayerNorm { .. } => 1.0,
    }
}

/// Ops one decoder layer issues for one forward of a decode step. `masked`: the attention gets
/// a mask (the static cache, whose unfilled tail is masked): `repeat_kv` then copies keys and
/// values to every query head (`use_gqa_in_sdpa` only lets SDPA share them without a mask) and
/// SDPA turns the boolean mask into a bias. `batch`: tokens routed through a MoE layer.
pub fn layer_ops(layer: &Layer, masked: bool, batch: u64) -> f64 {
    let k = layer.attention.kind;
    let norms: f64 = layer.norms.iter().map(|(_, n)| norm_ops(n.kind)).sum();
    let qk_norm = layer
        .attention
        .qk_norm
        .map_or(0.0, |n| 2.0 * norm_ops(n.kind));
    let attention = if k.heads() == 0 {
        // A state-space mixer: in/out projections, conv, gating and the scan's few ops.
        12.0
    } else {
        let gqa = k.kv_heads() < k.heads();
        // q, k, v, o projections; rotary on q and k (`q*cos`, `neg`, `cat`, `*sin`, `+`, each);
        // the cache update (`index_copy_` or `cat`, k and v); SDPA; the output's `contiguous`.
        let rotary = if layer.attention.nope { 0.0 } else { 10.0 };
        let repeat = if gqa && masked { 2.0 } else { 0.0 };
        let mask = if masked { 1.0 } else { 0.0 };
        4.0 + rotary + 2.0 + repeat + mask + 1.0 + 1.0
    };
    let mlp = match &layer.mlp {
        // gate, act, up, `*`, down; plain: up, act, down.
        Mlp::Dense(d) => {
            if d.gated {
                5.0
            } else {
                3.0
            }
        }
        // The router (linear, softmax, top-k, normalise, one-hot, nonzero: 6) and, per expert a
        // token reaches, its index, gated MLP and `index_add_` (7).
        Mlp::Moe(m) => 6.0 + 7.0 * (batch * m.top_k).min(m.experts) as f64,
        Mlp::None => 0.0,
    };
    // Two residual adds.
    norms + qk_norm + attention + mlp + 2.0
}

/// Ops of one forward outside the layers: the embedding, the causal mask (static: pad, index
/// and compare the padding mask, build the causal part, 8; dynamic: the `all()` that lets SDPA
/// skip it, 2), the rotary cos/sin (`LlamaRotaryEmbedding.forward`: 10), the final norm and
/// the LM head on the last position.
fn model_ops(spec: &ModelSpec, masked: bool) -> f64 {
    let mask = if masked { 8.0 } else { 2.0 };
    let norm = spec.decoder.final_norm.map_or(0.0, |n| norm_ops(n.kind));
    1.0 + mask + 10.0 + norm + 1.0
}

/// Ops of `generate`'s loop per token (`generation/utils.py` `_sample`):
/// `prepare_inputs_for_generation` (position ids from the mask: `long`, `cumsum`, `-1`,
/// `masked_fill_`), the last logits to fp32, the min-new-tokens processor (`arange`, `isin`,
/// `clone`, `where`), `argmax`, the finished-sequence padding (4), `cat` of the ids, the
/// attention mask and cache position updates (3), the stopping criteria (3), and the
/// unfinished flags (`& ~done`, `max() == 0`: 4).
pub const LOOP_OPS: f64 = 25.0;

/// Ops one new token costs: every layer, the model's own and the loop's.
pub fn token_ops(spec: &ModelSpec, masked: bool, batch: u64) -> f64 {
    let layers: f64 = spec.all_layers().map(|l| layer_ops(l, masked, batch)).sum();
    layers + model_ops(spec, masked) + LOOP_OPS
}

/// Host seconds of one forward plus its loop iteration: the ops at [`OP_HOST_S`] and
/// Hugging Face's Python at [`HF_LAYER_PYTHON_S`] per layer.
pub fn host_s(spec: &ModelSpec, masked: bool, batch: u64) -> f64 {
    token_ops(spec, masked, batch) * OP_HOST_S + spec.num_layers() as f64 * HF_LAYER_PYTHON_S
}
