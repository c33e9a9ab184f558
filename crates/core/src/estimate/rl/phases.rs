//! The two phases of an RL step: the policy's training step, the colocated vLLM engine, and
//! generation (by that engine, by the policy itself, or elsewhere).

use super::{sub_job, GeneratorFigures, PhaseFigures, Roles, Rollouts};
use crate::error::CoreError;
use crate::estimate::activations::{self, ForwardPlan};
use crate::estimate::input::ModelInput;
use crate::estimate::{engines, simulate, states};
use crate::job::EngineSettings;
use crate::job::{Generator, Parallel, Precision, ResolvedJob, Rl, RlAlgorithm, Task};
use crate::model::ModelSpec;
use crate::report::{Category, CategoryBytes, Components, Report, TimelinePoint};
use serde_json::json;

/// TRL's colocated engine (`trl/generation/vllm_generation.py`, `LLM(...)`):
/// `max_num_batched_tokens=4096`.
pub const TRL_VLLM_MAX_NUM_BATCHED_TOKENS: u64 = 4096;

/// One phase: its figures, its events, what it warns of.
pub(super) struct Phase {
    pub figures: PhaseFigures,
    pub timeline: Vec<TimelinePoint>,
    pub warnings: Vec<String>,
}

/// The trainer's bytes before a step begins (the walk's first event): weights, master
/// weights, optimizer states, workspaces and communication buffers, the CUDA context.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Resident {
    pub parameters: u64,
    pub optimizer_states: u64,
    pub master_weights: u64,
    pub temporaries: u64,
    pub cuda_context: u64,
}

impl Resident {
    pub fn of(step: &Report) -> Self {
        let start = step
            .timeline
            .first()
            .map(|p| p.by_category)
            .unwrap_or_default();
        Resident {
            parameters: start.of(Category::Parameters),
            optimizer_states: start.of(Category::OptimizerStates),
            master_weights: start.of(Category::MasterWeights),
            temporaries: start.of(Category::Temporaries),
            cuda_context: step.per_gpu.components.cuda_context,
        }
    }

    /// The GPU while the trainer waits on generation: these bytes and the frozen reference
    /// model beside them (TRL keeps both resident across the round).
    fn waiting(&self, reference: u64) -> Components {
        Components {
            parameters: self.parameters + reference,
            optimizer_states: self.optimizer_states,
            master_weights: self.master_weights,
            temporaries: self.temporaries,
            cuda_context: self.cuda_context,
            ..Components::default()
        }
    }

    /// The same bytes by role: the policy's, the reference model's; `temporaries` as the
    /// phase counts them.
    fn roles(&self, reference: u64, temporaries: u64) -> Roles {
        Roles {
            policy_parameters: self.parameters,
            policy_optimizer_states: self.optimizer_states,
            policy_master_weights: self.master_weights,
            reference_model: reference,
            temporaries,
            cuda_context: self.cuda_context,
            ..Roles::default()
        }
    }
}

/// The policy's training step: per-device-batch sequences of prompt + completion tokens (DPO:
/// chosen and rejected, twice the batch, concatenated as TRL's `concatenated_forward` does),
/// GRPO's loss over the completion tokens' logits only.
pub(super) fn policy_step(
    model: &ModelInput,
    job: &ResolvedJob,
    rl: &Rl,
) -> Result<Report, CoreError> {
    let dpo = rl.algorithm == RlAlgorithm::Dpo;
    let mut tj = sub_job(job, Task::Train);
    tj.seq = rl.sequence_len();
    tj.batch = if dpo {
        job.batch.saturating_mul(2)
    } else {
        job.batch
    };
    let k = rl.completion_len;
    let edit = |spec: &ModelSpec, plan: &mut ForwardPlan| {
        if dpo {
            crate::estimate::dpo::edit(spec, &tj, rl.reference_model, plan)
        } else {
            completion_logits(spec, &tj, k, plan)
        }
    };
    simulate::run_edited(model, &tj, Some(&edit))
}

