//! Fit: the largest micro-batch, sequence or context that fits a GPU, found by searching the
//! estimator (memory is not linear in batch or sequence: attention's s² terms, the fixed model
//! states and the allocator's rounding bend it), and the what-if table of saving techniques.

use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::{
    AttentionKernel, Checkpointing, Framework, Optimizer, Peft, PeftMethod, Precision, ResolvedJob,
    Task,
};
use serde::Serialize;

/// The contract's fit answer (train: `max_batch`, `max_seq`; infer: `max_batch`,
/// `max_context`), with what the search found along the way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitAnswer {
    pub gpu: String,
    pub capacity: u64,
    /// Largest micro-batch (train) or number of concurrent sequences (infer) at the job's
    /// sequence/context; `null` when even 1 does not fit.
    pub max_batch: Option<u64>,
    /// train: largest sequence at the job's batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq: Option<u64>,
    /// infer: largest context (prompt + generated tokens) per sequence at the job's batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u64>,
    /// Whether the sequence search stopped at the model's maximum positions.
    pub seq_limited_by_model: bool,
    /// The model's maximum positions, when known.
    pub model_max_positions: Option<u64>,
    /// llama.cpp: the most layers `-ngl` can put on the GPU (the block count + 1 means the
    /// output layer too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gpu_layers: Option<u64>,
    /// Estimates evaluated.
    pub evaluations: u64,
    pub notes: Vec<String>,
    /// A serving engine's own flags for this answer (`crate::launch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch: Option<crate::launch::Launch>,
}

/// Upper bound of the batch search (the job field's own limit).
const MAX_BATCH: u64 = 1 << 24;

/// `device_total` of `job`, or `None` when the estimator cannot give one.
fn total(model: &ModelInput, job: &ResolvedJob, evals: &mut u64) -> Result<Option<u64>, CoreError> {
    *evals += 1;
    match estimate(model, job) {
        Ok(r) => Ok(r.per_gpu.device_total),
        // Sizes past the estimator's limits do not fit anything.
        Err(CoreError::InvalidField { field, .. }) if field == "batch" => Ok(Some(u64::MAX)),
        Err(e) => Err(e),
    }
}

/// Largest `x` in [1, hi] with `fits(x)`, assuming fitting is monotone (more never fits
/// when less does not); `None` when 1 does not fit. Exponential then binary search.
pub fn largest(
    hi: u64,
    mut fits: impl FnMut(u64) -> Result<bool, CoreError>,
) -> Result<Option<u64>, CoreError> {
    if !fits(1)? {
        return Ok(None);
    }
    let mut lo = 1u64;
    let mut step = 1u64;
    let mut up = loop {
        let probe = lo.saturating_add(step).min(hi);
        if probe == lo {
            return Ok(Some(lo));
        }
        if fits(probe)? {
            lo = probe;
            if probe == hi {
                return Ok(Some(hi));
            }
            step = step.saturating_mul(2);
        } else {
            break probe;
        }
    };
    while up - lo > 1 {
        let mid = lo + (up - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            up = mid;
        }
    }
    Ok(Some(lo))
}

/// Searches the largest batch and sequence (train) or batch and context (infer) that fit the
/// job's GPU; for a serving engine, with the flags to launch it at that answer.
pub fn fit(model: &ModelInput, job: &ResolvedJob) -> Result<FitAnswer, CoreError> {
    let mut answer = search(model, job)?;
    let blocks = model.spec.as_ref().map_or(0, |s| s.num_layers());
    answer.launch = crate::launch::launch(&model.name, job, &answer, blocks);
    Ok(answer)
}

