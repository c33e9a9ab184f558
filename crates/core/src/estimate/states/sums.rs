//! What the trained states of the rank's tensors add up to before sharding: each kind of trained
//! tensor (a full fine-tune's classes, LoRA adapters, `modules_to_save`) adds to it.

/// Sums over the rank's tensors, before sharding.
#[derive(Default)]
pub(super) struct Sums {
    pub(super) params: u64,
    pub(super) grads: u64,
    pub(super) master: u64,
    pub(super) states: u64,
    pub(super) trainable: u64,
    /// Some trainable tensor gets bitsandbytes' 8-bit states (the shared maps are made).
    pub(super) any_8bit: bool,
    /// States in unified memory (paged optimizers).
    pub(super) paged: u64,
}
