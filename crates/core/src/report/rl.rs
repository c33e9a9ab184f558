//! The report's `rl` section (`task: "rl"`) as plain data; the two phases are estimated by
//! `estimate::rl`.

use super::vllm::VllmBudget;
use super::Components;
use crate::job::RlAlgorithm;
use serde::Serialize;

/// The RL figures of a Report (`report.rl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RlFigures {
    pub algorithm: RlAlgorithm,
    /// Each phase's own peak, by category and by role.
    pub phases: Vec<PhaseFigures>,
    /// `generation` or `training`: the phase with the larger device total.
    pub peak_phase: String,
    /// The colocated vLLM engine's budget and what its sleep mode releases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorFigures>,
    /// The completions one GPU generates per generation round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollouts: Option<Rollouts>,
}

/// One phase at its own peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseFigures {
    pub phase: &'static str,
    pub components: Components,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    pub device_total: u64,
    /// The same bytes by whose they are.
    pub roles: Roles,
}

/// Bytes at a phase's peak by role: the policy's states, the reference model, the vLLM
/// engine's weights and KV pool, the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Roles {
    pub policy_parameters: u64,
    pub policy_gradients: u64,
    pub policy_optimizer_states: u64,
    pub policy_master_weights: u64,
    pub reference_model: u64,
    pub vllm_weights: u64,
    /// The whole pool (free blocks included).
    pub vllm_kv_pool: u64,
    /// Saved activations, the completion tokens' logits included (training); the rollouts'
    /// KV when the policy generates itself.
    pub activations: u64,
    pub temporaries: u64,
    pub cuda_context: u64,
    /// The caching allocator's reserved-but-free bytes outside vLLM's pool.
    pub allocator_reserve: u64,
}

/// The colocated engine: vLLM's start-up budget, its sleep mode, whether it starts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GeneratorFigures {
    pub colocate: bool,
    pub sleep: bool,
    pub gpu_memory_utilization: f64,
    /// capacity × gpu_memory_utilization: what vLLM asks for at start-up.
    pub requested: u64,
    /// The trainer's bytes when vLLM starts (weights, master weights, reference model, the
    /// CUDA context; optimizer states come at the first step).
    pub trainer_at_startup: u64,
    /// Whether the GPU has `requested` free when vLLM starts (vLLM refuses otherwise:
    /// `vllm/v1/worker/utils.py` `request_memory`) and the pool holds one request of
    /// `max_model_len` tokens.
    pub starts: bool,
    /// What `sleep(level=2)` releases for the training phase: the weights and the KV pool.
    pub sleep_releases: u64,
    /// `engines::VllmBudget` for the engine TRL starts.
    pub budget: VllmBudget,
}

/// One GPU's completions per generation round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rollouts {
    /// per_device_train_batch_size × steps_per_generation (TRL's default: grad_accum).
    pub sequences: u64,
    /// sequences ÷ num_generations: the prompts, each generated num_generations times.
    pub prompts: u64,
    /// Their KV (prompt blocks shared by a prompt's generations: vLLM's prefix caching).
    pub kv_bytes: u64,
}
