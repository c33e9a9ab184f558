//! Model states — parameters, gradients, optimizer states, master weights — as each framework
//! keeps them, sharded as the job's parallel layout says, and LoRA/QLoRA's trainable subset.
//!
//! Framework profiles:
//! - `pytorch` (plain PyTorch / HF Trainer): parameters in their dtype (fp32 under autocast),
//!   gradients like the parameters, optimizer states `zeros_like(param)`; no master copy.
//! - `deepspeed`: the ZeRO paper's accounting (Rajbhandari et al. 2020, §3.1: mixed-precision
//!   Adam holds 2Ψ + 2Ψ + KΨ with K = 12: fp32 master 4Ψ, momentum 4Ψ, variance 4Ψ); stage 1
//!   partitions optimizer states and master, stage 2 also gradients, stage 3 also parameters.
//! - `megatron` (Megatron-LM `docs/api-guide/dist_optimizer.md`, the bytes-per-parameter
//!   table; `megatron/core/optimizer/optimizer.py` `Float16OptimizerWithFloat16Params`):
//!   `bf16-mixed` keeps bf16 parameters, the fp32 `main_grad` buffer (gradients accumulated in
//!   fp32), fp32 master and Adam moments: 18 B/param, 6 + 12/d with the distributed optimizer;
//!   `fp16-mixed` keeps fp16 parameters and fp16 gradients, and the optimizer copies them into
//!   fp32 `main_param.grad` for the step (`_copy_model_grads_to_main_grads`): 20 B/param,
//!   4 + 16/d; `fp32`: 16, 8 + 8/d.
//! - `fsdp`: parameters, gradients and states in the parameters' dtype, sharded over dp by
//!   strategy (0 = NO_SHARD; 2 = SHARD_GRAD_OP and 3 = FULL_SHARD shard all three, and differ
//!   in how long the unsharded copies live).

mod buffers;
mod modules_to_save;

use buffers::buffers_and_offload;
pub use buffers::{DS_PREFETCH_BUCKET, DS_REDUCE_BUCKET};
pub use modules_to_save::named as saved_module;

use super::input::ModelInput;
pub use super::lora_modules::LoraModules;
use super::optimizer;
use super::overhead::round_size;
pub use super::state_bytes::StateBytes;
use crate::error::CoreError;
use crate::inventory::{Component, Inventory, LayerTally, ShapeClass, ShapeTallies, Tensor};
use crate::job::{Framework, Optimizer, Precision, ResolvedJob, Task};
use crate::report::ModelStates;

/// Byte widths of each state per trainable element, by framework and precision.
#[derive(Clone, Copy)]
struct Widths {
    param: u64,
    grad: u64,
    master: u64,
    state: u64,
    /// An fp32 copy of the gradients the optimizer makes for its step, sharded like the
    /// optimizer states (Megatron's fp16 path); freed after the step.
    main_grad: u64,
}

fn widths(job: &ResolvedJob) -> Widths {
    let p = job.precision;
    match (job.framework, p) {
        (
            Framework::Deepspeed | Framework::Megatron,
            Precision::Fp16Mixed | Precision::Bf16Mixed,
        ) => {
            // Megatron accumulates bf16 models' gradients in an fp32 `main_grad` buffer
            // (`accumulate_allreduce_grads_in_fp32`, forced for bf16), fp16 models' in fp16;
            // DeepSpeed keeps 16-bit gradients either way (ZeRO paper §3.1, 2Ψ).
            let fp32_main_grad = job.framework == Framework::Megatron && p == Precision::Bf16Mixed;
            let fp16_copy = job.framework == Framework::Megatron && p == Precision::Fp16Mixed;
            Widths {
                param: 2,
                grad: if fp32_main_grad { 4 } else { 2 },
                master: 4,
                state: 4,
                main_grad: if fp16_copy { 4 } else { 0 },
            }
        }
        // DeepSpeed's ZeRO-1/2 optimizer keeps an fp32 partition of the parameters whatever
        // the model's dtype (`stage_1_and_2.py` `__init__`: `single_partition_of_fp32_groups`
        // is the partition's `.clone()`, a copy also when the model is fp32); ZeRO-3 steps
        // the fp32 partition itself (`stage3.py` `_create_fp32_partitions`).
        (Framework::Deepspeed, Precision::Fp32) if matches!(job.parallel.zero, 1 | 2) => Widths {
            param: 4,
            grad: 4,
            master: 4,
            state: 4,
            main_grad: 0,
        },
        (_, Precision::Fp32 | Precision::Fp16Mixed | Precision::Bf16Mixed) => Widths {
            param: 4,
            grad: 4,
            master: 0,
            state: 4,
            main_grad: 0,
        },
        (_, Precision::Fp16 | Precision::Bf16) => Widths {
            param: 2,
            grad: 2,
            master: 0,
            state: 2,
            main_grad: 0,
        },
    }
}

