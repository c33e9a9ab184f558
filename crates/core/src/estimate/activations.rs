//! Activations: the bytes each part of the forward keeps for backward, per block, for the
//! job's precision, attention kernel, dropout and checkpointing — and the Megatron accounting of
//! Korthikanti et al. 2022 for `framework: megatron`.

use super::alloc_events::plan_events::PlanEvents;
use super::blocks::sdpa::SdpaStack;
use super::blocks::{block_memory, block_program, BlockCtx, BlockMemory, Numerics, QuantLinear};
pub use super::forward_plan::{EagerMasks, ForwardPlan, LayerPlan};
use super::stages::{self, LossMemory, StageMemory};
use crate::error::CoreError;
use crate::job::{
    AttentionKernel, Checkpointing, Framework, Precision, ResolvedJob, Task, TransformersVersion,
};
use crate::model::{Head, ModelSpec};

mod parallel;
mod path_warnings;
use parallel::{distribute, Parts};
use path_warnings::{ssd_release_note, ssm_path_warning};

/// Dropout probabilities from the config, as each family names them.
pub fn dropout_of(spec: &ModelSpec) -> (f64, f64, f64) {
    let d = spec.dropout;
    (d.embedding, d.attention, d.hidden)
}

/// The widths a precision runs the forward in: (parameter / residual width, matmul width,
/// autocast on). Pure 16 bit and fp32 run every op in their dtype; the mixed precisions keep
/// fp32 weights and let `torch.autocast` cast matmul inputs to 16 bit (`autocast_mode.cpp`'s
/// lower-precision op list).
fn numerics(p: Precision) -> Numerics {
    match p {
        Precision::Fp32 => plain(4, 4, false),
        Precision::Fp16 | Precision::Bf16 => plain(2, 2, false),
        Precision::Fp16Mixed | Precision::Bf16Mixed => plain(4, 2, true),
    }
}

/// [`Numerics`] of these widths with the defaults of a current PyTorch in eager mode: softmax
/// saves only its output, no `torch.compile`, the default SDPA stack and transformers release.
pub(crate) fn plain(param: u64, compute: u64, autocast: bool) -> Numerics {
    Numerics {
        param,
        compute,
        autocast,
        softmax_saves_input: false,
        compile: false,
        sdpa: SdpaStack::default(),
        transformers: TransformersVersion::default(),
    }
}

