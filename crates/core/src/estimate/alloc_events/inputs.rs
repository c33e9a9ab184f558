//! What a training job's stream is made of, read off the model, the job and the forward plan;
//! and which jobs the stream can express (the rest keep the packing heuristic of
//! `overhead.rs`).

use super::chunked_loss::ChunkedOutput;
use super::fused_ce::FusedCe;
use super::infer_inputs::StaticCache;
use super::quant_load::{QuantKind, QuantLoad};
use super::train::{LossSizes, Param, StepKind, TrainInputs};
use super::PlanEvents;
use crate::error::CoreError;
use crate::estimate::forward_plan::ForwardPlan;
use crate::estimate::overhead::round_size;
use crate::estimate::quant::{self, WeightFormat};
use crate::estimate::states::LoraAdapter;
use crate::estimate::{optimizer, overhead};
use crate::gpu::Gpu;
use crate::inventory::{Component, Inventory};
use crate::job::{
    Checkpointing, Framework, LossKernel, Optimizer, OptimizerImpl, Precision, ResolvedJob, Task,
};
use crate::model::{AttentionKind, Head, Mlp, ModelSpec};
use crate::vision::Part;

/// Steps simulated: the first makes the optimizer states, the second is the steady state. In
/// the H200 runs (`run_one.py`: 1 warm-up + 2 measured) the third step's reserved peak equals
/// the second's in all 14 three-step training runs of the results file, and the simulation's
/// third step added nothing either; the peaks are over both steps.
pub const STEPS: u8 = 2;

/// The stream covers PyTorch training of a causal LM — one GPU, one DDP rank, one FSDP2
/// FULL_SHARD or SHARD_GRAD_OP rank (`fsdp.rs`) or one DeepSpeed ZeRO-1/2 rank (`zero.rs`) —
/// with torch's optimizers, the checkpointing, losses and weights the helpers below name
/// (bitsandbytes' 4-bit and LLM.int8 base weights among them), and none of the memory
/// techniques. Everything else (serving engines, pipelines, ZeRO-3, FSDP's NO_SHARD, other
/// quantized weights, offloading) keeps today's estimate.
pub fn expressible(job: &ResolvedJob, spec: &ModelSpec, plan: &ForwardPlan) -> bool {
    job.task == Task::Train && train_not_written(job, spec, plan).is_none()
}

/// What keeps the stream from writing `job` (the first of [`expressible`]'s or
/// [`expressible_infer`]'s conditions it fails, in words), or `None` where it writes it.
pub fn not_written(job: &ResolvedJob, spec: &ModelSpec, plan: &ForwardPlan) -> Option<String> {
    match job.task {
        Task::Train => train_not_written(job, spec, plan),
        Task::Infer if expressible_infer(job, spec, plan) => None,
        Task::Infer => Some(
            "inference other than one GPU's HF generate of an unquantized decoder-only LM \
             without adapters, images or a KV dtype of its own"
                .into(),
        ),
        Task::Rl => Some("an RL step".into()),
    }
}

/// The training conditions of [`expressible`], each with what it says when it fails.
fn train_not_written(job: &ResolvedJob, spec: &ModelSpec, plan: &ForwardPlan) -> Option<String> {
    let t = &job.techniques;
    let layout = || match job.framework {
        Framework::Pytorch => parallel_expressible(spec, job),
        Framework::Fsdp => fsdp_expressible(spec, job),
        Framework::Deepspeed => zero_expressible(spec, job),
        _ => false,
    };
    if !layout() {
        return Some(layout_words(job.framework));
    }
    let optimizer = || optimizer_expressible(job);
    let checks: [(&str, &dyn Fn() -> bool); 12] = [
        ("this optimizer", &optimizer),
        ("this loss under these settings", &|| {
            loss_expressible(job, plan)
        }),
        ("this weight format", &|| weights_expressible(spec, job)),
        ("images on this model or layout", &|| {
            images_expressible(job, plan)
        }),
        ("this checkpointing", &|| {
            checkpointing_expressible(job, plan)
        }),
        ("the optimizer in backward", &|| !t.optimizer_in_backward),
        ("torch.compile", &|| !t.compile),
        ("activation offloading", &|| {
            t.activation_offload == crate::job::ActivationOffload::None
        }),
        ("a reference model", &|| {
            t.reference_model == crate::job::ReferenceModel::None
        }),
        ("a head other than a causal LM's", &|| {
            matches!(spec.head, Head::LanguageModel { .. })
        }),
        ("this model's blocks", &|| plan.events.is_some()),
        ("this model's static cache", &|| {
            !job.engine.static_cache() || static_cache_expressible(spec)
        }),
    ];
    checks
        .iter()
        .find(|(_, ok)| !ok())
        .map(|(why, _)| (*why).to_string())
}

