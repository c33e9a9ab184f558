//! The step as the caching allocator sees it: every tensor allocation and free PyTorch issues,
//! in order, for a training process as `validation/gpu/run_one.py` runs it — the context probe's
//! cuBLAS workspace, the model's parameters in module order, `empty_cache()`, then steps of
//! `zero_grad(set_to_none=True)`, forward, backward and `optimizer.step()`.
//!
//! The sizes come from the mechanisms the estimator already has: each block's tensors from its
//! symbolic autograd tape (`tape/events.rs`: allocated when made, freed after the last reader,
//! saved ones released by their node in backward), the parameters from the inventory, the
//! head and loss from `stages.rs`'s rules, the optimizer's states and foreach scratch from
//! `optimizer.rs`. The stream is run through the caching-allocator model ([`replay`]) for
//! `peak_reserved`; the event walk of `simulate.rs` stays the source of the timeline and the
//! peak's categories (see `docs/allocator-stream.md` for how the two combine).

mod chunked_loss;
mod ctx_held;
pub mod ddp;
pub mod fsdp;
mod fused_ce;
mod infer;
mod infer_inputs;
pub mod inputs;
mod linear_ce;
pub mod outcome;
pub mod plan_events;
pub mod quant_load;
pub mod replay;
mod static_cache;
mod tower;
mod train;
pub mod zero;
pub mod zero_walk;

pub use chunked_loss::ChunkedOutput;
pub use fused_ce::FusedCe;
pub use infer::infer_into;
pub use infer_inputs::{InferInputs, StaticCache};
pub use outcome::Outcome;
pub use plan_events::PlanEvents;
pub use train::{train_into, train_stream, LossSizes, Param, StepKind, TrainInputs};

use super::tape::BlockEvents;

/// One allocator event. Ids are dense from 0 in the order tensors are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `malloc` of `bytes` (as requested, before the allocator's rounding) for tensor `id`.
    Alloc { id: u32, bytes: u64 },
    /// The tensor's block goes back to the allocator.
    Free { id: u32 },
    /// `torch.cuda.empty_cache()`: cached segments with no live block are released.
    EmptyCache,
    /// A phase begins (what the events after it belong to).
    Phase(Phase),
    /// The allocations after it are made on this CUDA stream (0: the default stream): the
    /// caching allocator keeps each stream's blocks in their own pools (`BlockPool` keyed by
    /// stream), and a block freed goes back to the stream it was allocated on.
    Stream(u64),
}

/// What part of the process the events belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `torch.cuda.init()` and the first matmul (the cuBLAS workspace).
    Context,
    /// The model's parameters.
    Load,
    /// Step `n` (from 0): zero_grad, forward, backward, optimizer.
    ZeroGrad(u8),
    Forward(u8),
    Backward(u8),
    Optimizer(u8),
}

/// Where a stream's events go: recorded ([`Stream`]) or run straight through the allocator
/// model ([`replay::SimSink`], which keeps no event list: the estimate's path).
pub trait Sink {
    /// A new tensor of `bytes` (0: an id, no allocation); its id.
    fn alloc(&mut self, bytes: u64) -> u32;
    /// Allocates a reserved id (again, if it was freed).
    fn alloc_at(&mut self, id: u32, bytes: u64);
    /// Releases `id` if it is live.
    fn free(&mut self, id: u32);
    /// Reserves `n` ids (dead until allocated); the first.
    fn reserve(&mut self, n: usize) -> u32;
    fn phase(&mut self, p: Phase);
    fn empty_cache(&mut self);
    /// The stream the next allocations are made on (`torch.cuda.stream(...)`), until the
    /// next call; 0, the default stream, at the start.
    fn stream(&mut self, stream: u64);
    /// Called where a run of identical event sequences may end (a micro-batch): whether the
    /// allocator is now as it was at the last call, with nothing mapped, released, retried or
    /// failed between (`compare`: else only remembered). The next identical sequence would
    /// then repeat the last one exactly, figures and all, so the caller may skip the rest of
    /// the run. A recording sink says `false` (it keeps every event).
    fn repeats(&mut self, compare: bool) -> bool {
        let _ = compare;
        false
    }
}

