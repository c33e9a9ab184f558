//! ollama's fit: `num_ctx` made explicit (its VRAM-tier default) and searched instead of the
//! prompt length; the layers it places itself.

use crate::engines::llamacpp::fit::most_gpu_layers;
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::job::{ResolvedJob, Task};
use crate::search::largest;

/// ollama allocates `num_ctx` per slot whatever the prompt: the job's `num_ctx`, else ollama's
/// default for this GPU (`engines::ollama::device::ollama_default_num_ctx`), set on the job so the
/// searches and the launch read one value.
pub(crate) fn ollama_with_num_ctx(
    model: &ModelInput,
    job: ResolvedJob,
) -> Result<ResolvedJob, CoreError> {
    let (Task::Infer, None, Some(spec)) = (job.task, job.engine.num_ctx, &model.spec) else {
        return Ok(job);
    };
    let gpu = job.gpu.as_deref().map(crate::gpu::find).transpose()?;
    let n = crate::engines::ollama::device::ollama_default_num_ctx(spec, &job, gpu);
    let mut j = job;
    j.set_engine("num_ctx", n.into())?;
    Ok(j)
}

/// ollama: the largest `num_ctx` per slot that fits at the job's layers, whether the search
/// stopped at the model's maximum positions, and that cap.
pub(crate) fn longest_num_ctx(
    job: &ResolvedJob,
    max_pos: Option<u64>,
    mut fits: impl FnMut(&ResolvedJob) -> Result<bool, CoreError>,
) -> Result<(Option<u64>, bool, u64), CoreError> {
    let cap = max_pos.unwrap_or(1 << 22).max(1);
    let best = largest(cap, |c| {
        let mut j = job.clone();
        j.set_engine("num_ctx", c.into())?;
        fits(&j)
    })?;
    Ok((best, best == Some(cap) && max_pos.is_some(), cap))
}
/// ollama without `num_gpu`: the layers it places itself, leaving llama-server's fit margin
/// free (`engines::llamacpp::device::LLAMA_FIT_TARGET`, as the estimate's own layer choice does), so
/// `fit` and `estimate` name the same count; with a note of how many more would fit with no
/// margin. With the user's `num_gpu`, the most that fit (as llama.cpp's `-ngl`).
pub(crate) fn ollama_gpu_layers(
    model: &ModelInput,
    spec: &crate::model::ModelSpec,
    job: &ResolvedJob,
    capacity: u64,
    evals: &mut u64,
    notes: &mut Vec<String>,
) -> Result<Option<u64>, CoreError> {
    let tight = most_gpu_layers(model, spec, job, capacity, evals)?;
    if job.engine.n_gpu_layers.is_some() {
        return Ok(tight);
    }
    let margin = crate::engines::llamacpp::device::LLAMA_FIT_TARGET;
    let own = most_gpu_layers(model, spec, job, capacity.saturating_sub(margin), evals)?;
    if let (Some(t), Some(o)) = (tight, own) {
        if t > o {
            notes.push(format!(
                "num_gpu {o} is what ollama picks itself: its server's fit keeps {} free \
                 (llama-server --fit-target); num_gpu {t} also fits, with less than that free",
                crate::text::bytes(margin)
            ));
        }
    }
    Ok(own.or(tight))
}