/// Optimizers the stream writes (`train/optimizer_step.rs`): torch's foreach and fused ones
/// on every layout; torch's `foreach=False` loop (Adam, AdamW, SGD) and bitsandbytes'
/// AdamW8bit, PagedAdamW and PagedAdamW8bit on one GPU or a DDP rank, where the step is
/// over whole parameters (FSDP's DTensor shards and DeepSpeed's flat partition are not
/// written for them).
fn optimizer_expressible(job: &ResolvedJob) -> bool {
    let whole = job.framework == Framework::Pytorch;
    match job.optimizer_impl {
        OptimizerImpl::Foreach => match job.optimizer {
            Optimizer::None
            | Optimizer::Sgd
            | Optimizer::SgdMomentum
            | Optimizer::Adam
            | Optimizer::AdamW
            | Optimizer::AdamWFused => true,
            Optimizer::AdamW8bit | Optimizer::AdamWPaged | Optimizer::AdamW8bitPaged => whole,
            Optimizer::Adafactor | Optimizer::Lion => false,
        },
        OptimizerImpl::ForLoop => whole,
        OptimizerImpl::Hf => false,
    }
}

/// What the job's `optimizer.step()` makes besides its states (`StepKind`): foreach or
/// for-loop Adam's temporaries, bitsandbytes' maps where a trainable parameter gets 8-bit
/// states (its `absmax1`, the third state, is made).
fn step_kind(job: &ResolvedJob, params: &[Param]) -> StepKind {
    let adam = matches!(job.optimizer, Optimizer::Adam | Optimizer::AdamW);
    let eight_bit =
        optimizer::is_8bit(job.optimizer) && params.iter().any(|p| p.grad > 0 && p.states[2] > 0);
    match job.optimizer_impl {
        _ if eight_bit => StepKind::Bnb8bitMaps(optimizer::BNB_QMAP_BYTES / 2),
        OptimizerImpl::Foreach if adam => StepKind::ForeachSqrt,
        OptimizerImpl::ForLoop if adam => StepKind::LoopDenom,
        _ => StepKind::InPlace,
    }
}

/// What each framework's stream leaves out of its layouts, in words (the conditions of
/// [`parallel_expressible`], [`fsdp_expressible`], [`zero_expressible`]).
fn layout_words(framework: Framework) -> String {
    match framework {
        Framework::Pytorch => {
            "tensor, pipeline, context or expert parallelism, offload, or DDP of quantized weights"
                .into()
        }
        Framework::Fsdp => "FSDP other than one FULL_SHARD or SHARD_GRAD_OP rank of unquantized \
                            weights (LoRA only without checkpointing, modules_to_save or pure \
                            16-bit precision)"
            .into(),
        Framework::Deepspeed => "DeepSpeed other than one ZeRO-1/2 rank in bf16-mixed or fp32 \
                                 without offload, quantized weights or modules_to_save"
            .into(),
        other => format!("{}'s own step", other.as_str()),
    }
}

/// Images the training stream writes: none, or a tower `estimate/vision_events.rs` writes
/// (`PlanEvents::tower`) on one GPU.
fn images_expressible(job: &ResolvedJob, plan: &ForwardPlan) -> bool {
    job.images.is_none()
        || (job.parallel.gpus <= 1
            && job.parallel.dp <= 1
            && plan.events.as_ref().is_some_and(|e| e.tower.is_some()))
}