/// GRPO's log-probabilities (`grpo_trainer.py` `_get_per_token_logps_and_entropies`): the
/// model is asked for `logits_to_keep + 1` positions (the completion's, and the one before
/// it), so the head runs on those rows only, and the loss (`selective_log_softmax` of
/// `logits / temperature`) reads `completion_len` rows: the head, the logits and the loss of
/// the same job at those lengths replace the full sequence's.
fn completion_logits(
    spec: &ModelSpec,
    job: &ResolvedJob,
    completion: u64,
    plan: &mut ForwardPlan,
) -> Result<(), CoreError> {
    let mut scratch = Vec::new();
    let at = |seq: u64| ResolvedJob { seq, ..job.clone() };
    let kept = activations::forward(spec, &at(completion + 1), &mut scratch)?;
    let read = activations::forward(spec, &at(completion), &mut scratch)?;
    plan.head = kept.head;
    plan.logits = kept.logits;
    plan.logits_grad_input = kept.logits_grad_input;
    plan.loss = read.loss;
    Ok(())
}

/// The frozen reference model's bytes: a second copy of the policy's weights as stored
/// (`grpo_trainer.py`: made from the same checkpoint with the same init kwargs when `beta` ≠
/// 0, prepared like the policy, so sharded alike). With a PEFT policy TRL makes none: the
/// reference is the base model with the adapters disabled.
pub(super) fn reference_bytes(job: &ResolvedJob, rl: &Rl, step: &Report) -> u64 {
    if !rl.reference_model || job.peft.is_some() {
        return 0;
    }
    Resident::of(step).parameters
}

/// The colocated engine TRL starts, what it holds, and whether it starts.
pub(super) struct Engine {
    pub figures: GeneratorFigures,
    pub rollouts: Rollouts,
    pub warnings: Vec<String>,
}

impl Engine {
    /// What the engine holds through the training phase: everything awake; in sleep mode
    /// (level 2) its CUDA graphs only. (weights, KV pool, CUDA graphs)
    fn held_in_training(&self) -> (u64, u64, u64) {
        let b = &self.figures.budget;
        if self.figures.sleep {
            (0, 0, b.cuda_graphs)
        } else {
            (b.weights, b.kv_pool, b.cuda_graphs)
        }
    }
}

/// The job the engine runs: vLLM serving the policy's weights (LoRA merged in, TRL's weight
/// sync) in 16-bit, one GPU (TRL `vllm_tensor_parallel_size` 1), with the settings TRL passes:
/// `gpu_memory_utilization`, `max_num_seqs` = the round's sequences, `max_num_batched_tokens`
/// 4096, `max_model_len` = `engine.max_model_len` (TRL `vllm_max_model_length`) or the
/// model's own.
fn generator_job(
    job: &ResolvedJob,
    g: &Generator,
    gpu: &crate::gpu::Gpu,
    sequences: u64,
) -> Result<ResolvedJob, CoreError> {
    let mut settings = json!({
        "gpu_memory_utilization": g.gpu_memory_utilization,
        "max_num_seqs": sequences,
        "max_num_batched_tokens": TRL_VLLM_MAX_NUM_BATCHED_TOKENS,
    });
    if let Some(v) = job.engine.get("max_model_len") {
        settings["max_model_len"] = v.clone();
    }
    let framework = crate::job::Framework::Vllm;
    Ok(ResolvedJob {
        task: Task::Infer,
        framework,
        precision: if gpu.bf16 {
            Precision::Bf16
        } else {
            Precision::Fp16
        },
        optimizer: crate::job::Optimizer::None,
        checkpointing: crate::job::Checkpointing::None,
        peft: None,
        parallel: Parallel::default(),
        engine: EngineSettings::resolve(Some(&settings), framework)?,
        rl: None,
        ..job.clone()
    })
}

