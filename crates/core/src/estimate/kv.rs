//! The KV cache a serving or generation job holds for its own sequences.
//!
//! Per token and layer: standard attention keeps K and V, `2 · kv_heads · head_dim` values
//! (vLLM paper §2: OPT-13B 2 · 5120 · 40 layers · 2 B = 800 KiB/token); multi-head latent
//! attention keeps the compressed latent and the rotary key, `kv_lora_rank + qk_rope_head_dim`
//! (DeepSeek-V2 paper §2.1; vLLM/SGLang cache it so), while Hugging Face's eager DeepSeek code
//! caches the decompressed K (`heads · (nope + rope)`) and V (`heads · v_head_dim`); its
//! DeepSeek-V3.2 / GLM-5 code caches the compressed latent plus one indexer key per token
//! (`cache_utils.py` `DynamicIndexedLayer`). Sliding-window
//! layers hold at most the window — once decoding: an HF `generate` prefill leaves each of
//! them the whole prompt ([`generate_prefill_bytes_per_gpu`], `estimate/generate_kv.rs`).
//! Paging engines round each sequence up to whole blocks.
//!
//! An encoder-decoder model (T5) generating with transformers' `EncoderDecoderCache` holds two
//! caches per decoder layer: self-attention K/V over the decoder's own tokens (the generated
//! ones; at least the start token) and cross-attention K/V over the encoder's `seq` tokens,
//! computed once from the encoder output (`modeling_t5.py` T5Attention with
//! `is_cross_attention`).
//!
//! A state-space layer (Mamba, Mamba2) keeps no K/V per token but a recurrent state per
//! sequence — its convolution's last `d_conv` inputs and the SSM state — constant in context
//! length (Gu & Dao 2023 §3.4; transformers' `LinearAttentionLayer` cache); it is counted here,
//! in the same category, beside the attention layers' KV. A Zamba2 hybrid layer holds both: its
//! Mamba2 states and the K/V of the shared block it applies, one cache per application
//! (`modeling_zamba2.py` passes the hybrid layer's own `layer_idx` to `cache.update`).

use crate::error::CoreError;
pub use crate::job::KvDtype;
use crate::job::{Framework, ResolvedJob};
use crate::model::{AttentionKind, ModelSpec};

/// Bytes per cached value for the job's `kv_dtype` (or the compute dtype). Block formats
/// (`q8_0`, `q4_0`, llama.cpp) are returned as (block bytes, block values).
pub fn kv_width(job: &ResolvedJob) -> (u64, u64) {
    match &job.kv_dtype {
        None => (job.precision.compute_bytes(), 1),
        Some(k) => k.value.width(),
    }
}

/// Values cached per token in one layer.
fn values_per_token(kind: AttentionKind, framework: Framework) -> u64 {
    match kind {
        AttentionKind::Standard {
            kv_heads, head_dim, ..
        } => 2 * kv_heads * head_dim,
        // DeepSeek-V3.2 / GLM-5 (`AXK1Attention.forward`, transformers 5.24) cache the latent
        // still compressed — `k_pass [b, 1, t, kv_lora_rank]` and `k_rot [b, 1, t, rope]` — and
        // their indexer's keys (`DynamicIndexedLayer.indexer_keys [b, t, index_head_dim]`) on the
        // layers that run their own indexer.
        AttentionKind::Latent {
            kv_lora_rank,
            qk_rope_head_dim,
            indexer: Some(ix),
            ..
        } => kv_lora_rank + qk_rope_head_dim + if ix.own() { ix.head_dim } else { 0 },
        AttentionKind::Latent {
            heads,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            ..
        } => match framework {
            Framework::Pytorch => heads * (qk_nope_head_dim + qk_rope_head_dim + v_head_dim),
            _ => kv_lora_rank + qk_rope_head_dim,
        },
        // A state-space layer caches no K/V per token: its state is per sequence.
        AttentionKind::StateSpace(_) => 0,
    }
}

