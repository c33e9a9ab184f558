//! The what-if table: each technique of [`super::techniques::TECHNIQUES`] on its own, with the
//! flags that make it, and (for a full fine-tune) every saving that keeps all weights trained.

use super::techniques::{Group, TECHNIQUES};
use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::{Checkpointing, Framework, Optimizer, Precision, ResolvedJob, Task};
use crate::report::Throughput;
use serde::Serialize;

/// One row of the what-if table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    /// The technique's name, as [`super::techniques::TECHNIQUES`] lists it.
    pub technique: String,
    /// What changes in the job: the flags, space-separated.
    pub change: String,
    /// The flags to add to the job's command line.
    pub flags: Vec<String>,
    /// The changed job's `per_gpu.peak_allocated` (what `torch.cuda.max_memory_allocated()`
    /// would read over its step).
    pub peak_allocated: Option<u64>,
    /// The changed job's `per_gpu.device_total` (what `nvidia-smi` would show used by the
    /// process).
    pub device_total: Option<u64>,
    /// device_total of the job minus this row's (positive = saved).
    pub saved: Option<i64>,
    /// Whether the changed job fits: its report's `fit.fits` (a serving engine can fail to
    /// start inside capacity), else its `device_total` within the GPU's capacity; `null`
    /// without a GPU.
    pub fits: Option<bool>,
    /// The change's modelled training step, seconds (`throughput.step_time_s` of its
    /// estimate); `null` for inference and where the GPU's speeds are unknown.
    pub step_time_s: Option<f64>,
    /// What the change costs in time per token against the job: the job's rate over the
    /// change's, less 1 (tokens/s per GPU for training, decode tokens/s for inference), so
    /// +0.33 is a third more time per token and a negative figure is faster; `null` where
    /// either rate is unknown.
    pub time_cost: Option<f64>,
    /// A serving engine that preallocates its KV pool (vLLM, SGLang): the tokens the change's
    /// pool holds. The engine takes its share of the GPU whatever the job, so a change shows
    /// as more tokens in the pool, not as bytes saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_tokens: Option<u64>,
    /// `kv_tokens` of this row minus the job's (positive = more room).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_tokens_gained: Option<i64>,
    /// vLLM: the requests of the job's context the change's pool holds at once
    /// (`engines::vllm_concurrent_requests`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrent_requests: Option<u64>,
    /// Host RAM the change needs (llama.cpp's and ollama's layers on the CPU, offloaded
    /// states): ollama fills the GPU with as many layers as fit, so a smaller format shows as
    /// less host RAM rather than fewer device bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_bytes: Option<u64>,
    /// Environment variables the change sets (`PYTORCH_CUDA_ALLOC_CONF`), beside its flags.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// `true` when the job's reserve was simulated through the caching allocator and this
    /// change's was not (its layout is one the allocation stream does not write yet, so its
    /// reserve is `overhead.rs`'s packing estimate, which runs low): its `saved` compares two
    /// methods and may be overstated by the difference. Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reserve_estimated: bool,
}

/// Each technique that applies to the job on its own (training and inference alike), the
/// hypothetical 8-GPU ZeRO rows for a one-GPU training job, and for a full fine-tune every
/// saving that keeps all weights trained, together.
pub fn what_if(model: &ModelInput, job: &ResolvedJob) -> Result<Vec<WhatIf>, CoreError> {
    let base = estimate(model, job)?;
    let base_total = base.per_gpu.peaks.device_total;
    let base_rate = rate(&base.throughput);
    let base_tokens = pool_tokens(&base);
    let capacity = job
        .gpu
        .as_deref()
        .and_then(|g| crate::gpu::find(g).ok())
        .map(|g| g.memory_bytes);
    let ctx = super::context(model, job);
    let mut variants: Vec<(String, ResolvedJob)> = Vec::new();
    let mut order: Vec<usize> = (0..TECHNIQUES.len()).collect();
    order.sort_by_key(|&i| TECHNIQUES[i].cost);
    for i in order {
        let t = &TECHNIQUES[i];
        // One llama.cpp split stands for the sixteen.
        if t.group == Group::GpuLayers && t.param != 8 {
            continue;
        }
        if let Some(j) = super::apply(job, &ctx, &[i]) {
            variants.push((t.name.to_string(), j));
        }
    }
    if job.task == Task::Train && job.parallel.gpus == 1 {
        for zero in [2u64, 3] {
            let mut j = job.clone();
            j.framework = Framework::Deepspeed;
            j.parallel.gpus = 8;
            j.parallel.dp = 8;
            j.parallel.zero = zero;
            variants.push((format!("ZeRO-{zero} over 8 GPUs"), j));
        }
    }
    if let Some(all) = full_fine_tune_savings(job, &ctx) {
        variants.push(("combined (full fine-tune)".into(), all));
    }
    let mut rows: Vec<WhatIf> = Vec::new();
    for (name, j) in variants {
        // A change the job's own checks refuse (DeepSpeed with the optimizer in backward) is
        // no row: the row's flags must be ones the tool accepts.
        if j.check_combination().is_err() {
            continue;
        }
        let flags = super::flags::flags(job, &j);
        let env = super::flags::env(job, &j);
        // Two techniques that make the same change (÷2 and "to 1" at micro-batch 2): one row.
        if rows.iter().any(|r| r.flags == flags && r.env == env) {
            continue;
        }
        // A variant the estimator refuses (a layout it cannot model) is no row.
        let Ok(r) = estimate(model, &j) else { continue };
        let t = r.per_gpu.peaks.device_total;
        let kv_tokens = pool_tokens(&r);
        rows.push(WhatIf {
            kv_tokens,
            kv_tokens_gained: base_tokens.zip(kv_tokens).map(|(b, t)| t as i64 - b as i64),
            concurrent_requests: crate::engines::engine(j.framework)
                .concurrent_requests(model, &j, &r),
            host_bytes: super::host_bytes(&r),
            reserve_estimated: base.per_gpu.allocator.is_some() && r.per_gpu.allocator.is_none(),
            technique: name,
            change: flags.join(" "),
            flags,
            peak_allocated: r.per_gpu.peaks.peak_allocated,
            device_total: t,
            saved: base_total.zip(t).map(|(b, t)| b as i64 - t as i64),
            // The report's own verdict (a serving engine can fail to start inside capacity).
            fits: r
                .fit
                .as_ref()
                .map(|f| f.fits)
                .or_else(|| capacity.zip(t).map(|(c, t)| t <= c)),
            step_time_s: match &r.throughput {
                Some(Throughput::Train(t)) => Some(t.step_time_s),
                _ => None,
            },
            time_cost: base_rate
                .zip(rate(&r.throughput))
                .map(|(base, row)| base / row - 1.0),
            env,
        });
    }
    Ok(rows)
}