fn search(model: &ModelInput, job: &ResolvedJob) -> Result<FitAnswer, CoreError> {
    let gpu_id = job
        .gpu
        .as_deref()
        .ok_or_else(|| CoreError::field("gpu", "fit needs a GPU (e.g. --gpu a100-80gb)"))?;
    let gpu = crate::gpu::find(gpu_id)?;
    let capacity = gpu.memory_bytes;
    let mut notes = Vec::new();
    let mut evals = 0u64;
    if model.spec.is_none() {
        notes.push(
            "a bare parameter count has no architecture, so activations (and so the batch and \
             sequence limits) cannot be computed"
                .into(),
        );
        return Ok(FitAnswer {
            gpu: gpu.id.clone(),
            capacity,
            max_batch: None,
            max_seq: None,
            max_context: None,
            seq_limited_by_model: false,
            model_max_positions: None,
            max_gpu_layers: None,
            evaluations: 0,
            notes,
            launch: None,
        });
    }
    let max_pos = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    if let (Framework::Vllm, Task::Infer, Some(spec)) = (job.framework, job.task, &model.spec) {
        return vllm_fit(model, spec, job, gpu, max_pos);
    }
    let max_gpu_layers = match (job.framework, job.task, &model.spec) {
        (Framework::LlamaCpp, Task::Infer, Some(spec)) => {
            let all = spec.num_layers() + 1;
            let mut best = None;
            // Memory grows with every layer moved to the GPU: the largest that fits.
            for ngl in (0..=all).rev() {
                let mut j = job.clone();
                if let serde_json::Value::Object(m) = &mut j.engine {
                    m.insert("n_gpu_layers".into(), ngl.into());
                }
                if total(model, &j, &mut evals)?.is_some_and(|t| t <= capacity) {
                    best = Some(ngl);
                    break;
                }
            }
            best
        }
        _ => None,
    };
    let fits_with = |j: &ResolvedJob, evals: &mut u64| -> Result<bool, CoreError> {
        Ok(total(model, j, evals)?.is_some_and(|t| t <= capacity))
    };
    let max_batch = largest(MAX_BATCH, |b| {
        let j = ResolvedJob {
            batch: b,
            ..job.clone()
        };
        fits_with(&j, &mut evals)
    })?;
    let infer = job.task == Task::Infer;
    let seq_cap = max_pos.unwrap_or(1 << 22).max(1);
    let mut limited = false;
    let longest = if infer {
        // Context = prompt + generated tokens; the prompt grows, generation stays.
        let cap = seq_cap.saturating_sub(job.new_tokens).max(1);
        let best = largest(cap, |s| {
            let j = ResolvedJob {
                seq: s,
                ..job.clone()
            };
            fits_with(&j, &mut evals)
        })?;
        limited = best == Some(cap) && max_pos.is_some();
        best.map(|s| s + job.new_tokens)
    } else {
        let best = largest(seq_cap, |s| {
            let j = ResolvedJob {
                seq: s,
                ..job.clone()
            };
            fits_with(&j, &mut evals)
        })?;
        limited = limited || (best == Some(seq_cap) && max_pos.is_some());
        best
    };
    if limited {
        notes.push(format!(
            "the sequence search stopped at the model's maximum of {} positions",
            seq_cap
        ));
    }
    if max_batch.is_none() {
        notes.push(format!(
            "even batch 1 at seq {} does not fit {}",
            job.seq, gpu.id
        ));
    }
    Ok(FitAnswer {
        gpu: gpu.id.clone(),
        capacity,
        max_batch,
        max_seq: (!infer).then_some(longest).flatten(),
        max_context: if infer { longest } else { None },
        seq_limited_by_model: limited,
        model_max_positions: max_pos,
        max_gpu_layers,
        evaluations: evals,
        notes,
        launch: None,
    })
}

/// One row of the what-if table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    pub technique: String,
    /// What changes in the job.
    pub change: String,
    pub peak_allocated: Option<u64>,
    pub device_total: Option<u64>,
    /// device_total of the job minus this row's (positive = saved).
    pub saved: Option<i64>,
    pub fits: Option<bool>,
}

