//! An RL step's time (`task: "rl"`): the round's generation, then the policy's training step,
//! one after the other as TRL's `GRPOTrainer` runs them (colocated or server-mode vLLM alike:
//! the trainer waits for the completions; `trl/trainer/grpo_trainer.py`
//! `_generate_and_score_completions`), plus the frozen reference model's forward over the
//! round's sequences when there is one (`beta` ≠ 0, `_get_per_token_logps_and_entropies` of
//! `ref_model`; with LoRA, the base model with the adapters disabled).
//!
//! Generation follows the inference model (`super::infer`): each GPU makes the round's
//! `batch × grad_accum` completions together; the prompts are prefilled once per distinct
//! prompt (each repeated `num_generations` times, vLLM's prefix caching shares them) at the
//! matmul rate, and each of the `completion_len` decode steps reads the 16-bit weights and the
//! batch's keys and values at their mean length (Pope et al. 2022, §2), or computes 2·N FLOPs
//! per sequence where that takes longer. TRL's server mode generates on GPUs of its own, which
//! the tokens/s per GPU of the job's GPUs leaves out; self-generation (transformers'
//! `generate`, no paged KV, ZeRO-3 gathering the weights every token) is slower than this
//! bound. DPO generates nothing and trains on chosen and rejected together (twice the batch).

use super::compute::{attention_forward_flops, model_flops};
use super::{train_step, Hardware, ModelShape, Setup, StepTime, Trainable};
use crate::job::{ResolvedJob, Rl, RlAlgorithm};

/// An RL step's parts: the training step (with the reference forward in its compute) and
/// the generation before it, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RlStep {
    pub train: StepTime,
    pub generation_s: f64,
}

/// The modelled RL step of a resolved `task: "rl"` job.
pub fn step(
    shape: &ModelShape,
    job: &ResolvedJob,
    rl: &Rl,
    hw: &Hardware,
    trainable: &Trainable,
) -> RlStep {
    let dpo = rl.algorithm == RlAlgorithm::Dpo;
    let mut setup = Setup::of_job(job, trainable);
    setup.attention = super::attention_kernel(job, shape);
    setup.seq = rl.sequence_len();
    if dpo {
        setup.micro_batch *= 2;
    }
    let mut train = train_step(shape, &setup, hw);
    let reference_s = if rl.reference_model {
        reference_forward_s(shape, &setup, hw)
    } else {
        0.0
    };
    let generation_s = if dpo {
        0.0
    } else {
        generation(shape, rl, hw, job, setup.micro_batch * setup.microbatches)
    };
    let tokens = train.tokens_per_s_per_gpu * train.step_s;
    train.parts.compute_s += reference_s;
    train.forward_s += reference_s;
    train.step_s += reference_s + generation_s;
    train.tokens_per_s_per_gpu = tokens / train.step_s;
    train.mfu *= (train.step_s - reference_s - generation_s) / train.step_s;
    RlStep {
        train,
        generation_s,
    }
}

/// The frozen reference model's no-grad forward over a step's rows: one forward (a third of
/// eq. 3's model FLOPs) per micro-batch, at the matmul rate.
pub fn reference_forward_s(shape: &ModelShape, setup: &Setup, hw: &Hardware) -> f64 {
    let m = setup.microbatches as f64;
    let mp = (setup.tp * setup.pp * setup.cp) as f64;
    m * hw.matmul_s(model_flops(shape, setup.micro_batch, setup.seq) / 3.0 / mp)
}

/// A training job's DPO step (`reference_model` set; `estimate/dpo.rs`): the policy trains on
/// the chosen and rejected rows together (twice the pairs), and a frozen reference runs its
/// forward over the same rows; a precomputed one costs nothing in the step.
pub fn dpo_train_step(shape: &ModelShape, setup: &Setup, hw: &Hardware, frozen: bool) -> StepTime {
    let rows = Setup {
        micro_batch: setup.micro_batch * 2,
        ..*setup
    };
    let mut train = train_step(shape, &rows, hw);
    let reference_s = if frozen {
        reference_forward_s(shape, &rows, hw)
    } else {
        0.0
    };
    let tokens = train.tokens_per_s_per_gpu * train.step_s;
    train.parts.compute_s += reference_s;
    train.forward_s += reference_s;
    train.step_s += reference_s;
    train.tokens_per_s_per_gpu = tokens / train.step_s;
    train.mfu *= (train.step_s - reference_s) / train.step_s;
    train
}

