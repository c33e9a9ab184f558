//! The attention block: its kind (standard, latent, a state-space mixer in its place) and
//! shapes, MLA's sparse indexer, the projections' biases.

use super::norm::Norm;
use super::serde_skip::is_false;
use super::ssm::Ssm;
use serde::{Deserialize, Serialize};

/// An attention block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    pub kind: AttentionKind,
    /// Which projections carry a bias.
    pub bias: ProjBias,
    /// Per-head norms of queries and keys (Qwen3, Gemma-3, OLMo-2): one `head_dim` norm each.
    pub qk_norm: Option<Norm>,
    /// Sliding-window size when this layer attends locally (Mistral, Gemma-2/3 local layers).
    pub sliding_window: Option<u64>,
    /// T5 relative-position bias table held by this layer (`buckets`), first layer only.
    pub relative_bias_buckets: Option<u64>,
    /// Learned per-head sink logits (gpt-oss `self_attn.sinks`, `[heads]`): one extra column
    /// in each softmax row that takes probability mass and is dropped before `@ V`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sinks: bool,
    /// The q/k norms span the whole projection, not one head (OLMoE `modeling_olmoe.py`
    /// `OlmoeAttention`: `q_norm` over `heads · head_dim`, `k_norm` over `kv_heads · head_dim`);
    /// `qk_norm` then gives their kind and its `dim` is unused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_norm_whole: bool,
    /// A weightless L2 norm on q and k per head (Llama 4 `Llama4TextL2Norm`, on its RoPE layers
    /// when `use_qk_norm`): no parameters, activations only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_l2_norm: bool,
    /// Chunked attention (Llama 4 `attention_chunk_size` on its RoPE layers): each token attends
    /// within its chunk only; the cache keeps at most this many tokens per sequence, as
    /// transformers' `cache_utils.py` builds a `DynamicSlidingWindowLayer` of
    /// `attention_chunk_size` for a `"chunked_attention"` layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk: Option<u64>,
    /// No rotary embedding on this layer although the model's positions are rotary (Llama 4's
    /// NoPE layers, `no_rope_layers[i] == 0`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub nope: bool,
    /// The layer attends to the images instead of the text (Llama-3.2-Vision's
    /// `MllamaCrossAttentionDecoderLayer`, `modeling_mllama.py`): queries from the text, keys
    /// and values from the projected vision states, `q_norm`/`k_norm` per head, no rotary, and
    /// the tanh gates `cross_attn_attn_gate` / `cross_attn_mlp_gate` on its two branches. Its
    /// cache holds the vision tokens, once per image, not the text.
    #[serde(default, skip_serializing_if = "is_false")]
    pub vision_cross: bool,
    /// A sigmoid output gate per attention channel (Qwen3-Next `Qwen3NextAttention`,
    /// `modeling_qwen3_next.py`): `q_proj` is twice as wide (`[q | gate]` per head) and the
    /// attention output is multiplied by `sigmoid(gate)` before `o_proj`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub output_gate: bool,
    /// The layer reuses the keys and values of the last earlier layer of its type that makes
    /// its own: no k/v projections or norms, nothing cached, its attention reads tensors the
    /// earlier layer already holds (Gemma 4's `num_kv_shared_layers`,
    /// `modeling_gemma4.py` `Gemma4TextAttention`, `is_kv_shared_layer`; `cache_utils.py`
    /// makes it a `DummyLayer`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub kv_shared: bool,
    /// No value projection: the values are the key projection's output, normed apart from the
    /// keys (Gemma 4's `attention_k_eq_v` on full layers, `Gemma4TextAttention.forward`:
    /// `value_states = key_states` before `k_norm`, then `v_norm`). The cache still holds
    /// keys and values as two tensors.
    #[serde(default, skip_serializing_if = "is_false")]
    pub values_from_keys: bool,
}

impl Attention {
    /// A block without a token mixer (Nemotron-H's MLP and MoE layers, `modeling_nemotron_h.py`
    /// `NemotronHBlock`: one mixer per layer) carries a standard attention of zero heads: no
    /// tensors, no cache, no activations.
    pub fn is_absent(&self) -> bool {
        matches!(self.kind, AttentionKind::Standard { heads: 0, .. })
    }

    /// An attention block of `kind` with `bias` and none of the per-family extras (no q/k norm,
    /// window, relative bias, sinks, chunking, NoPE, cross-attention or output gate): the
    /// block of transformers' `LlamaAttention` (`modeling_llama.py`), which the families'
    /// readers then amend field by field, so a new field is one edit here.
    pub fn new(kind: AttentionKind, bias: ProjBias) -> Self {
        Attention {
            kind,
            bias,
            qk_norm: None,
            sliding_window: None,
            relative_bias_buckets: None,
            sinks: false,
            qk_norm_whole: false,
            qk_l2_norm: false,
            attention_chunk: None,
            nope: false,
            vision_cross: false,
            output_gate: false,
            kv_shared: false,
            values_from_keys: false,
        }
    }

    /// Tokens of one sequence this layer's KV cache holds for a context of `tokens`: all of
    /// them, or at most the sliding window (or attention chunk) when the layer has one; none
    /// when it reuses another layer's keys and values ([`Attention::kv_shared`]).
    pub fn kv_held(&self, tokens: u64) -> u64 {
        if self.kv_shared {
            return 0;
        }
        self.kv_window().map_or(tokens, |n| n.min(tokens))
    }