/// The forward of one micro-batch, part by part: the embeddings, each block, the head and the
/// loss, placed on the most-loaded rank of the job's parallel layout.
pub fn forward(
    spec: &ModelSpec,
    job: &ResolvedJob,
    warnings: &mut Vec<String>,
) -> Result<ForwardPlan, CoreError> {
    let (b, s) = (job.batch, job.seq);
    if let Some(max) = spec.max_position_embeddings {
        if s > max {
            warnings.push(format!(
                "seq {s} is longer than the model's {max} positions"
            ));
        }
    }
    check_sizes(spec, b, s)?;
    ssm_path_warning(spec, job, warnings);
    ssd_release_note(spec, job, warnings);
    let num = forward_numerics(job);
    let tokens = b.saturating_mul(s);
    let h = spec.hidden_size;
    let p_emb = if job.task == Task::Train {
        dropout_of(spec).0
    } else {
        0.0
    };
    let embedding = stages::embeddings(spec, (b, s), num, p_emb, job.task == Task::Train);
    // A VLM's vision tower and projector run before the decoder (`estimate/vision.rs`).
    let tower = super::vision::tower_forward(spec, job, num)?;
    let mask = super::compile::traced_causal_mask(spec, job, num);
    // Llama-3.2-Vision's cross-attention mask, made once before the decoder.
    let (cross_mask, cross_mask_peak) = super::mllama::cross_mask(spec, job, num.param);
    let tower_events = if job.task == Task::Train {
        super::vision_events::tower_events(spec, job, num, tower, embedding)?
    } else {
        None
    };
    let embedding = StageMemory {
        kept: embedding.kept + tower.kept + mask + cross_mask,
        peak: (embedding.peak + tower.kept)
            .max(tower.peak)
            .max(tower.kept + cross_mask_peak),
        ..embedding
    };
    // A VLM's images are an input of the step beside the token ids.
    let pixels = if job.task == Task::Train {
        super::vision::pixel_input_bytes(spec, job)?
    } else {
        0
    };
    let (layers, mut events) = blocks_forward(spec, job, num)?;
    events.tower = tower_events;
    let (head, logits, loss) = head_and_loss(spec, job, num);
    let megatron = job.framework == Framework::Megatron && job.task == Task::Train;
    let bytes_per_layer = if megatron {
        megatron_layer_bytes(spec, job)?
    } else {
        median_kept(&layers)
    };
    let parts = Parts {
        layers,
        head,
        logits,
        loss,
    };
    let par = &job.parallel;
    let reshaped = megatron || par.tp.max(1) * par.cp.max(1) * par.pp.max(1) > 1;
    let parts = distribute(spec, job, parts, bytes_per_layer, megatron, warnings);
    Ok(ForwardPlan {
        inputs: super::techniques::input_tensors(job) * super::overhead::round_size(tokens * 8)
            + pixels,
        embedding,
        layers: parts.layers,
        head: parts.head,
        logits: parts.logits,
        hidden: super::overhead::round_size(tokens * h * num.param),
        first_input: spec.gemma3n.map_or(0, |g| {
            super::overhead::round_size(g.altup_inputs * tokens * h * num.param)
        }),
        loss: parts.loss,
        logits_grad_input: super::overhead::round_size(tokens * h * num.compute),
        bytes_per_layer,
        reference_forward: 0,
        masks: eager_masks(spec, job, num),
        lt_gemm: runs_lt_gemm(spec),
        events: (!reshaped).then(|| std::sync::Arc::new(events)),
    })
}

/// The masks a causal LM's forward builds once and holds (`attention_masks::forward_masks`:
/// eager attention's float masks, SDPA's bool sliding-window and chunked masks). Measured on
/// the CPU (a 2-layer Llama, b1 × 1024, fp32, eager, full checkpointing): a 4,194,304 B tensor
/// from `aten::where < eager_mask`, live at the step's backward peak.
fn eager_masks(spec: &ModelSpec, job: &ResolvedJob, num: Numerics) -> EagerMasks {
    super::attention_masks::forward_masks(spec, job, num)
}

/// Whether a block has a Linear with a bias: `F.linear` with a bias on a contiguous input is
/// `addmm` with a 1-D bias, which CUDA runs through cuBLASLt's bias epilogue
/// (`aten/src/ATen/native/cuda/Blas.cpp` `addmm_out_cuda_impl`, `useLtInterface`; GPT-2's
/// `Conv1D` calls `torch.addmm` itself). Biasless models (Llama, Qwen3 MLPs) run `mm` only.
pub fn runs_lt_gemm(spec: &ModelSpec) -> bool {
    spec.all_layers().any(|l| {
        let b = l.attention.bias;
        let mlp = matches!(&l.mlp, crate::model::Mlp::Dense(d) if d.bias);
        b.q || b.k || b.v || b.o || mlp
    })
}

