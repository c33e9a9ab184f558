//! Fit: the largest micro-batch, sequence or context that fits a GPU, found by searching the
//! estimator (memory is not linear in batch or sequence: attention's s² terms, the fixed model
//! states and the allocator's rounding bend it), and the what-if table of saving techniques.

use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::{ResolvedJob, Task};
pub(crate) mod probe;

use crate::engines::engine::{Engine, FitSearch};
pub use crate::engines::vllm::fit::pool_text;
pub use crate::report::{FitAnswer, Launch, LayersSpeed};
pub use crate::search::largest;
pub(crate) use probe::fits_in;

/// Upper bound of the batch search (the job field's own limit).
const MAX_BATCH: u64 = 1 << 24;

/// Searches the largest batch and sequence (train) or batch and context (infer) that fit the
/// job's GPU; for a serving engine, with the flags to launch it at that answer.
pub fn fit(model: &ModelInput, job: &ResolvedJob) -> Result<FitAnswer, CoreError> {
    if job.task == Task::Rl {
        return Err(CoreError::field(
            "task",
            "fit searches batch and context of train and infer jobs; for task rl, estimate \
             says whether it fits and what to change (--advise)",
        ));
    }
    let engine = crate::engines::engine(job.framework);
    let (job, note) = engine.fit_job(model, job.clone())?;
    let mut answer = search(engine, model, &job)?;
    if let Some(gpu) = job.gpu.as_deref() {
        let capacity = job.usable(crate::gpu::find(gpu)?.memory_bytes);
        let mut evals = 0;
        if let Some((n, why)) = crate::fit_vision::max_images(model, &job, capacity, &mut evals)? {
            answer.max_images = Some(n);
            answer.notes.extend(why);
            answer.evaluations += evals;
        }
    }
    answer.notes.extend(note);
    answer.notes.extend(recurrent_state_note(model, &job));
    answer
        .notes
        .extend(crate::estimate::engines::replicas_note(&job));
    let blocks = model.spec.as_ref().map_or(0, |s| s.num_layers());
    answer.launch = crate::launch::launch(&model.name, &job, &answer, blocks);
    let at_layers = match answer.max_gpu_layers {
        Some(n) if engine.fit_speed_at_layers(&job) => {
            let mut j = job.clone();
            j.set_engine("n_gpu_layers", n.into())?;
            j
        }
        _ => job.clone(),
    };
    answer.throughput_at_max_batch = throughput_at(model, &at_layers, answer.max_batch);
    answer.gpu_layers_speed =
        crate::fit_speed::gpu_layers_speed(model, &job, answer.max_gpu_layers)?;
    Ok(answer)
}

/// The Report's `throughput` of `job` at micro-batch (train) or concurrent sequences (infer)
/// `batch`; `None` without a batch or a modelled throughput.
fn throughput_at(
    model: &ModelInput,
    job: &ResolvedJob,
    batch: Option<u64>,
) -> Option<crate::report::Throughput> {
    let j = ResolvedJob {
        batch: batch?,
        ..job.clone()
    };
    estimate(model, &j).ok()?.throughput
}

/// Says, for a model with state-space layers, that their recurrent state (conv + SSM state per
/// sequence, [`crate::estimate::kv::state_bytes_per_sequence`]) does not grow with context, and
/// what does: the attention layers' KV (hybrids), else only activations (and, in inference,
/// the prefill's logits).
fn recurrent_state_note(model: &ModelInput, job: &ResolvedJob) -> Option<String> {
    let spec = model.spec.as_ref()?;
    let ssm = spec
        .decoder
        .layers
        .iter()
        .filter(|l| l.holds_state())
        .count();
    if ssm == 0 {
        return None;
    }
    let per_seq = crate::estimate::kv::state_bytes_per_sequence(
        spec,
        job.precision.compute_bytes(),
        job.framework,
    );
    let attn = spec
        .decoder
        .layers
        .iter()
        // Nemotron-H's MLP and MoE layers hold no attention (`Attention::is_absent`).
        .filter(|l| {
            // Zamba2's hybrid layers cache the K/V of the shared block they apply.
            (l.attention.kind.state_space().is_none() && !l.attention.is_absent())
                || l.shared_block.is_some()
        })
        .count();
    if spec.decoder.layers.iter().any(|l| l.parallel_ssm.is_some()) {
        // Falcon-H1: every layer runs attention and a state-space mixer side by side.
        return Some(format!(
            "the recurrent state of the {ssm} layers' state-space mixers ({} per sequence) does \
             not grow with context: only the {attn} layers' attention KV cache and the \
             activations grow with it",
            crate::text::bytes(per_seq)
        ));
    }
    let grows = if attn > 0 {
        format!("only the {attn} attention layers' KV cache and the activations grow with it")
    } else {
        "the limit comes from activations (and the prefill's logits), not from a cache".to_string()
    };
    let version = spec
        .decoder
        .layers
        .iter()
        .find_map(|l| l.attention.kind.state_space().map(|s| s.version));
    let kind = match version {
        Some(crate::model::SsmVersion::GatedDeltaNet) => "gated DeltaNet (linear-attention)",
        Some(crate::model::SsmVersion::ShortConv) => "short-convolution (LFM2)",
        _ => "state-space",
    };
    Some(format!(
        "the recurrent state of the {ssm} {kind} layers ({} per sequence) does not grow \
         with context: {grows}",
        crate::text::bytes(per_seq)
    ))
}