/// Which states are divided over data-parallel ranks: (parameters, gradients, states+master).
fn shards(job: &ResolvedJob, warnings: &mut Vec<String>) -> (u64, u64, u64) {
    let dp = job.parallel.dp.max(1);
    let z = job.parallel.zero;
    match job.framework {
        // FSDP keeps every parameter sharded outside its unit's computation under
        // SHARD_GRAD_OP as under FULL_SHARD (torch `ShardingStrategy.SHARD_GRAD_OP`:
        // "everything is sharded outside computation"; FSDP2 `fully_shard` shards at
        // construction whatever `reshard_after_forward`): the unsharded copies are its buffers
        // (`states/buffers.rs`, `alloc_events/fsdp.rs`).
        Framework::Fsdp => (
            if z >= 2 { dp } else { 1 },
            if z >= 2 { dp } else { 1 },
            if z >= 1 { dp } else { 1 },
        ),
        Framework::Deepspeed => (
            if z >= 3 { dp } else { 1 },
            if z >= 2 { dp } else { 1 },
            if z >= 1 { dp } else { 1 },
        ),
        Framework::Megatron => (1, 1, if z >= 1 { dp } else { 1 }),
        _ => {
            if z > 0 {
                warnings.push(format!(
                    "parallel.zero {z} has no meaning for framework {}: use deepspeed or fsdp; \
                     states are not sharded",
                    job.framework.as_str()
                ));
            }
            (1, 1, 1)
        }
    }
}

fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// LoRA adapter tensors for the job's targets: A (r × in) and B (out × r) beside every 2-D
/// weight whose module name is a target (PEFT `LoraConfig.target_modules` matching by suffix).
pub fn lora_adapters(
    tensors: &[Tensor],
    targets: &[String],
    rank: u64,
) -> Result<Vec<(Option<u32>, u64)>, CoreError> {
    adapters_of(&lora_modules(tensors, targets), targets, rank)
}

/// Matches the targets against the tensors' module names ([`LoraModules`]).
pub fn lora_modules(tensors: &[Tensor], targets: &[String]) -> LoraModules {
    let mut modules = Vec::new();
    let mut matched = vec![false; targets.len()];
    // GGUF files name the same projections llama.cpp's way (`blk.N.attn_q`).
    let gguf_names: Vec<&str> = targets.iter().map(|t| gguf_module(t)).collect();
    // `part:module` aims a target at one component of a vision-language model
    // (`language:q_proj`); a bare module name matches in every component, as PEFT's suffix
    // matching does.
    let split: Vec<(Option<crate::vision::Part>, &str)> = targets
        .iter()
        .map(|t| crate::vision::split_target(t))
        .collect();
    for t in tensors {
        if t.shape.len() != 2 || !t.name.ends_with(".weight") {
            continue;
        }
        let mut module = t.name.as_str();
        while let Some(m) = module.strip_suffix(".weight") {
            module = m;
        }
        let leaf = module.rsplit('.').next().unwrap_or(module);
        for (i, (&(part, target), gguf)) in split.iter().zip(&gguf_names).enumerate() {
            if part.is_some_and(|p| p != t.part) {
                continue;
            }
            let dotted = module
                .strip_suffix(target)
                .is_some_and(|p| p.ends_with('.'));
            if leaf == target || leaf == *gguf || dotted {
                matched[i] = true;
                modules.push((t.layer, t.shape[1].saturating_add(t.shape[0])));
                break;
            }
        }
    }
    LoraModules {
        modules,
        unmatched: matched.iter().position(|m| !m),
    }
}

/// The adapters' sizes at `rank`: r × (in + out) elements per adapted module (A and B).
pub fn adapters_of(
    m: &LoraModules,
    targets: &[String],
    rank: u64,
) -> Result<Vec<(Option<u32>, u64)>, CoreError> {
    let mut out = Vec::with_capacity(m.modules.len());
    for &(layer, in_out) in &m.modules {
        let n = rank
            .checked_mul(in_out)
            .ok_or_else(|| CoreError::Overflow {
                what: "LoRA adapter size".into(),
            })?;
        out.push((layer, n));
    }
    if let Some(i) = m.unmatched {
        return Err(CoreError::field(
            "peft.targets",
            format!("the model has no module named '{}'", targets[i]),
        ));
    }
    Ok(out)
}

/// A Hugging Face projection's name in GGUF files (llama.cpp's `blk.N.attn_q`).
fn gguf_module(target: &str) -> &str {
    match target {
        "q_proj" => "attn_q",
        "k_proj" => "attn_k",
        "v_proj" => "attn_v",
        "o_proj" => "attn_output",
        "gate_proj" => "ffn_gate",
        "up_proj" => "ffn_up",
        "down_proj" => "ffn_down",
        other => other,
    }
}

