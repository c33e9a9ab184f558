//! The table of memory-saving techniques the advice search combines, each with the group it
//! belongs to (a combination takes at most one technique per group), what it costs the user,
//! and how it changes the job.
//!
//! The cost order (cheapest first) ranks what a technique gives up:
//! 1. nothing — the same numbers by another kernel (fused AdamW, flash attention, a chunked
//!    loss) or an engine setting the job does not use (vLLM's `max_model_len` beyond the job's
//!    own context): 1–2 points;
//! 2. a little speed — smaller micro-batches with the global batch kept by accumulation,
//!    selective recomputation (Korthikanti et al. 2022: ~3 % more compute), sharding over the
//!    GPUs already given (ZeRO-2 communicates what DDP does; ZeRO-3 / FULL_SHARD 1.5×, ZeRO
//!    paper §7; tensor parallelism an all-reduce per layer): 2–6 points;
//! 3. much speed — full recomputation (one more forward, ~33 %): 6 points;
//! 4. quality a little — 8-bit optimizer states, an 8-bit KV cache or 8-bit weights: 4–7;
//! 5. host RAM and speed — offload to the CPU (ZeRO-Offload, ZeRO-Infinity, llama.cpp layers
//!    on the CPU), optimizer states paged to host RAM under pressure (bitsandbytes' paged
//!    optimizers): 8–12; stepping each parameter in its gradient hook (the optimizer in
//!    backward: no gradient clipping or accumulation): 5;
//! 6. quality more — pure 16-bit training without fp32 master weights, 4-bit weights: 9;
//! 7. what is trained — LoRA (adapters only): 12, QLoRA (adapters over 4-bit weights): 16;
//! 8. the job itself — fewer concurrent sequences, a shorter prompt: 5–10 (inference only).
//!
//! A combination's cost is the sum of its techniques' points.

pub use super::context::Ctx;
use crate::estimate::kv::KvDtype;
use crate::estimate::quant::WeightFormat;
use crate::job::{
    AttentionKernel, Checkpointing, Framework, LossKernel, Offload, Optimizer, Peft, PeftMethod,
    Precision, ResolvedJob, Spelled, Task,
};

/// Techniques of one group exclude each other in a combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    Precision,
    Optimizer,
    /// Where the optimizer steps: after the backward, or in each gradient's hook.
    OptimizerStep,
    Peft,
    Checkpointing,
    MicroBatch,
    Attention,
    Loss,
    /// Sharding, tensor parallelism and offload: one distributed layout.
    Layout,
    KvDtype,
    Weights,
    EngineLen,
    EngineUtil,
    GpuLayers,
    Batch,
    Context,
    /// The caching allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`).
    Allocator,
}

/// One technique: `apply` changes the job and says whether it applied (false: not for this
/// job, e.g. flash attention when attention is already flash).
pub struct Technique {
    pub name: &'static str,
    pub group: Group,
    /// Points in the cost order above.
    pub cost: u32,
    /// One line: what the user gives up.
    pub gives_up: &'static str,
    /// A number `apply` reads (a divisor, a fraction in eighths).
    pub param: u64,
    pub apply: fn(&mut ResolvedJob, &Ctx, u64) -> bool,
}

fn train(j: &ResolvedJob) -> bool {
    j.task == Task::Train
}

fn fused_adamw(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let ok = train(j) && matches!(j.optimizer, Optimizer::Adam | Optimizer::AdamW);
    if ok {
        j.optimizer = Optimizer::AdamWFused;
    }
    ok
}

/// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: an environment change, no code. Segments
/// then grow page by page in place (`ExpandableSegment` in `c10/cuda/CUDACachingAllocator.cpp`),
/// so space freed by one size is reused by any other instead of staying cached in fixed blocks.
/// Offered where PyTorch's caching allocator holds the step (the serving engines size their own
/// pools).
fn expandable_segments(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let ok = !j.allocator.expandable_segments
        && matches!(
            j.framework,
            Framework::Pytorch | Framework::Deepspeed | Framework::Fsdp | Framework::Megatron
        );
    if ok {
        j.allocator.expandable_segments = true;
    }
    ok
}

fn adamw_8bit(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let ok = train(j)
        && matches!(
            j.optimizer,
            Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWFused
        );
    if ok {
        j.optimizer = Optimizer::AdamW8bit;
    }
    ok
}