/// The widths the forward runs at. DeepSpeed and Megatron keep 16-bit parameters with an fp32
/// master copy: the forward runs on 16-bit weights without autocast. FSDP's mixed precision
/// (`torch/distributed/fsdp/api.py` `MixedPrecision(param_dtype=bf16)`, what accelerate sets
/// for `mixed_precision: bf16`) keeps the fp32 shard and casts it to 16 bits once per
/// all-gather (`_flat_param.py` `_use_low_precision_shard`), so the forward runs on 16-bit
/// weights: autocast, where it also runs, caches only casts of fp32 leaf tensors
/// (`aten/src/ATen/autocast_mode.cpp` `cached_cast`), so it keeps no weight copies. PEFT keeps the frozen
/// base in 16 bit (loaded with a 16-bit dtype); autocast then casts only fp32 inputs (the
/// adapters run in fp32). After PEFT's `prepare_model_for_kbit_training` the base's
/// unquantized weights are fp32 instead (`techniques::kbit_fp32_base`).
fn forward_numerics(job: &ResolvedJob) -> Numerics {
    let mut num = numerics(job.precision);
    let peft = job.peft.is_some() && job.task == Task::Train;
    if job.precision.is_mixed()
        && matches!(
            job.framework,
            Framework::Deepspeed | Framework::Megatron | Framework::Fsdp
        )
    {
        num = plain(2, 2, false);
    } else if peft && crate::job::kbit_casts(job.techniques.kbit_prepare, &job.weights.value) {
        num = super::techniques::kbit_fp32_base(num);
    } else if peft && num.param == 4 && job.precision != Precision::Fp32 {
        num.param = 2;
    }
    num.softmax_saves_input = job.torch_version.is_some_and(|v| v.softmax_saves_input());
    num.compile = job.techniques.compile && job.task == Task::Train;
    num.sdpa = SdpaStack::of(job);
    num.transformers = job.transformers_version.unwrap_or_default();
    num
}

/// `activation_bytes_per_layer`: bytes one block keeps, the median over blocks.
fn median_kept(layers: &[LayerPlan]) -> u64 {
    let mut per_layer: Vec<u64> = layers
        .iter()
        .map(|l| l.kept + l.weight_copies + l.cached_copies)
        .collect();
    per_layer.sort_unstable();
    per_layer.get(per_layer.len() / 2).copied().unwrap_or(0)
}

/// Each block's forward, by the job's task and checkpointing.
fn blocks_forward(
    spec: &ModelSpec,
    job: &ResolvedJob,
    num: Numerics,
) -> Result<(Vec<LayerPlan>, PlanEvents), CoreError> {
    let (b, s) = (job.batch, job.seq);
    let train = job.task == Task::Train;
    let format = super::weights::weights_in_force(Some(spec), job)?;
    // Checkpointing: the stored model of a checkpointed block is its output only; `selective`
    // drops the attention core (scores, probabilities, dropout) and recomputes it.
    let ckpt = if train {
        job.checkpointing
    } else {
        Checkpointing::None
    };
    let ctx = block_ctx(spec, job, num);
    // Llama-3.2-Vision's cross-attention layers attend over the images' vision tokens, and
    // are skipped when there are none.
    let cross_ctx = BlockCtx {
        kv_seq: super::mllama::cross_tokens(spec, job),
        ..ctx
    };
    // Gemma 4's kv-sharing layers in `generate`'s prefill run on the last token only.
    let shared_ctx = BlockCtx { seq: 1, ..ctx };
    let mut layers = Vec::with_capacity(spec.num_layers() as usize);
    let stored_kv = if ckpt == Checkpointing::Full {
        super::blocks::checkpoint_stored_kv(spec, b, s, num)
    } else {
        Vec::new()
    };
    let mut cache: Vec<DistinctLayer> = Vec::new();
    let mut events = PlanEvents {
        param_width: num.param,
        autocast: num.autocast,
        ..PlanEvents::default()
    };
    for layer in spec.all_layers() {
        if layer.attention.vision_cross && cross_ctx.kv_seq == 0 {
            layers.push(LayerPlan::default());
            events.layer_block.push(u32::MAX);
            continue;
        }
        let ctx = if layer.attention.vision_cross {
            cross_ctx
        } else if layer.attention.kv_shared && super::blocks::generate_slices_kv_shared(spec, job) {
            shared_ctx
        } else {
            ctx
        };
        let key = layers.len();
        let (mem, backward) = distinct_layer(spec, ctx, layer, key, &mut cache, &mut events);
        // Megatron's blocks keep Korthikanti's per-layer bytes (`megatron_blocks`): its core
        // stays the SDPA-less difference.
        let core = match ckpt {
            Checkpointing::Selective if job.framework != Framework::Megatron => {
                selective_core(&events).unwrap_or_else(|| attention_core_kept(ctx, layer, mem))
            }
            Checkpointing::Selective => attention_core_kept(ctx, layer, mem),
            _ => 0,
        };
        // Quantized weights (bitsandbytes, GPTQ, AWQ) are dequantized one matrix at a time to
        // the compute dtype, in forward and again in backward: the largest matrix is transient.
        // LLM.int8 in training dequantizes in backward only; its forward's own tensors are on
        // the block's tape (`blocks/linear8bit.rs`).
        let (dequant, forward_dequant) =
            QuantLinear::walk_transients(ctx.dequant, &format, spec, layer, num);
        let mem = BlockMemory {
            peak: mem.peak + forward_dequant,
            ..mem
        };
        layers.push(if job.task == Task::Infer {
            inference_block(mem)
        } else {
            let width = super::blocks::block_output_width(spec, layer, num.param);
            let output = super::overhead::round_size(
                b.saturating_mul(s) * spec.hidden_size * spec.residual_streams() * width,
            );
            let mut l = training_block(mem, ckpt, core, output);
            let block = events
                .layer_block
                .last()
                .and_then(|&k| events.blocks.get(k as usize));
            l.kept += QuantLinear::checkpoint_held(block, job);
            // Gemma 4's and 3n's storing layers: their keys and values stay in `shared_kv_states`.
            l.kept += stored_kv.get(key).copied().unwrap_or(0);
            let [backward, accumulate] = backward;
            if backward.net() + dequant > l.backward_transient {
                l.backward_transient = backward.made + dequant;
                l.backward_released = backward.released;
                l.backward_accumulate = Some((accumulate.made + dequant, accumulate.released));
            }
            l
        });
    }
    Ok((layers, events))
}