/// Bytes of one weight as it sits on the GPU: in the job's quantized format when it applies,
/// as stored when the file already holds it compressed (GGUF blocks, packed GPTQ integers,
/// fp8), otherwise at `width` bytes per element; rounded as the allocator rounds.
pub fn stored_bytes(
    weights: &super::quant::WeightFormat,
    qctx: &super::quant::QuantContext,
    t: &Tensor,
    width: u64,
) -> Result<u64, CoreError> {
    Ok(round_size(stored_bytes_exact(weights, qctx, t, width)?))
}

/// [`stored_bytes`] before the caching allocator's rounding (llama.cpp's buffers hold tensors
/// back to back).
pub fn stored_bytes_exact(
    weights: &super::quant::WeightFormat,
    qctx: &super::quant::QuantContext,
    t: &Tensor,
    width: u64,
) -> Result<u64, CoreError> {
    let compressed = stored_compressed(t.dtype);
    // A file that already holds the weight compressed keeps it so; only full-precision
    // weights take the job's quantized format.
    // A GGUF format sets every tensor's type (llama.cpp keeps norms and biases in F32).
    let gguf = matches!(weights, super::quant::WeightFormat::Gguf(_));
    if !compressed && (gguf || (!weights.is_none() && super::quant::is_quantized(weights, t))) {
        return super::quant::tensor_bytes(weights, t, qctx);
    }
    Ok(unquantized_bytes(t.dtype, t.bytes, t.elements(), width))
}

/// Whether a dtype is already compressed in the file (GGUF blocks, packed integers, fp8).
fn stored_compressed(dtype: crate::DType) -> bool {
    match dtype {
        crate::DType::Ggml(g) => !matches!(
            g,
            crate::ggml::GgmlType::F32 | crate::ggml::GgmlType::F16 | crate::ggml::GgmlType::BF16
        ),
        d => !d.is_float() || d.bits().is_some_and(|b| b < 16),
    }
}

/// Bytes of a weight no quantized format applies to: as stored when the file holds it
/// compressed, otherwise `width` bytes per element.
fn unquantized_bytes(dtype: crate::DType, stored: u64, elements: u64, width: u64) -> u64 {
    if stored_compressed(dtype) {
        stored
    } else {
        elements.saturating_mul(width)
    }
}

/// The model states of the job's most-loaded GPU: from the inventory's shape tallies when the
/// model has tensors, from the bare parameter count otherwise.
pub fn model_states(
    model: &ModelInput,
    job: &ResolvedJob,
    warnings: &mut Vec<String>,
) -> Result<StateBytes, CoreError> {
    let w = widths(job);
    let shard = shards(job, warnings);
    let mut st = match &model.inventory {
        Some(inv) => inventory_states(model, inv, job, w, shard, warnings),
        None => bare_count_states(model, job, w, shard, warnings),
    }?;
    if let Some(audio) = model
        .inventory
        .as_ref()
        .and_then(|inv| inv.by_part().remove(&crate::vision::Part::Audio))
    {
        warnings.push(format!(
            "audio inputs are not modelled: the audio tower's {} parameters are loaded, not run",
            audio.params
        ));
    }
    super::techniques::add_reference_model(job, &mut st);
    Ok(st)
}

/// The optimizer a job runs: none outside training.
fn job_optimizer(job: &ResolvedJob) -> Optimizer {
    if job.task == Task::Train {
        job.optimizer
    } else {
        Optimizer::None
    }
}

