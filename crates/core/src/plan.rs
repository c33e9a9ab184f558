//! The planner: enumerate parallel layouts for N GPUs (data × tensor × pipeline × context ×
//! expert degrees, ZeRO stage or FSDP mode, recomputation, offload, micro-batch), screen every
//! one with a closed-form evaluator built from the model's own coefficients, rank those that
//! fit, and confirm the best with the full step simulation.
//!
//! The screen is exact arithmetic on a few numbers per model — per-layer activation bytes at
//! micro-batch 1 from the autograd tape (activations are linear in the micro-batch), parameter
//! counts per part, the loss's b·s·V terms — so a million layouts take well under a second.

pub mod fsdp;
pub mod layouts;
mod peft;
mod rank;
mod states;
pub mod zero;

pub use layouts::{Layout, LayoutTime, Scored};

use peft::{peft_coeffs, PeftCoeffs};
use states::{screen_states, StateWidths};

use crate::error::CoreError;
use crate::estimate::activations::{forward, megatron_layer_bytes};
use crate::estimate::{estimate, overhead, ModelInput};
use crate::inventory::Component;
use crate::job::{Checkpointing, Framework, Offload, ResolvedJob, Task};
use crate::model::ModelSpec;
use rayon::prelude::*;
use serde::Serialize;