/// An event stream under construction: ids handed out in order, which tensors are live (a
/// free of a dead id is dropped, so composed pieces may release a tensor twice safely).
#[derive(Debug, Clone, Default)]
pub struct Stream {
    pub events: Vec<Event>,
    live: Vec<bool>,
    bytes: Vec<u64>,
}

impl Sink for Stream {
    fn alloc(&mut self, bytes: u64) -> u32 {
        let id = self.live.len() as u32;
        self.live.push(bytes > 0);
        self.bytes.push(bytes);
        if bytes > 0 {
            self.events.push(Event::Alloc { id, bytes });
        }
        id
    }

    fn alloc_at(&mut self, id: u32, bytes: u64) {
        let Some(l) = self.live.get_mut(id as usize) else {
            return;
        };
        if *l || bytes == 0 {
            return;
        }
        *l = true;
        self.bytes[id as usize] = bytes;
        self.events.push(Event::Alloc { id, bytes });
    }

    fn free(&mut self, id: u32) {
        if let Some(l) = self.live.get_mut(id as usize) {
            if *l {
                *l = false;
                self.events.push(Event::Free { id });
            }
        }
    }

    fn reserve(&mut self, n: usize) -> u32 {
        let base = self.live.len() as u32;
        self.live.extend(std::iter::repeat_n(false, n));
        self.bytes.extend(std::iter::repeat_n(0, n));
        base
    }

    fn phase(&mut self, p: Phase) {
        self.events.push(Event::Phase(p));
    }

    fn empty_cache(&mut self) {
        self.events.push(Event::EmptyCache);
    }

    fn stream(&mut self, stream: u64) {
        self.events.push(Event::Stream(stream));
    }
}

impl Stream {
    pub fn with_capacity(events: usize) -> Self {
        Stream {
            events: Vec::with_capacity(events),
            live: Vec::with_capacity(events / 2),
            bytes: Vec::with_capacity(events / 2),
        }
    }

    pub fn is_live(&self, id: u32) -> bool {
        self.live.get(id as usize).copied().unwrap_or(false)
    }

    /// Bytes allocated now (requested sizes), for tests.
    pub fn live_bytes(&self) -> u64 {
        self.live
            .iter()
            .zip(&self.bytes)
            .filter(|(l, _)| **l)
            .map(|(_, b)| *b)
            .sum()
    }

    /// Number of tensor ids handed out.
    pub fn ids(&self) -> usize {
        self.live.len()
    }

    /// The requested bytes of every allocation, in order (for tests and reports).
    pub fn alloc_sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.events.iter().filter_map(|e| match *e {
            Event::Alloc { bytes, .. } => Some(bytes),
            _ => None,
        })
    }
}

/// One layer's block instantiated in a stream: its id range and the ids it shares with its
/// neighbours (its input is the block before's output; its output's gradient is the block
/// after's input gradient).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockIds {
    pub base: u32,
    pub input: u32,
    pub output_grad: u32,
}

impl BlockIds {
    /// The stream id of a local slot of `b`.
    pub fn id(&self, b: &BlockEvents, slot: u32) -> u32 {
        if slot == b.input {
            self.input
        } else if slot == b.output + b.entries {
            self.output_grad
        } else {
            self.base + slot
        }
    }

    /// The block's output tensor.
    pub fn output(&self, b: &BlockEvents) -> u32 {
        self.base + b.output
    }

    /// The gradient of the block's input (handed to the block before).
    pub fn input_grad(&self, b: &BlockEvents) -> u32 {
        self.base + b.input + b.entries
    }
}

/// Runs `evs` of block `b` into `s`. `keep_input`: the input is held by someone else (a
/// checkpoint keeps its input), so the block does not release it.
pub(crate) fn run_block<S: Sink>(
    s: &mut S,
    b: &BlockEvents,
    evs: &[super::tape::Ev],
    ids: BlockIds,
    keep_input: bool,
) {
    for &e in evs {
        let slot = e.slot();
        if e.is_free() {
            if !(keep_input && slot == b.input) {
                s.free(ids.id(b, slot));
            }
            continue;
        }
        let bytes = b.sizes.get(slot as usize).copied().unwrap_or(0);
        s.alloc_at(ids.id(b, slot), bytes);
    }
}