/// A bare parameter count: every parameter trainable, one flat tensor per state, divided over
/// the whole model-parallel group (tp × pp) as no layer boundaries are known.
fn bare_count_states(
    model: &ModelInput,
    job: &ResolvedJob,
    w: Widths,
    (sp, sg, ss): (u64, u64, u64),
    warnings: &mut Vec<String>,
) -> Result<StateBytes, CoreError> {
    let mp = (job.parallel.tp * job.parallel.pp).max(1);
    let train = job.task == Task::Train;
    let opt = job_optimizer(job);
    let p = model.params_total;
    let format = super::weights::effective_weights(model, job)?;
    let params = if format.is_none() {
        p.saturating_mul(w.param)
    } else {
        let dtype = if w.param == 4 {
            crate::DType::F32
        } else {
            crate::DType::BF16
        };
        super::quant::bytes_for_params(&format, p, dtype)?
    };
    let grads = if train { p.saturating_mul(w.grad) } else { 0 };
    let master = if train { p.saturating_mul(w.master) } else { 0 };
    let states = optimizer::state_bytes(opt, &[p], w.state)?;
    if optimizer::scratch_follows_order(opt, job.optimizer_impl) && opt != Optimizer::Adafactor {
        warnings.push(format!(
            "optimizer_impl {} steps one parameter at a time; a bare parameter count has no \
             shapes, so the step's scratch is counted as foreach's (an upper bound)",
            job.optimizer_impl.as_str()
        ));
    }
    if opt == Optimizer::Adafactor {
        warnings.push(
            "adafactor factors each matrix's second moment; a bare parameter count has no \
             shapes, so its states are counted unfactored"
                .into(),
        );
    }
    let layers = model.spec.as_ref().map_or(0, |s| s.num_layers()) as usize;
    let mut out = StateBytes {
        layer_grads: vec![0; layers],
        ..StateBytes::default()
    };
    out.resident = ModelStates {
        parameters: div_ceil(params, sp * mp),
        gradients: div_ceil(grads, sg * mp),
        optimizer_states: div_ceil(states, ss * mp),
        master_weights: div_ceil(master, ss * mp),
    };
    out.max = out.resident;
    out.trainable_params = p;
    out.step_scratch = div_ceil(
        optimizer::step_scratch_bytes(opt, &[(&[p], w.state)])?,
        ss * mp,
    );
    let main_grads = if train {
        div_ceil(p.saturating_mul(w.main_grad), ss * mp)
    } else {
        0
    };
    add_main_grads(&mut out, main_grads);
    Ok(out)
}

/// What the per-class rules of one job read.
struct Rules<'a> {
    w: Widths,
    opt: Optimizer,
    /// How the optimizer walks the parameters (job `optimizer_impl`).
    imp: crate::job::OptimizerImpl,
    /// Every weight trained: a full fine-tune (not PEFT, not inference).
    full: bool,
    peft: Option<&'a crate::job::Peft>,
    /// Width of a weight as loaded: a PEFT base is frozen in 16 bit unless the job is fp32
    /// (PEFT users load the base with `torch_dtype=bfloat16`; there is no master copy of
    /// frozen weights), or PEFT's `prepare_model_for_kbit_training` cast it to fp32
    /// (`job::kbit_casts`: every fp16/bf16 parameter that is not a `Params4bit`; a quantized
    /// weight keeps its format, `stored_bytes`).
    frozen_width: u64,
    /// Expert parallelism: each rank holds experts/ep of the routed experts (their gradients
    /// and states too); everything else is replicated over EP ranks.
    ep: u64,
    /// Layers of the architecture.
    layers: usize,
    /// The most-loaded rank of a pipeline is its first stage: the embeddings and the first
    /// ⌈L/pp⌉ blocks (the head and final norm sit on the last stage).
    per_stage: usize,
    pp: usize,
    /// Rows of a tied embedding (its gradient first appears at the head's backward).
    tied_vocab: Option<u64>,
    /// Model components the job keeps frozen (`freeze`): no gradient, no optimizer state.
    frozen: &'a [crate::vision::Part],
    /// The job feeds images: the vision tower and projector run ([`Part::runs`]); a part
    /// that does not run gets no gradient and no optimizer state, as a frozen one.
    ///
    /// [`Part::runs`]: crate::vision::Part::runs
    images: bool,
    /// Gemma 3n: the projector part (its multimodal embedders) runs without images too.
    embedders_always: bool,
}

