//! The step-time model: how long a training step takes and how many tokens a GPU trains or
//! serves per second, from the same model description the memory model reads and the GPU
//! catalog's datasheet speeds. Pure arithmetic, closed-form per layout, so `plan` can rank
//! tens of thousands of layouts by it.
//!
//! - [`hardware`]: the GPU's peaks and the achievable fractions per op class and generation;
//! - [`shape`]: the model's matmul parameters, attention widths, memory-bound bytes;
//! - [`compute`]: FLOPs per op class (Narayanan et al. 2021 eq. 3) at those rates, and the
//!   bytes of the memory-bound ops, per phase (forward, backward);
//! - [`eager`]: the kernels an eager step launches and the host's time to launch them (a
//!   phase takes the longer of the GPU's work and the host's launches);
//! - [`communication`]: DP / ZeRO / FSDP / TP / PP / CP / EP traffic and its overlap;
//! - [`offload`]: PCIe traffic and the CPU optimizer (ZeRO-Offload);
//! - [`infer`]: prefill (compute-bound) and decode (memory-bandwidth-bound) tokens/s.
//!
//! The step: `m` micro-batches of compute plus each one's exposed communication, the 1F1B
//! bubble `(p − 1)` micro-batch times (Narayanan et al. 2021, §2.2.1: a fraction (p − 1)/m of
//! the ideal), the data-parallel reduction the last backward does not hide, the optimizer step
//! (memory-bound on the GPU, or the CPU's under offload), and `zero_grad`.

pub mod communication;
pub mod compute;
pub mod eager;
pub mod hardware;
pub mod infer;
pub mod layout;
pub mod memory;
pub mod offload;
pub mod price;
pub mod rl;
pub mod shape;

use crate::estimate::input::ModelInput;
use crate::job::{
    AttentionKernel, Checkpointing, Framework, Offload, Optimizer, Precision, ReferenceModel,
    ResolvedJob, Task,
};

pub use crate::report::{InferThroughput, StepParts, Throughput, TrainThroughput};
pub use hardware::Hardware;
pub use shape::ModelShape;

/// A layout as the step-time model reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    pub framework: Framework,
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    pub cp: u64,
    pub ep: u64,
    pub sp: bool,
    pub zero: u64,
    pub offload: Offload,
    pub checkpointing: Checkpointing,
    pub attention: AttentionKernel,
    pub micro_batch: u64,
    /// Micro-batches per step per replica (the pipeline's, else gradient accumulation's).
    pub microbatches: u64,
    pub seq: u64,
    /// Bytes of one activation / gathered weight value (the compute dtype).
    pub width: u64,
    /// Bytes of one gradient value as the framework reduces it.
    pub grad_width: u64,
    /// Bytes the optimizer step reads and writes per trainable parameter.
    pub step_bytes: u64,
    /// LoRA / QLoRA: frozen weights get no weight gradients.
    pub peft: bool,
    /// Trainable parameters of the whole model (the adapters under PEFT).
    pub trainable_params: f64,
    /// Trainable parameter tensors (the optimizer's and `zero_grad`'s per-tensor loops).
    pub trainable_tensors: f64,
    /// `torch.autocast` over fp32 parameters: a `*-mixed` precision in a plain PyTorch loop
    /// (HF Trainer's `bf16=True`). DeepSpeed, Megatron and FSDP2 run the model itself in 16
    /// bits and keep the fp32 master copy in the optimizer: no casts in the forward.
    pub autocast: bool,
    /// Fused kernels stand in for the modelling file's separate ops: Megatron-LM's (fused
    /// LayerNorm, bias-GeLU, scale-mask-softmax, RoPE, bias-dropout-add), or `torch.compile`'s
    /// (Inductor generates one kernel per chain of pointwise ops and reductions).
    pub fused: bool,
    /// LoRA-adapted projections per layer, and whether their adapters' dtype differs from
    /// the base's (PEFT's fp32 adapters over a 16-bit model: casts around each).
    pub lora_per_layer: f64,
    pub lora_cast: bool,
    /// How the optimizer step walks the parameters.
    pub optimizer_pass: OptimizerPass,
}

/// How an optimizer step walks the parameters: PyTorch's foreach kernels over tensor lists
/// (the default on CUDA), its fused kernel (`fused=True`), or a framework's flat buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptimizerPass {
    Foreach,
    Fused,
    Flat,
}

