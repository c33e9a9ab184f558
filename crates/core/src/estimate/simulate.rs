//! The step simulator: walks one training step (or one inference forward) as allocation
//! events — weights resident, forward block by block, logits and loss, backward block by block,
//! optimizer step — and finds the peak by replay, not by adding buckets. Each event records the
//! bytes live per category, so the report can say when the peak happens and what is live then.
//!
//! By phase: `walk` (the recorder), `step` (the step's order), `forward`, `backward`,
//! `zero_marks` (ZeRO's buffers in it), `device` (a PyTorch device from the walk), `warnings`.

use super::activations::{self, ForwardPlan};
use super::input::ModelInput;
use super::serving::Device;
use super::states::{self, StateBytes};
use super::techniques;
use crate::error::CoreError;
use crate::job::{ResolvedJob, Task};
use crate::report::*;
use crate::summary::ModelSummary;
use device::pytorch_device;
use warnings::{
    heuristic_reserve_warning, precision_warning, unified_memory_warning, zero_grad_warning,
};

mod backward;
mod device;
mod forward;
mod step;
mod walk;
mod warnings;
mod zero_marks;

/// Simulates one plain step of the job (no RL phases, no DPO pair; those are dispatched
/// above, in [`super::memory`]): model states, then the device by the framework's own rules (a
/// walk of the PyTorch step, vLLM's start-up budget, llama.cpp's GPU/host split), then the fit.
pub fn run(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let job = &*super::vision::with_images(model.spec.as_ref(), job)?;
    run_edited(model, job, None)
}

/// A change to the forward plan before the walk: a trainer that computes its loss its own way
/// (TRL's GRPO keeps the logits of the completion tokens only, `estimate/rl`).
pub(crate) type PlanEdit<'a> =
    &'a dyn Fn(&crate::model::ModelSpec, &mut ForwardPlan) -> Result<(), CoreError>;

/// [`run`] with the forward plan changed by `edit` (if any) before the step is walked; the
/// remembered plan is copied first, never changed in place.
pub(crate) fn run_edited(
    model: &ModelInput,
    job: &ResolvedJob,
    edit: Option<PlanEdit>,
) -> Result<Report, CoreError> {
    let mut warnings = Vec::new();
    if let Some(spec) = &model.spec {
        super::layout::check(spec, job)?;
    }
    let memo = model.memo();
    let st = memo.states(job, &mut warnings, |w| states::model_states(model, job, w))?;
    let gpu = job.gpu.as_deref().map(crate::gpu::find).transpose()?;
    precision_warning(gpu, job, &mut warnings);
    zero_grad_warning(job, &mut warnings);
    unified_memory_warning(gpu, &mut warnings);
    warnings.extend(super::engines::replicas_note(job));
    let plan = match &model.spec {
        Some(spec) => {
            let plan = memo.plan(job, &mut warnings, |w| activations::forward(spec, job, w))?;
            Some(match edit {
                None => plan,
                Some(edit) => {
                    let mut edited = (*plan).clone();
                    edit(spec, &mut edited)?;
                    std::sync::Arc::new(edited)
                }
            })
        }
        None => {
            warnings.push(
                "a bare parameter count has no architecture: activation-dependent figures \
                 (activations, peak, device total) are null; model states are exact"
                    .into(),
            );
            None
        }
    };
    let served = match &model.spec {
        Some(spec) if job.task == Task::Infer => {
            let s = crate::engines::device::Served {
                model,
                spec,
                job,
                gpu,
                states: &st,
            };
            match crate::engines::devices::device_of(job.framework) {
                Some(e) => e.device(&s, &mut warnings)?,
                None => None,
            }
        }
        _ => None,
    };
    let device = match served {
        Some(d) => d,
        None => pytorch_device(model, job, gpu, &st, plan.as_deref(), edit.is_some())?,
    };
    warnings.extend(heuristic_reserve_warning(
        model,
        job,
        plan.as_deref(),
        &device,
    ));
    let host_activations = techniques::host_activation_bytes(job, plan.as_deref());
    techniques::warnings(job, &st, host_activations, &mut warnings);
    let host = st.host.saturating_add(host_activations);
    Ok(Report {
        model: summary(model, &st),
        job: job.clone(),
        fit: fit(gpu, job, &device),
        per_gpu: PerGpu {
            components: device.components,
            model_states: st.max,
            peaks: PeakFigures {
                activation_bytes_per_layer: plan.as_ref().map(|p| p.bytes_per_layer),
                ..device.peaks
            },
            kv_pool: device.kv_pool,
            host_bytes: (host > 0).then_some(host),
            paged_states: (st.paged_states > 0 && device.peaks.peak_allocated.is_some())
                .then_some(st.paged_states),
            allocator: device.allocator,
            rank: (job.parallel.pp > 1).then(|| {
                "rank 0: the first pipeline stage (embeddings, the first blocks, the most \
                 micro-batches in flight)"
                    .to_string()
            }),
        },
        timeline: device.timeline,
        warnings,
        engine: device.engine,
        advice: None,
        rl: None,
        throughput: None,
    })
}

/// The fit check against the GPU less the user's reserve (contract `reserve`).
fn fit(gpu: Option<&crate::gpu::Gpu>, job: &ResolvedJob, device: &Device) -> Option<Fit> {
    let (g, total) = (gpu?, device.peaks.device_total?);
    // Paged optimizer states give way to the step (evicted to host RAM), so the fit is judged
    // on what must stay on the GPU.
    let total = total.saturating_sub(device.paged);
    let usable = job.usable(g.memory_bytes);
    Some(Fit {
        target: TargetGpu::from(g),
        fits: total <= usable && device.engine_starts,
        headroom: usable as i64 - total as i64,
        reserve: job.reserve,
    })
}

/// The model's summary with the job's trainable count.
fn summary(model: &ModelInput, st: &StateBytes) -> ModelSummary {
    match (&model.spec, &model.inventory) {
        (Some(s), inv) => {
            let mut m = model
                .memo()
                .summary(|| ModelSummary::from_spec(s, model.params_total, inv.as_ref()))
                .clone();
            m.name.clone_from(&model.name);
            m.params_trainable = st.trainable_params;
            m
        }
        (None, Some(inv)) => ModelSummary::from_inventory(&model.name, inv),
        (None, None) => ModelSummary::from_params(&model.name, model.params_total),
    }
}
