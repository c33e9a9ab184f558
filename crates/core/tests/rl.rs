//! `task: "rl"` (GRPO with a colocated vLLM engine, DPO) against figures derived by hand from a
//! small Llama-shaped model whose every tensor is a whole number of the caching allocator's
//! 512-byte blocks (so no rounding hides in the sums).

mod common;

use serde_json::{json, Value};
use vramscope_core::advice::advise;
use vramscope_core::estimate::{estimate, rl::RlFigures};
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

/// hidden 256, 2 layers, 4 heads of 64 with 2 KV heads, FFN 512, vocabulary 1024, untied.
/// Parameters: embeddings 1024·256 = 262,144; a layer: q 256·256 = 65,536, k and v 256·128 =
/// 32,768 each, o 65,536, gate/up/down 256·512 = 131,072 each, two norms of 256 = 590,336;
/// two layers 1,180,672; final norm 256; lm_head 262,144. Total 1,705,216.
fn tiny() -> Value {
    json!({"hf_config": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
        "max_position_embeddings": 4096, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16"}})
}

const PARAMS: u64 = 1_705_216;
/// A100 80GB: 81,920 MiB.
const A100: u64 = 81_920 << 20;

use common::run_job as run;

fn grpo(generator: Value, extra: Value) -> Value {
    let mut j = json!({"model": tiny(), "task": "rl", "batch": 4, "grad_accum": 2,
        "gpu": "a100-80gb",
        "rl": {"algorithm": "grpo", "num_generations": 4, "prompt_len": 100,
               "completion_len": 200, "generator": generator}});
    if let (Value::Object(o), Value::Object(e)) = (&mut j, extra) {
        o.extend(e);
    }
    j
}

fn figures(r: &Report) -> &RlFigures {
    r.rl.as_ref().expect("an RL report")
}

fn phase<'a>(r: &'a Report, name: &str) -> &'a vramscope_core::estimate::rl::PhaseFigures {
    figures(r)
        .phases
        .iter()
        .find(|p| p.phase == name)
        .unwrap_or_else(|| panic!("no {name} phase"))
}