/// Recurrent-state bytes one sequence holds over the decoder's state-space layers (conv state
/// plus SSM state, [`crate::model::Ssm::state_bytes`]), in `width`-byte values: the conv state
/// in the model's dtype; the SSM state in fp32 in transformers' cache (`framework` PyTorch and
/// the training frameworks, which run transformers' modules) and in the model's dtype in the
/// serving engines (vLLM's `mamba_ssm_cache_dtype` "auto") unless the config says fp32.
/// Constant in context length; 0 for a model without such layers.
pub fn state_bytes_per_sequence(spec: &ModelSpec, width: u64, framework: Framework) -> u64 {
    spec.decoder
        .layers
        .iter()
        .flat_map(|l| l.ssm_mixers())
        .map(|s| s.state_bytes(width, transformers_cache(framework)))
        .fold(0u64, u64::saturating_add)
}

/// Whether `framework`'s inference cache is transformers' ([`EngineSpec::transformers_cache`]).
///
/// [`EngineSpec::transformers_cache`]: crate::engines::spec::EngineSpec::transformers_cache
fn transformers_cache(framework: Framework) -> bool {
    crate::engines::settings::spec(framework).is_none_or(|e| e.transformers_cache())
}

/// Whether the model holds recurrent state in place of (some of) its KV cache.
pub fn has_recurrent_state(spec: &ModelSpec) -> bool {
    spec.all_layers().any(|l| l.holds_state())
}

/// Tokens an HF `generate` call's cache holds at its end: the prompt and every new token but
/// the last, which is sampled after the last forward and never fed back. The static cache is
/// made that long from the start (`generation/utils.py` `generate`, step 7: `max_cache_length
/// = generation_config.max_length - 1`, `max_length` = prompt + `max_new_tokens`); a dynamic one
/// grows to it. At least the prompt.
pub fn generate_cache_tokens(job: &ResolvedJob) -> u64 {
    job.seq.saturating_add(job.new_tokens.saturating_sub(1))
}

/// KV bytes for `batch` sequences of `tokens` each over all decoder layers: the whole model's.
pub fn kv_cache_bytes(spec: &ModelSpec, job: &ResolvedJob, tokens: u64) -> Result<u64, CoreError> {
    kv_bytes(spec, job, tokens, 1, 1, Held::Window)
}

/// [`kv_cache_bytes`] on one GPU of the job's layout: the layers of the first pipeline stage
/// (⌈L/pp⌉, as every per-GPU figure takes that stage), each rank of `tp` caching its own key
/// and value heads — transformers' tensor-parallel plan splits `q/k/v_proj` by heads
/// column-wise, so each rank's attention makes and caches `kv_heads / tp` of them (one whole
/// head where there are fewer heads than ranks) — and its share of a recurrent state's inner
/// channels.
pub fn kv_cache_bytes_per_gpu(
    spec: &ModelSpec,
    job: &ResolvedJob,
    tokens: u64,
) -> Result<u64, CoreError> {
    kv_bytes(
        spec,
        job,
        tokens,
        job.parallel.tp.max(1),
        job.parallel.pp.max(1),
        Held::Window,
    )
}

/// [`kv_cache_bytes_per_gpu`] right after an HF `generate` prefill of the job's prompt: every
/// layer that caches its own keys holds the whole prompt, a sliding-window or chunked layer
/// too ([`Attention::kv_held_after_prefill`]: transformers 5.24 `DynamicSlidingWindowLayer`
/// keeps a view of the prompt's `torch.cat` until the first decode step's `update`).
///
/// [`Attention::kv_held_after_prefill`]: crate::model::Attention::kv_held_after_prefill
pub fn generate_prefill_bytes_per_gpu(
    spec: &ModelSpec,
    job: &ResolvedJob,
) -> Result<u64, CoreError> {
    kv_bytes(
        spec,
        job,
        job.seq,
        job.parallel.tp.max(1),
        job.parallel.pp.max(1),
        Held::Prompt,
    )
}