/// What each saving technique would buy on its own, and all of them together (the seed's
/// table: mixed precision, 16-bit states, 8-bit optimizer, SGD, checkpointing, smaller
/// micro-batch with accumulation, flash attention, LoRA, QLoRA, ZeRO sharding).
pub fn what_if(model: &ModelInput, job: &ResolvedJob) -> Result<Vec<WhatIf>, CoreError> {
    let base = estimate(model, job)?;
    let base_total = base.per_gpu.device_total;
    let capacity = job
        .gpu
        .as_deref()
        .and_then(|g| crate::gpu::find(g).ok())
        .map(|g| g.memory_bytes);
    let mut variants: Vec<(String, String, ResolvedJob)> = Vec::new();
    let mut push = |name: &str, change: String, j: ResolvedJob| {
        if j != *job {
            variants.push((name.to_string(), change, j));
        }
    };
    let train = job.task == Task::Train;
    if train {
        if job.precision == Precision::Fp32 {
            push(
                "mixed precision",
                "precision bf16-mixed".into(),
                ResolvedJob {
                    precision: Precision::Bf16Mixed,
                    ..job.clone()
                },
            );
        }
        if matches!(
            job.precision,
            Precision::Fp32 | Precision::Bf16Mixed | Precision::Fp16Mixed
        ) {
            push(
                "pure bf16 (16-bit weights, grads, states)",
                "precision bf16".into(),
                ResolvedJob {
                    precision: Precision::Bf16,
                    ..job.clone()
                },
            );
        }
        if matches!(
            job.optimizer,
            Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWFused
        ) {
            push(
                "8-bit optimizer",
                "optimizer adamw-8bit".into(),
                ResolvedJob {
                    optimizer: Optimizer::AdamW8bit,
                    ..job.clone()
                },
            );
            push(
                "fused AdamW (no foreach scratch)",
                "optimizer adamw-fused".into(),
                ResolvedJob {
                    optimizer: Optimizer::AdamWFused,
                    ..job.clone()
                },
            );
        }
        if job.optimizer != Optimizer::Sgd {
            push(
                "SGD (no optimizer state)",
                "optimizer sgd".into(),
                ResolvedJob {
                    optimizer: Optimizer::Sgd,
                    ..job.clone()
                },
            );
        }
        if job.checkpointing != Checkpointing::Full {
            push(
                "gradient checkpointing",
                "checkpointing full".into(),
                ResolvedJob {
                    checkpointing: Checkpointing::Full,
                    ..job.clone()
                },
            );
        }
        if job.batch > 1 {
            push(
                "micro-batch 1 + gradient accumulation",
                format!("batch 1, grad_accum {}", job.batch * job.grad_accum),
                ResolvedJob {
                    batch: 1,
                    grad_accum: job.batch * job.grad_accum,
                    ..job.clone()
                },
            );
        }
        if job.peft.is_none() && model.inventory.is_some() {
            let lora = |method| Peft {
                method,
                rank: 16,
                alpha: 32.0,
                targets: ["q_proj", "k_proj", "v_proj", "o_proj"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            };
            let has_targets = model
                .inventory
                .as_ref()
                .is_some_and(|i| i.tensors.iter().any(|t| t.name.ends_with("q_proj.weight")));
            if has_targets {
                push(
                    "LoRA r=16 on q,k,v,o",
                    "peft lora r16".into(),
                    ResolvedJob {
                        peft: Some(lora(PeftMethod::Lora)),
                        ..job.clone()
                    },
                );
                push(
                    "QLoRA r=16 (NF4 + double quant)",
                    "peft qlora r16, weights nf4-dq".into(),
                    ResolvedJob {
                        peft: Some(lora(PeftMethod::Qlora)),
                        weights: "nf4-dq".into(),
                        ..job.clone()
                    },
                );
            }
        }
        if job.parallel.gpus == 1 {
            for (zero, name) in [(2u64, "ZeRO-2 over 8 GPUs"), (3, "ZeRO-3 over 8 GPUs")] {
                let mut p = job.parallel.clone();
                p.gpus = 8;
                p.dp = 8;
                p.zero = zero;
                push(
                    name,
                    format!("framework deepspeed, 8 GPUs, zero {zero}"),
                    ResolvedJob {
                        framework: Framework::Deepspeed,
                        parallel: p,
                        ..job.clone()
                    },
                );
            }
        }
    }
    let lm = model.spec.as_ref().is_some_and(|s| {
        matches!(
            s.head,
            crate::model::Head::LanguageModel { .. } | crate::model::Head::MaskedLm { .. }
        )
    });
    if train && lm && job.loss == crate::job::LossKernel::Standard {
        push(
            "chunked cross-entropy (fused linear CE)",
            "loss chunked".into(),
            ResolvedJob {
                loss: crate::job::LossKernel::Chunked,
                ..job.clone()
            },
        );
    }
    if job.attention == AttentionKernel::Eager {
        push(
            "flash attention",
            "attention flash".into(),
            ResolvedJob {
                attention: AttentionKernel::Flash,
                ..job.clone()
            },
        );
    }
    if train {
        // Everything that keeps the full model trainable, together.
        let mut all = job.clone();
        let mut changes = Vec::new();
        if all.precision != Precision::Bf16 && all.precision != Precision::Fp16 {
            all.precision = Precision::Bf16;
            changes.push("precision bf16");
        }
        if matches!(
            all.optimizer,
            Optimizer::Adam | Optimizer::AdamW | Optimizer::AdamWFused
        ) {
            all.optimizer = Optimizer::AdamW8bit;
            changes.push("optimizer adamw-8bit");
        }
        if all.checkpointing != Checkpointing::Full {
            all.checkpointing = Checkpointing::Full;
            changes.push("checkpointing full");
        }
        if all.attention == AttentionKernel::Eager {
            all.attention = AttentionKernel::Flash;
            changes.push("attention flash");
        }
        if lm && all.loss == crate::job::LossKernel::Standard {
            all.loss = crate::job::LossKernel::Chunked;
            changes.push("chunked loss");
        }
        if all.batch > 1 {
            all.grad_accum *= all.batch;
            all.batch = 1;
            changes.push("batch 1 + accumulation");
        }
        if changes.len() > 1 {
            variants.push(("combined (full fine-tune)".into(), changes.join(", "), all));
        }
    }
    let mut rows = Vec::new();
    for (name, change, j) in variants {
        let r = match estimate(model, &j) {
            Ok(r) => r,
            Err(_) => continue,
        };
        let t = r.per_gpu.device_total;
        rows.push(WhatIf {
            technique: name,
            change,
            peak_allocated: r.per_gpu.peak_allocated,
            device_total: t,
            saved: base_total.zip(t).map(|(b, t)| b as i64 - t as i64),
            fits: capacity.zip(t).map(|(c, t)| t <= c),
        });
    }
    Ok(rows)
}

/// vLLM: what fits in the KV pool the engine would allocate (its start-up log's "GPU KV cache
/// size" and "Maximum concurrency"): the most sequences at the job's context, and the longest
/// context at the job's batch (paged in `block_size` tokens).
fn vllm_fit(
    model: &ModelInput,
    spec: &crate::model::ModelSpec,
    job: &ResolvedJob,
    gpu: &crate::gpu::Gpu,
    max_pos: Option<u64>,
) -> Result<FitAnswer, CoreError> {
    let report = estimate(model, job)?;
    let pool = report.per_gpu.kv_pool.unwrap_or(0);
    let context = job.seq + job.new_tokens;
    let per_seq = crate::estimate::engines::kv_bytes_per_gpu(spec, job, 1, context)?.max(1);
    let max_batch = Some(pool / per_seq).filter(|b| *b >= 1);
    let cap = report
        .engine
        .as_ref()
        .and_then(|e| e.get("max_model_len"))
        .and_then(|v| v.as_u64())
        .or(max_pos)
        .unwrap_or(1 << 22);
    let mut evals = 1u64;
    let max_context = largest(cap, |c| {
        evals += 1;
        Ok(crate::estimate::engines::kv_bytes_per_gpu(spec, job, job.batch, c)? <= pool)
    })?;
    let limited = max_context == Some(cap);
    let mut notes = vec![format!("vLLM's KV pool on {}: {} bytes", gpu.id, pool)];
    if limited {
        notes.push(format!("the context search stopped at max_model_len {cap}"));
    }
    Ok(FitAnswer {
        gpu: gpu.id.clone(),
        capacity: gpu.memory_bytes,
        max_batch,
        max_seq: None,
        max_context,
        seq_limited_by_model: limited,
        model_max_positions: max_pos,
        max_gpu_layers: None,
        evaluations: evals,
        notes,
        launch: None,
    })
}
