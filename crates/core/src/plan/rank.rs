//! The one data-parallel rank whose buffers the screen reads off the walk (`plan/fsdp.rs`,
//! `plan/zero.rs`): a layout of every GPU a data-parallel rank (dp = gpus, as `plan.rs`'
//! `modes` lays out FSDP and DeepSpeed), its confirming job, and whether the allocator stream
//! writes that job (`alloc_events/inputs.rs` `expressible`, asked of the same forward plan as
//! the estimate's). The micro-batch and the checkpointing (none or full, the screen's choices
//! for these frameworks) change neither the buffers nor the coverage, so one rank serves every
//! layout of its framework and stage.

use super::{job_of, Layout};
use crate::error::CoreError;
use crate::estimate::activations::forward;
use crate::estimate::alloc_events::inputs;
use crate::job::ResolvedJob;
use crate::model::ModelSpec;

/// `framework` at `zero` over `gpus` GPUs (micro-batch 1, no checkpointing): its confirming
/// job and whether the stream writes it, or `None` where the job has no forward plan.
pub(super) fn job(
    base: &ResolvedJob,
    spec: &ModelSpec,
    (framework, zero): (&'static str, u64),
    gpus: u64,
    gpu: &crate::gpu::Gpu,
) -> Result<Option<(ResolvedJob, bool)>, CoreError> {
    let layout = Layout {
        framework,
        dp: gpus,
        tp: 1,
        pp: 1,
        cp: 1,
        ep: 1,
        sp: false,
        zero,
        offload: "none",
        checkpointing: "none",
        micro_batch: 1,
        microbatches: 1,
    };
    let job = job_of(base, &layout, gpu)?;
    let Ok(plan) = forward(spec, &job, &mut Vec::new()) else {
        return Ok(None);
    };
    let covered = inputs::expressible(&job, spec, &plan);
    Ok(Some((job, covered)))
}