impl Rules<'_> {
    fn of<'a>(model: &ModelInput, job: &'a ResolvedJob, w: Widths) -> Rules<'a> {
        let train = job.task == Task::Train;
        let peft = job.peft.as_ref().filter(|_| train);
        let layers = model.spec.as_ref().map_or(0, |s| s.num_layers()) as usize;
        let pp = job.parallel.pp.max(1) as usize;
        Rules {
            frozen_width: if peft.is_some()
                && crate::job::kbit_casts(job.techniques.kbit_prepare, &job.weights.value)
            {
                4
            } else if peft.is_some() && job.precision != Precision::Fp32 {
                2
            } else {
                w.param
            },
            w,
            opt: job_optimizer(job),
            imp: job.optimizer_impl,
            full: peft.is_none() && train,
            peft,
            ep: job.parallel.ep.max(1),
            layers,
            per_stage: layers.div_ceil(pp).max(1),
            pp,
            tied_vocab: model
                .spec
                .as_ref()
                .filter(|s| s.tied_embeddings())
                .map(|s| s.vocab_size),
            frozen: &job.freeze,
            images: job.images.is_some(),
            embedders_always: model.spec.as_ref().is_some_and(|s| s.gemma3n.is_some()),
        }
    }

    /// Whether the job's forward runs `part` ([`crate::vision::Part::runs`]), with Gemma 3n's
    /// exception: `Gemma3nModel.forward` (transformers 5.24) runs its two multimodal embedders
    /// (the projector part) on every call, over dummy ids where the input has no image or audio
    /// token, so they get gradients from text alone.
    fn runs(&self, part: crate::vision::Part) -> bool {
        part.runs(self.images) || (self.embedders_always && part == crate::vision::Part::Projector)
    }

    fn ep_share(&self, c: Component) -> u64 {
        if c == Component::Experts {
            self.ep
        } else {
            1
        }
    }

    fn on_rank(&self, layer: Option<u32>, c: Component) -> bool {
        match (layer, c) {
            (Some(l), _) => (l as usize) < self.per_stage,
            (None, Component::Embedding) => true,
            (None, _) => self.pp == 1,
        }
    }

    /// The layers the most-loaded rank holds.
    fn layers_on_rank<'t>(&'t self, tl: &'t ShapeTallies) -> impl Iterator<Item = &'t LayerTally> {
        tl.layers
            .iter()
            .filter(|l| self.on_rank(Some(l.layer), Component::Attention))
    }

    /// The groups of alike tensors the most-loaded rank holds: (layer, class, tensors). The
    /// layers are taken per composition (`layer_kinds`), not one by one: a class's tensors in
    /// one layer times the rank's layers of that composition, with the composition's first
    /// layer standing for them (a 32-layer model with one composition is 7 groups, not 224).
    fn on_rank_groups<'t>(
        &'t self,
        tl: &'t ShapeTallies,
    ) -> impl Iterator<Item = (Option<u32>, u32, u64)> + 't {
        let outside = tl
            .outside
            .iter()
            .filter(|(c, _)| self.on_rank(None, tl.classes[*c as usize].component))
            .map(|&(c, n)| (None, c, n));
        // (composition, its first layer, layers): in order of first appearance.
        let mut kinds: Vec<(u32, u32, u64)> = Vec::new();
        for l in self.layers_on_rank(tl) {
            match kinds.iter_mut().find(|(k, _, _)| *k == l.kind) {
                Some((_, _, n)) => *n += 1,
                None => kinds.push((l.kind, l.layer, 1)),
            }
        }
        let layered = kinds.into_iter().flat_map(move |(kind, first, layers)| {
            tl.layer_kinds[kind as usize]
                .iter()
                .map(move |&(c, n)| (Some(first), c, n.saturating_mul(layers)))
        });
        outside.chain(layered)
    }
}

/// One class's trainable figures: elements on this rank, its gradient and master allocations,
/// its optimizer states (each state its own allocation, rounded by the allocator) and the
/// shape the optimizer sees (expert weights divided over EP ranks are flat).
struct Trained {
    elements: u64,
    grad: u64,
    master: u64,
    states: u64,
    state_shape: Vec<u64>,
    /// Tensors of the class on this rank.
    count: u64,
    /// Of its states, the bytes a paged optimizer puts in unified memory.
    paged: u64,
    /// Its own optimizer step's scratch (the optimizer stepping this one tensor).
    scratch: u64,
}

impl Trained {
    fn of(class: &ShapeClass, r: &Rules) -> Result<Trained, CoreError> {
        let ep_share = r.ep_share(class.component);
        let n = class.elements / ep_share;
        let state_shape = if ep_share > 1 {
            vec![n]
        } else {
            class.shape.clone()
        };
        let mut states = 0u64;
        for st in optimizer::state_tensors(r.opt, &state_shape, r.w.state)? {
            states = states.saturating_add(round_size(st.bytes));
        }
        let paged = optimizer::paged_state_bytes(r.opt, &state_shape)?;
        let scratch = optimizer::step_scratch_bytes(r.opt, &[(&state_shape, r.w.state)])?;
        Ok(Trained {
            elements: n,
            grad: round_size(n.saturating_mul(r.w.grad)),
            master: round_size(n.saturating_mul(r.w.master)),
            states,
            state_shape,
            count: 0,
            paged: round_size(paged),
            scratch: round_size(scratch),
        })
    }
}

/// Sums over the rank's tensors, before sharding.
#[derive(Default)]
struct Sums {
    params: u64,
    grads: u64,
    master: u64,
    states: u64,
    trainable: u64,
    /// Some trainable tensor gets bitsandbytes' 8-bit states (the shared maps are made).
    any_8bit: bool,
    /// States in unified memory (paged optimizers).
    paged: u64,
}