/// Layouts the training stream writes: one GPU, or plain data parallelism — one rank of
/// PyTorch's `DistributedDataParallel` (`ddp.rs`): every GPU a replica (dp = gpus), no ZeRO,
/// no offload, unquantized weights (4-bit `Params4bit` are broadcast in their own dtype's
/// buckets, not written).
fn parallel_expressible(spec: &ModelSpec, job: &ResolvedJob) -> bool {
    let p = &job.parallel;
    let model_parallel = p.tp > 1 || p.pp > 1 || p.cp > 1 || p.ep > 1;
    if p.zero != 0 || model_parallel || p.offload != crate::job::Offload::None {
        return false;
    }
    if p.gpus <= 1 && p.dp <= 1 {
        return true;
    }
    p.dp == p.gpus
        && crate::estimate::weights::weights_in_force(Some(spec), job).is_ok_and(|w| w.is_none())
}

/// FSDP the stream writes (`fsdp.rs`): FULL_SHARD (`parallel.zero: 3`) or SHARD_GRAD_OP
/// (`parallel.zero: 2`, `reshard_after_forward=False`) on a sharded rank
/// ([`sharded_rank_expressible`]; its units are the decoder layers and the root), any number
/// of micro-batches (each reduce-scattered into the sharded gradients) and
/// `zero_grad(set_to_none=True)`. LoRA adapters are written under fp32 or mixed precision
/// (`MixedPrecisionPolicy` gathers the 16-bit base and the adapters in one dtype), without
/// `modules_to_save` and without checkpointing (whether the embeddings' output then needs a
/// gradient depends on the recipe's `enable_input_require_grads`, which moves the first
/// layer's post-backward). NO_SHARD keeps the heuristic.
fn fsdp_expressible(spec: &ModelSpec, job: &ResolvedJob) -> bool {
    sharded_rank_expressible(spec, job)
        && matches!(job.parallel.zero, 2 | 3)
        && job.peft.as_ref().is_none_or(|peft| {
            peft.modules_to_save.is_empty()
                && job.checkpointing == Checkpointing::None
                && !matches!(job.precision, Precision::Bf16 | Precision::Fp16)
        })
        && job.zero_grad == crate::job::ZeroGrad::None
}

/// DeepSpeed the stream writes (`zero.rs`): ZeRO stage 1 or 2 (`DeepSpeedZeroOptimizer`)
/// over every GPU, bf16-mixed (DeepSpeed's `bf16.enabled`: a bf16 model, an fp32 master
/// partition) or fp32, with an optimizer (`_configure_zero_optimizer` asserts one), a full
/// fine-tune or LoRA adapters over an unquantized frozen base (only `requires_grad`
/// parameters are flattened and hooked: `zero::params`; `modules_to_save` not written), over
/// any number of micro-batches (`zero.rs`: the accumulation boundary). fp16 (its loss
/// scaler), ZeRO-3, offload and QLoRA's quantized bases keep the heuristic; a block
/// parameter larger than the reduce bucket too (`zero::params`).
fn zero_expressible(spec: &ModelSpec, job: &ResolvedJob) -> bool {
    sharded_rank_expressible(spec, job)
        && matches!(job.parallel.zero, 1 | 2)
        && matches!(job.precision, Precision::Bf16Mixed | Precision::Fp32)
        && job.optimizer != Optimizer::None
        && job.peft.as_ref().is_none_or(|p| {
            p.method == crate::job::PeftMethod::Lora && p.modules_to_save.is_empty()
        })
}

/// One rank of a sharded data-parallel group (FSDP2, ZeRO): every GPU a data-parallel rank
/// (dp = gpus > 1, no model parallelism, no CPU offload), unquantized weights (4-bit
/// `Params4bit` shard otherwise), a decoder-only model (its parameters in the decoder's order; an encoder's or a vision
/// tower's wrapping is not written).
fn sharded_rank_expressible(spec: &ModelSpec, job: &ResolvedJob) -> bool {
    let p = &job.parallel;
    spec.encoder.is_none()
        && spec.vision.is_none()
        && p.tp <= 1
        && p.pp <= 1
        && p.cp <= 1
        && p.ep <= 1
        && p.dp == p.gpus
        && p.dp > 1
        && p.offload == crate::job::Offload::None
        && crate::estimate::weights::weights_in_force(Some(spec), job).is_ok_and(|w| w.is_none())
}

