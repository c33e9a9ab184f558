//! A PyTorch step (or forward) on the device: walked event by event, with an inference job's
//! `generate` cache, then the caching allocator's reserve and the CUDA context on top.

use super::step::walk;
use super::walk::Walk;
use crate::error::CoreError;
use crate::estimate::activations::ForwardPlan;
use crate::estimate::input::ModelInput;
use crate::estimate::overhead;
use crate::estimate::serving::{non_torch_bytes, Device};
use crate::estimate::states::StateBytes;
use crate::job::{ResolvedJob, Task};
use crate::report::{Category, Components, PeakFigures};

/// Moves the walk's cache from `from` bytes to `to` (a sliding layer's prompt given back at
/// the first decode step, a full layer grown).
fn set_kv(w: &mut Walk, from: u64, to: u64) {
    if to >= from {
        w.add(Category::KvCache, to - from);
    } else {
        w.sub(Category::KvCache, from - to);
    }
}

/// An inference job's `generate` cache at the walk's marks (`generate_kv.rs`) and the prefill's
/// layers that make it one by one where the walk can place them (`prefill_walk.rs`); none
/// in training.
fn generate_cache(
    model: &ModelInput,
    job: &ResolvedJob,
    plan: Option<&ForwardPlan>,
) -> Result<
    (
        crate::estimate::generate_kv::GenerateKv,
        crate::estimate::prefill_walk::Prefill,
    ),
    CoreError,
> {
    let kv = match (&model.spec, job.task) {
        (Some(spec), Task::Infer) => crate::estimate::generate_kv::generate_kv(spec, job)?,
        _ => crate::estimate::generate_kv::GenerateKv::default(),
    };
    let prefill = crate::estimate::prefill_walk::prefill_layers(model.spec.as_ref(), job, plan);
    Ok((kv, prefill))
}

/// A PyTorch step (or forward) walked event by event; the caching allocator's reserve and the
/// context on top. A bare parameter count has no walk: its model states alone, peak unknown.
pub(super) fn pytorch_device(
    model: &ModelInput,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    st: &StateBytes,
    plan: Option<&ForwardPlan>,
    edited: bool,
) -> Result<Device, CoreError> {
    let (kv, prefill) = generate_cache(model, job, plan)?;
    // Start, embeddings, each block forward and backward, head, loss (twice), optimizer.
    let events = plan.map_or(1, |p| 2 * p.layers.len() + 8);
    let mut w = Walk::new(events);
    // What no layer's first `update` makes is held from the start.
    w.add(Category::KvCache, kv.prefill.saturating_sub(prefill.made));
    let mut device = Device {
        components: Components {
            kv_cache: kv.full,
            parameters: st.resident.parameters,
            gradients: st.resident.gradients,
            optimizer_states: st.resident.optimizer_states,
            master_weights: st.resident.master_weights,
            ..Components::default()
        },
        peaks: PeakFigures::default(),
        kv_pool: None,
        timeline: Vec::new(),
        engine: None,
        engine_starts: true,
        paged: 0,
        allocator: None,
    };
    let Some(plan) = plan else {
        device.timeline = w.points;
        return Ok(device);
    };
    let (fsdp, zero) = rank_buffers(model, job, plan)?;
    walk(
        &mut w,
        st,
        plan,
        job,
        gpu,
        (fsdp.as_ref(), zero.as_ref(), &prefill.layers),
    );
    if job.task == Task::Infer && job.new_tokens > 0 {
        decode_steps(&mut w, plan, &kv);
    }
    let (alloc, mut components, peak_at) = w.peak;
    let phase = peak_at.map_or_else(String::new, |i| w.points[i].phase.to_string());
    let (reserved, allocator) = match crate::estimate::alloc_events::simulated_reserve(
        model, job, gpu, plan, alloc, edited,
    )? {
        Some((r, a)) => (r, Some(a)),
        None => (
            overhead::reserved_estimate(alloc, &plan.largest_allocations()),
            None,
        ),
    };
    device.allocator = allocator;
    let context = non_torch_bytes(gpu, job);
    components.cuda_context = context;
    components.allocator_reserve = reserved.saturating_sub(alloc);
    device.components = components;
    device.peaks.peak_allocated = Some(alloc);
    device.peaks.peak_reserved = Some(reserved);
    device.peaks.device_total = Some(reserved + context + st.paged_states);
    device.paged = st.paged_states;
    device.peaks.peak_phase = Some(phase);
    device.timeline = w.points;
    Ok(device)
}

type RankBuffers = (
    Option<crate::estimate::alloc_events::fsdp::WalkBuffers>,
    Option<crate::estimate::alloc_events::zero_walk::WalkBuffers>,
);

/// What one sharded data-parallel rank holds beside the model's own tensors, as the walk
/// charges it: FSDP2's gathered units and reduce-scatter outputs (`alloc_events/fsdp.rs`) or
/// DeepSpeed ZeRO-1/2's bucket and partitions (`alloc_events/zero_walk.rs`); `None` for other
/// layouts and for a model known only by its parameter count.
fn rank_buffers(
    model: &ModelInput,
    job: &ResolvedJob,
    plan: &ForwardPlan,
) -> Result<RankBuffers, CoreError> {
    Ok(match &model.spec {
        Some(spec) => {
            let covered = crate::estimate::alloc_events::inputs::expressible(job, spec, plan);
            let inv = model.inventory.as_ref();
            let tied = matches!(
                spec.head,
                crate::model::Head::LanguageModel { tied: true, .. }
            );
            (
                crate::estimate::alloc_events::fsdp::walk_buffers(
                    inv,
                    job,
                    covered,
                    crate::estimate::states::conv1d_weights(Some(spec)),
                )?,
                crate::estimate::alloc_events::zero_walk::walk_buffers(
                    inv,
                    job,
                    covered,
                    (tied, crate::estimate::states::conv1d_weights(Some(spec))),
                )?,
            )
        }
        None => (None, None),
    })
}

/// Generation after the prefill: the prefill's hidden states gone once its forward returns,
/// the cache grown to the first decode step's and then to the last's, each step's transient
/// and logits on top (`estimate/generate_kv.rs`).
fn decode_steps(w: &mut Walk, plan: &ForwardPlan, kv: &crate::estimate::generate_kv::GenerateKv) {
    // The prefill's hidden states are gone once its forward returns; the cache stays.
    w.sub(Category::Activations, plan.embedding.kept + plan.hidden);
    if let Some(f) = kv.first_step {
        set_kv(w, kv.prefill, f.cache);
        w.mark(
            "decode",
            "first decode step".into(),
            f.transient + plan.logits,
        );
        set_kv(w, f.cache, kv.prefill);
    }
    set_kv(w, kv.prefill, kv.full);
    w.mark(
        "decode",
        "last decode step".into(),
        kv.decode_transient + plan.logits,
    );
}
