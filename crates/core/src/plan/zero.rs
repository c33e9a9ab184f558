//! The screen's DeepSpeed ZeRO-1/2 buffers (`framework: deepspeed`, `parallel.zero` 1 or 2, no
//! offload, one rank) where the full estimate walks them: the same figures the walk charges
//! (`estimate/simulate/zero_marks.rs`), read once per plan and stage off the same rank
//! (`estimate/alloc_events/zero_walk.rs` `walk_buffers`, DeepSpeed 0.19.8's
//! `stage_1_and_2.py`; `plan/rank.rs`: dp = gpus, as every DeepSpeed layout the planner
//! screens). The micro-batch and the checkpointing change neither the bucket, the partition
//! nor whether the stream writes the job.
//!
//! The walk makes the IPG bucket at the first gradient hook, after the loss's backward, so the
//! screen's loss moment holds none of ZeRO's buffers; the two later moments it compares are
//! the epilogue and the optimizer step, each beside the model states alone (the activations
//! are gone by then).

use crate::error::CoreError;
use crate::estimate::alloc_events::zero_walk;
use crate::estimate::ModelInput;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

/// What the walk holds of ZeRO's buffers and gradients at the moments the screen compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroHeld {
    /// At the epilogue ([`zero_walk::WalkBuffers::at_epilogue`]): the 5e8-element bucket, the
    /// gradients held (stage 1 every gradient whole, stage 2 `grads_in_partition`) and the
    /// reduce's flattened copy, with `grads_in_partition` made there under stage 1.
    pub at_epilogue: u64,
    /// At the optimizer step ([`zero_walk::WalkBuffers::at_step`]): `grads_in_partition`, and
    /// the step's most over it (the flat partition and its fp32 cast, or the fp32 gradient
    /// beside foreach Adam's `sqrt` scratch).
    pub at_step: u64,
}

/// The walk's ZeRO figures for `base`'s DeepSpeed layouts at `stage` (1 or 2) over `gpus`
/// GPUs, or `None` where the walk keeps the heuristic's `comm_buffers` (a job the stream does
/// not write: one GPU, fp16, PEFT, accumulation, a block parameter larger than the bucket, ...).
pub fn held(
    model: &ModelInput,
    base: &ResolvedJob,
    spec: &ModelSpec,
    (gpus, gpu): (u64, &crate::gpu::Gpu),
    stage: u64,
) -> Result<Option<ZeroHeld>, CoreError> {
    let Some((job, covered)) = super::rank::job(base, spec, ("deepspeed", stage), gpus, gpu)?
    else {
        return Ok(None);
    };
    // The stream writes only a causal LM's head (`expressible`), whose tying this is.
    let tied = spec.tied_embeddings();
    let walked = zero_walk::walk_buffers(
        model.inventory.as_ref(),
        &job,
        covered,
        (tied, crate::estimate::states::conv1d_weights(Some(spec))),
    )?;
    Ok(walked.map(|w| ZeroHeld {
        at_epilogue: w.at_epilogue(),
        at_step: w.at_step(),
    }))
}