/// The colocated vLLM engine (`None` without one): its budget (`engines::vllm::budget::vllm_budget` with no
/// memory of its own outside the allocator — the CUDA context is the trainer's process's), the
/// round's rollouts, and vLLM's two start-up checks.
pub(super) fn colocated_engine(
    model: &ModelInput,
    job: &ResolvedJob,
    rl: &Rl,
    step: &Report,
    reference: u64,
) -> Result<Option<Engine>, CoreError> {
    let (Some(g), Some(spec)) = (rl.colocated(), model.spec.as_ref()) else {
        return Ok(None);
    };
    let mut warnings = Vec::new();
    let gpu = match job.gpu.as_deref() {
        Some(id) => crate::gpu::find(id)?,
        None => {
            warnings.push(
                "vLLM sizes its KV pool from the GPU's memory: with no --gpu, an A100 80GB is \
                 assumed"
                    .into(),
            );
            crate::gpu::find("a100-80gb")?
        }
    };
    let capacity = gpu.memory_bytes;
    let sequences = job.batch.saturating_mul(job.grad_accum);
    let gj = generator_job(job, g, gpu, sequences)?;
    let weights = states::model_states(model, &gj, &mut Vec::new())?
        .resident
        .parameters;
    let budget = crate::engines::vllm::budget::vllm_budget(spec, &gj, capacity, weights, 0)?;
    let rollouts = rollouts(rl, &budget, sequences);
    let r = Resident::of(step);
    let trainer_at_startup = r.parameters + r.master_weights + reference + r.cuda_context;
    let requested = (capacity as f64 * g.gpu_memory_utilization).ceil() as u64;
    let free = capacity.saturating_sub(trainer_at_startup);
    let one_request = engines::kv_bytes_per_gpu(spec, &gj, 1, budget.max_model_len)?;
    starts_warnings(&mut warnings, free, requested, one_request, &budget, g);
    if rollouts.kv_bytes > budget.kv_pool {
        warnings.push(format!(
            "the round's {} completions need {} of KV but vLLM's pool holds {}: vLLM runs \
             fewer at once (slower generation, not an out-of-memory error)",
            rollouts.sequences,
            crate::text::bytes(rollouts.kv_bytes),
            crate::text::bytes(budget.kv_pool)
        ));
    }
    Ok(Some(Engine {
        figures: GeneratorFigures {
            colocate: true,
            sleep: g.sleep,
            gpu_memory_utilization: g.gpu_memory_utilization,
            requested,
            trainer_at_startup,
            starts: free >= requested && one_request <= budget.kv_pool,
            sleep_releases: budget.weights + budget.kv_pool,
            budget,
        },
        rollouts,
        warnings,
    }))
}

/// vLLM's refusals at start-up, as warnings naming the check and what to change.
fn starts_warnings(
    warnings: &mut Vec<String>,
    free: u64,
    requested: u64,
    one_request: u64,
    b: &crate::report::VllmBudget,
    g: &Generator,
) {
    use crate::text::bytes;
    if free < requested {
        warnings.push(format!(
            "vLLM would not start: {} is free when it starts, less than gpu_memory_utilization \
             {} of the GPU ({}) (vllm/v1/worker/utils.py request_memory); lower \
             --vllm-utilization",
            bytes(free),
            g.gpu_memory_utilization,
            bytes(requested)
        ));
    }
    if one_request > b.kv_pool {
        warnings.push(format!(
            "vLLM would not start: one request of max_model_len {} tokens needs {} of KV but \
             the pool holds {} (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory); \
             set --max-model-len to prompt + completion (TRL vllm_max_model_length) or raise \
             --vllm-utilization",
            b.max_model_len,
            bytes(one_request),
            bytes(b.kv_pool)
        ));
    }
}

/// The round's completions on one GPU and their KV: TRL repeats each prompt
/// `num_generations` times in a row (`RepeatSampler`) and vLLM's prefix caching (on by default
/// in V1) lets a prompt's generations share its full prompt blocks; each sequence then holds
/// its last partial prompt block and its completion in blocks of its own.
fn rollouts(rl: &Rl, b: &crate::report::VllmBudget, sequences: u64) -> Rollouts {
    let per_prompt = rl.num_generations.unwrap_or(1).max(1);
    let prompts = sequences.div_ceil(per_prompt);
    let bs = b.block_size.max(1);
    let shared = rl.prompt_len / bs;
    let own = (rl.prompt_len % bs + rl.completion_len).div_ceil(bs);
    let blocks = prompts
        .saturating_mul(shared)
        .saturating_add(sequences.saturating_mul(own));
    Rollouts {
        sequences,
        prompts,
        kv_bytes: blocks.saturating_mul(b.block_bytes),
    }
}