/// Losses the stream writes: the standard one (the logits whole), torchtune's chunked output
/// (`chunked_loss.rs`, with or without autocast), Liger's fused linear cross-entropy
/// (`fused_ce.rs`, with or without autocast: under it the release's weight-gradient path for
/// the job's torch and GPU, `liger::autocast_addmm`) and torchtune's `LinearCrossEntropyLoss`
/// (`linear_ce.rs`) without autocast (torchtune trains in its dtype; eager: `compile` is
/// refused for every loss).
fn loss_expressible(job: &ResolvedJob, plan: &ForwardPlan) -> bool {
    match job.loss {
        LossKernel::Standard | LossKernel::ChunkedOutput => true,
        LossKernel::Chunked => true,
        LossKernel::LinearCe => plan.events.as_ref().is_some_and(|e| !e.autocast),
    }
}

/// Checkpointing the stream writes: none, full, and selective (`activations.rs`: a block's
/// attention core — scores, probabilities, dropout mask — dropped and recomputed). Under SDPA
/// or flash attention without attention dropout the kernel saves nothing of the core beyond
/// q, k, v, the output and the log-sum-exp, so `recomputed` is 0 and the block is the
/// un-checkpointed one; over eager attention each block that recomputes has its core's events
/// (`tape/selective.rs`, `BlockEvents::selective`). A block recomputing anything else (SDPA's
/// attention dropout, a block of two cores) keeps the heuristic.
fn checkpointing_expressible(job: &ResolvedJob, plan: &ForwardPlan) -> bool {
    match job.checkpointing {
        Checkpointing::None | Checkpointing::Full => true,
        Checkpointing::Selective => {
            let events = plan.events.as_ref();
            plan.layers.iter().enumerate().all(|(i, l)| {
                l.recomputed == 0
                    || events
                        .and_then(|e| e.layer_block.get(i))
                        .and_then(|&b| events?.blocks.get(b as usize))
                        .is_some_and(|b| b.selective.is_some())
            })
        }
    }
}

/// Weights the training stream writes: unquantized, or bitsandbytes' under LoRA adapters on
/// blocks of standard attention and a dense MLP — 4-bit (NF4/FP4, with or without double
/// quantization: QLoRA, `blocks/linear4bit.rs`) and LLM.int8 without or under full
/// checkpointing (`blocks/linear8bit.rs`). GPTQ/AWQ kernels and quantized experts are not written.
fn weights_expressible(spec: &ModelSpec, job: &ResolvedJob) -> bool {
    match crate::estimate::weights::weights_in_force(Some(spec), job) {
        Ok(w) if w.is_none() => true,
        Ok(WeightFormat::Nf4 | WeightFormat::Fp4 | WeightFormat::Nf4Dq) => {
            job.peft.is_some() && dense_standard_blocks(spec)
        }
        // LLM.int8 without or under full checkpointing: `MatMul8bitLt` holds each
        // projection's input in `ctx.tensors`; non-reentrant checkpointing's saved-tensor hooks
        // do not reach it (the first forward's held through the step, `ctx_held.rs`),
        // reentrant checkpointing holds nothing (`docs/allocator-stream.md`).
        Ok(WeightFormat::Int8) => {
            job.peft.is_some()
                && job.checkpointing != Checkpointing::Selective
                && dense_standard_blocks(spec)
        }
        _ => false,
    }
}

/// Every block of standard attention and a dense MLP, nothing beside them: each projection
/// takes the bitsandbytes `Linear4bit` / `Linear8bitLt` path of the block programs.
fn dense_standard_blocks(spec: &ModelSpec) -> bool {
    spec.decoder.layers.iter().all(|l| {
        matches!(l.attention.kind, AttentionKind::Standard { .. })
            && matches!(l.mlp, Mlp::Dense(_))
            && l.cross_attention.is_none()
            && l.parallel_ssm.is_none()
            && l.shared_block.is_none()
            && l.experts_beside.is_none()
    })
}

