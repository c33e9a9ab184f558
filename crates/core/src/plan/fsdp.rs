//! The screen's FSDP2 buffers (`framework: fsdp`, `parallel.zero: 3` FULL_SHARD or 2
//! SHARD_GRAD_OP, one rank) where the full estimate walks them: the same figures the walk
//! charges (`estimate/simulate.rs`), read once per plan off the same layout
//! (`estimate/alloc_events/fsdp.rs` `walk_buffers`, torch 2.15's `_fully_shard`). FSDP layouts
//! are pure data parallelism over every GPU (dp = gpus), so one layout serves every FSDP
//! layout the planner screens; the strategy, the micro-batch and the checkpointing change
//! neither the units' sizes nor whether the stream writes the job
//! (`alloc_events/inputs.rs` `expressible`, asked of `plan/rank.rs`' rank), but for LoRA,
//! written without checkpointing only (the screen asks `plan.rs`' layout).

use crate::error::CoreError;
use crate::estimate::alloc_events::fsdp;
use crate::estimate::ModelInput;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

/// What the walk holds of FSDP2's buffers at the moments the screen compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsdpHeld {
    /// At the loss's backward, beside every activation ([`fsdp::WalkBuffers::at_loss`]):
    /// FULL_SHARD (`zero: 3`) and SHARD_GRAD_OP (`zero: 2`, every layer kept gathered).
    pub at_loss: u64,
    pub at_loss_kept: u64,
    /// At the root's post-backward, beside the layers' sharded gradients
    /// ([`fsdp::WalkBuffers::at_root_reduce`]).
    pub at_root_reduce: u64,
}

/// The walk's FSDP2 figures for `base`'s FSDP layouts over `gpus` GPUs, or `None` where the
/// walk keeps the heuristic's `comm_buffers` (a job the stream does not write: quantized
/// weights, PEFT's `modules_to_save`, one GPU, ...).
pub fn held(
    model: &ModelInput,
    base: &ResolvedJob,
    spec: &ModelSpec,
    gpus: u64,
    gpu: &crate::gpu::Gpu,
) -> Result<Option<FsdpHeld>, CoreError> {
    let Some((job, covered)) = super::rank::job(base, spec, ("fsdp", 3), gpus, gpu)? else {
        return Ok(None);
    };
    let conv1d = crate::estimate::states::conv1d_weights(Some(spec));
    let walked = fsdp::walk_buffers(model.inventory.as_ref(), &job, covered, conv1d)?;
    Ok(walked.map(|w| FsdpHeld {
        at_loss: w.at_loss(),
        at_root_reduce: w.at_root_reduce(),
        at_loss_kept: fsdp::WalkBuffers { kept: true, ..w }.at_loss(),
    }))
}
