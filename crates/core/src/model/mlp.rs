//! The feed-forward part of a block: dense or a mixture of experts.

use super::serde_skip::{is_false, is_zero};
use serde::{Deserialize, Serialize};

/// The feed-forward part of a block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mlp {
    Dense(DenseMlp),
    Moe(MoeMlp),
    /// No feed-forward: the block is its mixer alone (Mamba, Mamba2).
    None,
}

/// A dense feed-forward network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseMlp {
    /// Intermediate width.
    pub ffn: u64,
    /// Gated (SwiGLU/GeGLU: gate, up and down matrices) or plain (up and down).
    pub gated: bool,
    pub bias: bool,
    /// The activation as the config names it (`silu`, `gelu_pytorch_tanh`, `relu`, ...).
    pub activation: String,
    /// The gate goes through Gemma 3n's Gaussian top-k before the activation
    /// (`modeling_gemma3n.py` `Gemma3nTextMLP._gaussian_topk`: `relu(gate - (mean + std ·
    /// Φ⁻¹(sparsity)))` on a layer whose `activation_sparsity_pattern` is above 0).
    #[serde(default, skip_serializing_if = "is_false")]
    pub gaussian_topk: bool,
}

/// A mixture-of-experts feed-forward network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeMlp {
    /// Routed experts.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// One routed expert (always gated in the supported families).
    pub expert: DenseMlp,
    /// Always-active shared expert(s), as one MLP of the summed width (Qwen2-MoE, DeepSeek).
    pub shared: Option<DenseMlp>,
    /// A sigmoid gate on the shared expert's output (Qwen2-MoE `shared_expert_gate`).
    pub shared_gate: bool,
    /// The router carries a bias (gpt-oss `GptOssTopKRouter.bias`, `[experts]`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub router_bias: bool,
    /// Times the block's input is multiplied in place by uniform noise in training, each
    /// saving its noise tensor for backward: Mixtral's `router_jitter_noise` once
    /// (`MixtralSparseMoeBlock`), Phi-3.5-MoE's `input_jitter_noise` twice (in
    /// `PhimoeSparseMoeBlock` and again in `PhimoeTopKRouter`); 0 without jitter.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_jitter: u64,
    /// The routed experts run in a latent width: `fc1_latent_proj [latent, hidden]` before
    /// them, `fc2_latent_proj [hidden, latent]` after, each expert `latent → ffn → latent`
    /// (Nemotron-3 `moe_latent_size`, `modeling_nemotron_h.py` `NemotronHMoE`); `None`: the
    /// experts read the hidden state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent: Option<u64>,
}