/// The colocated engine and the trainer beside it, by hand:
/// - vLLM's copy of the weights in bf16: 2 · 1,705,216 = 3,410,432 B.
/// - the policy in bf16-mixed (autocast over fp32 parameters): 4 · 1,705,216 = 6,820,864 B;
///   AdamW's two fp32 moments 8 · 1,705,216 = 13,641,728 B; gradients 6,820,864 B.
/// - vLLM asks for 0.25 · 85,899,345,920 = 21,474,836,480 B; its KV pool is that less its
///   weights, its profile run's peak and its CUDA graphs (vLLM's own rule, `engines.rs`), cut
///   into blocks of 16 tokens · 2 layers · 2 (K, V) · 2 KV heads · 64 · 2 B = 16,384 B.
/// - the round: batch 4 · grad_accum 2 = 8 completions, 8 / 4 generations = 2 prompts; each prompt's 6 full
///   16-token blocks (96 of its 100 tokens) shared by its 4 generations (prefix caching), each
///   sequence's own 4 + 200 = 204 tokens in 13 blocks: 2·6 + 8·13 = 116 blocks = 1,900,544 B.
#[test]
fn colocated_grpo_by_hand() {
    let r = run(grpo(
        json!({"engine": "vllm", "gpu_memory_utilization": 0.25}),
        json!({}),
    ));
    let f = figures(&r);
    let g = f.generator.as_ref().unwrap();
    let b = &g.budget;
    assert_eq!(b.weights, 2 * PARAMS);
    assert_eq!(b.weights, 3_410_432);
    assert_eq!(g.requested, 21_474_836_480);
    assert_eq!(b.usable, 21_474_836_480);
    assert_eq!(b.block_bytes, 16_384);
    assert_eq!(
        b.non_torch, 0,
        "the CUDA context is the trainer's process's"
    );
    let left = b.usable - b.weights - b.profile_peak - b.cuda_graphs;
    assert_eq!(b.kv_pool, left / 16_384 * 16_384);
    let ro = f.rollouts.unwrap();
    assert_eq!((ro.sequences, ro.prompts, ro.kv_bytes), (8, 2, 1_900_544));
    // The report's job: the training sequence is prompt + completion.
    assert_eq!(r.job.seq, 300);
    // The policy's states.
    let ms = r.per_gpu.model_states;
    assert_eq!(ms.parameters, 6_820_864);
    assert_eq!(ms.gradients, 6_820_864);
    assert_eq!(ms.optimizer_states, 13_641_728);
    assert_eq!(ms.master_weights, 0);
    // Generation: the policy's weights and moments (no gradients: zero_grad freed them), vLLM's
    // weights, the round's KV inside the pool, the pool's other blocks free.
    let gen = phase(&r, "generation");
    assert_eq!(gen.roles.policy_parameters, 6_820_864);
    assert_eq!(gen.roles.policy_optimizer_states, 13_641_728);
    assert_eq!(gen.roles.policy_gradients, 0);
    assert_eq!(gen.roles.vllm_weights, 3_410_432);
    assert_eq!(gen.components.parameters, 6_820_864 + 3_410_432);
    assert_eq!(gen.components.kv_cache, 1_900_544);
    assert_eq!(gen.components.allocator_reserve, b.kv_pool - 1_900_544);
    // vLLM starts: 85.9 GB less the trainer (its weights and the context) is far above the
    // 21.5 GB it asks for.
    assert_eq!(
        g.trainer_at_startup - gen.components.cuda_context,
        6_820_864
    );
    assert!(g.starts);
    // Training: the whole engine stays (not asleep) beside the step.
    let train = phase(&r, "training");
    assert_eq!(train.roles.vllm_weights, 3_410_432);
    assert_eq!(train.roles.vllm_kv_pool, b.kv_pool);
    assert_eq!(f.peak_phase, "training");
    assert_eq!(r.per_gpu.peaks.peak_phase.as_deref(), Some("training"));
    assert_eq!(r.per_gpu.peaks.device_total, Some(train.device_total));
    assert_eq!(r.per_gpu.kv_pool, Some(b.kv_pool));
    assert!(r.fit.as_ref().unwrap().fits);
    // Phases in order, timeline points labelled by phase.
    let names: Vec<&str> = f.phases.iter().map(|p| p.phase).collect();
    assert_eq!(names, ["generation", "training"]);
    assert!(r.timeline.iter().any(|p| p.phase == "generation"));
    assert!(r.timeline.iter().any(|p| p.phase == "training"));
    // Each phase's components sum to its peak_allocated (the first seven categories).
    for p in &f.phases {
        assert_eq!(p.components.allocated(), p.peak_allocated, "{}", p.phase);
        assert_eq!(
            p.peak_allocated + p.components.allocator_reserve + p.components.cuda_context,
            p.device_total
        );
    }
}

/// vLLM's sleep mode (level 2, as TRL calls it: weights and KV cache discarded) lowers the
/// training phase by exactly what it releases, the weights (3,410,432 B) and the pool, and
/// leaves generation (the engine awake again) unchanged.
#[test]
fn sleep_releases_weights_and_pool_in_training() {
    let awake = run(grpo(json!({"gpu_memory_utilization": 0.25}), json!({})));
    let asleep = run(grpo(
        json!({"gpu_memory_utilization": 0.25, "sleep": true}),
        json!({}),
    ));
    let pool = figures(&awake).generator.as_ref().unwrap().budget.kv_pool;
    let released = figures(&asleep).generator.as_ref().unwrap().sleep_releases;
    assert_eq!(released, 3_410_432 + pool);
    let (ta, ts) = (phase(&awake, "training"), phase(&asleep, "training"));
    assert_eq!(ta.device_total - ts.device_total, released);
    assert_eq!(ta.peak_allocated - ts.peak_allocated, 3_410_432);
    assert_eq!(ts.roles.vllm_weights + ts.roles.vllm_kv_pool, 0);
    assert_eq!(phase(&awake, "generation"), phase(&asleep, "generation"));
    // Asleep, generation (the whole engine awake) is the peak.
    assert_eq!(figures(&asleep).peak_phase, "generation");
}

/// A reference model (TRL: beta ≠ 0) is a second copy of the policy's weights as stored:
/// 6,820,864 B more in both phases; with LoRA TRL keeps none (the adapters are disabled for
/// the reference pass).
#[test]
fn reference_model_is_a_copy_of_the_policy_weights() {
    let g = json!({"gpu_memory_utilization": 0.25});
    let without = run(grpo(g.clone(), json!({})));
    let mut job = grpo(g.clone(), json!({}));
    job["rl"]["reference_model"] = json!(true);
    let with = run(job.clone());
    for name in ["generation", "training"] {
        let (a, b) = (phase(&without, name), phase(&with, name));
        assert_eq!(b.peak_allocated - a.peak_allocated, 6_820_864, "{name}");
        assert_eq!(b.roles.reference_model, 6_820_864);
    }
    job["peft"] = json!({"method": "lora", "rank": 8});
    let lora = run(job);
    assert_eq!(phase(&lora, "training").roles.reference_model, 0);
}

