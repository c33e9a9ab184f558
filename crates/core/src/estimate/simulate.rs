//! The step simulator: walks one training step (or one inference forward) as allocation
//! events — weights resident, forward block by block, logits and loss, backward block by block,
//! optimizer step — and finds the peak by replay, not by adding buckets. Each event records the
//! bytes live per category, so the report can say when the peak happens and what is live then.

use super::activations::{self, ForwardPlan};
use super::input::ModelInput;
use super::prefill_walk::PrefillLayer;
use super::serving::{non_torch_bytes, Device};
use super::states::{self, StateBytes};
use super::{overhead, techniques};
use crate::error::CoreError;
use crate::job::{Framework, ResolvedJob, Task};
use crate::report::*;
use crate::summary::ModelSummary;
use std::borrow::Cow;

mod zero_marks;
use zero_marks::Zero;

/// Live bytes per category at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Live {
    c: Components,
}

/// Records the step's events and keeps the peak.
struct Walk {
    live: Live,
    points: Vec<TimelinePoint>,
    /// The highest total so far, what was live then, and its event's index in `points`
    /// (remembered by index so a new peak copies no strings).
    peak: (u64, Components, Option<usize>),
}

impl Walk {
    /// A walk with room for `events` points (one growth of the vector is one allocation).
    fn new(events: usize) -> Self {
        Walk {
            live: Live::default(),
            points: Vec::with_capacity(events),
            peak: (0, Components::default(), None),
        }
    }

    fn add(&mut self, cat: Category, bytes: u64) {
        if let Some(v) = self.live.c.get_mut(cat) {
            *v = v.saturating_add(bytes);
        }
    }

    fn sub(&mut self, cat: Category, bytes: u64) {
        if let Some(v) = self.live.c.get_mut(cat) {
            *v = v.saturating_sub(bytes);
        }
    }

    /// Records the current state as an event; `transient` bytes (temporaries) exist only at this
    /// moment.
    fn mark(&mut self, phase: &'static str, label: Cow<'static, str>, transient: u64) {
        let mut c = self.live.c;
        c.temporaries = c.temporaries.saturating_add(transient);
        let total = c.allocated();
        if total > self.peak.0 {
            self.peak = (total, c, Some(self.points.len()));
        }
        let mut by_category = CategoryBytes::default();
        for k in Category::ALLOCATED {
            by_category.set(k, c.get(k));
        }
        self.points.push(TimelinePoint {
            phase: Cow::Borrowed(phase),
            label,
            allocated: total,
            by_category,
        });
    }
}

/// "layer {i}", made once for the first [`LAYER_LABELS`] layers and shared by every estimate
/// (a walk labels each block twice, forward and backward).
fn layer_label(i: usize) -> Cow<'static, str> {
    static LABELS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let labels = LABELS.get_or_init(|| (0..LAYER_LABELS).map(|i| format!("layer {i}")).collect());
    match labels.get(i) {
        Some(l) => Cow::Borrowed(l.as_str()),
        None => Cow::Owned(format!("layer {i}")),
    }
}

/// How many layer labels [`layer_label`] keeps made.
const LAYER_LABELS: usize = 256;

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
) -> Result<(super::generate_kv::GenerateKv, super::prefill_walk::Prefill), CoreError> {
    let kv = match (&model.spec, job.task) {
        (Some(spec), Task::Infer) => super::generate_kv::generate_kv(spec, job)?,
        _ => super::generate_kv::GenerateKv::default(),
    };
    let prefill = super::prefill_walk::prefill_layers(model.spec.as_ref(), job, plan);
    Ok((kv, prefill))
}