/// A distinct layer: its index, its memory and its backward's fullest moments
/// (`BlockEvents::backward_peak`, `backward_accumulate_peak`).
type DistinctLayer = (usize, BlockMemory, [super::tape::BackwardPeak; 2]);

/// Identical layers have identical memory: the program of `layer` (the `key`-th) is run once
/// per distinct layer and its events recorded once; a repeat points at the first.
fn distinct_layer(
    spec: &ModelSpec,
    ctx: BlockCtx,
    layer: &crate::model::Layer,
    key: usize,
    cache: &mut Vec<DistinctLayer>,
    events: &mut PlanEvents,
) -> (BlockMemory, [super::tape::BackwardPeak; 2]) {
    let seen = cache
        .iter()
        .position(|(i, _, _)| spec.all_layers().nth(*i) == Some(layer));
    if let Some(k) = seen {
        events.layer_block.push(k as u32);
        return (cache[k].1, cache[k].2);
    }
    let (m, ev) = block_program(ctx, layer);
    let backward = [
        ev.backward_peak(super::round_size),
        ev.backward_accumulate_peak(super::round_size),
    ];
    events.layer_block.push(cache.len() as u32);
    events.blocks.push(ev);
    cache.push((key, m, backward));
    (m, backward)
}

/// LoRA under DeepSpeed: the engine casts every parameter to the model's dtype, the adapters
/// included (`runtime/engine.py` `_configure_distributed_model` →
/// `_cast_module_mixed_precision`, 0.19.8), so they run at the parameters' width whatever
/// `peft.adapter_dtype` says.
fn deepspeed_cast<'a>(l: super::blocks::Lora<'a>, job: &ResolvedJob) -> super::blocks::Lora<'a> {
    if job.framework != Framework::Deepspeed {
        return l;
    }
    let width = if job.precision == Precision::Fp32 {
        4
    } else {
        2
    };
    super::blocks::Lora { width, ..l }
}