/// The searches by engine: vLLM's KV pool, llama.cpp's GPU layers and then the batch and
/// sequence limits at them, or the batch and sequence limits of a PyTorch step.
fn search(
    engine: &dyn Engine,
    model: &ModelInput,
    job: &ResolvedJob,
) -> Result<FitAnswer, CoreError> {
    let gpu_id = job
        .gpu
        .as_deref()
        .ok_or_else(|| CoreError::field("gpu", "fit needs a GPU (e.g. --gpu a100-80gb)"))?;
    let gpu = crate::gpu::find(gpu_id)?;
    // Everything is searched against what the user's reserve leaves (contract `reserve`).
    let capacity = job.usable(gpu.memory_bytes);
    let Some(spec) = &model.spec else {
        return Ok(no_architecture(gpu, job));
    };
    let max_pos = spec.max_position_embeddings;
    let s = FitSearch {
        model,
        spec,
        job,
        gpu,
        capacity,
        max_pos,
    };
    // The engines' own searches are of serving (an inference job); a training job's are a
    // PyTorch step's, whatever the framework.
    let engine = if job.task == Task::Infer {
        engine
    } else {
        crate::engines::engine(crate::job::Framework::Pytorch)
    };
    if let Some(answer) = engine.fit_search(&s)? {
        return Ok(answer);
    }
    let mut notes = Vec::new();
    let mut evals = 0u64;
    let max_gpu_layers = engine.fit_gpu_layers(&s, &mut evals, &mut notes)?;
    // llama.cpp: when every layer on the GPU does not fit, the limits below are those at the
    // most layers that do (`-ngl N`), with the rest in host RAM.
    let at_ngl = match max_gpu_layers {
        Some(n) if job.engine.n_gpu_layers.is_none() => {
            Some(at_gpu_layers(model, spec, job, n, &mut notes)?)
        }
        _ => None,
    };
    let job = at_ngl.as_ref().unwrap_or(job);
    let max_batch = largest(MAX_BATCH, |b| {
        let j = ResolvedJob {
            batch: b,
            ..job.clone()
        };
        fits_in(model, &j, capacity, &mut evals)
    })?;
    let infer = job.task == Task::Infer;
    let mut fits = |j: &ResolvedJob| fits_in(model, j, capacity, &mut evals);
    let (longest, limited, seq_cap) = match engine.fit_longest(job, max_pos, &mut fits) {
        Some(found) => found?,
        None => longest_sequence(model, job, capacity, max_pos, &mut evals)?,
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
        max_batch,
        max_seq: (!infer).then_some(longest).flatten(),
        max_context: if infer { longest } else { None },
        seq_limited_by_model: limited,
        model_max_positions: max_pos,
        max_gpu_layers,
        evaluations: evals,
        notes,
        ..FitAnswer::on(gpu, job.reserve)
    })
}

/// A bare parameter count: no architecture, so no activations and no limits.
fn no_architecture(gpu: &crate::gpu::Gpu, job: &ResolvedJob) -> FitAnswer {
    FitAnswer {
        notes: vec![
            "a bare parameter count has no architecture, so activations (and so the batch and \
             sequence limits) cannot be computed"
                .into(),
        ],
        ..FitAnswer::on(gpu, job.reserve)
    }
}

/// The job at `-ngl n`, with a note of what stays in host RAM when not every layer is on the
/// GPU.
fn at_gpu_layers(
    model: &ModelInput,
    spec: &crate::model::ModelSpec,
    job: &ResolvedJob,
    n: u64,
    notes: &mut Vec<String>,
) -> Result<ResolvedJob, CoreError> {
    let mut j = job.clone();
    j.set_engine("n_gpu_layers", n.into())?;
    let host = estimate(model, &j)
        .ok()
        .and_then(|r| crate::advice::host_bytes(&r))
        .unwrap_or(0);
    if n < spec.num_layers() + 1 {
        let flag = crate::engines::settings::layers_flag(job.framework);
        notes.push(format!(
            "fits with {flag} {n}, {} in host RAM (the limits are at {flag} {n})",
            crate::text::bytes(host)
        ));
    }
    Ok(j)
}

/// The longest sequence (train) or context (infer: prompt + generated tokens, the prompt
/// growing) that fits at the job's batch, whether the search stopped at the model's maximum
/// positions, and that cap.
fn longest_sequence(
    model: &ModelInput,
    job: &ResolvedJob,
    capacity: u64,
    max_pos: Option<u64>,
    evals: &mut u64,
) -> Result<(Option<u64>, bool, u64), CoreError> {
    let seq_cap = max_pos.unwrap_or(1 << 22).max(1);
    let infer = job.task == Task::Infer;
    let cap = if infer {
        seq_cap.saturating_sub(job.new_tokens).max(1)
    } else {
        seq_cap
    };
    let best = largest(cap, |s| {
        let j = ResolvedJob {
            seq: s,
            ..job.clone()
        };
        fits_in(model, &j, capacity, evals)
    })?;
    let limited = best == Some(cap) && max_pos.is_some();
    let longest = if infer {
        best.map(|s| s + job.new_tokens)
    } else {
        best
    };
    Ok((longest, limited, seq_cap))
}

pub use crate::advice::whatif::{what_if, WhatIf};
