//! The forward of one micro-batch as the estimator plans it, part by part: the type every
//! part of the step (activations, states, techniques, the event streams, the memo) reads. A
//! leaf: the planning itself is in `activations.rs`.

use super::alloc_events::plan_events::PlanEvents;
use super::stages::{LossMemory, StageMemory};

/// One block in the step.
#[derive(Debug, Clone, Copy, Default)]
pub struct LayerPlan {
    /// Bytes kept from its forward until its backward (saved tensors and its output).
    pub kept: u64,
    /// Autocast's 16-bit copies of its weights, kept until its backward.
    pub weight_copies: u64,
    /// Autocast's 16-bit copies of a checkpointed block's weights: nothing saves them, but
    /// autocast's cache holds them until the autocast region exits (after the loss), so they
    /// pile up over the forward and go before the backward (`torch.autocast.__exit__` clears
    /// the cache; measured: SmolLM2 bf16-mixed with checkpointing keeps input + copies per block).
    pub cached_copies: u64,
    /// Top of its forward (kept plus transients).
    pub forward_peak: u64,
    /// Extra bytes while its backward runs: its backward's own scratch read off the block's
    /// autograd sequence at its fullest (`BlockEvents::backward_peak`: the incoming gradient,
    /// the activation and weight gradients made so far), or its forward's transient where
    /// that is larger.
    pub backward_transient: u64,
    /// Of what it kept, the bytes its backward has released by that moment (the saved tensors
    /// of the ops after the peak's, in forward order).
    pub backward_released: u64,
    /// Bytes a checkpointed block recomputes just before its backward.
    pub recomputed: u64,
    /// The same two figures (`backward_transient`, `backward_released`) when every weight
    /// already has its `.grad` (a later micro-batch of gradient accumulation): read off the
    /// accumulating sequence (`BlockEvents::backward_accumulate_peak`), where the block's
    /// weight gradients are made and freed one by one. `None` where the block's backward is
    /// not read off its tape (its forward's transient is larger) or a parallel layout rescaled
    /// it: the walk then adds the layer's whole gradients as before.
    pub backward_accumulate: Option<(u64, u64)>,
}

/// The forward of one micro-batch, part by part.
#[derive(Debug, Clone, Default)]
pub struct ForwardPlan {
    /// input_ids and labels (int64), and a VLM's `pixel_values` (fp32).
    pub inputs: u64,
    pub embedding: StageMemory,
    pub layers: Vec<LayerPlan>,
    pub head: StageMemory,
    /// The logits tensor, live from the head until the loss has read it.
    pub logits: u64,
    /// One hidden state between blocks (batch · seq · hidden at the residual stream's width).
    pub hidden: u64,
    /// Bytes of the first layer's input where it is not `inputs_embeds` but a tensor the
    /// embedding stage makes (counted in its `kept`) and the loop's rebinding
    /// (`hidden_states = decoder_layer(hidden_states, ...)`) frees as layer 0 returns: Gemma
    /// 3n's `[altup_num_inputs, b, s, h]` stack of AltUp streams (`torch.stack` in
    /// `Gemma3nTextModel.forward`), every layer's input and output being such a stack. 0
    /// otherwise.
    pub first_input: u64,
    pub loss: LossMemory,
    /// The head's input gradient (b·s·h) during its backward.
    pub logits_grad_input: u64,
    /// `activation_bytes_per_layer`: bytes one block keeps (median over blocks).
    pub bytes_per_layer: u64,
    /// A DPO step's frozen reference: its no-grad forward's working set after the policy's
    /// loss (`estimate/dpo.rs`); 0 otherwise.
    pub reference_forward: u64,
    /// Eager attention's additive masks (`activations::eager_masks`): made after the
    /// embeddings, read by every block; released when the decoder returns, or — held by every
    /// checkpointed block's saved arguments — when the last checkpoint's backward is done.
    pub masks: EagerMasks,
    /// The forward runs a cuBLASLt GEMM (`runs_lt_gemm`), which some PyTorch releases give a
    /// workspace of its own (`overhead::blas_workspaces_bytes_for`).
    pub lt_gemm: bool,
    /// The blocks' allocator events (`tape/events.rs`), one per distinct block program;
    /// `None` where a layout changes the blocks (tensor, context or pipeline parallelism,
    /// Megatron's accounting).
    pub events: Option<std::sync::Arc<PlanEvents>>,
}

impl ForwardPlan {
    /// Whether eager attention's masks outlive the forward: `torch.utils.checkpoint` keeps each
    /// checkpointed region's arguments (the masks among them) for its recomputation until that
    /// region's backward is done (`checkpoint.py`, non-reentrant: `_NoopSaveInputs` saves them
    /// and the frame holds it), so they go with the first block's backward, the last to run.
    /// Regions are whole blocks under full checkpointing, the attention cores that take the
    /// mask under selective checkpointing where a block recomputes one (eager attention's).
    pub fn masks_held_to_backward(&self, ckpt: crate::job::Checkpointing) -> bool {
        use crate::job::Checkpointing;
        match ckpt {
            Checkpointing::Full => true,
            Checkpointing::Selective => self.layers.iter().any(|l| l.recomputed > 0),
            Checkpointing::None => false,
        }
    }

    /// The largest single allocations of the step (for the allocator model).
    pub fn largest_allocations(&self) -> Vec<u64> {
        let mut v = vec![
            self.logits,
            self.loss.saved,
            self.loss.backward_transient / 2,
        ];
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }
}

/// The additive masks of eager attention in a causal LM's training step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EagerMasks {
    /// The float masks, `[b, 1, s, s]` each in the model's dtype, one per kind of attention
    /// layer (full, sliding window, chunked).
    pub bytes: u64,
    /// The boolean `[1, 1, s, s]` pattern each is filled from, freed once filled.
    pub pattern: u64,
}
