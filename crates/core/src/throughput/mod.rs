//! The step-time model: how long a training step takes and how many tokens a GPU trains or
//! serves per second, from the same model description the memory model reads and the GPU
//! catalog's datasheet speeds. Pure arithmetic, closed-form per layout, so `plan` can rank
//! tens of thousands of layouts by it.
//!
//! - [`hardware`]: the GPU's peaks and the achievable fractions per op class and generation;
//! - [`shape`]: the model's matmul parameters, attention widths, memory-bound bytes;
//! - [`compute`]: FLOPs per op class (Narayanan et al. 2021 eq. 3) at those rates;
//! - [`communication`]: DP / ZeRO / FSDP / TP / PP / CP / EP traffic and its overlap;
//! - [`offload`]: PCIe traffic and the CPU optimizer (ZeRO-Offload);
//! - [`infer`]: prefill (compute-bound) and decode (memory-bandwidth-bound) tokens/s.
//!
//! The step: `m` micro-batches of compute plus each one's exposed communication, the 1F1B
//! bubble `(p − 1)` micro-batch times (Narayanan et al. 2021, §2.2.1: a fraction (p − 1)/m of
//! the ideal), the data-parallel reduction the last backward does not hide, the optimizer step
//! (memory-bound on the GPU, or the CPU's under offload).

pub mod communication;
pub mod compute;
pub mod hardware;
pub mod infer;
pub mod layout;
pub mod offload;
pub mod price;
pub mod rl;
pub mod shape;

use crate::estimate::ModelInput;
use crate::job::{
    AttentionKernel, Checkpointing, Framework, Offload, Optimizer, Precision, ReferenceModel,
    ResolvedJob, Task,
};
use serde::Serialize;

pub use hardware::Hardware;
pub use shape::ModelShape;

/// The report's `throughput` (contract): the modelled time of a training step, or an
/// inference job's prefill and decode rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Throughput {
    Train(TrainThroughput),
    Infer(InferThroughput),
}

/// A training step's time (contract `throughput`, train).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainThroughput {
    pub step_time_s: f64,
    pub tokens_per_s_per_gpu: f64,
    /// Model FLOPs (no recomputation) / (step time × the dtype's dense peak).
    pub mfu: f64,
    pub compute_s: f64,
    pub communication_s: f64,
    pub offload_s: f64,
    pub bubble_s: f64,
    /// With a price per GPU-hour: what a million trained tokens cost; else `null`.
    pub cost_per_million_tokens: Option<f64>,
    /// The price per GPU-hour the cost was computed with: the job's `price_per_gpu_hour`, else
    /// the built-in list's for the GPU ([`price`]); `null` when neither has one.
    pub price_per_gpu_hour: Option<f64>,
    /// Where that price came from: `"job"` (`--price-per-gpu-hour`) or the built-in list and
    /// the instance shape it prices; `null` without a price.
    pub price_source: Option<String>,
    /// `task: "rl"`: the seconds of the step spent generating the round's completions
    /// (`throughput::rl`), part of `step_time_s`; absent for other tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_s: Option<f64>,
}

/// An inference job's rates (contract `throughput`, infer), over all its sequences, and the
/// time of one `generate` call of the job ([`infer`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InferThroughput {
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    /// One `generate` call: the prefill (which yields the first new token) and
    /// `new_tokens − 1` decode steps, seconds.
    pub generate_s: f64,
    pub prefill_s: f64,
    /// One decode step (a new token for every sequence), seconds.
    pub decode_step_s: f64,
    /// What a decode step is bound by: `launch` (the host issuing eager ops), `memory`,
    /// `compute`, `offload` (layers read from host RAM).
    pub bound: &'static str,
}

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
}

impl Setup {
    /// The layout of a resolved job.
    pub fn of_job(job: &ResolvedJob, trainable_params: f64) -> Setup {
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
        }
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
    pub compute_s: f64,
    pub communication_s: f64,
    pub offload_s: f64,
    pub bubble_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    /// Bytes moved over the host link per step (offload).
    pub host_bytes: f64,
}

