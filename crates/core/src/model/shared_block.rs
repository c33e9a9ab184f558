//! Zamba2's shared transformer blocks (transformers 5.24 `modeling_zamba2.py`,
//! `Zamba2Model.get_layers`, `Zamba2HybridLayer`, `Zamba2AttentionDecoderLayer`).
//!
//! A Zamba2 "hybrid" layer runs one of `num_mem_blocks` transformer blocks whose weights are
//! shared by every hybrid layer that applies the same block (the `i`-th hybrid layer applies
//! block `i % num_mem_blocks`; transformers ties `layers.N.shared_transformer` to the first
//! application's module through `_tied_weights_keys`). The block reads the concatenation of
//! the hidden state and the original embeddings (width `2 · hidden`), and its output goes
//! through a per-layer `linear [hidden, hidden]` before it is added to the input of the layer's
//! Mamba2 mixer. Each application has its own LoRA-like adapters (one `gate_up_proj` adapter
//! always; q/k/v adapters with `use_shared_attention_adapter`), its own KV cache and its own
//! saved activations; the shared weights count once, as `model.parameters()` does.
//!
//! Transformers 5.24 ties the blocks only when `tie_word_embeddings` is true
//! (`PreTrainedModel.get_expanded_tied_weights_keys` returns no tie at all otherwise): untied,
//! every hybrid layer holds its own copy of its block, each copy with the adapter slots of
//! every application of that block (`Zamba2Attention.__init__`, `Zamba2MLP.__init__` build a
//! slot per hybrid layer, an `nn.Sequential` where `visit % num_mem_blocks == block_id`).

use super::attention::Attention;
use super::mlp::DenseMlp;
use serde::{Deserialize, Serialize};

/// One application of a shared transformer block at a hybrid layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedBlock {
    /// Which shared block (`hybrid index % num_mem_blocks`).
    pub block: u64,
    /// The application's index among the hybrid layers (`Zamba2Attention.layer_dic`): its
    /// adapter slot in the block's `*_adapter_list`.
    pub visit: u64,
    /// The layer index whose `shared_transformer` module holds the weights this application
    /// runs, with the adapters of every application of the block: the block's first
    /// application when the blocks are tied (the name `model.parameters()` and the published
    /// checkpoints keep), this layer itself when they are not.
    pub owner: u64,
    /// `num_mem_blocks`: how many distinct blocks the hybrid layers cycle through.
    pub mem_blocks: u64,
    /// How many hybrid layers there are (`len(hybrid_layer_ids)`): the adapter slots of each
    /// block's module.
    pub applications: u64,
    /// The block's attention: standard, `heads · head_dim = 2 · hidden` wide (`head_dim =
    /// 2 · hidden / heads`, `Zamba2Config.__post_init__`), projections without bias, reading
    /// `2 · hidden` and writing `hidden` (`Zamba2Attention.__init__`).
    pub attention: Attention,
    /// The block's MLP: fused `gate_up_proj [2 · ffn, hidden]`, `down_proj [hidden, ffn]`
    /// (bias: `add_bias_linear`), gated with `hidden_act` (`Zamba2MLP`).
    pub mlp: DenseMlp,
    /// `adapter_rank`: the inner width of every adapter.
    pub adapter_rank: u64,
    /// `use_shared_attention_adapter`: q, k and v adapters `[2·hidden → rank → 2·hidden]`.
    pub attention_adapter: bool,
}

impl SharedBlock {
    /// Whether this application is the block's first: the one that holds its weights.
    pub fn owns_weights(&self, layer: u64) -> bool {
        self.owner == layer
    }

    /// Weights one application multiplies each token through: the block's q/k/v (reading
    /// 2·hidden) and o projections, `gate_up_proj` and `down_proj`, and its own adapter slot
    /// (`Zamba2Attention.forward` / `Zamba2MLP.forward` index the slot by the hybrid layer).
    /// The layer's own `linear` is not the block's.
    pub fn matmul_params(&self, hidden: u64) -> u64 {
        let k = self.attention.kind;
        let two_h = 2 * hidden;
        let (q, kv) = (k.heads() * k.qk_head_dim(), k.kv_heads() * k.qk_head_dim());
        let f = self.mlp.ffn;
        let attn = two_h * (q + 2 * kv) + q * hidden;
        let mlp = hidden * 2 * f + f * hidden;
        let r = self.adapter_rank;
        let mut adapters = r * (hidden + 2 * f);
        if self.attention_adapter {
            adapters += 3 * 2 * r * two_h;
        }
        attn + mlp + adapters
    }

    /// The applications (visit indices) whose adapters the block's module holds.
    pub fn adapter_visits(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.applications).filter(move |v| v % self.mem_blocks.max(1) == self.block)
    }
}