/// DPO generates nothing: one phase, training, on chosen and rejected sequences together
/// (twice the batch), with the reference model by default.
#[test]
fn dpo_trains_on_pairs_with_a_reference() {
    let r = run(
        json!({"model": tiny(), "task": "rl", "batch": 2, "gpu": "a100-80gb",
        "rl": {"algorithm": "dpo", "prompt_len": 100, "completion_len": 200}}),
    );
    let f = figures(&r);
    assert_eq!(f.phases.len(), 1);
    assert_eq!(f.peak_phase, "training");
    assert_eq!(phase(&r, "training").roles.reference_model, 6_820_864);
    // The step is the DPO training step of 2 pairs (4 rows) at 300 tokens with a frozen
    // reference (`estimate/dpo.rs`, `tests/dpo_step.rs`): TRL's loss and the reference's
    // no-grad forward, the reference's weights held beside the policy's.
    let dpo = run(
        json!({"model": tiny(), "batch": 2, "seq": 300, "gpu": "a100-80gb",
                         "reference_model": "frozen"}),
    );
    assert_eq!(
        r.per_gpu.peaks.peak_allocated,
        dpo.per_gpu.peaks.peak_allocated
    );
    assert!(r
        .timeline
        .iter()
        .any(|p| p.label == "forward: reference model forward (no_grad)"));
}

/// vLLM refuses to start when less than utilization × total is free at start-up (the trainer
/// holds its weights and the CUDA context): at 0.999, 0.1% of 80 GiB (86 MB) is left for a
/// trainer whose context alone is larger.
#[test]
fn vllm_that_cannot_start_does_not_fit() {
    let r = run(grpo(json!({"gpu_memory_utilization": 0.999}), json!({})));
    let g = figures(&r).generator.as_ref().unwrap();
    assert!(!g.starts);
    assert!(!r.fit.as_ref().unwrap().fits);
    common::assert_warns(&r.warnings, "request_memory");
}

/// A job that fits only with the engine asleep during training: the advice's cheapest change
/// is `--vllm-sleep`, and the changed job fits.
#[test]
fn advice_names_sleep_mode() {
    let base = grpo(json!({"gpu_memory_utilization": 0.5}), json!({"batch": 64}));
    let r = run(base.clone());
    let gen = phase(&r, "generation").device_total;
    let train = phase(&r, "training").device_total;
    assert!(train > gen, "the training phase must be the larger here");
    // Keep free all but the midpoint between the two phases: generation fits, training not.
    let mut job = base;
    job["reserve"] = json!(A100 - (gen + train) / 2);
    let job: Job = serde_json::from_value(job).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap())
        .unwrap()
        .into_input();
    let resolved = job.resolve(Some(4096)).unwrap();
    assert!(!estimate(&model, &resolved).unwrap().fit.unwrap().fits);
    let advice = advise(&model, &resolved).unwrap();
    assert!(!advice.is_empty());
    assert_eq!(advice[0].flags, ["--vllm-sleep"]);
    assert!(advice[0].headroom >= 0);
    assert_eq!(
        advice[0].changes["rl"]["generator"]["sleep"],
        json!(true),
        "{:?}",
        advice[0].changes
    );
}

/// What is not modelled is refused in one line: PPO (a value and a reward model), a bare
/// parameter count, `rl` on another task, a `seq` other than prompt + completion.
#[test]
fn refusals_are_one_line() {
    let job: Job =
        serde_json::from_value(json!({"model": tiny(), "task": "rl", "rl": {"algorithm": "ppo"}}))
            .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let e = estimate(&model.into_input(), &job.resolve(None).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("rl.algorithm: ppo is not modelled"), "{e}");
    for (v, field) in [
        (json!({"task": "train", "rl": {}}), "rl"),
        (json!({"task": "rl", "seq": 100}), "seq"),
    ] {
        let e = serde_json::from_value::<Job>(v)
            .unwrap()
            .resolve(None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(field) && !e.contains('\n'), "{e}");
    }
}