    /// Tokens of one sequence this layer's cache holds right after one `update` of `tokens`
    /// new ones onto an empty cache (an HF `generate` prefill of a `tokens`-long prompt): all
    /// of them, the window too — transformers 5.24's `DynamicSlidingWindowLayer.update`
    /// (`cache_utils.py`, also built for `"chunked_attention"` layers) keeps
    /// `full_key_states[:, :, -sliding_window + 1:, :]`, a view that holds the whole
    /// `torch.cat` of the prompt until the layer's next `update` replaces it (measured:
    /// `validation/cpu-measured-generate-swa.json`). None when the layer reuses another's.
    pub fn kv_held_after_prefill(&self, tokens: u64) -> u64 {
        if self.kv_shared {
            0
        } else {
            tokens
        }
    }

    /// The window the layer's dynamic cache keeps after a decode step: `sliding_window`, or
    /// `attention_chunk_size` on a chunked layer (`cache_utils.py`
    /// `get_layer_types_and_kwargs`); `None` on a full-attention layer.
    pub fn kv_window(&self) -> Option<u64> {
        self.sliding_window.or(self.attention_chunk)
    }
}

/// The attention variant and its shapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AttentionKind {
    /// Multi-head, grouped-query or multi-query attention (MHA when `kv_heads == heads`, MQA when
    /// `kv_heads == 1`).
    Standard {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
    },
    /// Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass through
    /// low-rank latents; the KV cache holds `kv_lora_rank + qk_rope_head_dim` per token.
    Latent {
        heads: u64,
        /// `None`: queries are projected directly (DeepSeek-V2-Lite).
        q_lora_rank: Option<u64>,
        kv_lora_rank: u64,
        qk_nope_head_dim: u64,
        qk_rope_head_dim: u64,
        v_head_dim: u64,
        /// DeepSeek Sparse Attention's lightning indexer on this layer (DeepSeek-V3.2, GLM-5):
        /// `None` for plain MLA (DeepSeek-V2/V3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        indexer: Option<Indexer>,
    },
    /// No softmax attention: a state-space token mixer (Mamba's selective scan, Mamba2's SSD)
    /// in its place. Its cache is a recurrent state per sequence, constant in context length,
    /// not K/V per token; `heads`/`kv_heads` and the head dims read 0.
    StateSpace(Ssm),
}

/// DeepSeek Sparse Attention's lightning indexer (`modeling_deepseek_v32.py`
/// `DeepseekV32Indexer`, transformers 5.24): per layer, `wq_b [heads · head_dim, q_lora_rank]`
/// reading the MLA query latent, `wk [head_dim, hidden]`, a LayerNorm `k_norm [head_dim]` with
/// bias, and `weights_proj [heads, hidden]`. Under `torch.no_grad` it scores every query against
/// every cached indexer key (fp32 `[b, s, heads, t]`) and keeps the `topk` best keys, which
/// become a sparse mask on the MLA attention. Its cache holds one `head_dim` key per token
/// (`cache_utils.py` `DynamicIndexedLayer.indexer_keys [b, t, head_dim]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Indexer {
    pub heads: u64,
    pub head_dim: u64,
    pub topk: u64,
    /// GLM-5's `"shared"` layers (`modeling_glm_moe_dsa.py` `GlmMoeDsaAttention`,
    /// `indexer_types[i] == "shared"`): no indexer of their own, no indexer keys cached; they
    /// reuse the previous full layer's top-k and still build the sparse mask from it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shared: bool,
}

impl Indexer {
    /// Whether this layer runs its own indexer (holds its weights and caches its keys).
    pub fn own(&self) -> bool {
        !self.shared
    }
}

impl AttentionKind {
    pub fn heads(&self) -> u64 {
        match *self {
            AttentionKind::Standard { heads, .. } | AttentionKind::Latent { heads, .. } => heads,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// Key/value heads as stored in a standard KV cache (MLA: all heads after decompression).
    pub fn kv_heads(&self) -> u64 {
        match *self {
            AttentionKind::Standard { kv_heads, .. } => kv_heads,
            AttentionKind::Latent { heads, .. } => heads,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// Width of one query/key head.
    pub fn qk_head_dim(&self) -> u64 {
        match *self {
            AttentionKind::Standard { head_dim, .. } => head_dim,
            AttentionKind::Latent {
                qk_nope_head_dim,
                qk_rope_head_dim,
                ..
            } => qk_nope_head_dim + qk_rope_head_dim,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// Width of one value head.
    pub fn v_head_dim(&self) -> u64 {
        match *self {
            AttentionKind::Standard { head_dim, .. } => head_dim,
            AttentionKind::Latent { v_head_dim, .. } => v_head_dim,
            AttentionKind::StateSpace(_) => 0,
        }
    }

    /// The state-space mixer this layer runs in place of attention, if any.
    pub fn state_space(&self) -> Option<&Ssm> {
        match self {
            AttentionKind::StateSpace(s) => Some(s),
            _ => None,
        }
    }
}

/// Bias flags of the four attention projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProjBias {
    pub q: bool,
    pub k: bool,
    pub v: bool,
    pub o: bool,
}

impl ProjBias {
    pub fn all(on: bool) -> Self {
        ProjBias {
            q: on,
            k: on,
            v: on,
            o: on,
        }
    }
}