/// bitsandbytes' paged optimizers (`bitsandbytes/optim/optimizer.py`, `is_paged`: states in
/// `cudaMallocManaged` memory, evicted to host RAM under pressure): `param` 8 = 8-bit states
/// (`PagedAdamW8bit`), 32 = 32-bit (`PagedAdamW`). From Adam/AdamW (and 8-bit AdamW to its
/// paged twin).
fn paged(j: &mut ResolvedJob, _: &Ctx, bits: u64) -> bool {
    let from_32 = matches!(
        j.optimizer,
        Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWFused
    );
    let ok = train(j) && (from_32 || (bits == 8 && j.optimizer == Optimizer::AdamW8bit));
    if ok {
        j.optimizer = if bits == 8 {
            Optimizer::AdamW8bitPaged
        } else {
            Optimizer::AdamWPaged
        };
    }
    ok
}

/// The optimizer in backward (torchtune `optimizer_in_bwd`, `estimate/techniques.rs`): each
/// gradient stepped and freed in its hook. Plain PyTorch and FSDP only, without accumulation
/// ([`ResolvedJob::check_combination`] refuses the combination otherwise).
fn in_backward(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let ok = train(j)
        && !j.techniques.optimizer_in_backward
        && j.optimizer != Optimizer::None
        && matches!(j.framework, Framework::Pytorch | Framework::Fsdp);
    if ok {
        j.techniques.optimizer_in_backward = true;
    }
    ok
}

fn flash(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let ok = j.attention == AttentionKernel::Eager;
    if ok {
        j.attention = AttentionKernel::Flash;
    }
    ok
}

fn chunked_loss(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let ok = train(j) && c.lm_head && j.loss == LossKernel::Standard;
    if ok {
        j.loss = LossKernel::Chunked;
    }
    ok
}

/// Micro-batch divided by `k` (`k` = 0: down to 1), gradient accumulation multiplied so the
/// global batch stays.
fn micro_batch(j: &mut ResolvedJob, _: &Ctx, k: u64) -> bool {
    let k = if k == 0 { j.batch } else { k };
    if !train(j) || k < 2 || !j.batch.is_multiple_of(k) {
        return false;
    }
    j.batch /= k;
    j.grad_accum *= k;
    true
}

fn checkpoint(j: &mut ResolvedJob, _: &Ctx, level: u64) -> bool {
    let to = if level == 2 {
        Checkpointing::Full
    } else {
        Checkpointing::Selective
    };
    let rank = |c: Checkpointing| match c {
        Checkpointing::None => 0,
        Checkpointing::Selective => 1,
        Checkpointing::Full => 2,
    };
    let ok = train(j) && rank(j.checkpointing) < rank(to);
    if ok {
        j.checkpointing = to;
    }
    ok
}

/// Mixed precision for an fp32 job: bf16 where the GPU has it, fp16 with loss scaling where not.
fn mixed(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let ok = train(j) && j.precision == Precision::Fp32;
    if ok {
        j.precision = if c.bf16 {
            Precision::Bf16Mixed
        } else {
            Precision::Fp16Mixed
        };
    }
    ok
}

/// Pure bf16 (no fp32 master): only where the GPU has bf16 (pure fp16 training diverges).
fn pure_bf16(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let ok = train(j) && c.bf16 && matches!(j.precision, Precision::Fp32 | Precision::Bf16Mixed);
    if ok {
        j.precision = Precision::Bf16;
    }
    ok
}