/// Reserves ids for a block's local slots (dead until allocated) and returns its id map.
pub(crate) fn reserve_block<S: Sink>(s: &mut S, b: &BlockEvents, input: u32) -> BlockIds {
    let base = s.reserve(2 * b.entries as usize);
    BlockIds {
        base,
        input,
        output_grad: u32::MAX,
    }
}

/// The training stream of `job` on `model` into `sink`; `false` (nothing sent) where the
/// stream cannot express the job ([`inputs::expressible`]). `plan` is the estimate's own.
pub(crate) fn events_into<S: Sink>(
    sink: &mut S,
    model: &super::input::ModelInput,
    job: &crate::job::ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    plan: &super::forward_plan::ForwardPlan,
) -> Result<bool, crate::error::CoreError> {
    let (Some(spec), Some(inv), Some(events)) = (&model.spec, &model.inventory, &plan.events)
    else {
        return Ok(false);
    };
    let src = inputs::Source {
        spec,
        job,
        gpu,
        plan,
        events,
    };
    if inputs::expressible_infer(job, spec, plan) {
        let params: Vec<u64> = inv
            .tensors
            .iter()
            .map(|t| t.elements().saturating_mul(events.param_width))
            .collect();
        let inp = inputs::infer_inputs(&src, &params)?;
        infer_into(sink, &inp);
        return Ok(true);
    }
    if !inputs::expressible(job, spec, plan) {
        return Ok(false);
    }
    if job.framework == crate::job::Framework::Fsdp {
        let conv1d = crate::estimate::states::conv1d_weights(Some(spec));
        let (params, layout) = fsdp::params(inv, job, conv1d)?;
        train_into(
            sink,
            &inputs::train_inputs(&src, &params, Some(&layout), None),
        );
        return Ok(true);
    }
    if job.framework == crate::job::Framework::Deepspeed {
        let conv1d = crate::estimate::states::conv1d_weights(Some(spec));
        let Some((params, layout)) = zero::params(inv, job, conv1d)? else {
            return Ok(false);
        };
        train_into(
            sink,
            &inputs::train_inputs(&src, &params, None, Some(&layout)),
        );
        return Ok(true);
    }
    let format = crate::estimate::weights::weights_in_force(Some(spec), job)?;
    let conv1d = crate::estimate::states::conv1d_weights(Some(spec));
    let params = inputs::params_quantized(inv, job, events.param_width, &format, conv1d)?;
    let inp = inputs::train_inputs(&src, &params, None, None);
    train_into(sink, &inp);
    Ok(true)
}

/// The stream of `job` recorded ([`events_into`]), or `None`.
pub(crate) fn stream_of(
    model: &super::input::ModelInput,
    job: &crate::job::ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    plan: &super::forward_plan::ForwardPlan,
) -> Result<Option<Stream>, crate::error::CoreError> {
    let mut s = Stream::with_capacity(1 << 14);
    Ok(events_into(&mut s, model, job, gpu, plan)?.then_some(s))
}

/// The allocator model's figures for `job`'s stream run through `sim`, or `None`.
pub(crate) fn simulate(
    sim: crate::allocator::Allocator,
    model: &super::input::ModelInput,
    job: &crate::job::ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    plan: &super::forward_plan::ForwardPlan,
) -> Result<Option<Outcome>, crate::error::CoreError> {
    let mut sink = replay::SimSink::new(sim);
    Ok(events_into(&mut sink, model, job, gpu, plan)?.then(|| sink.outcome()))
}

