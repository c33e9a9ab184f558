//! One transformer block ([`Layer`]): its mixer, its MLP, its norms and where they sit.

use super::attention::Attention;
use super::mlp::{Mlp, MoeMlp};
use super::norm::Norm;
use super::shared_block::SharedBlock;
use super::ssm::{ParallelSsm, Ssm};
use serde::{Deserialize, Serialize};

/// One transformer block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    pub attention: Attention,
    /// Cross-attention over the encoder output (T5 decoder).
    pub cross_attention: Option<Attention>,
    pub mlp: Mlp,
    /// The norms of this block, in the order they apply.
    pub norms: Vec<(NormSlot, Norm)>,
    /// Attention and MLP read the same input (GPT-NeoX, Falcon, GPT-J).
    pub parallel_residual: bool,
    /// A state-space mixer run beside `attention` on the same normed input, the two outputs
    /// summed before the residual add (Falcon-H1's parallel hybrid layer); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_ssm: Option<ParallelSsm>,
    /// A shared transformer block applied before the layer's mixer (Zamba2's hybrid layers,
    /// [`SharedBlock`]); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_block: Option<Box<SharedBlock>>,
    /// Routed experts run beside the dense `mlp` on the same residual, each branch with its
    /// own norms, the two outputs summed (Gemma 4's `enable_moe_block`,
    /// `modeling_gemma4.py` `Gemma4TextDecoderLayer.forward`); `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts_beside: Option<MoeMlp>,
}

impl Layer {
    /// A sequential pre- or post-norm block (`attention`, then `mlp`, with `norms`): no
    /// cross-attention, no parallel residual, no state-space mixer beside attention, as
    /// transformers' `LlamaDecoderLayer` (`modeling_llama.py`); readers amend the rest.
    pub fn new(attention: Attention, mlp: Mlp, norms: Vec<(NormSlot, Norm)>) -> Self {
        Layer {
            attention,
            cross_attention: None,
            mlp,
            norms,
            parallel_residual: false,
            parallel_ssm: None,
            shared_block: None,
            experts_beside: None,
        }
    }

    /// The layer's state-space mixers: the one standing in attention's place (Mamba, Jamba's
    /// Mamba layers) and the one running beside attention (Falcon-H1).
    pub fn ssm_mixers(&self) -> impl Iterator<Item = &Ssm> {
        self.attention
            .kind
            .state_space()
            .into_iter()
            .chain(self.parallel_ssm.as_ref().map(|p| &p.ssm))
    }

    /// The layer's routed experts: its MLP when that is a mixture of experts, or the experts
    /// beside a dense MLP ([`Layer::experts_beside`], Gemma 4).
    pub fn routed_experts(&self) -> Option<&MoeMlp> {
        match &self.mlp {
            Mlp::Moe(m) => Some(m),
            Mlp::Dense(_) | Mlp::None => self.experts_beside.as_ref(),
        }
    }

    /// Whether the layer holds a recurrent state per sequence.
    pub fn holds_state(&self) -> bool {
        self.ssm_mixers().next().is_some()
    }
}

/// Where a norm sits inside a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormSlot {
    /// Before self-attention (pre-norm models).
    PreAttention,
    /// After self-attention, before the residual add (post-norm BERT; Gemma-2/3's extra norm).
    PostAttention,
    /// Before cross-attention (T5 decoder).
    PreCrossAttention,
    /// Before the MLP.
    PreMlp,
    /// After the MLP (post-norm BERT; Gemma-2/3).
    PostMlp,
}