/// What every block's program runs with: the job's shape, numerics and kernel, the config's
/// dropout (training only) and LoRA targets (training only).
fn block_ctx<'a>(spec: &'a ModelSpec, job: &'a ResolvedJob, num: Numerics) -> BlockCtx<'a> {
    let train = job.task == Task::Train;
    let lora = job
        .peft
        .as_ref()
        .filter(|_| train)
        .map(|p| deepspeed_cast(super::blocks::Lora::of(p), job));
    let (_, p_attn, p_hidden) = if train {
        dropout_of(spec)
    } else {
        (0.0, 0.0, 0.0)
    };
    BlockCtx {
        spec,
        batch: job.batch,
        seq: job.seq,
        kv_seq: job.seq,
        num,
        kernel: job.attention,
        attn_dropout: p_attn,
        hidden_dropout: p_hidden,
        causal: !matches!(
            spec.naming,
            crate::model::Naming::Bert | crate::model::Naming::Roberta
        ),
        lora,
        dequant: if train {
            // The format in force (`weights::weights_in_force`); none where it is in error.
            super::weights::weights_in_force(Some(spec), job)
                .ok()
                .and_then(|f| QuantLinear::of(&f, job, num))
        } else {
            None
        },
        no_grad: job.task == Task::Infer,
        python_holds: job.task == Task::Infer && job.framework == Framework::Pytorch,
        part: crate::vision::Part::Language,
    }
}

/// What selective checkpointing drops from the last distinct block `events` recorded, where
/// its tape marked an eager attention core (`tape/selective.rs`): the core's saved tensors
/// less the inputs the checkpoint holds in their place — under autocast the fp32 rotated q
/// and k (`apply_rotary_pos_emb` promotes to the fp32 cos/sin) where the plain block keeps
/// only their 16-bit casts.
fn selective_core(events: &PlanEvents) -> Option<u64> {
    let &k = events.layer_block.last()?;
    let b = events.blocks.get(k as usize)?;
    let sel = b.selective.as_ref()?;
    Some(sel.core_bytes(&b.sizes, super::round_size))
}

/// Bytes of the attention core (scores, probabilities, dropout) a block keeps: what
/// selective recomputation drops, the block's kept bytes less those of the same block under
/// SDPA without attention dropout (a block without an eager core marked on its tape).
fn attention_core_kept(ctx: BlockCtx, layer: &crate::model::Layer, mem: BlockMemory) -> u64 {
    let sdpa_ctx = BlockCtx {
        kernel: AttentionKernel::Sdpa,
        attn_dropout: 0.0,
        ..ctx
    };
    let light = block_memory(sdpa_ctx, layer);
    mem.kept.saturating_sub(light.kept)
}

/// A block under inference: no autograd, nothing is saved; each block's tensors are freed as
/// it finishes and its output replaces its input.
fn inference_block(mem: BlockMemory) -> LayerPlan {
    LayerPlan {
        kept: 0,
        weight_copies: 0,
        cached_copies: 0,
        forward_peak: mem.peak,
        backward_transient: 0,
        recomputed: 0,
        backward_released: 0,
        backward_accumulate: None,
    }
}

/// A training block by checkpointing: all it saves (none), less the attention core `core`
/// (selective), or only its `output` (full, the rest recomputed before its backward).
fn training_block(mem: BlockMemory, ckpt: Checkpointing, core: u64, output: u64) -> LayerPlan {
    let backward_transient = mem.peak.saturating_sub(mem.kept);
    match ckpt {
        Checkpointing::None => LayerPlan {
            kept: mem.kept.saturating_sub(mem.input_freed),
            weight_copies: mem.weight_copies,
            cached_copies: 0,
            forward_peak: mem.peak,
            backward_transient,
            recomputed: 0,
            backward_released: 0,
            backward_accumulate: None,
        },
        Checkpointing::Selective => LayerPlan {
            kept: (mem.kept - core).saturating_sub(mem.input_freed),
            weight_copies: mem.weight_copies,
            cached_copies: 0,
            forward_peak: mem.peak,
            backward_transient,
            recomputed: core,
            backward_released: 0,
            backward_accumulate: None,
        },
        Checkpointing::Full => LayerPlan {
            kept: output,
            weight_copies: 0,
            cached_copies: mem.weight_copies,
            forward_peak: mem.peak + mem.weight_copies,
            backward_transient,
            recomputed: (mem.kept + mem.weight_copies).saturating_sub(output),
            backward_released: 0,
            backward_accumulate: None,
        },
    }
}