/// What a layer's cache holds of its context ([`kv_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// At most its window (`Attention::kv_held`): a layer past a decode step, or a serving
    /// engine's pool.
    Window,
    /// The whole context on every layer that caches its own keys
    /// (`Attention::kv_held_after_prefill`).
    Prompt,
}

/// One decoder layer's own keys and values in an HF `generate` call's `DynamicCache`, on one
/// GPU of the job's layout, as [`GenerateLayer::bytes_after`] sizes them step by step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GenerateLayer {
    /// Bytes of the layer's keys (or values: half of both) per token, all sequences.
    pub per_token: u64,
    /// The window its `DynamicSlidingWindowLayer` keeps ([`Attention::kv_window`]); `None` on
    /// a full-attention layer (`DynamicLayer`).
    ///
    /// [`Attention::kv_window`]: crate::model::Attention::kv_window
    pub window: Option<u64>,
    /// Bytes of the layer's recurrent state, all sequences (its state-space mixers,
    /// [`state_bytes_per_sequence`]'s rule): made at the prefill, constant in length.
    pub state: u64,
}

impl GenerateLayer {
    /// Bytes of the layer's keys (or values) once `update` has run on `step` of a prompt of
    /// `prompt` tokens (step 0 the prefill, step t the t-th decode forward), transformers 5.24
    /// `cache_utils.py`: a `DynamicLayer` concatenates every token (`prompt + step`); a
    /// `DynamicSlidingWindowLayer` concatenates its kept view — `min(cumulative,
    /// sliding_window − 1)` tokens — with the new ones, so the prefill's storage is the whole
    /// prompt and each decode step's is `min(prompt + step, window)` (measured on the CPU:
    /// 1,024-token prompt, window 128: 1,024 tokens after the prefill, 128 after a decode step).
    pub fn bytes_after(&self, prompt: u64, step: u64) -> u64 {
        let tokens = match self.window {
            Some(w) if step > 0 => prompt.saturating_add(step).min(w),
            _ => prompt.saturating_add(step),
        };
        self.per_token.saturating_mul(tokens)
    }

    /// Bytes the layer's `update` on `step` makes while the old keys and values still live
    /// (`cache_utils.py`, transformers 5.24): a `DynamicLayer` rebinds `self.keys` to its keys'
    /// `torch.cat` before the values' one runs, so one tensor at a time; a
    /// `DynamicSlidingWindowLayer` makes `full_key_states` and `full_value_states` both before
    /// rebinding either, so two (measured: ten windows of storage at a decode peak of four
    /// sliding layers, `validation/cpu-measured-generate-swa.json`).
    pub fn update_transient(&self, prompt: u64, step: u64) -> u64 {
        let made = self.bytes_after(prompt, step);
        if self.window.is_some() {
            made.saturating_mul(2)
        } else {
            made
        }
    }
}

/// The decoder layers of the job's first pipeline stage ([`kv_cache_bytes_per_gpu`]'s), each
/// as its `DynamicCache` layer grows: its attention's keys per token on one GPU (at the
/// compute width; 8/4-bit block formats by their bytes per value), plus a Zamba2 shared
/// block's on the layer that applies it. A layer caching no keys of its own (state-space,
/// shared with an earlier layer, no attention) has `per_token` 0; cross-attention caches are
/// left out (made once, never grown).
pub fn generate_layers(spec: &ModelSpec, job: &ResolvedJob) -> Vec<GenerateLayer> {
    let (block_bytes, block_values) = kv_width(job);
    let tp = job.parallel.tp.max(1);
    let pp = job.parallel.pp.max(1) as usize;
    let half = |a: &crate::model::Attention| -> u64 {
        if a.kv_shared || a.vision_cross {
            return 0;
        }
        let values = u128::from(rank_values(a.kind, job.framework, tp)) * u128::from(job.batch);
        let bytes = (values * u128::from(block_bytes)).div_ceil(u128::from(block_values.max(1)));
        u64::try_from(bytes / 2).unwrap_or(u64::MAX)
    };
    let layers = &spec.decoder.layers[..spec.decoder.layers.len().div_ceil(pp)];
    layers
        .iter()
        .map(|l| GenerateLayer {
            per_token: half(&l.attention)
                .saturating_add(l.shared_block.as_ref().map_or(0, |sb| half(&sb.attention))),
            window: l.attention.kv_window(),
            state: l
                .ssm_mixers()
                .map(|m| {
                    m.state_bytes(
                        job.precision.compute_bytes(),
                        transformers_cache(job.framework),
                    )
                })
                .fold(0u64, u64::saturating_add)
                .div_ceil(tp)
                .saturating_mul(job.batch),
        })
        .collect()
}