/// Seconds one GPU takes to generate the round's `sequences` completions.
fn generation(
    shape: &ModelShape,
    rl: &Rl,
    hw: &Hardware,
    job: &ResolvedJob,
    sequences: u64,
) -> f64 {
    let tp = job.parallel.tp.max(1) as f64;
    let b = sequences as f64;
    let (prompt, completion) = (rl.prompt_len, rl.completion_len);
    let distinct = (b / rl.num_generations.unwrap_or(1).max(1) as f64).max(1.0);
    let prefill_s = hw.matmul_s(2.0 * shape.matmul_params * distinct * prompt as f64 / tp)
        + hw.attention_s(distinct * attention_forward_flops(shape, prompt) * 0.5 / tp);
    // 16-bit weights and keys/values (vLLM's dtype for a 16-bit checkpoint).
    let weights = shape.params * 2.0 / tp;
    let kv_per_token = (shape.kv_width * shape.layers * 2) as f64 / tp;
    let mean_context = prompt as f64 + completion as f64 / 2.0;
    let read_s = hw.memory_s(weights + b * kv_per_token * mean_context);
    let compute_s = hw.matmul_s(2.0 * shape.matmul_params * b / tp);
    prefill_s + completion as f64 * read_s.max(compute_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::hardware::Fractions;

    /// A model of 10⁹ parameters, all in matmuls, 16 layers of 1,024 key/value elements per
    /// token, no attention core (so prefill is its matmuls alone).
    fn shape() -> ModelShape {
        ModelShape {
            layers: 16,
            hidden: 1024,
            kv_width: 1024,
            ..ModelShape::dense(1e9)
        }
    }

    /// A GPU of 10¹⁵ FLOP/s at half of it for matmuls, 10¹² bytes/s of memory (85 % reached).
    fn hw() -> Hardware {
        Hardware {
            peak: 1e15,
            fractions: Fractions {
                matmul: 0.5,
                attention: 0.5,
                measured: true,
            },
            memory: 1e12,
            intra: 1e11,
            inter: 1e10,
            host: 1e10,
            node_gpus: 8,
        }
    }

    /// 64 completions (8 prompts × 8 generations) of 200 tokens after 100-token prompts:
    /// prefill 2 · 10⁹ · 8 prompts · 100 tokens / (10¹⁵ · 0.5) = 3.2 ms; each decode step
    /// reads 2·10⁹ bytes of weights and 64 · (1024 · 16 · 2 bytes) · (100 + 200/2) tokens =
    /// 419,430,400 bytes of keys and values, (2e9 + 4.194304e8) / (1e12 · 0.85) = 2.846389 ms,
    /// longer than its 2 · 10⁹ · 64 / 5·10¹⁴ = 0.256 ms of matmuls; 200 steps: 0.5692786 s;
    /// in all 0.5724786 s.
    #[test]
    fn generation_is_prefill_then_memory_bound_decode() {
        let rl = Rl {
            algorithm: RlAlgorithm::Grpo,
            reference_model: false,
            generator: None,
            num_generations: Some(8),
            prompt_len: 100,
            completion_len: 200,
        };
        let job: ResolvedJob = serde_json::from_value::<crate::job::Job>(serde_json::json!({
            "model": {"params": 1_000_000_000u64}
        }))
        .unwrap()
        .resolve(None)
        .unwrap();
        let g = generation(&shape(), &rl, &hw(), &job, 64);
        assert!((g - 0.5724786).abs() < 1e-6, "{g}");
    }
}
