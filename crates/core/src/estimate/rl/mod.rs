//! `task: "rl"`: a policy that trains while a generator makes its completions, on the same
//! GPUs. Modelled on TRL's `GRPOTrainer` with `use_vllm=True, vllm_mode="colocate"`
//! (`trl/trainer/grpo_trainer.py`, `trl/generation/vllm_generation.py`) and its `DPOTrainer`.
//! The step has two phases, each estimated by the existing pieces:
//!
//! - **generation**: the trainer's states stay resident (parameters, master weights, optimizer
//!   states; gradients were freed by the last `zero_grad`), the reference model too, while a
//!   vLLM engine in the same process holds its own copy of the weights, its KV pool (sized by
//!   `gpu_memory_utilization` of the GPU's total, `engines::vllm::budget::vllm_budget`), its forward working
//!   set and CUDA graphs. Without a generator the policy generates itself (transformers'
//!   `generate`, the `infer` estimate); with a generator elsewhere (`colocate: false`) this GPU
//!   only waits.
//! - **training**: the policy's step walked as any training step (`simulate`), on
//!   per-device-batch sequences of prompt + completion tokens, with GRPO's loss over the
//!   completion tokens' logits only; beside it the reference model and what vLLM keeps — all
//!   of it awake, or, in sleep mode (`llm.sleep(level=2)`: weights and KV cache discarded),
//!   its CUDA graphs only.
//!
//! The peak is the larger phase (by device total). Each phase's figures are what that phase
//! holds itself: the caching allocator's blocks cached from the training step are reused by
//! generation's working set, so the larger of the two phases is the step's peak either way.

mod phases;

use super::input::ModelInput;
use crate::error::CoreError;
use crate::job::{Framework, ResolvedJob, Rl, RlAlgorithm, Task};
use crate::report::*;
pub use crate::report::{GeneratorFigures, PhaseFigures, RlFigures, Roles, Rollouts};
use phases::{colocated_engine, generation, policy_step, reference_bytes, training, Engine, Phase};

/// Estimates an RL job: both phases, the peak, the fit.
pub fn run(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let rl = job
        .rl
        .as_ref()
        .ok_or_else(|| CoreError::field("rl", "task rl needs the rl object"))?;
    check(model, job, rl)?;
    let step = policy_step(model, job, rl)?;
    let reference = reference_bytes(job, rl, &step);
    let engine = colocated_engine(model, job, rl, &step, reference)?;
    let gen = generation(model, job, rl, &step, reference, engine.as_ref())?;
    let train = training(&step, reference, engine.as_ref());
    assemble(job, rl, step, [gen, Some(train)], engine)
}

/// What is not modelled is refused in one line.
fn check(model: &ModelInput, job: &ResolvedJob, rl: &Rl) -> Result<(), CoreError> {
    if rl.algorithm == RlAlgorithm::Ppo {
        return Err(CoreError::field(
            "rl.algorithm",
            "ppo is not modelled yet (TRL's PPOTrainer trains a value model beside the policy \
             and keeps a reward model and a reference policy); grpo and dpo are",
        ));
    }
    if model.spec.is_none() {
        return Err(CoreError::field(
            "model",
            "task rl needs the model's architecture (a bare parameter count has none)",
        ));
    }
    if matches!(job.framework, Framework::Vllm | Framework::LlamaCpp) {
        return Err(CoreError::field(
            "framework",
            format!(
                "task rl trains the policy: the framework is the trainer's (pytorch, deepspeed, \
                 fsdp), not {}",
                job.framework.as_str()
            ),
        ));
    }
    Ok(())
}

/// The Report: the peak phase's figures as `per_gpu`, both phases' events as the timeline.
fn assemble(
    job: &ResolvedJob,
    rl: &Rl,
    step: Report,
    phases: [Option<Phase>; 2],
    engine: Option<Engine>,
) -> Result<Report, CoreError> {
    let phases: Vec<Phase> = phases.into_iter().flatten().collect();
    // The later phase wins a tie: training, whose peak the step's own figures describe.
    let peak = phases
        .iter()
        .rev()
        .max_by_key(|p| p.figures.device_total)
        .map(|p| p.figures.clone())
        .ok_or_else(|| CoreError::field("rl", "no phase to estimate"))?;
    let gpu = job.gpu.as_deref().map(crate::gpu::find).transpose()?;
    let starts = engine.as_ref().is_none_or(|e| e.figures.starts);
    let fit = gpu.map(|g| {
        let usable = job.usable(g.memory_bytes);
        let total = peak.device_total;
        Fit {
            target: TargetGpu::from(g),
            fits: total <= usable && starts,
            headroom: usable as i64 - total as i64,
            reserve: job.reserve,
        }
    });
    let mut warnings = step.warnings.clone();
    let mut timeline = Vec::new();
    for p in &phases {
        warnings.extend(p.warnings.iter().cloned());
        timeline.extend(p.timeline.iter().cloned());
    }
    let generator = engine.as_ref().map(|e| e.figures.clone());
    let peak_phase = peak.phase.to_string();
    Ok(Report {
        per_gpu: PerGpu {
            components: peak.components,
            model_states: step.per_gpu.model_states,
            peaks: PeakFigures {
                activation_bytes_per_layer: step.per_gpu.peaks.activation_bytes_per_layer,
                peak_allocated: Some(peak.peak_allocated),
                peak_reserved: Some(peak.peak_reserved),
                device_total: Some(peak.device_total),
                peak_phase: Some(peak_phase.clone()),
            },
            kv_pool: generator.as_ref().map(|g| g.budget.kv_pool),
            rank: step.per_gpu.rank.clone(),
            host_bytes: step.per_gpu.host_bytes,
            paged_states: step.per_gpu.paged_states,
            allocator: step.per_gpu.allocator,
        },
        model: step.model,
        job: job.clone(),
        timeline,
        fit,
        warnings,
        engine: generator
            .as_ref()
            .map(|g| serde_json::to_value(&g.budget).unwrap_or_default()),
        advice: None,
        throughput: None,
        rl: Some(RlFigures {
            algorithm: rl.algorithm,
            phases: phases.into_iter().map(|p| p.figures).collect(),
            peak_phase,
            rollouts: engine.as_ref().map(|e| e.rollouts),
            generator,
        }),
    })
}

/// The job one phase runs as: `task` with the RL fields dropped.
fn sub_job(job: &ResolvedJob, task: Task) -> ResolvedJob {
    ResolvedJob {
        task,
        rl: None,
        ..job.clone()
    }
}