/// A static cache the stream writes (`static_cache.rs`): full-attention layers of standard
/// attention alone (a sliding-window layer's `StaticSlidingWindowLayer` holds the window and
/// copies on overflow; latent attention and state-space layers cache otherwise).
fn static_cache_expressible(spec: &ModelSpec) -> bool {
    spec.decoder.layers.iter().all(|l| {
        matches!(l.attention.kind, AttentionKind::Standard { .. })
            && l.attention.sliding_window.is_none()
            && l.attention.attention_chunk.is_none()
            && l.cross_attention.is_none()
    })
}

/// The static cache's shape for a job with `engine.cache: "static"` (`static_cache.rs`):
/// `max_cache_len` = prompt + new tokens − 1 (`kv::generate_cache_tokens`), `repeat_kv`'s
/// `n_rep` = query heads / key-value heads (`modeling_llama.py` `num_key_value_groups`).
fn static_cache_of(spec: &ModelSpec, job: &ResolvedJob, query_width: u64) -> Option<StaticCache> {
    if !job.engine.static_cache() {
        return None;
    }
    let att = spec.decoder.layers.first().map(|l| l.attention.kind)?;
    let rep = match att {
        AttentionKind::Standard {
            heads, kv_heads, ..
        } if kv_heads > 0 => heads / kv_heads,
        _ => 1,
    };
    Some(StaticCache {
        len: crate::estimate::kv::generate_cache_tokens(job),
        rep,
        query_width,
    })
}

/// The parameters in module order, each with its gradient and optimizer states; LoRA's
/// adapters after their layer's base tensors (the base frozen); `conv1d`: the base's
/// projections are `Conv1D` (`states::conv1d_weights`).
pub fn params(
    inv: &Inventory,
    job: &ResolvedJob,
    width: u64,
    conv1d: bool,
) -> Result<Vec<Param>, CoreError> {
    params_quantized(inv, job, width, &WeightFormat::None, conv1d)
}

/// [`params`] with the base weights in `format`: a bitsandbytes 4-bit weight is loaded as
/// its packed bytes and quant state (`quant_load.rs`); every other tensor at `width`, or at
/// fp32 where PEFT's `prepare_model_for_kbit_training` cast it (`job::kbit_casts`: each
/// fp16/bf16 parameter's `param.data = param.data.to(torch.float32)`, the 16-bit copy freed;
/// the load's moment with both copies is not written, the step starts after it).
pub fn params_quantized(
    inv: &Inventory,
    job: &ResolvedJob,
    width: u64,
    format: &WeightFormat,
    conv1d: bool,
) -> Result<Vec<Param>, CoreError> {
    let bnb = matches!(
        format,
        WeightFormat::Nf4 | WeightFormat::Fp4 | WeightFormat::Nf4Dq | WeightFormat::Int8
    );
    let lora = job.peft.as_ref();
    let mut out = Vec::with_capacity(inv.tensors.len() + 8);
    let adapters = match lora {
        Some(p) => {
            crate::estimate::states::lora_adapters(&inv.tensors, &p.targets, p.rank, conv1d)?
        }
        None => Vec::new(),
    };
    let aw = lora.map_or(4, |p| p.adapter_dtype.bytes());
    let cast = lora.is_some() && crate::job::kbit_casts(job.techniques.kbit_prepare, format);
    let mut layer_done: Option<u32> = None;
    for t in &inv.tensors {
        if t.layer != layer_done {
            push_adapters(&mut out, &adapters, layer_done, aw, job.optimizer)?;
            layer_done = t.layer;
        }
        let quantized = bnb && quant::is_quantized(format, t);
        let kept_width = if cast && !quantized { 4 } else { width };
        let bytes = t.elements().saturating_mul(kept_width);
        // An idle tower's weight (Gemma 3n's, text-only) gets no gradient and no state, nor
        // does a frozen part's or one the job's forward does not run (a VLM's tower without
        // images: `Part::runs`), as the walk's states count them.
        let trainable = lora.is_none()
            && !t.idle
            && !job.freeze.contains(&t.part)
            && t.part.runs(job.images.is_some());
        out.push(Param {
            bytes,
            grad: if trainable { bytes } else { 0 },
            layer: t.layer,
            embedding: t.component == Component::Embedding && t.layer.is_none(),
            states: if trainable {
                optimizer::first_state_bytes(job.optimizer, &t.shape, width)?
            } else {
                [0; 4]
            },
            // The projector's weights are not on a block's tape (`tower.rs` makes them).
            tape_grad: matches!(t.component, Component::Attention | Component::Mlp)
                && t.part != Part::Projector,
            quant: quantized.then(|| QuantLoad {
                elements: t.elements(),
                width,
                kind: load_kind(format, t),
            }),
            part: t.part,
        });
    }
    push_adapters(&mut out, &adapters, layer_done, aw, job.optimizer)?;
    Ok(out)
}