/// The training stream of `job` on `model` as the estimate makes it (its plan
/// remembered by the model, `memo.rs`); `None` where the stream cannot express the job.
pub fn step_stream(
    model: &super::input::ModelInput,
    job: &crate::job::ResolvedJob,
) -> Result<Option<Stream>, crate::error::CoreError> {
    let Some(spec) = &model.spec else {
        return Ok(None);
    };
    // A VLM's image tokens lengthen the sequence, as the estimate folds them in.
    let job = &*crate::estimate::vision::with_images(Some(spec), job)?;
    let mut warnings = Vec::new();
    let memo = model.memo();
    let plan = memo.plan(job, &mut warnings, |w| {
        super::activations::forward(spec, job, w)
    })?;
    let gpu = job.gpu.as_deref().map(crate::gpu::find).transpose()?;
    stream_of(model, job, gpu, &plan)
}

/// The report's word on a reserve the allocator model did not give (the packing heuristic of
/// `overhead.rs` stood in): what kept the stream from writing the job ([`inputs::not_written`]).
pub(crate) fn heuristic_reserve_warning(
    spec: &crate::model::ModelSpec,
    job: &crate::job::ResolvedJob,
    plan: &super::forward_plan::ForwardPlan,
) -> String {
    let why = inputs::not_written(job, spec, plan)
        .unwrap_or_else(|| "this model's inventory".to_string());
    format!(
        "allocator reserve not simulated: the allocation stream does not write {why} yet, so \
         the reserve is the packing estimate of the tensors live at the peak (it falls short \
         where large transient blocks churn)"
    )
}

/// `max_memory_reserved` from the step's allocator events run through the caching-allocator
/// model (`alloc_events`, `crate::allocator`), for the jobs the stream expresses: the walk's
/// peak allocated (validated to 0.1 % on the H200) plus the model's reserve over its own
/// allocated peak (`peak_reserved − peak_allocated` of the simulation), so a small difference
/// between the stream's and the walk's tensors moves both figures alike. `None`: the stream
/// does not cover the job.
pub(crate) fn simulated_reserve(
    model: &super::input::ModelInput,
    job: &crate::job::ResolvedJob,
    gpu: Option<&crate::gpu::Gpu>,
    plan: &super::forward_plan::ForwardPlan,
    walk_peak: u64,
    edited: bool,
) -> Result<Option<(u64, crate::report::AllocatorSummary)>, crate::error::CoreError> {
    let compute = || -> Result<Option<Outcome>, crate::error::CoreError> {
        // A job whose tensors alone exceed the device is simulated without a limit: its
        // figures then say what it would need, not how the allocator fails.
        let limit = capacity(gpu, job);
        let limit = if walk_peak > limit { u64::MAX } else { limit };
        let mut sim = crate::allocator::Allocator::new(&job.allocator, limit);
        if let Some(g) = gpu {
            sim.set_device_total(g.memory_bytes);
        }
        simulate(sim, model, job, gpu, plan)
    };
    // An edited plan (a trainer's own loss) is not the memo's plan: simulated afresh.
    let outcome = if edited {
        compute()?
    } else {
        *model.memo().reserve(job, compute)?
    };
    let Some(o) = outcome else {
        return Ok(None);
    };
    let reserve = o.peak_reserved.saturating_sub(o.peak_allocated);
    let mut reserved = walk_peak.saturating_add(reserve);
    if o.oom {
        // A request failed even after the cache was freed (`malloc`'s OOM path): the process
        // needs more than the allocator may hold, whatever the bytes in use say.
        reserved = reserved.max(capacity(gpu, job).saturating_add(1));
    }
    let summary = crate::report::AllocatorSummary {
        segments: o.segments,
        fragmentation: if reserved == 0 {
            0.0
        } else {
            1.0 - walk_peak as f64 / reserved as f64
        },
        largest_free_block: o.largest_free_block,
        num_alloc_retries: o.num_alloc_retries,
    };
    Ok(Some((reserved, summary)))
}

/// What the caching allocator may hold: the GPU's memory less the CUDA context (unlimited
/// without a GPU).
fn capacity(gpu: Option<&crate::gpu::Gpu>, job: &crate::job::ResolvedJob) -> u64 {
    gpu.map_or(u64::MAX, |g| {
        g.memory_bytes
            .saturating_sub(super::overhead::cuda_context_bytes_with(
                Some(g),
                job.cuda_module_loading,
            ))
    })
}