/// The tokens a preallocated KV pool holds: vLLM's blocks × block size (its log's "GPU KV
/// cache size: N tokens"), SGLang's `max_total_tokens`; `None` for other engines.
fn pool_tokens(r: &crate::report::Report) -> Option<u64> {
    r.per_gpu.kv_pool?;
    let get = |k: &str| r.engine.as_ref()?.get(k)?.as_u64();
    match (get("num_blocks"), get("block_size")) {
        (Some(n), Some(b)) => Some(n * b),
        _ => get("max_total_tokens"),
    }
}

/// The rate a job's time per token is judged by: tokens/s per GPU (train) or decode tokens/s
/// (infer); `None` without a modelled throughput or at a rate of 0.
pub(crate) fn rate(t: &Option<Throughput>) -> Option<f64> {
    let r = match t.as_ref()? {
        Throughput::Train(t) => t.tokens_per_s_per_gpu,
        Throughput::Infer(i) => i.decode_tokens_per_s,
    };
    (r > 0.0 && r.is_finite()).then_some(r)
}

/// A full fine-tune with every saving that keeps all weights trained: pure 16-bit (where the
/// GPU has bf16), paged 8-bit AdamW, the optimizer in backward (plain PyTorch and FSDP without
/// accumulation), full recomputation, flash attention, a chunked loss, else micro-batch 1 with
/// accumulation. `None` for PEFT jobs and when fewer than two savings apply.
fn full_fine_tune_savings(job: &ResolvedJob, ctx: &super::techniques::Ctx) -> Option<ResolvedJob> {
    if job.task != Task::Train || job.peft.is_some() {
        return None;
    }
    let mut all = job.clone();
    let mut changes = 0;
    if ctx.bf16 && all.precision != Precision::Bf16 && all.precision != Precision::Fp16 {
        all.precision = Precision::Bf16;
        changes += 1;
    }
    if matches!(
        all.optimizer,
        Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWFused | Optimizer::AdamW8bit
    ) {
        all.optimizer = Optimizer::AdamW8bitPaged;
        changes += 1;
    }
    // The optimizer in backward frees every gradient as it is made; it cannot accumulate, so
    // it replaces "micro-batch 1 with accumulation" where the framework runs it.
    let hook = matches!(all.framework, Framework::Pytorch | Framework::Fsdp)
        && all.grad_accum == 1
        && all.optimizer != Optimizer::None;
    if hook && !all.techniques.optimizer_in_backward {
        all.techniques.optimizer_in_backward = true;
        changes += 1;
    }
    if all.checkpointing != Checkpointing::Full {
        all.checkpointing = Checkpointing::Full;
        changes += 1;
    }
    if all.attention == crate::job::AttentionKernel::Eager {
        all.attention = crate::job::AttentionKernel::Flash;
        changes += 1;
    }
    if ctx.lm_head && all.loss == crate::job::LossKernel::Standard {
        all.loss = crate::job::LossKernel::Chunked;
        changes += 1;
    }
    if all.batch > 1 && !all.techniques.optimizer_in_backward {
        all.grad_accum *= all.batch;
        all.batch = 1;
        changes += 1;
    }
    (changes > 1).then_some(all)
}