/// How a quantized tensor of `format` (a bitsandbytes one) is loaded: LLM.int8 with an
/// fp32 scale per output row (an `nn.Linear` weight is `[out, in]`), 4-bit with or without
/// double quantization.
fn load_kind(format: &WeightFormat, t: &crate::inventory::Tensor) -> QuantKind {
    match format {
        WeightFormat::Int8 => QuantKind::Int8 {
            rows: t.shape.first().copied().unwrap_or(0),
        },
        _ => QuantKind::FourBit {
            nested: matches!(format, WeightFormat::Nf4Dq),
        },
    }
}

/// The adapters of `layer`, trainable: per adapted module in module order its `lora_A`
/// `[r, in]` then its `lora_B` `[out, r]` ([`LoraAdapter`]), each its own allocation with its
/// own gradient and optimizer states (the optimizer's per-tensor rules read its shape).
fn push_adapters(
    out: &mut Vec<Param>,
    adapters: &[LoraAdapter],
    layer: Option<u32>,
    width: u64,
    opt: Optimizer,
) -> Result<(), CoreError> {
    for a in adapters.iter().filter(|a| a.layer == layer) {
        for shape in a.tensors() {
            let bytes = shape[0].saturating_mul(shape[1]).saturating_mul(width);
            out.push(Param {
                bytes,
                grad: bytes,
                layer: a.layer,
                embedding: false,
                states: optimizer::first_state_bytes(opt, &shape, width)?,
                tape_grad: true,
                quant: None,
                part: Part::Language,
            });
        }
    }
    Ok(())
}

/// The loss's tensors from the plan's loss (`stages::loss`): the log-softmax is half of the
/// backward's two gradients, the upcast exists where dlogits is cast back (16-bit logits).
pub fn loss_sizes(spec: &ModelSpec, job: &ResolvedJob, plan: &ForwardPlan) -> LossSizes {
    let (b, s) = (job.batch, job.seq);
    let log_softmax = plan.loss.backward_transient / 2;
    LossSizes {
        logits: plan.logits,
        upcast: if plan.loss.dlogits > 0 {
            log_softmax
        } else {
            0
        },
        log_softmax,
        labels_padded: round_size(b.saturating_mul(s + 1).saturating_mul(8)),
        labels_shifted: round_size(b.saturating_mul(s).saturating_mul(8)),
    }
    .for_spec(spec)
}

impl LossSizes {
    /// A model without a vocabulary head has no loss tensors.
    fn for_spec(self, spec: &ModelSpec) -> Self {
        if spec.vocab_size == 0 {
            LossSizes::default()
        } else {
            self
        }
    }
}