/// The head, the logits tensor and the loss. Generation computes logits for the last position
/// only (transformers `logits_to_keep`, vLLM's sampler); training for every position. A
/// chunked loss never makes the whole logits tensor.
fn head_and_loss(
    spec: &ModelSpec,
    job: &ResolvedJob,
    num: Numerics,
) -> (StageMemory, u64, LossMemory) {
    let (b, s) = (job.batch, job.seq);
    let tokens = b.saturating_mul(s);
    let train = job.task == Task::Train;
    let lora = job.peft.is_some() && train;
    let logit_rows = if train { tokens } else { b };
    let linear_ce = job.loss == crate::job::LossKernel::LinearCe && train;
    let (head, logits_width) = stages::head(spec, (b, s), num, lora, !linear_ce);
    // Liger's function casts the head's weight itself under autocast, per chunk or cached to
    // the forward's end (`liger::autocast_transient`): no copy the backward holds.
    let head = if job.loss == crate::job::LossKernel::Chunked && train {
        StageMemory {
            weight_copies: 0,
            ..head
        }
    } else {
        head
    };
    let head = if train {
        head
    } else {
        StageMemory {
            kept: 0,
            peak: head
                .peak
                .min(super::overhead::round_size(tokens * spec.hidden_size * 4)),
            weight_copies: 0,
        }
    };
    let lm_head = matches!(
        spec.head,
        Head::LanguageModel { .. } | Head::MaskedLm { .. }
    );
    let chunked = job.loss == crate::job::LossKernel::Chunked;
    let logits = if lm_head && !chunked && !linear_ce {
        super::overhead::round_size(logit_rows * spec.vocab_size * logits_width)
    } else {
        0
    };
    let chunked_output = job.loss == crate::job::LossKernel::ChunkedOutput;
    let loss = if lm_head && linear_ce {
        let trains = stages::head_trains(job.peft.as_ref());
        super::linear_ce::loss_memory(&super::linear_ce::LinearCe::new(spec, b, s, num, trains))
    } else if train && lm_head && chunked {
        let trains = stages::head_trains(job.peft.as_ref());
        let addmm = super::liger::autocast_addmm(job);
        stages::loss_chunked(spec, (b, s), num, trains, addmm)
    } else if train && lm_head && chunked_output {
        let eager = stages::loss_chunked_output(spec, b, s, logits_width);
        let chunk = stages::largest_output_chunk(b, s, spec.vocab_size, logits_width);
        super::compile::chunked_output_loss(eager, num, tokens, spec.vocab_size, chunk)
    } else if train && lm_head {
        let width = stages::loss_width(spec, num, logits_width);
        let loss = stages::loss(spec, b, s, logits_width, width, num.softmax_saves_input);
        super::compile::loss(
            loss,
            num,
            logits,
            super::overhead::round_size(tokens * spec.vocab_size * width),
            tokens,
        )
    } else {
        LossMemory::default()
    };
    (head, logits, loss)
}