/// What the planner found.
#[derive(Debug, Clone, Serialize)]
pub struct PlanResult {
    pub gpu: String,
    pub gpus: u64,
    pub capacity: u64,
    /// Bytes the job's `reserve` keeps free: layouts are screened and confirmed against
    /// `capacity − reserve` (absent when 0).
    #[serde(skip_serializing_if = "crate::report::is_zero")]
    pub reserve: u64,
    pub evaluated: u64,
    pub fitting: u64,
    /// The best layouts, ranked (least recompute, smallest bubble, smallest TP degree, least
    /// communication, largest micro-batch), the first ones confirmed by the full estimator.
    pub best: Vec<Confirmed>,
    /// The best-ranked fitting layout of each family (DeepSpeed, DeepSpeed with offload, FSDP,
    /// Megatron), confirmed by the full estimator: the choice when a framework is given.
    pub best_per_framework: Vec<Confirmed>,
    /// When nothing fits: what would.
    pub advice: Vec<String>,
    /// Why the first layout wins, in one line (with the step-time model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A ranked layout and, for the top ones, the full estimate of its most-loaded GPU.
#[derive(Debug, Clone, Serialize)]
pub struct Confirmed {
    #[serde(flatten)]
    pub scored: Scored,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<crate::report::PerGpu>,
}

/// Per-model numbers the screen needs.
struct Coeffs {
    layers: u64,
    heads: u64,
    kv_heads: u64,
    experts: Option<u64>,
    p_embed: u64,
    p_head: u64,
    p_blocks: u64,
    p_largest_block: u64,
    /// Activation bytes per layer at micro-batch 1: [autocast, DeepSpeed's 16-bit, FSDP's
    /// 16-bit] × [none, selective, full] (under autocast with the layer's 16-bit weight copies).
    act: [[u64; 3]; 3],
    /// Embedding stage kept bytes at micro-batch 1.
    embed_act: u64,
    /// Loss: saved + backward-start transients at micro-batch 1 (fp32 b·s·V terms).
    loss: u64,
    /// LoRA / QLoRA: the frozen base and the adapters (`None` for a full fine-tune).
    peft: Option<PeftCoeffs>,
    /// FSDP2's buffers as the walk charges them, where it does (`plan/fsdp.rs`).
    fsdp: Option<fsdp::FsdpHeld>,
    /// DeepSpeed ZeRO-1 and ZeRO-2's buffers as the walk charges them, where it does
    /// (`plan/zero.rs`).
    zero: [Option<zero::ZeroHeld>; 2],
}

fn ckpt_index(c: Checkpointing) -> usize {
    match c {
        Checkpointing::None => 0,
        Checkpointing::Selective => 1,
        Checkpointing::Full => 2,
    }
}

fn coeffs(
    spec: &ModelSpec,
    model: &ModelInput,
    base: &ResolvedJob,
    (gpus, gpu): (u64, &crate::gpu::Gpu),
) -> Result<Coeffs, CoreError> {
    let inv = model.inventory.as_ref().ok_or_else(|| {
        CoreError::field(
            "model",
            "planning needs the model's tensors (a preset, config or file)",
        )
    })?;
    let mut p_embed = 0;
    let mut p_head = 0;
    let mut per_block = vec![0u64; spec.num_layers() as usize];
    for t in &inv.tensors {
        match (t.layer, t.component) {
            (Some(l), _) => {
                if let Some(b) = per_block.get_mut(l as usize) {
                    *b += t.elements();
                }
            }
            (None, Component::Embedding) => p_embed += t.elements(),
            (None, _) => p_head += t.elements(),
        }
    }
    let mut act = [[0u64; 3]; 3];
    let mut embed_act = 0;
    let mut loss = 0;
    let mut w = Vec::new();
    for (ni, framework) in [Framework::Pytorch, Framework::Deepspeed, Framework::Fsdp]
        .into_iter()
        .enumerate()
    {
        for ck in [
            Checkpointing::None,
            Checkpointing::Selective,
            Checkpointing::Full,
        ] {
            let job = ResolvedJob {
                batch: 1,
                framework,
                checkpointing: ck,
                parallel: Default::default(),
                ..base.clone()
            };
            let p = forward(spec, &job, &mut w)?;
            let l = p.layers.first().copied().unwrap_or_default();
            act[ni][ckpt_index(ck)] = l.kept + if ni == 0 { l.weight_copies } else { 0 };
            if ni == 0 && ck == Checkpointing::None {
                embed_act = p.embedding.kept + p.inputs;
                loss = p.loss.saved + p.loss.backward_transient + p.head.kept;
            }
        }
    }
    let first = spec.all_layers().next();
    Ok(Coeffs {
        layers: spec.num_layers(),
        heads: first.map_or(1, |l| l.attention.kind.heads()),
        kv_heads: first.map_or(1, |l| l.attention.kind.kv_heads()),
        experts: spec
            .all_layers()
            .find_map(|l| l.routed_experts().map(|m| m.experts)),
        p_embed,
        p_head,
        p_blocks: per_block.iter().sum(),
        p_largest_block: per_block.iter().copied().max().unwrap_or(0),
        act,
        embed_act,
        loss,
        peft: peft_coeffs(model, base, inv)?,
        fsdp: fsdp::held(model, base, spec, gpus, gpu)?,
        zero: [
            zero::held(model, base, spec, (gpus, gpu), 1)?,
            zero::held(model, base, spec, (gpus, gpu), 2)?,
        ],
    })
}

/// Divisors of n in increasing order.
fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// The (dp, tp, pp, cp, ep) degrees of `gpus` GPUs worth screening: tp up to 8 dividing the
/// heads (and the k/v heads, or divided by them), pp up to the layer count, cp up to 8, ep
/// dividing dp and the expert count.
fn shapes(c: &Coeffs, gpus: u64) -> Vec<(u64, u64, u64, u64, u64)> {
    let mut shapes = Vec::new();
    for tp in divisors(gpus).into_iter().filter(|t| *t <= 8) {
        if !c.heads.is_multiple_of(tp)
            || (!c.kv_heads.is_multiple_of(tp) && !tp.is_multiple_of(c.kv_heads))
        {
            continue;
        }
        for pp in divisors(gpus / tp).into_iter().filter(|p| *p <= c.layers) {
            for cp in divisors(gpus / (tp * pp)).into_iter().filter(|x| *x <= 8) {
                let dp = gpus / (tp * pp * cp);
                let eps = match c.experts {
                    Some(e) => divisors(dp).into_iter().filter(|x| e % x == 0).collect(),
                    None => vec![1],
                };
                for ep in eps {
                    shapes.push((dp, tp, pp, cp, ep));
                }
            }
        }
    }
    shapes
}

/// The (framework, zero, offload, sp) choices valid for a shape: Megatron for model
/// parallelism (sequence parallelism with tp > 1), DeepSpeed (ZeRO 0–3, with optimizer and
/// parameter offload) and FSDP (no sharding, SHARD_GRAD_OP, FULL_SHARD) for pure data
/// parallelism.
fn modes(tp: u64, model_parallel: bool) -> Vec<(&'static str, u64, &'static str, bool)> {
    let mut modes = Vec::new();
    for zero in [0, 1] {
        for sp in if tp > 1 {
            vec![false, true]
        } else {
            vec![false]
        } {
            modes.push(("megatron", zero, "none", sp));
        }
    }
    if !model_parallel {
        for zero in 0..=3 {
            modes.push(("deepspeed", zero, "none", false));
            if zero >= 1 {
                modes.push(("deepspeed", zero, "optimizer", false));
            }
            if zero == 3 {
                modes.push(("deepspeed", zero, "optimizer+params", false));
            }
        }
        for zero in [0, 2, 3] {
            modes.push(("fsdp", zero, "none", false));
        }
    }
    modes
}

/// Every layout of `gpus` GPUs worth screening: each shape × mode × recomputation ×
/// micro-batch count (pp to 8·pp with a pipeline) × micro-batch size.
fn layouts(c: &Coeffs, gpus: u64, max_micro_batch: u64) -> Vec<Layout> {
    let mut out = Vec::new();
    for (dp, tp, pp, cp, ep) in shapes(c, gpus) {
        let mbs: Vec<u64> = if pp > 1 {
            vec![pp, 2 * pp, 4 * pp, 8 * pp]
        } else {
            vec![1]
        };
        for (framework, zero, offload, sp) in modes(tp, tp * pp * cp > 1) {
            let ckpts: &[&str] = if framework == "megatron" {
                &["none", "selective", "full"]
            } else {
                &["none", "full"]
            };
            for ck in ckpts {
                for &m in &mbs {
                    for b in 1..=max_micro_batch {
                        out.push(Layout {
                            framework,
                            dp,
                            tp,
                            pp,
                            cp,
                            ep,
                            sp,
                            zero,
                            offload,
                            checkpointing: ck,
                            micro_batch: b,
                            microbatches: m,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Activation bytes on the first stage: Korthikanti's per-layer bytes under Megatron (divided
/// by cp), else the tape's per-layer bytes at micro-batch 1 times the micro-batch, divided by
/// tp × cp; each for the micro-batches in flight; plus the embeddings.
fn screen_activations(c: &Coeffs, l: &Layout, base: &ResolvedJob, spec: &ModelSpec) -> u64 {
    let (tp, pp, cp) = (l.tp, l.pp, l.cp);
    let ck = match l.checkpointing {
        "selective" => 1,
        "full" => 2,
        _ => 0,
    };
    let b = l.micro_batch;
    let in_flight = if pp > 1 { pp.min(l.microbatches) } else { 1 };
    let per_layer = if l.framework == "megatron" {
        let job = ResolvedJob {
            batch: b,
            checkpointing: [
                Checkpointing::None,
                Checkpointing::Selective,
                Checkpointing::Full,
            ][ck],
            parallel: crate::job::Parallel {
                tp,
                sp: l.sp,
                ..Default::default()
            },
            ..base.clone()
        };
        megatron_layer_bytes(spec, &job).unwrap_or(u64::MAX / 4) / cp
    } else {
        // Autocast numerics where fp32 weights stay (plain PyTorch); 16-bit weights under
        // DeepSpeed's and FSDP's mixed precision (`estimate::activations::forward_numerics`);
        // DeepSpeed's apart: its engine casts LoRA's adapters to the model's dtype
        // (`activations::deepspeed_cast`).
        let ni = match l.framework {
            "pytorch" if base.precision.is_mixed() => 0,
            "deepspeed" => 1,
            _ => 2,
        };
        c.act[ni][ck] * b / (tp * cp)
    };
    per_layer
        .saturating_mul(c.layers.div_ceil(pp))
        .saturating_mul(in_flight)
        + c.embed_act * b
}

/// What offload leaves on the GPU: (its resident parameters, optimizer states and master
/// weights; its gradients; the host RAM the offload needs).
fn offloaded(st: &states::ScreenStates, l: &Layout, w: &StateWidths) -> (u64, u64, u64) {
    if l.offload == "none" {
        return (st.params + st.states + st.master, st.grads, 0);
    }
    let (mut params, mut grads, mut host) = (st.params, st.grads, st.states + st.master);
    // DeepSpeed's offload moves the gradients to the host in fp32 as they are reduced
    // (`estimate::states::gradients_to_host`).
    if l.framework == "deepspeed" {
        host += grads / w.grad.max(1) * 4;
        grads = 0;
    }
    if l.offload == "optimizer+params" {
        host += st.params;
        params = 0;
    }
    (params, grads, host)
}

/// The data-parallel buffers beside the loss's backward (`estimate::states::buffers`' figures
/// where the walk keeps them). FSDP2 where the walk charges its buffers (`plan/fsdp.rs`):
/// what it holds at the loss. DeepSpeed ZeRO-1/2 where it does (`plan/zero.rs`): nothing, the
/// bucket is made at the first gradient hook, after the loss's backward.
fn loss_buffers(
    c: &Coeffs,
    l: &Layout,
    (w, grads): (&StateWidths, u64),
    (walked, zero): (Option<fsdp::FsdpHeld>, Option<zero::ZeroHeld>),
) -> u64 {
    use crate::estimate::states::{DS_PREFETCH_BUCKET, DS_REDUCE_BUCKET};
    match (l.framework, l.zero) {
        ("deepspeed", 3) => {
            DS_REDUCE_BUCKET * w.grad + DS_PREFETCH_BUCKET * w.param + c.p_largest_block * w.param
        }
        ("deepspeed", _) if zero.is_some() => 0,
        ("deepspeed", _) if l.dp.max(1) > 1 => DS_REDUCE_BUCKET * w.grad,
        ("fsdp", 3) => walked.map_or(3 * c.p_largest_block * 2, |f| f.at_loss),
        // SHARD_GRAD_OP: every parameter unsharded in 16 bit at the loss
        // (`estimate::states::buffers`).
        ("fsdp", 2) => walked.map_or(
            (c.p_embed + c.p_blocks + c.p_head) * 2 + c.p_largest_block * w.grad,
            |f| f.at_loss_kept,
        ),
        ("fsdp", 0) if l.dp.max(1) > 1 => grads,
        _ => 0,
    }
}

/// Screened device total of the most-loaded GPU (the first pipeline stage) and the host RAM
/// its offload needs: the most of its moments (the loss's backward, the optimizer step, and
/// where the walk charges FSDP2's or ZeRO-1/2's buffers their own moments), each beside the
/// resident model states.
fn screen(c: &Coeffs, l: &Layout, base: &ResolvedJob, spec: &ModelSpec, ctx: u64) -> (u64, u64) {
    let w = StateWidths::of(l, base);
    let st = screen_states(c, l, base, &w);
    let (resident, grads, host) = offloaded(&st, l, &w);
    let acts = screen_activations(c, l, base, spec);
    let loss = if l.pp == 1 {
        c.loss * l.micro_batch / l.tp.max(1)
    } else {
        0
    };
    // FSDP2 where the walk charges its buffers (`plan/fsdp.rs`): held beside the loss, freed
    // before the step, and the root's reduce-scatter beside the layers' sharded gradients.
    // (LoRA: without checkpointing, as `alloc_events::inputs` writes it.)
    let walked = c.fsdp.filter(|_| {
        l.framework == "fsdp"
            && l.zero >= 2
            && l.ep <= 1
            && (c.peft.is_none() || l.checkpointing == "none")
    });
    // DeepSpeed ZeRO-1/2 where the walk charges its buffers (`plan/zero.rs`): the epilogue
    // and the step beside the states; ZeRO-3 and offload keep the heuristic's bucket.
    let zero = match (l.framework, l.zero, l.offload, l.ep) {
        ("deepspeed", z @ (1 | 2), "none", ..=1) => c.zero[z as usize - 1],
        _ => None,
    };
    let buffers = loss_buffers(c, l, (&w, st.grads), (walked, zero));
    // foreach AdamW's sqrt(v) scratch: one state's worth over the trainable elements.
    let scratch = if base.optimizer == crate::job::Optimizer::AdamW && l.offload == "none" {
        let per = if c.peft.is_some() { 4 } else { w.states / 2 };
        st.trainable * per / w.shard_states
    } else {
        0
    };
    let fwd_bwd = resident + acts + loss + buffers;
    let step_buffers = if walked.is_some() { 0 } else { buffers };
    let step = zero.map_or(resident + grads + scratch + step_buffers, |z| {
        resident + z.at_step
    });
    let epilogue = zero.map_or(0, |z| resident + z.at_epilogue);
    // The layers' sharded gradients beside the root's reduce-scatter (LoRA: the adapters').
    let layer_grads = match c.peft {
        Some(_) => grads,
        None => c.p_blocks * w.grad / w.shard_grad,
    };
    let root_reduce = walked.map_or(0, |f| resident + layer_grads + f.at_root_reduce);
    let allocated = fwd_bwd.max(step).max(root_reduce).max(epilogue);
    // Allocator reserve (a few percent in single-stream runs: docs/overheads.md) and the context.
    (allocated + allocated / 50 + ctx, host)
}

/// Plans `base` (its model, seq, precision, optimizer) over `gpus` GPUs of `gpu`.
pub fn plan(
    model: &ModelInput,
    base: &ResolvedJob,
    gpus: u64,
    gpu: &crate::gpu::Gpu,
    max_micro_batch: u64,
    top: usize,
) -> Result<PlanResult, CoreError> {
    plan_until(model, base, gpus, gpu, (max_micro_batch, top), &|| false)
}

/// A search that was told to stop (`plan_until`'s `stop`).
fn stopped() -> CoreError {
    CoreError::field("plan", "the search was stopped before it finished")
}

/// `plan`, asking `stop` between layouts (screened and confirmed) and giving up with an error
/// once it answers true: the server stops a plan whose request's deadline has passed.
/// `limits` is (largest micro-batch, layouts listed).
pub fn plan_until(
    model: &ModelInput,
    base: &ResolvedJob,
    gpus: u64,
    gpu: &crate::gpu::Gpu,
    (max_micro_batch, top): (u64, usize),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<PlanResult, CoreError> {
    let spec = model
        .spec
        .as_ref()
        .ok_or_else(|| CoreError::field("model", "planning needs the architecture"))?;
    if base.task != Task::Train {
        return Err(CoreError::field(
            "task",
            "plan searches training layouts (task train)",
        ));
    }
    let c = coeffs(spec, model, base, (gpus, gpu))?;
    let all = layouts(&c, gpus, max_micro_batch.max(1));
    let ctx = overhead::cuda_context_bytes_with(Some(gpu), base.cuda_module_loading)
        + if gpus > 1 {
            overhead::nccl_bytes(gpus)
        } else {
            0
        };
    // Layouts are screened against what the user's reserve leaves (contract `reserve`).
    let usable = base.usable(gpu.memory_bytes);
    let timing = crate::throughput::layout::Timing::new(model, base, gpu);
    let mut fitting: Vec<Scored> = all
        .par_iter()
        .filter_map(|l| {
            if stop() {
                return None;
            }
            let (total, host) = screen(&c, l, base, spec, ctx);
            (total <= usable).then(|| score(l, (total, host, usable), base, timing.as_ref()))
        })
        .collect();
    if stop() {
        return Err(stopped());
    }
    rank(&mut fitting);
    let why = fitting.first().and_then(crate::throughput::layout::explain);
    let n_fit = fitting.len() as u64;
    let best_per_framework = per_family(model, base, gpu, &fitting)?;
    let best = confirm_leaders(model, base, gpu, fitting, (top, stop))?;
    let advice = if n_fit == 0 {
        nothing_fits(model, gpus, gpu)
    } else {
        Vec::new()
    };
    Ok(PlanResult {
        gpu: gpu.id.clone(),
        gpus,
        capacity: gpu.memory_bytes,
        reserve: base.reserve,
        evaluated: all.len() as u64,
        fitting: n_fit,
        best,
        best_per_framework,
        advice,
        why,
    })
}

/// Ranks fitting layouts: by modelled tokens per second per GPU, fastest first, ties to more
/// headroom; without the GPU's speeds, by the tie-breakers of [`rank_by_proxies`].
fn rank(fitting: &mut [Scored]) {
    if fitting.iter().any(|s| s.time.is_none()) {
        return rank_by_proxies(fitting);
    }
    let tps = |s: &Scored| s.time.map_or(0.0, |t| t.tokens_per_s_per_gpu);
    fitting.sort_by(|a, b| {
        tps(b)
            .partial_cmp(&tps(a))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.headroom.cmp(&a.headroom))
    });
}

/// Ranks fitting layouts without a step-time model. Narayanan et al. 2021 §3.2: tensor parallelism all-reduces
/// activations in every layer; use the smallest degree that fits. Before it: the least
/// recomputation and the smallest pipeline bubble; ties go to less communication, then bigger
/// batches, then more headroom.
fn rank_by_proxies(fitting: &mut [Scored]) {
    fitting.sort_by(|a, b| {
        (a.recompute, a.bubble, a.layout.tp as f64, a.communication)
            .partial_cmp(&(b.recompute, b.bubble, b.layout.tp as f64, b.communication))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.layout.micro_batch.cmp(&a.layout.micro_batch))
            .then(b.headroom.cmp(&a.headroom))
    });
}

/// The `top` best of the ranked fitting layouts. The leaders are confirmed with the full step
/// simulation; a layout the simulation finds over capacity, or cannot estimate, is dropped (the
/// screen is a close, not an exact, bound): at most 3 confirmed among the first 40 tried, the
/// rest listed as screened.
fn confirm_leaders(
    model: &ModelInput,
    base: &ResolvedJob,
    gpu: &crate::gpu::Gpu,
    ranked: Vec<Scored>,
    (top, stop): (usize, &(dyn Fn() -> bool + Sync)),
) -> Result<Vec<Confirmed>, CoreError> {
    let capacity = base.usable(gpu.memory_bytes);
    let mut best = Vec::new();
    let mut confirmed = 0;
    for (tried, s) in ranked.into_iter().enumerate() {
        if best.len() >= top {
            break;
        }
        if confirmed < 3 && tried < 40 {
            if stop() {
                return Err(stopped());
            }
            let per_gpu = estimate(model, &job_of(base, &s.layout, gpu)?)
                .ok()
                .map(|r| r.per_gpu);
            match per_gpu.as_ref().and_then(|p| p.peaks.device_total) {
                Some(t) if t <= capacity => {
                    confirmed += 1;
                    best.push(Confirmed {
                        scored: s,
                        estimate: per_gpu,
                    });
                }
                _ => continue,
            }
        } else {
            best.push(Confirmed {
                scored: s,
                estimate: None,
            });
        }
    }
    Ok(best)
}

/// When no layout fits: the model states' size and what would fit.
fn nothing_fits(model: &ModelInput, gpus: u64, gpu: &crate::gpu::Gpu) -> Vec<String> {
    let p = model.params_total;
    vec![
        format!(
            "no layout of {gpus} × {} fits; model states alone need about {} GB with \
             mixed-precision Adam (16 B/param) before sharding",
            gpu.id,
            p * 16 / 1_000_000_000
        ),
        "try more GPUs, CPU offload (deepspeed ZeRO-3 with offload optimizer+params), \
         LoRA/QLoRA (--lora 16 / --qlora 16), or a shorter sequence"
            .into(),
    ]
}

/// Every layout `plan` considers for `base` over `gpus` GPUs of `gpu`, with its screened device
/// total and host RAM (fitting or not): what the agreement test holds against `estimate`.
pub fn screened(
    model: &ModelInput,
    base: &ResolvedJob,
    gpus: u64,
    gpu: &crate::gpu::Gpu,
    max_micro_batch: u64,
) -> Result<Vec<(Layout, u64, u64)>, CoreError> {
    let spec = model
        .spec
        .as_ref()
        .ok_or_else(|| CoreError::field("model", "planning needs the architecture"))?;
    let c = coeffs(spec, model, base, (gpus, gpu))?;
    let ctx = overhead::cuda_context_bytes(Some(gpu))
        + if gpus > 1 {
            overhead::nccl_bytes(gpus)
        } else {
            0
        };
    Ok(layouts(&c, gpus, max_micro_batch.max(1))
        .into_iter()
        .map(|l| {
            let (t, h) = screen(&c, &l, base, spec, ctx);
            (l, t, h)
        })
        .collect())
}

/// The first fitting layout (in rank order) of each family that the full estimator confirms.
fn per_family(
    model: &ModelInput,
    base: &ResolvedJob,
    gpu: &crate::gpu::Gpu,
    ranked: &[Scored],
) -> Result<Vec<Confirmed>, CoreError> {
    let mut out: Vec<Confirmed> = Vec::new();
    let family = |l: &Layout| (l.framework, l.offload != "none");
    for s in ranked {
        if out
            .iter()
            .any(|c| family(&c.scored.layout) == family(&s.layout))
        {
            continue;
        }
        let per_gpu = estimate(model, &job_of(base, &s.layout, gpu)?)
            .ok()
            .map(|r| r.per_gpu);
        if per_gpu
            .as_ref()
            .and_then(|p| p.peaks.device_total)
            .is_some_and(|t| t <= base.usable(gpu.memory_bytes))
        {
            out.push(Confirmed {
                scored: s.clone(),
                estimate: per_gpu,
            });
        }
        if out.len() == 4 {
            break;
        }
    }
    Ok(out)
}

fn score(
    l: &Layout,
    (total, host, capacity): (u64, u64, u64),
    base: &ResolvedJob,
    timing: Option<&crate::throughput::layout::Timing>,
) -> Scored {
    let recompute = match l.checkpointing {
        "selective" => 0.027,
        "full" => 1.0 / 3.0,
        _ => 0.0,
    };
    let bubble = if l.pp > 1 {
        (l.pp - 1) as f64 / l.microbatches.max(1) as f64
    } else {
        0.0
    };
    let communication = match (l.framework, l.zero) {
        (_, 3) => 1.5,
        _ => 1.0,
    } + if l.offload != "none" { 1.0 } else { 0.0 };
    Scored {
        layout: *l,
        device_total: total,
        headroom: capacity as i64 - total as i64,
        host_bytes: host,
        recompute,
        bubble,
        communication,
        time: timing.map(|t| t.of(l, base)),
    }
}

/// The full job of a layout, for confirmation by the step simulation.
pub fn job_of(
    base: &ResolvedJob,
    l: &Layout,
    gpu: &crate::gpu::Gpu,
) -> Result<ResolvedJob, CoreError> {
    Ok(ResolvedJob {
        batch: l.micro_batch,
        framework: Framework::parse("framework", l.framework)?,
        checkpointing: Checkpointing::parse("checkpointing", l.checkpointing)?,
        gpu: Some(gpu.id.clone()),
        parallel: crate::job::Parallel {
            gpus: l.dp * l.tp * l.pp * l.cp,
            dp: l.dp,
            tp: l.tp,
            pp: l.pp,
            sp: l.sp,
            cp: l.cp,
            ep: l.ep,
            zero: l.zero,
            offload: Offload::parse("parallel.offload", l.offload)?,
            microbatches: l.microbatches,
        },
        ..base.clone()
    })
}