/// Liger's fused loss for the job (`fused_ce.rs`): the walk's chunking
/// (`liger::loss_chunked`), `grad_weight` the head weight's gradient (none when it is frozen:
/// LoRA), the labels as the whole loss pads and shifts them; under autocast 16-bit logits, the
/// input rows' and an fp32 weight's 16-bit casts and the release's weight-gradient path for
/// the job's torch and GPU (`liger::autocast_addmm`).
fn fused_ce_of(spec: &ModelSpec, job: &ResolvedJob, params: &[Param], ev: &PlanEvents) -> FusedCe {
    let rows = job.batch.saturating_mul(job.seq);
    let (h, v, width) = (spec.hidden_size, spec.vocab_size, ev.param_width);
    let tied = matches!(spec.head, Head::LanguageModel { tied: true, .. });
    let head_grad = if tied {
        params.iter().find(|p| p.embedding && p.text_outside())
    } else {
        params
            .iter()
            .filter(|p| p.text_outside() && !p.embedding)
            .max_by_key(|p| p.bytes)
    }
    .map_or(0, |p| p.grad);
    let addmm = crate::estimate::liger::autocast_addmm(job);
    let logits_width = if ev.autocast { 2 } else { width };
    let scratch = match (head_grad > 0, ev.autocast && addmm) {
        (true, false) => crate::estimate::liger::liger_grad_weight_scratch(v, h, logits_width),
        _ => [0, 0],
    };
    FusedCe {
        rows,
        chunk: FusedCe::chunk_rows(rows, h, v),
        vocab: v,
        hidden_row: h.saturating_mul(width),
        logits_width,
        head_grad,
        labels_padded: job.batch.saturating_mul(job.seq + 1).saturating_mul(8),
        labels_shifted: rows.saturating_mul(8),
        grad_weight_scratch: scratch,
        cast_row: if ev.autocast { h.saturating_mul(2) } else { 0 },
        weight_copy: if ev.autocast && width == 4 {
            v.saturating_mul(h).saturating_mul(2)
        } else {
            0
        },
        addmm,
    }
}

/// What either stream (training, `generate`) is written from: the model, the job, the
/// device, the estimate's forward plan and its blocks' events.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub spec: &'a ModelSpec,
    pub job: &'a ResolvedJob,
    pub gpu: Option<&'a Gpu>,
    pub plan: &'a ForwardPlan,
    pub events: &'a PlanEvents,
}

/// The stream's inputs for a job [`expressible`] says it covers.
pub fn train_inputs<'a>(
    src: &Source<'a>,
    params: &'a [Param],
    fsdp: Option<&'a super::fsdp::Fsdp>,
    zero: Option<&'a super::zero::Zero>,
) -> TrainInputs<'a> {
    let (spec, job, plan, events) = (src.spec, src.job, src.plan, src.events);
    let tokens = job.batch.saturating_mul(job.seq);
    TrainInputs {
        plan,
        events,
        params,
        tied: matches!(spec.head, Head::LanguageModel { tied: true, .. }),
        workspace: workspace_block(src.gpu),
        lt_workspace: lt_workspace_block(src.gpu, job, plan),
        checkpointing: job.checkpointing,
        reentrant: job.techniques.checkpoint_reentrant,
        input_grad_kept: crate::estimate::techniques::input_grads_hook(
            job,
            params
                .iter()
                .any(|p| p.embedding && p.layer.is_none() && p.grad > 0),
        ),
        hidden: round_size(tokens.saturating_mul(spec.hidden_size) * events.param_width),
        head_grad_input: plan.logits_grad_input,
        loss: loss_sizes(spec, job, plan),
        step: step_kind(job, params),
        steps: STEPS,
        micro_batches: u32::try_from(job.grad_accum.max(1)).unwrap_or(u32::MAX),
        // DeepSpeed keeps its own gradient buffers: its engine's `zero_grad` sets them to None.
        keep_grads: job.zero_grad == crate::job::ZeroGrad::Zeros && zero.is_none(),
        chunked_output: (job.loss == LossKernel::ChunkedOutput && spec.vocab_size > 0).then(|| {
            let c = ChunkedOutput::new(
                job.batch,
                job.seq,
                spec.vocab_size,
                events.param_width,
                spec.hidden_size.saturating_mul(events.param_width),
            );
            if events.autocast {
                c.under_autocast(spec.hidden_size, plan.head.weight_copies)
            } else {
                c
            }
        }),
        fused_ce: (job.loss == LossKernel::Chunked && spec.vocab_size > 0)
            .then(|| fused_ce_of(spec, job, params, events)),
        linear_ce: (job.loss == LossKernel::LinearCe && spec.vocab_size > 0).then(|| {
            let trains = crate::estimate::stages::head_trains(job.peft.as_ref());
            let w = events.param_width;
            crate::estimate::linear_ce::LinearCe::of(spec, (job.batch, job.seq), (w, w), trains)
        }),
        ddp: job.parallel.dp > 1 && fsdp.is_none() && zero.is_none(),
        fsdp,
        zero,
    }
}