impl StepTime {
    /// The part the step spends most on: `compute`, `communication`, `offload` or `bubble`.
    pub fn dominant(&self) -> &'static str {
        [
            (self.compute_s, "compute"),
            (self.communication_s, "communication"),
            (self.offload_s, "offload"),
            (self.bubble_s, "pipeline bubble"),
        ]
        .into_iter()
        .fold((f64::MIN, "compute"), |a, b| if b.0 > a.0 { b } else { a })
        .1
    }

    /// The contract's shape, with a price per GPU-hour when one is known.
    pub fn report(&self, price: Option<&price::Price>) -> TrainThroughput {
        TrainThroughput {
            step_time_s: self.step_s,
            tokens_per_s_per_gpu: self.tokens_per_s_per_gpu,
            mfu: self.mfu,
            compute_s: self.compute_s,
            communication_s: self.communication_s,
            offload_s: self.offload_s,
            bubble_s: self.bubble_s,
            cost_per_million_tokens: price
                .map(|p| p.per_gpu_hour / 3600.0 / self.tokens_per_s_per_gpu * 1e6),
            price_per_gpu_hour: price.map(|p| p.per_gpu_hour),
            price_source: price.map(|p| p.source.clone()),
            generation_s: None,
        }
    }
}

/// The modelled training step of a layout.
pub fn train_step(shape: &ModelShape, s: &Setup, hw: &Hardware) -> StepTime {
    let mb = compute::micro_batch(shape, s, hw);
    let comm = communication::exposed(shape, s, hw, &mb);
    let params_gpu = shape.params / (s.tp * s.pp) as f64;
    let (off_mb, off_step, host_bytes) = offload::exposed(s, hw, &mb, params_gpu);
    let m = s.microbatches as f64;
    let optimizer_gpu = if s.offload == Offload::None {
        let trainable = if s.peft {
            s.trainable_params / (s.tp * s.pp) as f64
        } else {
            params_gpu
        };
        let sharded = if s.zero >= 1 { s.dp as f64 } else { 1.0 };
        hw.memory_s(trainable / sharded * s.step_bytes as f64)
    } else {
        0.0
    };
    let compute_s = m * mb.total() + optimizer_gpu;
    let communication_s = m * comm.per_micro_batch_s + comm.per_step_s;
    let offload_s = m * off_mb + off_step;
    let bubble_s = (s.pp - 1) as f64 * (mb.total() + comm.per_micro_batch_s);
    let step_s = compute_s + communication_s + offload_s + bubble_s;
    let tokens = (s.micro_batch * s.seq) as f64 * m * s.dp as f64;
    let gpus = s.gpus() as f64;
    StepTime {
        step_s,
        compute_s,
        communication_s,
        offload_s,
        bubble_s,
        tokens_per_s_per_gpu: tokens / step_s / gpus,
        mfu: mb.model_flops * m / (step_s * hw.peak),
        host_bytes,
    }
}

/// Trainable parameters of a job's model: the LoRA adapters under PEFT, else all.
pub fn trainable_params(model: &ModelInput, job: &ResolvedJob) -> f64 {
    let all = model.params_total as f64;
    let (Some(p), Some(inv)) = (&job.peft, &model.inventory) else {
        return all;
    };
    // The targets' matching is remembered per model (`estimate::memo`).
    let modules = model.memo().lora_modules(&p.targets, || {
        crate::estimate::states::lora_modules(&inv.tensors, &p.targets)
    });
    crate::estimate::states::adapters_of(&modules, &p.targets, p.rank)
        .map(|v| v.iter().map(|(_, n)| *n as f64).sum())
        .unwrap_or(all)
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
    let shape = model.memo().shape(|| ModelShape::of(model));
    match job.task {
        Task::Train => {
            let setup = Setup::of_job(job, trainable_params(model, job));
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
            let s = rl::step(shape, job, r, &hw, trainable_params(model, job));
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