fn adapters(method: PeftMethod) -> Peft {
    Peft {
        method,
        rank: 16,
        alpha: 32.0,
        targets: ["q_proj", "k_proj", "v_proj", "o_proj"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        adapter_dtype: crate::job::AdapterDtype::Fp32,
        dropout: crate::job::DEFAULT_LORA_DROPOUT,
        modules_to_save: Vec::new(),
    }
}

fn lora(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let ok = train(j) && c.lora_targets && j.peft.is_none();
    if ok {
        j.peft = Some(adapters(PeftMethod::Lora));
    }
    ok
}

fn qlora(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let ok = train(j) && c.lora_targets && j.peft.is_none() && !c.weights_fixed;
    if ok {
        j.peft = Some(adapters(PeftMethod::Qlora));
        j.weights = Spelled::new(WeightFormat::Nf4Dq, "nf4-dq");
    }
    ok
}

/// A LoRA job's frozen weights stored in 4 bits (LoRA → QLoRA, same adapters).
fn lora_to_qlora(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let ok = train(j)
        && !c.weights_fixed
        && j.weights.value.is_none()
        && j.peft
            .as_ref()
            .is_some_and(|p| p.method == PeftMethod::Lora);
    if ok {
        if let Some(p) = &mut j.peft {
            p.method = PeftMethod::Qlora;
        }
        j.weights = Spelled::new(WeightFormat::Nf4Dq, "nf4-dq");
    }
    ok
}

/// Sharding over the GPUs given: `param` = 0x(framework)(zero): 0x12 DeepSpeed ZeRO-2, 0x13
/// ZeRO-3, 0x23 FSDP FULL_SHARD.
fn shard(j: &mut ResolvedJob, _: &Ctx, param: u64) -> bool {
    let framework = if param >> 4 == 1 {
        Framework::Deepspeed
    } else {
        Framework::Fsdp
    };
    let zero = param & 0xf;
    let p = &j.parallel;
    let ok = train(j)
        && p.dp > 1
        && p.tp * p.pp * p.cp == 1
        && p.offload == Offload::None
        && !(j.framework == framework && p.zero >= zero)
        && matches!(
            j.framework,
            Framework::Pytorch | Framework::Deepspeed | Framework::Fsdp
        );
    if ok {
        j.framework = framework;
        j.parallel.zero = zero;
    }
    ok
}

/// Tensor parallelism (Megatron) over the GPUs given, at most 8 (one node).
fn tensor_parallel(j: &mut ResolvedJob, c: &Ctx, _: u64) -> bool {
    let gpus = j.parallel.gpus;
    let Some(spec) = c.spec else { return false };
    let Some(first) = spec.all_layers().next() else {
        return false;
    };
    let (heads, kv) = (
        first.attention.kind.heads(),
        first.attention.kind.kv_heads(),
    );
    let tp = (1..=gpus.min(8))
        .rev()
        .find(|t| {
            gpus.is_multiple_of(*t)
                && heads.is_multiple_of(*t)
                && (kv.is_multiple_of(*t) || t.is_multiple_of(kv))
        })
        .unwrap_or(1);
    let vllm_infer = j.task == Task::Infer && j.framework == Framework::Vllm;
    let ok = tp > 1
        && j.parallel.tp == 1
        && j.parallel.pp == 1
        && j.parallel.offload == Offload::None
        && (vllm_infer || (train(j) && j.peft.is_none()));
    if ok {
        if train(j) {
            j.framework = Framework::Megatron;
            j.parallel.zero = 0;
        }
        j.parallel.tp = tp;
        j.parallel.dp = gpus / tp;
    }
    ok
}

/// DeepSpeed CPU offload: `param` 1 = optimizer states (ZeRO-Offload, stage 2 at least),
/// 2 = optimizer states and parameters (ZeRO-Infinity's CPU offload, stage 3).
fn offload(j: &mut ResolvedJob, _: &Ctx, param: u64) -> bool {
    let (to, zero) = if param == 2 {
        (Offload::OptimizerParams, 3)
    } else {
        (Offload::Optimizer, j.parallel.zero.max(2))
    };
    let p = &j.parallel;
    let ok = train(j)
        && p.tp * p.pp * p.cp == 1
        && p.offload != to
        && !(param == 1 && p.offload == Offload::OptimizerParams)
        && matches!(j.framework, Framework::Pytorch | Framework::Deepspeed);
    if ok {
        j.framework = Framework::Deepspeed;
        j.parallel.zero = zero;
        j.parallel.offload = to;
    }
    ok
}

/// A smaller KV dtype: `param` 8 = 8-bit, 4 = 4-bit, in the engine's own spelling
/// (`EngineSpec::kv_quant`: vLLM fp8, transformers int8, llama.cpp q8_0 / q4_0).
fn kv_dtype(j: &mut ResolvedJob, _: &Ctx, bits: u64) -> bool {
    let Some(to) = crate::engines::settings::kv_quant(j.framework, bits) else {
        return false;
    };
    // No `kv_dtype`: the activation dtype, 16 or 32 bits.
    let now = j.kv_dtype.as_ref().map(|k| k.value);
    let small = matches!(now, Some(KvDtype::Byte | KvDtype::Q8_0 | KvDtype::Q4_0));
    let ok = j.task == Task::Infer && !small;
    let ok = ok || (bits == 4 && now == Some(KvDtype::Q8_0) && super::context::splits_layers(j));
    if ok {
        j.kv_dtype = Some(Spelled::new(to.0, to.1));
    }
    ok
}

/// Quantized weights for serving: `param` 8 or 4 bits, in the engine's own format
/// (`EngineSpec::weights_quant`).
fn weights(j: &mut ResolvedJob, c: &Ctx, bits: u64) -> bool {
    let (format, text) = crate::engines::settings::weights_quant(j.framework, bits);
    let ok = j.task == Task::Infer && !c.weights_fixed && j.weights.value.is_none();
    if ok {
        j.weights = Spelled::new(format, text);
    }
    ok
}

/// Fewer concurrent sequences (not vLLM, whose pool does not depend on the batch).
fn fewer_sequences(j: &mut ResolvedJob, _: &Ctx, k: u64) -> bool {
    let k = if k == 0 { j.batch } else { k };
    let ok = j.task == Task::Infer
        && j.framework != Framework::Vllm
        && k >= 2
        && j.batch.is_multiple_of(k);
    if ok {
        j.batch /= k;
    }
    ok
}

/// The prompt halved (transformers, llama.cpp).
fn shorter_prompt(j: &mut ResolvedJob, _: &Ctx, _: u64) -> bool {
    let ok = j.task == Task::Infer && j.framework != Framework::Vllm && j.seq >= 2;
    if ok {
        j.seq /= 2;
    }
    ok
}

macro_rules! t {
    ($name:literal, $group:ident, $cost:literal, $param:literal, $apply:path, $gives:literal) => {
        Technique {
            name: $name,
            group: Group::$group,
            cost: $cost,
            gives_up: $gives,
            param: $param,
            apply: $apply,
        }
    };
}

/// llama.cpp with `$k` sixteenths of the layers on the GPU: each sixteenth moved to the CPU
/// costs a point more.
macro_rules! ngl {
    ($k:literal, $cost:expr) => {
        Technique {
            name: concat!("llama.cpp: ", $k, "/16 of the layers on the GPU"),
            group: Group::GpuLayers,
            cost: $cost,
            gives_up: "host RAM and speed: the other layers run on the CPU",
            param: $k,
            apply: crate::engines::llamacpp::advice::gpu_layers,
        }
    };
}

/// Every technique, in the cost order above within each group.
pub const TECHNIQUES: &[Technique] = &[
    t!("expandable segments", Allocator, 1, 0, expandable_segments,
       "nothing: an environment change (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), freed memory reused across sizes"),
    t!("fused AdamW", Optimizer, 1, 0, fused_adamw,
       "nothing: the same update in one fused kernel, without foreach's scratch"),
    t!("flash attention", Attention, 1, 0, flash,
       "nothing: the same attention without the s×s probabilities"),
    t!("vLLM max_model_len = the longest request the KV pool holds", EngineLen, 1, 0, crate::engines::vllm::advice::max_model_len,
       "requests longer than the KV pool holds are refused (the model's full context)"),
    t!("chunked cross-entropy", Loss, 2, 0, chunked_loss,
       "nothing: the same loss, chunk by chunk (needs a fused linear cross-entropy such as Liger-Kernel)"),
    t!("mixed precision", Precision, 2, 0, mixed,
       "little: 16-bit compute over fp32 master weights (standard practice)"),
    t!("micro-batch ÷2, accumulation ×2", MicroBatch, 2, 2, micro_batch,
       "a little speed: smaller micro-batches, the same global batch"),
    t!("micro-batch ÷4, accumulation ×4", MicroBatch, 3, 4, micro_batch,
       "a little speed: smaller micro-batches, the same global batch"),
    t!("micro-batch 1 with accumulation", MicroBatch, 4, 0, micro_batch,
       "speed: micro-batch 1, the same global batch by accumulation"),
    t!("vLLM gpu_memory_utilization 0.95", EngineUtil, 2, 0, crate::engines::vllm::advice::utilization,
       "less GPU memory left to other processes"),
    t!("SGLang context_length = the job's context", EngineLen, 1, 0, crate::engines::sglang::advice::sglang_context,
       "longer requests than the job's own context are refused"),
    t!("ollama num_ctx = the job's context", EngineLen, 1, 0, crate::engines::ollama::advice::ollama_context,
       "longer prompts than the job's own context are truncated"),
    t!("SGLang mem_fraction_static +0.05", EngineUtil, 2, 0, crate::engines::sglang::advice::sglang_fraction,
       "less room for a prefill chunk and the CUDA graphs"),
    t!("selective checkpointing", Checkpointing, 3, 1, checkpoint,
       "a little speed: the attention core recomputed (~3 % more compute)"),
    t!("ZeRO-2 over the GPUs given", Layout, 3, 0x12, shard,
       "a little speed: gradients and optimizer states sharded (DDP's communication volume)"),
    t!("tensor parallel over the GPUs given", Layout, 3, 0, tensor_parallel,
       "speed: an all-reduce in every layer"),
    t!("ZeRO-3 over the GPUs given", Layout, 5, 0x13, shard,
       "speed: parameters gathered per layer (1.5× DDP's communication)"),
    t!("FSDP FULL_SHARD over the GPUs given", Layout, 5, 0x23, shard,
       "speed: parameters gathered per layer (1.5× DDP's communication)"),
    t!("full checkpointing", Checkpointing, 6, 2, checkpoint,
       "speed: one more forward per step (~33 % more compute)"),
    t!("8-bit KV cache", KvDtype, 4, 8, kv_dtype,
       "a little quality: KV cache stored in 8 bits"),
    t!("8-bit weights", Weights, 6, 8, weights,
       "a little quality: weights stored in 8 bits"),
    t!("8-bit AdamW (bitsandbytes)", Optimizer, 7, 0, adamw_8bit,
       "a little quality: optimizer states in 8 bits (block-wise quantized)"),
    t!("optimizer in backward", OptimizerStep, 5, 0, in_backward,
       "gradient clipping and accumulation: each gradient is stepped and freed in its hook"),
    t!("paged AdamW (bitsandbytes)", Optimizer, 8, 32, paged,
       "host RAM and speed: optimizer states paged to host RAM when the GPU is full"),
    t!("paged 8-bit AdamW (bitsandbytes)", Optimizer, 9, 8, paged,
       "a little quality and some speed: 8-bit optimizer states, paged to host RAM when the GPU is full"),
    t!("4-bit KV cache", KvDtype, 7, 4, kv_dtype,
       "quality: KV cache stored in 4 bits"),
    t!("ZeRO-Offload: optimizer states in host RAM", Layout, 8, 1, offload,
       "host RAM and speed: optimizer states and the update on the CPU"),
    t!("4-bit weights", Weights, 9, 4, weights,
       "quality: weights stored in 4 bits"),
    t!("pure bf16 (no fp32 master weights)", Precision, 9, 0, pure_bf16,
       "quality: updates rounded to bf16 (no fp32 master copy)"),
    t!("ZeRO-Infinity: optimizer states and parameters in host RAM", Layout, 11, 2, offload,
       "host RAM and much speed: parameters fetched from the CPU every layer"),
    t!("LoRA → QLoRA (4-bit frozen weights)", Peft, 6, 0, lora_to_qlora,
       "quality: frozen weights stored in NF4"),
    t!("LoRA r=16 on q,k,v,o", Peft, 12, 0, lora,
       "what is trained: rank-16 adapters on the attention projections, not every weight"),
    t!("QLoRA r=16 (NF4 + double quantization)", Peft, 16, 0, qlora,
       "what is trained and quality: rank-16 adapters over NF4 frozen weights"),
    ngl!(15, 9),
    ngl!(14, 10),
    ngl!(13, 11),
    ngl!(12, 12),
    ngl!(11, 13),
    ngl!(10, 14),
    ngl!(9, 15),
    ngl!(8, 16),
    ngl!(7, 17),
    ngl!(6, 18),
    ngl!(5, 19),
    ngl!(4, 20),
    ngl!(3, 21),
    ngl!(2, 22),
    ngl!(1, 23),
    t!("half the concurrent sequences", Batch, 5, 2, fewer_sequences,
       "throughput: half the sequences at once"),
    t!("a quarter of the concurrent sequences", Batch, 6, 4, fewer_sequences,
       "throughput: a quarter of the sequences at once"),
    t!("one sequence at a time", Batch, 7, 0, fewer_sequences,
       "throughput: one sequence at a time"),
    t!("half the prompt", Context, 10, 0, shorter_prompt,
       "the job itself: the prompt cut to half its length"),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every technique says what it gives up, and within a group the costlier option gives up
    /// more in the documented order (the group's entries are listed cheapest first where they
    /// are steps of one knob: micro-batch, checkpointing, offload, llama.cpp layers).
    #[test]
    fn the_table_is_well_formed() {
        for t in TECHNIQUES {
            assert!(!t.gives_up.is_empty() && t.cost > 0, "{}", t.name);
        }
        for g in [
            Group::MicroBatch,
            Group::Checkpointing,
            Group::GpuLayers,
            Group::Batch,
        ] {
            let costs: Vec<u32> = TECHNIQUES
                .iter()
                .filter(|t| t.group == g)
                .map(|t| t.cost)
                .collect();
            assert!(costs.windows(2).all(|w| w[0] < w[1]), "{g:?}: {costs:?}");
        }
    }
}