/// The model states from the inventory: weights as stored, then for a full fine-tune each
/// class's gradients, master copy and optimizer states, for PEFT the adapters; then sharded.
fn inventory_states(
    model: &ModelInput,
    inv: &Inventory,
    job: &ResolvedJob,
    w: Widths,
    shard: (u64, u64, u64),
    warnings: &mut Vec<String>,
) -> Result<StateBytes, CoreError> {
    let (_, _, ss) = shard;
    let r = Rules::of(model, job, w);
    let adapters = match r.peft {
        Some(p) => {
            let modules = model
                .memo()
                .lora_modules(&p.targets, || lora_modules(&inv.tensors, &p.targets));
            adapters_of(&modules, &p.targets, p.rank)?
        }
        None => Vec::new(),
    };
    let tl = inv.tallies();
    let mut out = StateBytes {
        layer_grads: vec![0; r.layers],
        ..StateBytes::default()
    };
    let mut sums = Sums {
        params: weights_on_rank(model, inv, job, &r)?,
        ..Sums::default()
    };
    let trained = if r.full {
        full_training(tl, &r, &mut sums, &mut out)?
    } else {
        Vec::new()
    };
    let adapter_shapes = add_adapters(&adapters, &r, &mut sums, &mut out)?;
    let saved_scratch = modules_to_save::add_saved_modules(&inv.tensors, &r, &mut sums, &mut out)?;
    let shared = if sums.any_8bit {
        optimizer::BNB_QMAP_BYTES
    } else {
        0
    };
    sums.states = shared.saturating_add(sums.states);
    let scratch = step_scratch(inv, &r, &trained, &adapter_shapes)?.saturating_add(saved_scratch);
    out.step_scratch = div_ceil(scratch, ss * job.parallel.tp.max(1));
    out.trainable_params = if job.task == Task::Train {
        sums.trainable
    } else {
        0
    };
    shard_states(&mut out, &sums, job, shard);
    let largest_block = tl
        .layers
        .iter()
        .filter(|l| (l.layer as usize) < r.layers)
        .map(|l| l.elements)
        .max()
        .unwrap_or(0);
    let elements = inv.tensors.iter().map(Tensor::elements).sum::<u64>() / job.parallel.tp.max(1);
    let sizes = (largest_block, elements);
    buffers_and_offload(&mut out, job, sizes, w.param, w.grad, warnings);
    out.max = out.resident;
    let main_grads = sums.trainable.saturating_mul(w.main_grad);
    add_main_grads(&mut out, div_ceil(main_grads, ss * job.parallel.tp.max(1)));
    out.paged_states = if job.parallel.offload == crate::job::Offload::None {
        div_ceil(sums.paged, ss * job.parallel.tp.max(1))
    } else {
        0
    };
    if job.task == Task::Train && job.techniques.optimizer_in_backward {
        super::techniques::steps_in_backward(&mut out);
    }
    Ok(out)
}

/// Bytes of the weights on the most-loaded rank as they sit on the GPU ([`stored_bytes`]),
/// expert weights divided over EP ranks. Without a quantized format a weight's bytes follow
/// from its class; a quantized format's choice reads each tensor's name and place.
fn weights_on_rank(
    model: &ModelInput,
    inv: &Inventory,
    job: &ResolvedJob,
    r: &Rules,
) -> Result<u64, CoreError> {
    let weights = super::weights::effective_weights(model, job)?;
    if weights.is_none() {
        let tl = inv.tallies();
        let mut params = 0u64;
        for (_, c, n) in r.on_rank_groups(tl) {
            let class = &tl.classes[c as usize];
            let bytes = unquantized_bytes(class.dtype, class.bytes, class.elements, r.frozen_width);
            let one = round_size(bytes) / r.ep_share(class.component);
            params = params.saturating_add(one.saturating_mul(n));
        }
        return Ok(params);
    }
    let qctx = model
        .spec
        .as_ref()
        .map(super::quant::QuantContext::from_spec)
        .unwrap_or_default();
    // Outside GGUF's per-layer mixes a weight's bytes follow from its class and whether the
    // format quantizes it (a rule on its name): each is computed once, at its first tensor.
    let per_tensor = matches!(weights, super::quant::WeightFormat::Gguf(_));
    let tl = inv.tallies();
    let mut known: Vec<[Option<u64>; 2]> = vec![[None; 2]; tl.classes.len()];
    let mut params = 0u64;
    for (t, &c) in inv.tensors.iter().zip(&tl.tensor_class) {
        if !r.on_rank(t.layer, t.component) {
            continue;
        }
        let q = usize::from(super::quant::is_quantized(&weights, t));
        let stored = match known[c as usize][q] {
            Some(b) if !per_tensor => b,
            _ => {
                let b = stored_bytes(&weights, &qctx, t, r.frozen_width)?;
                known[c as usize][q] = Some(b);
                b
            }
        };
        params = params.saturating_add(stored / r.ep_share(t.component));
    }
    Ok(params)
}