/// A PyTorch step (or forward) walked event by event; the caching allocator's reserve and the
/// context on top. A bare parameter count has no walk: its model states alone, peak unknown.
fn pytorch_device(
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
    let (fsdp, zero) = match &model.spec {
        Some(spec) => {
            let covered = super::alloc_events::inputs::expressible(job, spec, plan);
            let inv = model.inventory.as_ref();
            let tied = matches!(
                spec.head,
                crate::model::Head::LanguageModel { tied: true, .. }
            );
            (
                super::alloc_events::fsdp::walk_buffers(inv, job, covered)?,
                super::alloc_events::zero_walk::walk_buffers(inv, job, covered, tied)?,
            )
        }
        None => (None, None),
    };
    walk(
        &mut w,
        st,
        plan,
        job,
        gpu,
        (fsdp.as_ref(), zero.as_ref(), &prefill.layers),
    );
    if job.task == Task::Infer && job.new_tokens > 0 {
        // The prefill's hidden states are gone once its forward returns; the cache stays.
        w.sub(Category::Activations, plan.embedding.kept + plan.hidden);
        if let Some(f) = kv.first_step {
            set_kv(&mut w, kv.prefill, f.cache);
            w.mark(
                "decode",
                "first decode step".into(),
                f.transient + plan.logits,
            );
            set_kv(&mut w, f.cache, kv.prefill);
        }
        set_kv(&mut w, kv.prefill, kv.full);
        w.mark(
            "decode",
            "last decode step".into(),
            kv.decode_transient + plan.logits,
        );
    }
    let (alloc, mut components, peak_at) = w.peak;
    let phase = peak_at.map_or_else(String::new, |i| w.points[i].phase.to_string());
    let (reserved, allocator) =
        match super::alloc_events::simulated_reserve(model, job, gpu, plan, alloc, edited)? {
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

/// The report's word where PyTorch's reserve came from the packing heuristic, not the
/// allocator model (no `allocator` summary; serving engines keep their own budgets).
fn heuristic_reserve_warning(
    model: &ModelInput,
    job: &ResolvedJob,
    plan: Option<&ForwardPlan>,
    device: &Device,
) -> Option<String> {
    let (Some(spec), Some(plan)) = (&model.spec, plan) else {
        return None;
    };
    let heuristic = device.allocator.is_none()
        && device.engine.is_none()
        && device.peaks.peak_reserved.is_some();
    heuristic.then(|| super::alloc_events::heuristic_reserve_warning(spec, job, plan))
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

/// A unified-memory machine's capacity is the GPU's share of memory the OS also lives in, and
/// on Metal the CUDA context and caching-allocator figures are CUDA measurements that stand in
/// for Metal's unmeasured ones.
fn unified_memory_warning(gpu: Option<&crate::gpu::Gpu>, warnings: &mut Vec<String>) {
    let Some(g) = gpu.filter(|g| g.unified_memory) else {
        return;
    };
    warnings.push(format!(
        "{} shares its memory with the OS: the capacity is the GPU's share ({}), and the \
         desktop and other applications take from the same pool (--reserve GIB keeps some free)",
        g.id,
        crate::text::bytes(g.memory_bytes)
    ));
    if g.is_metal() {
        warnings.push(
            "Metal has no measured context or allocator figures in vramscope: the CUDA context \
             and caching-allocator overheads are CUDA figures, assumed, not measured on Apple \
             silicon"
                .into(),
        );
    }
}

/// `zero_grad: zeros` where the framework manages its own gradient buffers.
fn zero_grad_warning(job: &ResolvedJob, warnings: &mut Vec<String>) {
    if job.task == Task::Train
        && job.zero_grad == crate::job::ZeroGrad::Zeros
        && !keeps_zeroed_grads(job)
    {
        warnings.push(format!(
            "zero_grad zeros has no effect with framework {}: it keeps its own gradient buffers",
            job.framework.as_str()
        ));
    }
}

/// On a GPU without bf16 (V100, T4): fp16 is the default precision there (said, since the
/// user may expect bf16), and bf16 asked for explicitly has no tensor-core support.
fn precision_warning(gpu: Option<&crate::gpu::Gpu>, job: &ResolvedJob, warnings: &mut Vec<String>) {
    use crate::job::Precision;
    let Some(g) = gpu.filter(|g| !g.bf16) else {
        return;
    };
    match job.precision {
        Precision::Fp16Mixed | Precision::Fp16 => warnings.push(format!(
            "{} has no bf16: {} is used (the default on GPUs before Ampere; mixed precision \
             then needs loss scaling)",
            g.id,
            job.precision.as_str()
        )),
        Precision::Bf16Mixed | Precision::Bf16 => warnings.push(format!(
            "{} has no bf16 tensor cores: {} runs slowly or not at all there; use fp16-mixed",
            g.id,
            job.precision.as_str()
        )),
        Precision::Fp32 => {}
    }
}

/// FSDP2's buffers in the walk (`alloc_events/fsdp.rs`), where the stream writes the job.
type Fsdp<'a> = Option<&'a super::alloc_events::fsdp::WalkBuffers>;

/// The event walk of one step.
fn walk(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    (fsdp, zero, prefill): (Fsdp, Zero, &[PrefillLayer]),
) {
    let train = job.task == Task::Train;
    let carried_grads = walk_start(w, st, plan, job, gpu, fsdp.is_none() && zero.is_none());
    walk_forward(w, plan, job, (fsdp, prefill));
    if !train {
        return;
    }
    walk_backward(w, st, plan, job, carried_grads, (fsdp, zero));
    // Optimizer step (with the optimizer in backward, each parameter's ran in its hook).
    if techniques::in_backward(job) {
        return;
    }
    if st.resident.optimizer_states > 0
        || st.step_scratch > 0
        || !matches!(job.optimizer, crate::job::Optimizer::None)
    {
        let scratch = zero.map_or(st.step_scratch, |z| z.step);
        w.mark("optimizer", "optimizer step".into(), scratch);
    }
}

/// Resident before the step: weights, optimizer states (steady state: made on the first
/// step), master weights, the batch; gradients while accumulating over micro-batches, or from
/// one step to the next when `zero_grad()` zeroes them in place ([`keeps_zeroed_grads`])
/// (returned: the gradients carried into the step's backward).
fn walk_start(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    comm_buffers: bool,
) -> u64 {
    use Category::*;
    let train = job.task == Task::Train;
    w.add(Parameters, st.resident.parameters);
    // Paged states live outside PyTorch's allocator (`techniques`): not walked.
    w.add(
        OptimizerStates,
        st.resident.optimizer_states.saturating_sub(st.paged_states),
    );
    w.add(MasterWeights, st.resident.master_weights);
    let carried_grads = if train && (job.grad_accum > 1 || keeps_zeroed_grads(job)) {
        st.resident.gradients
    } else {
        0
    };
    w.add(Gradients, carried_grads);
    w.add(Activations, plan.inputs);
    // cuBLAS/cuBLASLt workspaces go through the caching allocator and stay allocated, as do
    // the data-parallel communication buffers.
    let ws = overhead::blas_workspaces_bytes_for(gpu, train, job.torch_version, plan.lt_gemm);
    w.add(Temporaries, ws);
    if comm_buffers {
        w.add(Temporaries, st.comm_buffers);
    }
    w.mark("start", "weights and optimizer states resident".into(), 0);
    carried_grads
}

/// `zero_grad: zeros`: `zero_grad(set_to_none=False)` (torch/optim/optimizer.py and
/// torch/nn/modules/module.py `zero_grad`, the default before torch 2.0, pytorch/pytorch#92731;
/// the HF Trainer calls `model.zero_grad()` after each optimizer step, transformers/trainer.py)
/// runs `p.grad.zero_()` and keeps the tensors: from the second step on every gradient is
/// resident through the forward, and backward adds into it in place (`AccumulateGrad`), as
/// when accumulating over micro-batches. DeepSpeed and Megatron keep their own gradient
/// buffers, so the field is for the frameworks that call torch's (`pytorch`, `fsdp`).
fn keeps_zeroed_grads(job: &ResolvedJob) -> bool {
    job.zero_grad == crate::job::ZeroGrad::Zeros
        && matches!(job.framework, Framework::Pytorch | Framework::Fsdp)
}

/// The forward: embeddings, each block, the head; in training also the loss, and leaving the
/// autocast region frees the cached weight copies nothing saved. Under FSDP2 the root's
/// parameters are gathered first (kept to the backward's end; its all-gather output held to
/// layer 0's copy-out), each layer's unsharded parameters and held all-gather output live
/// through its forward, and the last layer's output is held through the head and loss.
///
/// `prefill`: each layer's cache and its block's top with it (`prefill_walk.rs`), where the
/// prefill's cache is made layer by layer; empty otherwise.
fn walk_forward(
    w: &mut Walk,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    (fsdp, prefill): (Fsdp, &[PrefillLayer]),
) {
    use Category::*;
    let train = job.task == Task::Train;
    let root = fsdp.map_or(0, |f| f.root);
    w.add(Temporaries, root);
    w.add(Activations, plan.embedding.kept);
    w.mark(
        "forward",
        "embeddings".into(),
        plan.embedding.peak.saturating_sub(plan.embedding.kept) + root,
    );
    if let Some(f) = fsdp.filter(|f| f.root > f.layer(Some(0))) {
        // Layer 0's all-gather output made while the root's is still held.
        w.mark(
            "forward",
            "all-gather layer 0".into(),
            f.root + f.layer(Some(0)),
        );
    }
    if plan.masks.bytes > 0 {
        w.add(Activations, plan.masks.bytes);
        w.mark("forward", "attention masks".into(), plan.masks.pattern);
    }
    for (i, l) in plan.layers.iter().enumerate() {
        let mut transient = l.forward_peak.saturating_sub(l.kept);
        if let Some(p) = prefill.get(i) {
            w.add(KvCache, p.cache);
            transient = p.top.saturating_sub(p.cache);
        }
        let kept = techniques::kept_on_gpu(job, l.kept + l.weight_copies);
        w.add(Activations, kept + l.cached_copies);
        let gathered = fsdp.map_or(0, |f| 2 * f.layer(Some(i)));
        w.mark("forward", layer_label(i), transient + gathered);
        w.add(Temporaries, fsdp.map_or(0, |f| f.kept_after_forward(i)));
        if i == 0 && !train && plan.first_input == 0 {
            // Under no_grad the embeddings stay bound to `inputs_embeds` in the model's
            // forward to its end (`modeling_llama.py` `LlamaModel.forward`), and the loop holds
            // each later layer's input (the layer before's output) until that layer returns:
            // from the second layer on, two hidden states live beside the block's own tensors.
            // Where the first input is a tensor of its own (`ForwardPlan::first_input`, kept
            // by the embedding stage), the rebinding frees it as layer 0's output of the same
            // size takes its place: nothing added.
            w.add(Activations, plan.hidden);
        }
    }
    if !plan.masks_held_to_backward(job.checkpointing) {
        w.sub(Activations, plan.masks.bytes);
    }
    // The last layer's all-gather output, held to the root's post-forward, then under
    // FULL_SHARD the same layer prefetched by the root's pre-backward.
    let last = plan.layers.len().checked_sub(1);
    let held = fsdp.map_or(0, |f| f.layer(last));
    w.add(Temporaries, held);
    let cached_copies: u64 = plan.layers.iter().map(|l| l.cached_copies).sum();
    if !train {
        // The hidden state between blocks, the head's working set and the last logits.
        w.mark(
            "forward",
            "final norm and head".into(),
            plan.head.peak + plan.logits,
        );
        return;
    }
    w.add(Activations, plan.head.kept + plan.head.weight_copies);
    w.mark("forward", "final norm and head".into(), plan.logits);
    w.add(Activations, plan.loss.saved);
    w.mark("forward", "loss".into(), plan.loss.forward_transient);
    if fsdp.is_some_and(|f| f.kept) {
        // SHARD_GRAD_OP: the held output goes at the root's post-forward, nothing prefetched.
        w.sub(Temporaries, held);
    }
    w.sub(Activations, cached_copies);
    // DPO: the reference's no-grad forward after the policy's (accelerate's autocast wraps
    // each model's forward, so the policy's cached weight copies are gone by then).
    if plan.reference_forward > 0 {
        w.mark(
            "forward",
            "reference model forward (no_grad)".into(),
            plan.reference_forward,
        );
    }
}

/// FSDP's root post-backward, the backward's final callback (`alloc_events/fsdp.rs`): the root
/// resharded, layer 0's reduce-scatter input released, the root's made while its unsharded
/// gradients live; then those gradients and that input go (its sharded gradients are the
/// walk's full gradients after it). A deferred first layer (LoRA's frozen embeddings:
/// `first_deferred`) is resharded after the root and its reduce-scatter input made then.
fn root_post_backward(w: &mut Walk, f: &super::alloc_events::fsdp::WalkBuffers, rs_held: u64) {
    w.sub(Category::Temporaries, f.root + rs_held);
    w.mark("backward", "root reduce-scatter".into(), f.root_rs);
    w.sub(Category::Temporaries, f.head_grads + f.embedding_grads);
    if f.first_deferred {
        w.sub(Category::Temporaries, f.layer(Some(0)));
        let rs = f.layer_rs.first().copied().unwrap_or(0);
        w.mark("backward", "layer 0 reduce-scatter".into(), rs);
    }
}

/// The backward: the loss gradient first (three fp32 b·s·V tensors live together), the head,
/// the blocks in reverse (a checkpointed block first recomputes its forward), the embeddings;
/// gradients grow to their full size. Accumulating over micro-batches (`carried_grads` > 0),
/// a new gradient is added in place into the `.grad` kept from the earlier ones
/// (`AccumulateGrad`, torch/csrc/autograd/functions/accumulate_grad.h: `variable_grad +=
/// new_grad` outside grad mode) and freed: a transient, not a new state.
fn walk_backward(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    carried_grads: u64,
    (fsdp, zero): (Fsdp, Zero),
) {
    use Category::*;
    let hooked = techniques::in_backward(job);
    let hs = st.hook_step;
    w.mark(
        "backward",
        "loss (log-softmax backward)".into(),
        plan.loss.backward_transient,
    );
    w.sub(Activations, plan.loss.saved);
    // ZeRO-2: each gradient goes into the bucket as it is made (`zero_marks.rs`).
    let zero2 = zero.filter(|z| z.partitions_gradients());
    let grads = GradSplit {
        hooked,
        accumulating: carried_grads > 0 || zero2.is_some(),
        reduced: fsdp.is_some(),
    };
    let split = |g: u64, hook: u64| grads.of(g, hook);
    let (head_kept, head_new) = match zero2 {
        Some(z) => (z.tied_grads, z.head_grads),
        None if hooked => (hs.tied_grad, hs.head),
        None => split(st.head_grad, 0),
    };
    // FSDP: the root's gradients stay unsharded (compute dtype) until its post-backward.
    let head_kept = if fsdp.is_some() { 0 } else { head_kept };
    w.add(Temporaries, fsdp.map_or(0, |f| f.head_grads));
    w.add(Gradients, head_kept);
    w.mark(
        "backward",
        "head".into(),
        plan.loss.dlogits + plan.logits_grad_input + head_new,
    );
    w.sub(Activations, plan.head.kept + plan.head.weight_copies);
    zero_marks::head(w, zero);
    let rs_held = walk_layers_backward(w, st, plan, job, grads, (fsdp, zero));
    if plan.masks_held_to_backward(job.checkpointing) {
        w.sub(Activations, plan.masks.bytes);
    }
    // A VLM's image branch runs its backward before the text embeddings' (`alloc_events/
    // tower.rs`, `vision_events::backward_top`).
    if let Some(t) = plan.events.as_ref().and_then(|e| e.tower.as_ref()) {
        if t.backward_top > 0 {
            w.mark("backward", "vision tower".into(), t.backward_top);
        }
    }
    w.sub(Activations, plan.embedding.kept);
    let (e_kept, e_new) = match zero2 {
        Some(z) => (0, z.embedding_grads),
        None => split(st.embedding_grad, hs.embedding),
    };
    let e_kept = if fsdp.is_some() { 0 } else { e_kept };
    w.add(Temporaries, fsdp.map_or(0, |f| f.embedding_grads));
    w.add(Gradients, e_kept);
    // A tied parameter's step runs once its two contributions are summed (they are gone by
    // then): its scratch replaces them rather than joining them.
    let tied = match zero2 {
        Some(z) => 2 * z.tied_grads,
        None if hooked => st.embedding_backward_transient.max(hs.tied_scratch),
        None => st.embedding_backward_transient,
    };
    // PEFT's input-gradient hook: the first block's input gradient kept as `.grad` on the
    // embedding's output, and that leaf, both held by the graph to the backward's end.
    let input_grad = if techniques::input_grads_hook(job, st.embedding_grad > 0) {
        2 * plan.hidden
    } else {
        0
    };
    w.mark("backward", "embeddings".into(), tied + e_new + input_grad);
    zero_marks::embedding(w, zero);
    if let Some(f) = fsdp {
        root_post_backward(w, f, rs_held);
    }
    if hooked {
        // The tied parameter's hook ran: its gradient is freed; nothing else is resident.
        w.sub(Gradients, hs.tied_grad);
        w.sub(Activations, plan.inputs);
        return;
    }
    // Gradients reached their full size; any rounding difference goes to the last layer.
    let g_now = w.live.c.gradients;
    let g_full = st.resident.gradients;
    if g_full > g_now && zero2.is_none() {
        w.add(Gradients, g_full - g_now);
    }
    zero_marks::epilogue(w, zero);
    w.sub(Activations, plan.inputs);
}

/// How a part's gradient is charged: (kept after its backward, made and gone within it). A
/// gradient stays; one accumulated into a carried `.grad` is a transient; one stepped by its
/// hook is a transient of one parameter at a time. Under FSDP2 (`reduced`) the part's sharded
/// gradient is its reduce-scatter output: kept from the first micro-batch, and a later one's
/// is added into it after the unit's unsharded gradients are freed
/// (`alloc_events/fsdp.rs`), outside the block's fullest moment.
#[derive(Debug, Clone, Copy)]
struct GradSplit {
    hooked: bool,
    accumulating: bool,
    reduced: bool,
}

impl GradSplit {
    fn of(self, g: u64, hook: u64) -> (u64, u64) {
        match (self.hooked, self.accumulating) {
            (true, _) => (0, hook),
            (false, true) if self.reduced => (0, 0),
            (false, true) => (0, g),
            (false, false) => (g, 0),
        }
    }

    /// The backward adds its weight gradients into `.grad`s it keeps (FSDP2 takes the
    /// unsharded ones at each post-backward: its blocks' backward is the first's).
    fn into_kept_grads(self) -> bool {
        self.accumulating && !self.hooked && !self.reduced
    }
}

/// The blocks' backward, newest first (a checkpointed block first recomputes its forward).
/// Under FSDP2 each layer's pre-backward copies it out and prefetches the one before, its
/// post-backward reshards it and keeps its reduce-scatter input in place of the last one
/// (returned: the input still held).
fn walk_layers_backward(
    w: &mut Walk,
    st: &StateBytes,
    plan: &ForwardPlan,
    job: &ResolvedJob,
    grads: GradSplit,
    (fsdp, zero): (Fsdp, Zero),
) -> u64 {
    use Category::*;
    let hs = st.hook_step;
    let mut rs_held = 0;
    for (i, l) in plan.layers.iter().enumerate().rev() {
        // FSDP's pre-backward: the prefetched layer copied out, the one before prefetched
        // (FULL_SHARD; under SHARD_GRAD_OP every layer is gathered already).
        w.add(Temporaries, fsdp.map_or(0, |f| f.prefetched_before(i)));
        let recompute = l.recomputed;
        let (g_kept, g_new) = grads.of(st.layer_grads.get(i).copied().unwrap_or(0), hs.layer);
        let saved = l.kept + l.weight_copies;
        let back = techniques::brought_back(job, saved) - techniques::kept_on_gpu(job, saved);
        let previous = plan
            .layers
            .get(i + 1)
            .map_or(0, |p| p.kept + p.weight_copies);
        let held = techniques::held_from_previous(job, previous);
        w.add(Activations, recompute + back);
        // The block's fullest moment: what its backward has made (with the weight gradients
        // in flight when they are accumulated into kept `.grad`s, read off that sequence)
        // and what it has released by then of its saved tensors.
        let (made, released) = match (grads.into_kept_grads(), l.backward_accumulate) {
            (true, Some((made, released))) => (made, released),
            _ => (l.backward_transient + g_new, l.backward_released),
        };
        let gone = released.min(techniques::brought_back(job, saved) + recompute);
        w.sub(Activations, gone);
        w.mark("backward", layer_label(i), made + held);
        w.sub(
            Activations,
            techniques::brought_back(job, saved) + recompute - gone,
        );
        w.add(Gradients, g_kept);
        zero_marks::layer(w, zero, i);
        if let Some(f) = fsdp.filter(|f| !(i == 0 && f.first_deferred)) {
            // Post-backward: resharded, the last reduce-scatter input released, this one kept.
            w.sub(Temporaries, f.layer(Some(i)) + rs_held);
            rs_held = f.layer_rs.get(i).copied().unwrap_or(0);
            w.add(Temporaries, rs_held);
        }
    }
    rs_held
}