/// Inference the stream covers: Hugging Face `generate` on one GPU, a decoder-only causal LM
/// with unquantized weights, no adapters or images, the KV cache in the model's dtype. Serving
/// engines keep their own budgets (`engines.rs`, `serving.rs`).
pub fn expressible_infer(job: &ResolvedJob, spec: &ModelSpec, plan: &ForwardPlan) -> bool {
    let p = &job.parallel;
    job.task == Task::Infer
        && job.framework == Framework::Pytorch
        && p.gpus <= 1
        && job.peft.is_none()
        && job.kv_dtype.is_none()
        && job.images.is_none()
        && spec.encoder.is_none()
        && crate::estimate::weights::weights_in_force(Some(spec), job).is_ok_and(|w| w.is_none())
        && matches!(spec.head, Head::LanguageModel { .. })
        && plan.events.is_some()
}

/// The inference stream's inputs for a job [`expressible_infer`] covers.
pub fn infer_inputs<'a>(
    src: &Source<'a>,
    params: &'a [u64],
) -> Result<super::infer_inputs::InferInputs<'a>, CoreError> {
    let (spec, job, events) = (src.spec, src.job, src.events);
    let layers = spec.num_layers().max(1);
    let per_token = crate::estimate::kv::kv_cache_bytes(spec, job, 1)?;
    Ok(super::infer_inputs::InferInputs {
        plan: src.plan,
        events,
        params,
        workspace: workspace_block(src.gpu),
        batch: job.batch,
        prompt: job.seq,
        new_tokens: job.new_tokens,
        hidden_per_token: spec.hidden_size.saturating_mul(events.param_width),
        kv_per_token: per_token / (2 * layers),
        kv_layers: crate::estimate::kv::generate_layers(spec, job),
        vocab: spec.vocab_size,
        logits_width: events.param_width,
        calls: 1,
        static_cache: static_cache_of(spec, job, events.param_width),
    })
}

/// The block a BLAS handle's workspace takes from the caching allocator:
/// `overhead::cublas_workspace_bytes`, cuBLAS's alone on CUDA (the H200 traces, torch 2.11,
/// cu130: one 33,554,432 B block per handle at `getCurrentCUDABlasHandle`); ROCm's hipBLASLt
/// pool counted with hipBLAS's. cuBLASLt's own workspace, where a release keeps one, is
/// [`lt_workspace_block`].
pub fn workspace_block(gpu: Option<&Gpu>) -> u64 {
    overhead::cublas_workspace_bytes(gpu)
}

/// cuBLASLt's own workspace block, allocated at the forward's first cuBLASLt GEMM (a Linear
/// with a bias: `addmm` with a 1-D bias takes the Lt path, `Blas.cpp` `addmm_out_cuda_impl`)
/// and kept: 1 MiB on the releases that keep one apart (`overhead::cublaslt_workspace_bytes`:
/// 2.9–2.11; the GPT-2 H200 snapshot shows it at `getCUDABlasLtWorkspace` under its first
/// `addmm`), none where the model runs no biased Linear or the release shares cuBLAS's.
pub fn lt_workspace_block(gpu: Option<&Gpu>, job: &ResolvedJob, plan: &ForwardPlan) -> u64 {
    if plan.lt_gemm {
        overhead::cublaslt_workspace_bytes(gpu, job.torch_version)
    } else {
        0
    }
}