/// A phase from its components and roles: allocated = the first seven categories, reserved =
/// with the allocator reserve (vLLM's free blocks included), device total = with the context.
fn phase_figures(phase: &'static str, c: Components, roles: Roles) -> PhaseFigures {
    let allocated = c.allocated();
    let reserved = allocated + c.allocator_reserve;
    PhaseFigures {
        phase,
        components: c,
        peak_allocated: allocated,
        peak_reserved: reserved,
        device_total: reserved + c.cuda_context,
        roles,
    }
}

/// One timeline event of a phase.
fn point(phase: &'static str, label: String, c: &Components) -> TimelinePoint {
    let mut by_category = CategoryBytes::default();
    for k in Category::ALLOCATED {
        by_category.set(k, c.get(k));
    }
    TimelinePoint {
        phase: phase.into(),
        label: label.into(),
        allocated: c.allocated(),
        by_category,
    }
}

/// The generation phase: `None` for DPO (nothing is generated).
pub(super) fn generation(
    model: &ModelInput,
    job: &ResolvedJob,
    rl: &Rl,
    step: &Report,
    reference: u64,
    engine: Option<&Engine>,
) -> Result<Option<Phase>, CoreError> {
    if rl.algorithm == RlAlgorithm::Dpo {
        return Ok(None);
    }
    let r = Resident::of(step);
    Ok(Some(match (engine, &rl.generator) {
        (Some(e), _) => colocated_generation(r, reference, e),
        (None, Some(_)) => elsewhere_generation(r, reference),
        (None, None) => self_generation(model, job, rl, r, reference)?,
    }))
}

/// Generation by the colocated engine: the trainer's resident states and the reference model,
/// the engine's weights, its pool (the rollouts' KV in it, the rest free blocks), its forward
/// working set (the profile run's peak) and CUDA graphs.
fn colocated_generation(r: Resident, reference: u64, e: &Engine) -> Phase {
    let b = &e.figures.budget;
    let kv = e.rollouts.kv_bytes.min(b.kv_pool);
    let resident = r.waiting(reference);
    let loaded = Components {
        parameters: resident.parameters + b.weights,
        temporaries: resident.temporaries + b.cuda_graphs,
        allocator_reserve: b.kv_pool,
        ..resident
    };
    let generating = Components {
        kv_cache: kv,
        temporaries: loaded.temporaries + b.profile_peak,
        allocator_reserve: b.kv_pool - kv,
        ..loaded
    };
    let roles = Roles {
        vllm_weights: b.weights,
        vllm_kv_pool: b.kv_pool,
        ..r.roles(reference, generating.temporaries)
    };
    let timeline = vec![
        point("generation", "trainer states resident".into(), &resident),
        point(
            "generation",
            "vLLM weights, KV pool and CUDA graphs".into(),
            &loaded,
        ),
        point(
            "generation",
            format!("generating {} completions", e.rollouts.sequences),
            &generating,
        ),
    ];
    Phase {
        figures: phase_figures("generation", generating, roles),
        timeline,
        warnings: e.warnings.clone(),
    }
}

/// Generation on the engine's own GPUs (TRL `vllm_mode: server`): this GPU holds the trainer's
/// states while it waits.
fn elsewhere_generation(r: Resident, reference: u64) -> Phase {
    let c = r.waiting(reference);
    let roles = r.roles(reference, r.temporaries);
    Phase {
        figures: phase_figures("generation", c, roles),
        timeline: vec![point(
            "generation",
            "waiting for the vLLM server's completions".into(),
            &c,
        )],
        warnings: vec![
            "the generator runs on GPUs of its own (colocate false): its memory is not in these \
             figures; estimate it with --task infer --framework vllm"
                .into(),
        ],
    }
}