/// A full fine-tune: every weight on the rank trained. Adds each class's gradients, master
/// copy and optimizer states times its count, and places the gradients where the backward
/// makes them (per layer, the head, the embeddings). Returns each class's figures (`None` for
/// classes not on this rank).
fn full_training(
    tl: &ShapeTallies,
    r: &Rules,
    sums: &mut Sums,
    out: &mut StateBytes,
) -> Result<Vec<Option<Trained>>, CoreError> {
    let mut trained: Vec<Option<Trained>> = (0..tl.classes.len()).map(|_| None).collect();
    for (layer, c, n) in r.on_rank_groups(tl) {
        let class = &tl.classes[c as usize];
        if r.frozen.contains(&class.part) || class.no_grad || !r.runs(class.part) {
            continue;
        }
        let t = match &mut trained[c as usize] {
            Some(t) => t,
            slot => slot.insert(Trained::of(class, r)?),
        };
        t.count += n;
        sums.trainable += t.elements * n;
        sums.grads = sums.grads.saturating_add(t.grad.saturating_mul(n));
        sums.master = sums.master.saturating_add(t.master.saturating_mul(n));
        sums.states = sums.states.saturating_add(t.states.saturating_mul(n));
        sums.paged = sums.paged.saturating_add(t.paged.saturating_mul(n));
        sums.any_8bit |= eight_bit(r.opt, &t.state_shape);
        let g = t.grad * n;
        let tied = layer.is_none()
            && class.component == Component::Embedding
            && r.tied_vocab.is_some()
            && class.shape.first() == r.tied_vocab.as_ref();
        out.hook_step
            .add(layer, class.component, tied, t.grad, t.scratch);
        match (layer, class.component) {
            // Each layer's own gradients are placed below.
            (Some(_), _) => {}
            (None, Component::Head) => out.head_grad += g,
            (None, Component::Embedding)
                if r.tied_vocab.is_some() && class.shape.first() == r.tied_vocab.as_ref() =>
            {
                // The tied matrix's gradient first appears at the head's backward.
                out.head_grad += g;
                out.embedding_backward_transient += 2 * g;
            }
            (None, _) => out.embedding_grad += g,
        }
    }
    layer_grads(tl, r, &trained, out);
    Ok(trained)
}

/// Places each layer's gradients in its backward: its composition's sum, computed once per
/// composition.
fn layer_grads(tl: &ShapeTallies, r: &Rules, trained: &[Option<Trained>], out: &mut StateBytes) {
    let mut per_kind: Vec<Option<u64>> = vec![None; tl.layer_kinds.len()];
    for l in r.layers_on_rank(tl) {
        let g = *per_kind[l.kind as usize].get_or_insert_with(|| {
            tl.layer_kinds[l.kind as usize]
                .iter()
                .map(|&(c, n)| trained[c as usize].as_ref().map_or(0, |t| t.grad * n))
                .sum()
        });
        if let Some(x) = out.layer_grads.get_mut(l.layer as usize) {
            *x += g;
        }
    }
}

/// Whether bitsandbytes gives a tensor of this shape 8-bit states (and so makes its shared
/// maps): [`optimizer::shared_state_bytes`] of the one shape.
fn eight_bit(opt: Optimizer, shape: &[u64]) -> bool {
    optimizer::shared_state_bytes(opt, [shape]) > 0
}

/// LoRA adapters in the job's `peft.adapter_dtype` (PEFT keeps them in fp32 beside a 16-bit or
/// quantized base; torchtune in the recipe's dtype), trainable: their bytes count as parameters
/// and gradients (a gradient has its parameter's dtype), their gradients in their layer's
/// backward, and each gets its optimizer states in that dtype too (torch's Adam makes its
/// moments `zeros_like(param)`; computed once per adapter size). Returns the flat shapes the
/// optimizer sees, as runs of alike neighbours: ([elements], count).
fn add_adapters(
    adapters: &[(Option<u32>, u64)],
    r: &Rules,
    sums: &mut Sums,
    out: &mut StateBytes,
) -> Result<Vec<([u64; 1], u64)>, CoreError> {
    let mut runs: Vec<([u64; 1], u64)> = Vec::new();
    let mut sizes: Vec<(u64, u64)> = Vec::new(); // (elements, adapters)
    let width = adapter_width(r);
    for (layer, n) in adapters {
        let bytes = round_size(n * width);
        sums.params += bytes;
        sums.grads += bytes;
        sums.trainable += n;
        match runs.last_mut() {
            Some((shape, count)) if shape[0] == *n => *count += 1,
            _ => runs.push(([*n], 1)),
        }
        match sizes.iter_mut().find(|(m, _)| m == n) {
            Some((_, count)) => *count += 1,
            None => sizes.push((*n, 1)),
        }
        if let Some(l) = layer.and_then(|l| out.layer_grads.get_mut(l as usize)) {
            *l += bytes;
        }
        let scratch = optimizer::step_scratch_bytes(r.opt, &[(&[*n], width)])?;
        let component = if layer.is_some() {
            Component::Attention
        } else {
            Component::Head
        };
        out.hook_step
            .add(*layer, component, false, bytes, round_size(scratch));
    }
    for (n, count) in sizes {
        let mut one = 0u64;
        for st in optimizer::state_tensors(r.opt, &[n], width)? {
            one = one.saturating_add(round_size(st.bytes));
        }
        sums.states = sums.states.saturating_add(one.saturating_mul(count));
        let paged = round_size(optimizer::paged_state_bytes(r.opt, &[n])?);
        sums.paged = sums.paged.saturating_add(paged.saturating_mul(count));
        sums.any_8bit |= eight_bit(r.opt, &[n]);
    }
    Ok(runs)
}

