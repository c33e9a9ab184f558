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

use super::{Attention, DenseMlp};
use serde::{Deserialize, Serialize};

/// One application of a shared transformer block at a hybrid layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedBlock {
    /// Which shared block (`hybrid index % num_mem_blocks`).
    pub block: u64,
    /// The application's index among the hybrid layers (`Zamba2Attention.layer_dic`): its
    /// adapter slot in the block's `*_adapter_list`.
    pub visit: u64,
    /// The layer index of the block's first application, whose `shared_transformer` module holds
    /// the shared weights and every application's adapters (the name `model.parameters()` and
    /// the published checkpoints keep for them).
    pub owner: u64,
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
}