/// Rejects jobs whose largest tensors (b·s·V logits, b·heads·s² scores, b·s·ffn·top_k
/// activations) would not fit 64-bit byte counts, so that every later product is safe.
fn check_sizes(spec: &ModelSpec, b: u64, s: u64) -> Result<(), CoreError> {
    let tokens = b as u128 * s as u128;
    let widest = spec
        .all_layers()
        .map(|l| {
            let heads = l.attention.kind.heads() as u128;
            let mlp = match &l.mlp {
                crate::model::Mlp::Dense(d) => d.ffn as u128,
                crate::model::Mlp::Moe(m) => {
                    m.expert.ffn as u128 * m.top_k as u128 + m.experts as u128
                }
                crate::model::Mlp::None => 0,
            };
            // Gemma 4's experts beside the dense MLP.
            let mlp = mlp.max(l.experts_beside.as_ref().map_or(0, |m| {
                m.expert.ffn as u128 * m.top_k as u128 + m.experts as u128
            }));
            (heads * s as u128)
                .max(mlp * 4)
                .max(spec.hidden_size as u128 * 8)
        })
        .max()
        .unwrap_or(0)
        .max(spec.vocab_size as u128)
        // Gemma 4's per-layer inputs, `[b, s, layers, width]`.
        .max(
            spec.embedding
                .per_layer_inputs
                .map_or(0, |p| p.width as u128 * spec.num_layers() as u128),
        );
    // 16 bytes per element leaves room for sums of several such tensors.
    if tokens.saturating_mul(widest).saturating_mul(16) > u64::MAX as u128 / 4 {
        return Err(CoreError::field(
            "batch",
            format!("batch {b} × seq {s} makes tensors of more than 2^60 bytes; no GPU holds that"),
        ));
    }
    Ok(())
}

/// Activation bytes per layer in Megatron's accounting (Korthikanti et al. 2022, "Reducing
/// Activation Recomputation in Large Transformer Models", Table 2; 16-bit activations, dropout,
/// eager attention): with s sequence, b micro-batch, h hidden, a heads, t tensor-parallel size:
/// no parallelism sbh(34 + 5as/h); TP sbh(10 + 24/t + 5as/(ht)); TP+SP sbh/t·(34 + 5as/h);
/// TP + selective sbh(10 + 24/t); TP+SP + selective sbh·34/t; full recomputation 2sbh (the
/// layer input only).
pub fn megatron_layer_bytes(spec: &ModelSpec, job: &ResolvedJob) -> Result<u64, CoreError> {
    let s = job.seq as f64;
    let b = job.batch as f64;
    let h = spec.hidden_size as f64;
    let a = spec
        .all_layers()
        .next()
        .map(|l| l.attention.kind.heads())
        .unwrap_or(1) as f64;
    let t = job.parallel.tp as f64;
    let sbh = s * b * h;
    let sp = job.parallel.sp;
    let bytes = match job.checkpointing {
        Checkpointing::Full => 2.0 * sbh,
        Checkpointing::Selective if sp => sbh * 34.0 / t,
        Checkpointing::Selective => sbh * (10.0 + 24.0 / t),
        Checkpointing::None if sp => sbh / t * (34.0 + 5.0 * a * s / h),
        Checkpointing::None => sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)),
    };
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(CoreError::Overflow {
            what: "activation bytes per layer".into(),
        });
    }
    Ok(bytes.round() as u64)
}

/// The BLAS workspaces a step of `job` on `spec` holds allocated from its start: the figure
/// `simulate`'s walk adds at the step's start (`overhead::blas_workspaces_bytes_for` with the job's GPU,
/// task and PyTorch release, cuBLASLt's own where the forward runs a cuBLASLt GEMM,
/// [`runs_lt_gemm`]). A run measured on the CPU has none of them, so `validate`
/// compares such a case's peak net of this.
pub fn job_blas_workspaces_bytes(
    spec: Option<&crate::model::ModelSpec>,
    job: &crate::job::ResolvedJob,
) -> Result<u64, crate::error::CoreError> {
    let gpu = job.gpu.as_deref().map(crate::gpu::find).transpose()?;
    let train = job.task == crate::job::Task::Train;
    let lt_gemm = spec.is_some_and(runs_lt_gemm);
    Ok(super::overhead::blas_workspaces_bytes_for(
        gpu,
        train,
        job.torch_version,
        lt_gemm,
    ))
}