/// Bytes of one adapter element: the job's `peft.adapter_dtype` (fp32 without PEFT).
fn adapter_width(r: &Rules) -> u64 {
    r.peft.map_or(4, |p| p.adapter_dtype.bytes())
}

/// The optimizer step's temporaries over the trainable tensors
/// ([`optimizer::step_scratch_runs_with`]): the class tallies, or where the figure depends on
/// the order (Adafactor, a per-parameter Adam loop) the tensors in parameter order (runs of
/// alike neighbours); the adapters after them.
fn step_scratch(
    inv: &Inventory,
    r: &Rules,
    trained: &[Option<Trained>],
    adapters: &[([u64; 1], u64)],
) -> Result<u64, CoreError> {
    let mut runs: Vec<optimizer::Run> = Vec::new();
    if optimizer::scratch_follows_order(r.opt, r.imp) {
        let classes = &inv.tallies().tensor_class;
        let mut last = None;
        for (t, &c) in inv.tensors.iter().zip(classes) {
            let Some(tr) = trained
                .get(c as usize)
                .and_then(Option::as_ref)
                .filter(|_| r.on_rank(t.layer, t.component))
            else {
                continue;
            };
            match runs.last_mut() {
                Some(run) if last == Some(c) => run.count += 1,
                _ => runs.push(optimizer::Run {
                    shape: &tr.state_shape,
                    width: r.w.state,
                    count: 1,
                }),
            }
            last = Some(c);
        }
    } else {
        runs.extend(trained.iter().flatten().map(|tr| optimizer::Run {
            shape: &tr.state_shape,
            width: r.w.state,
            count: tr.count,
        }));
    }
    let width = adapter_width(r);
    runs.extend(adapters.iter().map(|(shape, count)| optimizer::Run {
        shape,
        width,
        count: *count,
    }));
    optimizer::step_scratch_runs_with(r.opt, r.imp, &runs)
}

/// Each state divided as the job's sharding says (tensor parallelism divides them all), and
/// the per-layer gradient figures scaled to the shard the GPU keeps.
fn shard_states(
    out: &mut StateBytes,
    sums: &Sums,
    job: &ResolvedJob,
    (sp, sg, ss): (u64, u64, u64),
) {
    let tp = job.parallel.tp.max(1);
    out.resident = ModelStates {
        parameters: div_ceil(sums.params, sp * tp),
        gradients: div_ceil(sums.grads, sg * tp),
        optimizer_states: div_ceil(sums.states, ss * tp),
        master_weights: div_ceil(sums.master, ss * tp),
    };
    // Unsharded gradients appear layer by layer and are reduce-scattered after; per-layer
    // figures are scaled to the shard the GPU keeps.
    let scale = |x: u64| div_ceil(x, sg * tp);
    out.layer_grads.iter_mut().for_each(|g| *g = scale(*g));
    out.head_grad = scale(out.head_grad);
    out.embedding_grad = scale(out.embedding_grad);
    out.embedding_backward_transient = scale(out.embedding_backward_transient);
    // DeepSpeed's mixed-precision optimizer upcasts its gradient partition to fp32 for the
    // step (`stage_1_and_2.py`: `single_partition_of_fp32_groups[i].grad`), freed after it.
    if job.framework == Framework::Deepspeed && job.precision.is_mixed() && job.task == Task::Train
    {
        out.step_scratch += div_ceil(sums.trainable.saturating_mul(4), ss * tp);
    }
}

/// The optimizer's fp32 gradient copies (`Widths::main_grad`): made at the step, freed after
/// it, so step scratch, and part of the gradients' maximum over the step (`model_states`).
fn add_main_grads(out: &mut StateBytes, bytes: u64) {
    out.step_scratch = out.step_scratch.saturating_add(bytes);
    out.max.gradients = out.max.gradients.saturating_add(bytes);
}