/// Generation by the policy itself (TRL `use_vllm: false`: transformers' `generate` over the
/// round's prompts): the `infer` estimate of the policy at those sequences, with the optimizer
/// states, master weights and reference model the trainer keeps beside it.
fn self_generation(
    model: &ModelInput,
    job: &ResolvedJob,
    rl: &Rl,
    r: Resident,
    reference: u64,
) -> Result<Phase, CoreError> {
    let mut ij = sub_job(job, Task::Infer);
    ij.batch = job.batch.saturating_mul(job.grad_accum);
    ij.seq = rl.prompt_len;
    ij.new_tokens = rl.completion_len;
    ij.optimizer = crate::job::Optimizer::None;
    let inf = simulate::run(model, &ij)?;
    let extra = Components {
        parameters: reference,
        optimizer_states: r.optimizer_states,
        master_weights: r.master_weights,
        ..Components::default()
    };
    let mut c = inf.per_gpu.components;
    for k in Category::ESTIMATED {
        if let Some(v) = c.get_mut(k) {
            *v += extra.get(k);
        }
    }
    let added = extra.allocated();
    let roles = Roles {
        policy_parameters: inf.per_gpu.components.parameters,
        policy_optimizer_states: r.optimizer_states,
        policy_master_weights: r.master_weights,
        reference_model: reference,
        activations: inf.per_gpu.components.activations + inf.per_gpu.components.kv_cache,
        temporaries: c.temporaries,
        cuda_context: c.cuda_context,
        allocator_reserve: c.allocator_reserve,
        ..Roles::default()
    };
    let timeline = inf
        .timeline
        .iter()
        .map(|p| shifted(p, "generation", &extra, added))
        .collect();
    let reserved = inf.per_gpu.peaks.peak_reserved.unwrap_or(0) + added;
    Ok(Phase {
        figures: PhaseFigures {
            phase: "generation",
            components: c,
            peak_allocated: inf.per_gpu.peaks.peak_allocated.unwrap_or(0) + added,
            peak_reserved: reserved,
            device_total: reserved + c.cuda_context,
            roles,
        },
        timeline,
        warnings: inf.warnings,
    })
}

/// A point of a sub-estimate's timeline under the RL phase `phase` (its own phase kept in the
/// label), with `extra` bytes live beside it.
fn shifted(
    p: &TimelinePoint,
    phase: &'static str,
    extra: &Components,
    added: u64,
) -> TimelinePoint {
    let mut by_category = p.by_category;
    for k in Category::ALLOCATED {
        by_category.set(k, by_category.of(k) + extra.get(k));
    }
    TimelinePoint {
        phase: phase.into(),
        label: format!("{}: {}", p.phase, p.label).into(),
        allocated: p.allocated + added,
        by_category,
    }
}

/// The training phase: the policy's step with the reference model and what the engine keeps
/// (its weights and pool unless asleep, its CUDA graphs) beside it all the way through.
pub(super) fn training(step: &Report, reference: u64, engine: Option<&Engine>) -> Phase {
    let (w, pool, graphs) = engine.map_or((0, 0, 0), Engine::held_in_training);
    let extra = Components {
        parameters: reference + w,
        temporaries: graphs,
        ..Components::default()
    };
    let added = extra.allocated();
    let s = &step.per_gpu;
    let mut c = s.components;
    c.parameters += extra.parameters;
    c.temporaries += graphs;
    c.allocator_reserve += pool;
    let roles = Roles {
        policy_parameters: s.components.parameters,
        policy_gradients: s.components.gradients,
        policy_optimizer_states: s.components.optimizer_states,
        policy_master_weights: s.components.master_weights,
        reference_model: reference,
        vllm_weights: w,
        vllm_kv_pool: pool,
        activations: s.components.activations + s.components.kv_cache,
        temporaries: c.temporaries,
        cuda_context: c.cuda_context,
        allocator_reserve: s.components.allocator_reserve,
    };
    let reserved = s.peaks.peak_reserved.unwrap_or(0) + added + pool;
    Phase {
        figures: PhaseFigures {
            phase: "training",
            components: c,
            peak_allocated: s.peaks.peak_allocated.unwrap_or(0) + added,
            peak_reserved: reserved,
            device_total: reserved + c.cuda_context,
            roles,
        },
        timeline: step
            .timeline
            .iter()
            .map(|p| shifted(p, "training", &extra, added))
            .collect(),
        warnings: Vec::new(),
    }
}