impl OptimizerPass {
    /// The pass a framework runs an optimizer with: DeepSpeed and Megatron step flat fp32
    /// buffers; PyTorch (and FSDP) `torch.optim`'s foreach, or its fused kernel when asked.
    pub fn of(framework: Framework, optimizer: Optimizer) -> Self {
        match (framework, optimizer) {
            (Framework::Deepspeed | Framework::Megatron, _) => OptimizerPass::Flat,
            (_, Optimizer::AdamWFused) => OptimizerPass::Fused,
            _ => OptimizerPass::Foreach,
        }
    }
}

impl Setup {
    /// The layout of a resolved job.
    pub fn of_job(job: &ResolvedJob, trainable: &Trainable) -> Setup {
        let trainable_params = trainable.params;
        let p = &job.parallel;
        let microbatches = if p.pp > 1 {
            p.microbatches
        } else {
            job.grad_accum
        };
        Setup {
            framework: job.framework,
            dp: p.dp,
            tp: p.tp,
            pp: p.pp,
            cp: p.cp,
            ep: p.ep,
            sp: p.sp,
            zero: p.zero,
            offload: p.offload,
            checkpointing: job.checkpointing,
            attention: job.attention,
            micro_batch: job.batch,
            microbatches: microbatches.max(1),
            seq: job.seq,
            width: job.precision.compute_bytes(),
            grad_width: grad_width(job.framework, job.precision),
            step_bytes: step_bytes(job.optimizer, job.precision),
            peft: job.peft.is_some(),
            trainable_params,
            trainable_tensors: trainable.tensors,
            autocast: autocast(job.framework, job.precision),
            fused: job.framework == Framework::Megatron || job.techniques.compile,
            lora_per_layer: trainable.lora_per_layer,
            lora_cast: lora_cast(job),
            optimizer_pass: OptimizerPass::of(job.framework, job.optimizer),
        }
        .with_step_bytes(job.optimizer, job.precision)
    }

    /// The optimizer's bytes per trainable parameter for this layout's pass.
    pub fn with_step_bytes(mut self, optimizer: Optimizer, precision: Precision) -> Setup {
        self.step_bytes = pass_bytes(self.optimizer_pass, optimizer, precision, self.peft)
            .unwrap_or(self.step_bytes);
        self
    }

    pub fn gpus(&self) -> u64 {
        self.dp * self.tp * self.pp * self.cp
    }
}

/// Bytes of a gradient value as it is reduced: Megatron accumulates and reduces fp32 main
/// grads (`--accumulate-allreduce-grads-in-fp32`), DeepSpeed 16-bit grads, DDP and FSDP
/// under autocast fp32 (FSDP's `reduce_dtype` fp32 as torchtitan sets it); without mixed
/// precision, the compute dtype.
pub fn grad_width(framework: Framework, precision: Precision) -> u64 {
    match (framework, precision.is_mixed()) {
        (Framework::Deepspeed, true) => 2,
        (_, true) => 4,
        (_, false) => precision.compute_bytes(),
    }
}

/// Bytes the optimizer step reads and writes per trainable parameter: the gradient and the
/// weight read, the weight written, the fp32 master weight and each state read and written
/// (Adam: two fp32 moments; momentum SGD and Lion one; bitsandbytes' 8-bit Adam two bytes).
pub fn step_bytes(optimizer: Optimizer, precision: Precision) -> u64 {
    let w = precision.compute_bytes();
    let master = if precision.is_mixed() { 4 } else { 0 };
    let states = match optimizer {
        Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWFused | Optimizer::AdamWPaged => 8,
        Optimizer::SgdMomentum | Optimizer::Lion => 4,
        Optimizer::AdamW8bit | Optimizer::AdamW8bitPaged => 2,
        Optimizer::Adafactor | Optimizer::Sgd | Optimizer::None => 0,
    };
    w + w + w + 2 * (master + states)
}

/// A step's time, by part, and what dominates it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTime {
    pub step_s: f64,
    /// What `step_s` adds up from.
    pub parts: StepParts,
    /// The step's forwards, backwards and optimizer step (with `zero_grad`): `compute_s`'s parts.
    pub forward_s: f64,
    pub backward_s: f64,
    pub optimizer_s: f64,
    /// Seconds of `compute_s` the host's launches bound, the GPU's matmuls and attention
    /// bound, and its memory-bound ops bound.
    pub launch_bound_s: f64,
    pub compute_bound_s: f64,
    pub memory_bound_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    /// Bytes moved over the host link per step (offload).
    pub host_bytes: f64,
}