/// Values one rank of `tp` caches of a layer's `values` per token ([`values_per_token`]): the
/// heads split evenly, at least one whole head; an MLA latent cached compressed is replicated.
fn rank_values(kind: AttentionKind, framework: Framework, tp: u64) -> u64 {
    let values = values_per_token(kind, framework);
    let heads = match kind {
        AttentionKind::Standard { kv_heads, .. } => kv_heads,
        AttentionKind::Latent { heads, .. } if framework == Framework::Pytorch => heads,
        _ => return values,
    };
    if tp <= 1 || heads == 0 {
        return values;
    }
    values / heads * (heads / tp).max(1)
}

fn kv_bytes(
    spec: &ModelSpec,
    job: &ResolvedJob,
    tokens: u64,
    tp: u64,
    pp: u64,
    mode: Held,
) -> Result<u64, CoreError> {
    let (block_bytes, block_values) = kv_width(job);
    let page = crate::engines::settings::spec(job.framework).map_or(1, |e| e.kv_page(&job.engine));
    let enc_dec = spec.encoder.is_some();
    // The decoder's own tokens: all of them for a decoder-only model; for an encoder-decoder
    // model only the generated ones, the input going to the encoder.
    let self_tokens = if enc_dec {
        job.new_tokens.max(1)
    } else {
        tokens
    };
    let layers = &spec.decoder.layers[..spec.decoder.layers.len().div_ceil(pp as usize)];
    let state = layers
        .iter()
        .flat_map(|l| l.ssm_mixers())
        .map(|s| {
            s.state_bytes(
                job.precision.compute_bytes(),
                transformers_cache(job.framework),
            )
        })
        .fold(0u64, u64::saturating_add)
        .div_ceil(tp);
    let mut total: u128 = state as u128 * job.batch as u128;
    let mut add = |kind: AttentionKind, held: u64| {
        let held = held.div_ceil(page) * page;
        let values =
            rank_values(kind, job.framework, tp) as u128 * held as u128 * job.batch as u128;
        total += values.div_ceil(block_values as u128) * block_bytes as u128;
    };
    // Llama-3.2-Vision's cross-attention layers cache the images' vision tokens, once,
    // whatever the text length (`MllamaForConditionalGeneration._prepare_static_cache`).
    let cross = super::mllama::cross_tokens(spec, job);
    for layer in layers {
        let held_of = |a: &crate::model::Attention| match mode {
            Held::Window => a.kv_held(self_tokens),
            Held::Prompt => a.kv_held_after_prefill(self_tokens),
        };
        let held = if layer.attention.vision_cross {
            cross
        } else {
            held_of(&layer.attention)
        };
        add(layer.attention.kind, held);
        // Zamba2's hybrid layer: the shared block's attention caches its own K/V at this layer
        // (`cache_utils.py` `LinearAttentionAndFullAttentionLayer` for a "hybrid" layer type:
        // the Mamba states and a full-attention K/V side by side).
        if let Some(sb) = &layer.shared_block {
            add(sb.attention.kind, held_of(&sb.attention));
        }
        if let Some(cross) = &layer.cross_attention {
            add(cross.kind, job.seq);
        }
    }
    u64::try_from(total).map_err(|_| CoreError::Overflow {
        what: "KV cache bytes".into(),
    })
}
