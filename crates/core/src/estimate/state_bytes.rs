//! The model states of one GPU over the step ([`StateBytes`]) and what the optimizer in
//! backward holds at once ([`HookStep`]): the types `states.rs` fills and the simulator,
//! techniques and memo read. A leaf.

use crate::inventory::Component;
use crate::report::ModelStates;

/// The model states of one GPU over the step.
#[derive(Debug, Clone, Default)]
pub struct StateBytes {
    /// Held over the whole step (gradients: once complete).
    pub resident: ModelStates,
    /// The contract's `model_states`: each state's maximum over the step.
    pub max: ModelStates,
    pub trainable_params: u64,
    /// Gradient bytes that appear during each layer's backward.
    pub layer_grads: Vec<u64>,
    /// Gradient bytes of the head (or of a tied embedding, made at the head's backward).
    pub head_grad: u64,
    /// Gradient bytes of the embeddings (0 when tied: already counted at the head).
    pub embedding_grad: u64,
    /// A tied embedding's backward: the embedding's own V×h gradient and the sum with the
    /// head's contribution, live together for a moment.
    pub embedding_backward_transient: u64,
    /// The optimizer step's temporaries (foreach AdamW's sqrt(v) of every parameter).
    pub step_scratch: u64,
    /// Communication buffers held through the step (DDP buckets, DeepSpeed's reduce bucket,
    /// ZeRO-3 / FSDP gathered parameters).
    pub comm_buffers: u64,
    /// Host (CPU) RAM holding offloaded states.
    pub host: u64,
    /// Optimizer-state bytes a paged bitsandbytes optimizer keeps in unified memory
    /// (`optimizer::paged_state_bytes`): on the GPU while it has room, evictable to host RAM.
    pub paged_states: u64,
    /// `optimizer_in_backward`: what one parameter's gradient and its own step hold at once.
    pub hook_step: HookStep,
}

/// `optimizer_in_backward`: torchtune's recipes (`recipes/full_finetune_single_device.py`,
/// `optimizer_in_bwd`) make one optimizer per parameter and register `optim_step` with
/// `param.register_post_accumulate_grad_hook` (torch `torch/_tensor.py`): when a parameter's
/// gradient is complete its optimizer steps and `zero_grad()` frees the gradient. So at most
/// one parameter's gradient and its own step's scratch (foreach AdamW's `sqrt(v)` of that one
/// tensor) live at once, in each part of the backward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookStep {
    /// The most a block's parameter holds: its gradient plus its step's scratch.
    pub layer: u64,
    /// The head's (untied) parameter, likewise.
    pub head: u64,
    /// An untied embedding (and the other parameters outside the blocks).
    pub embedding: u64,
    /// A tied embedding's gradient: `AccumulateGrad` sums the head's and the embedding's
    /// contributions, so the head's is held from its backward until the embedding's, where the
    /// hook runs once.
    pub tied_grad: u64,
    /// The tied parameter's step scratch (at the embedding's backward).
    pub tied_scratch: u64,
    /// The largest single gradient: `model_states.gradients` (its maximum over the step).
    pub largest_grad: u64,
}

impl HookStep {
    /// Records one trainable tensor of `grad` bytes whose own step needs `scratch` bytes.
    pub fn add(&mut self, layer: Option<u32>, c: Component, tied: bool, grad: u64, scratch: u64) {
        let both = grad.saturating_add(scratch);
        self.largest_grad = self.largest_grad.max(grad);
        match (layer, c) {
            (Some(_), _) => self.layer = self.layer.max(both),
            (None, _) if tied => {
                self.tied_grad = self.tied_grad.max(grad);
                self.tied_scratch = self.tied_scratch.max(scratch);
            }
            (None, Component::Head) => self.head = self.head.max(both),
            (None, _) => self.embedding = self.embedding.max(both),
        }
    }
}