/// The name of the largest of `parts` (the first of equals; `compute` when none is above
/// `f64::MIN`).
fn largest<const N: usize>(parts: [(f64, &'static str); N]) -> &'static str {
    parts
        .into_iter()
        .fold((f64::MIN, "compute"), |a, b| if b.0 > a.0 { b } else { a })
        .1
}

impl StepTime {
    /// What bounds the step (contract `throughput.bound`): the largest of the host's launches,
    /// the GPU's compute, its memory traffic, the communication and the offload not hidden.
    pub fn bound(&self) -> &'static str {
        largest([
            (self.launch_bound_s, "launch"),
            (self.compute_bound_s, "compute"),
            (self.memory_bound_s, "memory"),
            (self.parts.communication_s, "communication"),
            (self.parts.offload_s, "offload"),
        ])
    }

    /// The contract's shape, with a price per GPU-hour when one is known.
    pub fn report(&self, price: Option<&price::Price>) -> TrainThroughput {
        TrainThroughput {
            step_time_s: self.step_s,
            forward_s: self.forward_s,
            backward_s: self.backward_s,
            optimizer_s: self.optimizer_s,
            bound: self.bound(),
            tokens_per_s_per_gpu: self.tokens_per_s_per_gpu,
            mfu: self.mfu,
            parts: self.parts,
            cost_per_million_tokens: price
                .map(|p| p.per_gpu_hour / 3600.0 / self.tokens_per_s_per_gpu * 1e6),
            price_per_gpu_hour: price.map(|p| p.per_gpu_hour),
            price_source: price.map(|p| p.source.clone()),
            generation_s: None,
        }
    }
}

/// The optimizer step on the GPU's side of the host (offload runs it on the CPU instead):
/// (seconds, whether the host's per-tensor loop bounds it). The GPU moves the pass's bytes per
/// trainable parameter of its shard; the host walks its tensors ([`eager::optimizer_host_s`]).
fn optimizer_step(s: &Setup, hw: &Hardware, params_gpu: f64) -> (f64, bool) {
    let split = (s.tp * s.pp) as f64;
    let sharded = if s.zero >= 1 { s.dp as f64 } else { 1.0 };
    let tensors = s.trainable_tensors / split;
    let zero_grad = eager::zero_grad_s(tensors);
    if s.offload != Offload::None {
        return (zero_grad, true);
    }
    let host = eager::optimizer_host_s(tensors, s.optimizer_pass);
    let trainable = if s.peft {
        s.trainable_params / split
    } else {
        params_gpu
    };
    let bytes = trainable / sharded * s.step_bytes as f64;
    let gpu = match s.optimizer_pass {
        OptimizerPass::Flat => hw.memory_s(bytes),
        OptimizerPass::Foreach | OptimizerPass::Fused => hw.foreach_s(bytes),
    };
    (gpu.max(host) + zero_grad, host > gpu)
}

/// The modelled training step of a layout.
pub fn train_step(shape: &ModelShape, s: &Setup, hw: &Hardware) -> StepTime {
    let mb = compute::micro_batch(shape, s, hw);
    let comm = communication::exposed(shape, s, hw, &mb);
    let params_gpu = shape.params / (s.tp * s.pp) as f64;
    let (off_mb, off_step, host_bytes) = offload::exposed(s, hw, &mb, params_gpu);
    let m = s.microbatches as f64;
    let (optimizer_s, optimizer_launch) = optimizer_step(s, hw, params_gpu);
    let compute_s = m * mb.total() + optimizer_s;
    let communication_s = m * comm.per_micro_batch_s + comm.per_step_s;
    let offload_s = m * off_mb + off_step;
    let bubble_s = (s.pp - 1) as f64 * (mb.total() + comm.per_micro_batch_s);
    let step_s = compute_s + communication_s + offload_s + bubble_s;
    let tokens = (s.micro_batch * s.seq) as f64 * m * s.dp as f64;
    let gpus = s.gpus() as f64;
    let launch_bound_s = m * mb.launch_bound_s() + if optimizer_launch { optimizer_s } else { 0.0 };
    let gpu_bound = m * (mb.total() - mb.launch_bound_s());
    let gpu_work = (mb.matmul_s + mb.attention_s + mb.memory_s).max(f64::MIN_POSITIVE);
    let compute_bound_s = gpu_bound * (mb.matmul_s + mb.attention_s) / gpu_work;
    let memory_bound_s =
        gpu_bound - compute_bound_s + if optimizer_launch { 0.0 } else { optimizer_s };
    StepTime {
        step_s,
        parts: StepParts {
            compute_s,
            communication_s,
            offload_s,
            bubble_s,
        },
        forward_s: m * mb.forward_s(),
        backward_s: m * mb.backward_s(),
        optimizer_s,
        launch_bound_s,
        compute_bound_s,
        memory_bound_s,
        tokens_per_s_per_gpu: tokens / step_s / gpus,
        mfu: mb.model_flops * m / (step_s * hw.peak),
        host_bytes,
    }
}

/// The attention kernel a job's step runs: SDPA is PyTorch's choice of backend for the call
/// (`estimate::blocks::sdpa`, `select_sdp_backend` by torch version, dtype, grouped k/v, head
/// dim, GPU); its math fallback materialises the scores as eager attention does (QKᵀ, softmax,
/// ·V as separate kernels), so it is timed as eager. Flash and memory-efficient are fused.
pub fn attention_kernel(job: &ResolvedJob, shape: &ModelShape) -> AttentionKernel {
    use crate::estimate::blocks::sdpa::{SdpaBackend, SdpaCall, SdpaStack};
    if job.attention != AttentionKernel::Sdpa || shape.layer_ops.head_dim == 0 {
        return job.attention;
    }
    let stack = SdpaStack::of(job);
    let call = SdpaCall {
        half: job.precision.compute_bytes() == 2,
        grouped: shape.layer_ops.repeat_kv && stack.passes_grouped_kv(false),
        masked: false,
        head_dim: shape.layer_ops.head_dim,
    };
    match stack.backend(call) {
        SdpaBackend::Math => AttentionKernel::Eager,
        SdpaBackend::Flash | SdpaBackend::Efficient => AttentionKernel::Sdpa,
    }
}

/// Whether the forward runs under `torch.autocast` ([`Setup::autocast`]).
pub fn autocast(framework: Framework, precision: Precision) -> bool {
    precision.is_mixed() && framework == Framework::Pytorch
}

/// What a job trains: parameters and tensors (the adapters' under PEFT, else the model's), and
/// the adapted projections per layer.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Trainable {
    pub params: f64,
    pub tensors: f64,
    pub lora_per_layer: f64,
}

/// Trainable parameters of a job's model: the LoRA adapters under PEFT, else all.
pub fn trainable_params(model: &ModelInput, job: &ResolvedJob) -> f64 {
    trainable(model, job).params
}

/// What a job's model trains ([`Trainable`]).
pub fn trainable(model: &ModelInput, job: &ResolvedJob) -> Trainable {
    let all = Trainable {
        params: model.params_total as f64,
        tensors: model
            .inventory
            .as_ref()
            .map_or(0.0, |i| i.tensors.len() as f64),
        lora_per_layer: 0.0,
    };
    let (Some(p), Some(inv)) = (&job.peft, &model.inventory) else {
        return all;
    };
    // The targets' matching is remembered per model (`estimate::memo`).
    let modules = model.memo().lora_modules(&p.targets, || {
        let conv1d = crate::estimate::states::conv1d_weights(model.spec.as_ref());
        crate::estimate::states::lora_modules(&inv.tensors, &p.targets, conv1d)
    });
    let Ok(adapters) = crate::estimate::states::adapters_of(&modules, &p.targets, p.rank) else {
        return all;
    };
    let layers = model.spec.as_ref().map_or(1, |s| s.num_layers()).max(1) as f64;
    Trainable {
        params: adapters.iter().map(|a| a.elements() as f64).sum(),
        // A and B per adapted module.
        tensors: 2.0 * adapters.len() as f64,
        lora_per_layer: adapters.len() as f64 / layers,
    }
}

/// Whether PEFT's adapters differ in dtype from the base's compute (fp32 adapters over a
/// 16-bit model: PEFT casts the input up and the result back around each).
pub fn lora_cast(job: &ResolvedJob) -> bool {
    job.peft.as_ref().is_some_and(|p| {
        p.adapter_dtype == crate::job::AdapterDtype::Fp32 && job.precision.compute_bytes() == 2
    })
}

/// Bytes an optimizer pass reads and writes per trainable parameter, counted from
/// `torch/optim/adam.py` `_multi_tensor_adam` (torch 2.x, decoupled weight decay): the
/// params' `_foreach_mul_` (read, write), `_foreach_lerp_` of the first moment (2 reads, a
/// write), `_foreach_mul_` and `_foreach_addcmul_` of the second (2 + 4), `_foreach_sqrt`,
/// `_foreach_div_`, `_foreach_add_` (2 each) and `_foreach_addcdiv_` (3 reads, a write): 21
/// accesses of the parameter's dtype; `sgd.py` `_multi_tensor_sgd` with momentum 8 (the buffer's
/// mul and add, the params' add), without 3; `_fused_adamw` reads the parameter, gradient and
/// two moments and writes three: 7. Other optimizers and flat passes: `None` (the framework's
/// figure, [`step_bytes`]).
fn pass_bytes(
    pass: OptimizerPass,
    optimizer: Optimizer,
    precision: Precision,
    peft: bool,
) -> Option<u64> {
    // PEFT's adapters are fp32; else the parameters are fp32 unless the model is pure 16-bit.
    let w = if peft || precision.is_mixed() {
        4
    } else {
        precision.compute_bytes()
    };
    let accesses = match (pass, optimizer) {
        (OptimizerPass::Flat, _) => return None,
        (OptimizerPass::Fused, _) => 7,
        (_, Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWPaged) => 21,
        (_, Optimizer::SgdMomentum) => 8,
        (_, Optimizer::Sgd) => 3,
        _ => return None,
    };
    Some(accesses * w)
}

/// The report's `throughput` for a job and its estimate, and a warning when the GPU's
/// figures are unknown. `None` without a GPU. `engine`: the report's `engine` object
/// (llama.cpp's split of the layers between GPU and host).
pub fn for_job(
    model: &ModelInput,
    job: &ResolvedJob,
    per_gpu: &crate::report::PerGpu,
    engine: Option<&serde_json::Value>,
) -> (Option<Throughput>, Option<String>) {
    let Some(gpu) = job.gpu.as_deref().and_then(|g| crate::gpu::find(g).ok()) else {
        return (None, None);
    };
    let hw = match Hardware::of(gpu, compute_precision(job)) {
        Ok(hw) => hw,
        Err(why) => return (None, Some(format!("throughput is null: {why}"))),
    };
    let shape = model.memo().shape(|| {
        ModelShape::of(
            model.spec.as_ref(),
            model.inventory.as_ref(),
            model.params_total,
        )
    });
    match job.task {
        Task::Train => {
            let mut setup = Setup::of_job(job, &trainable(model, job));
            setup.attention = attention_kernel(job, shape);
            let step = if crate::estimate::dpo::is_dpo(job) {
                let frozen = job.techniques.reference_model == ReferenceModel::Frozen;
                rl::dpo_train_step(shape, &setup, &hw, frozen)
            } else {
                train_step(shape, &setup, &hw)
            };
            let price = price::resolve(job.price_per_gpu_hour, &gpu.id, setup.gpus());
            (Some(Throughput::Train(step.report(price.as_ref()))), None)
        }
        Task::Infer => (
            Some(Throughput::Infer(infer::rates(
                model.spec.as_ref(),
                shape,
                job,
                &hw,
                per_gpu,
                engine,
            ))),
            None,
        ),
        Task::Rl => {
            let Some(r) = &job.rl else {
                return (None, None);
            };
            let s = rl::step(shape, job, r, &hw, &trainable(model, job));
            let price = price::resolve(job.price_per_gpu_hour, &gpu.id, job.parallel.gpus);
            let mut t = s.train.report(price.as_ref());
            t.generation_s = Some(s.generation_s);
            (Some(Throughput::Train(t)), None)
        }
    }
}

/// The dtype matmuls run in: the job's precision; inference over quantized weights
/// dequantizes to 16 bits (bf16 where the GPU has it).
fn compute_precision(job: &ResolvedJob) -> Precision {
    job.precision
}

#[cfg(test)]
mod tests;
