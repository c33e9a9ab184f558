//! The estimator on real models, against values derived by hand from papers and from the models'
//! shapes (never from vramscope's own output).

use serde_json::{json, Value};
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

fn run(job: Value) -> Report {
    let job: Job = serde_json::from_value(job).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let max = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let resolved = job.resolve(max).unwrap();
    estimate(&model.into_input(), &resolved).unwrap()
}

fn states_total(r: &Report) -> u64 {
    r.per_gpu.model_states.total()
}

/// ZeRO paper (Rajbhandari et al. 2020) §3.1 and Table 1: mixed-precision Adam keeps 16Ψ
/// bytes of model states; Ψ = 7.5B → 120 GB on one GPU (stage 0).
#[test]
fn zero_paper_stage_0_is_16_psi() {
    let r = run(
        json!({"model": {"params": 7.5e9}, "precision": "fp16-mixed",
        "optimizer": "adam", "framework": "deepspeed", "parallel": {"dp": 64, "zero": 0}}),
    );
    assert_eq!(states_total(&r), 16 * 7_500_000_000);
    assert_eq!(r.per_gpu.model_states.master_weights, 4 * 7_500_000_000);
    // A bare count has no architecture: activation figures are null, with a warning.
    assert!(r.per_gpu.peak_allocated.is_none());
    assert!(!r.warnings.is_empty());
}

/// Korthikanti et al. 2022, Table 2, GPT-3 175B (s = 2048, h = 12288, a = 96, b = 1):
/// sbh(34 + 5as/h) = 25,165,824 · (34 + 80) = 2,868,903,936 B per layer; with t = 8 tensor
/// parallelism and sequence parallelism sbh/t·(34 + 80) = 358,612,992; full recomputation 2sbh.
#[test]
fn korthikanti_table_2() {
    let cfg = json!({"model_type": "gpt2", "n_embd": 12288, "n_head": 96, "n_layer": 96,
        "n_positions": 2048, "vocab_size": 51200});
    let base = |par: Value, ckpt: &str| {
        run(
            json!({"model": {"hf_config": cfg.clone()}, "seq": 2048, "batch": 1,
            "precision": "fp16-mixed", "framework": "megatron", "attention": "eager",
            "checkpointing": ckpt, "parallel": par}),
        )
        .per_gpu
        .activation_bytes_per_layer
        .unwrap()
    };
    let sbh: u64 = 2048 * 12288;
    assert_eq!(base(json!({}), "none"), sbh * 114);
    assert_eq!(base(json!({"tp": 8, "sp": true}), "none"), sbh * 114 / 8);
    assert_eq!(base(json!({"tp": 8}), "selective"), sbh * 10 + sbh * 3);
    assert_eq!(base(json!({}), "full"), 2 * sbh);
}

/// The fp32 log-softmax that transformers' loss keeps for Llama-3-8B at b = 1, s = 4096:
/// 4096 · 128,256 · 4 = 2,101,346,304 bytes, saved from the loss until backward starts.
#[test]
fn llama_3_8b_fp32_logits_term() {
    let r = run(json!({"model": "llama-3-8b", "batch": 1, "seq": 4096,
        "precision": "bf16-mixed", "optimizer": "adamw"}));
    let at = |label: &str| {
        r.timeline
            .iter()
            .find(|p| p.label == label)
            .unwrap_or_else(|| panic!("{label}"))
            .by_category
            .get("activations")
            .copied()
            .unwrap()
    };
    let saved = at("loss") - at("final norm and head");
    // Labels: the padded copy b·(s+1)·8 and the shifted copy b·s·8, each rounded to 512 B.
    let labels = 33_280 + 32_768;
    assert_eq!(saved, 4096 * 128_256 * 4 + labels);
}

/// Optimizer states of GPT-2 (124,439,808 parameters, all fp32): SGD keeps none; Adam two
/// fp32 moments = 8 · 124,439,808 = 995,518,464 B; bitsandbytes AdamW8bit keeps 1 byte per
/// state for tensors of ≥ 4096 elements plus an fp32 absmax per 256, and fp32 states for the
/// 74 small tensors (biases and LayerNorms: 50 · 768 + 12 · 2304 + 24 · 768 + 12 · 3072 =
/// 121,344 elements), plus two shared 256-entry fp32 code tables.
#[test]
fn sgd_adam_and_8bit_states_of_gpt2() {
    let states = |opt: &str| {
        run(
            json!({"model": "gpt2", "batch": 1, "seq": 128, "precision": "fp32",
            "optimizer": opt}),
        )
        .per_gpu
        .model_states
        .optimizer_states
    };
    assert_eq!(states("sgd"), 0);
    assert_eq!(states("adamw"), 995_518_464);
    let small: u64 = 50 * 768 + 12 * 2304 + 24 * 768 + 12 * 3072;
    assert_eq!(small, 121_344);
    let big = 124_439_808 - small;
    // Large matrices: wte 50257·768, wpe 1024·768, per layer 768·2304, 768², 768·3072, 3072·768.
    // Every state is its own allocation, rounded up to 512 B by the caching allocator.
    let r512 = |b: u64| b.div_ceil(512) * 512;
    let absmax = |n: u64| r512(4 * n.div_ceil(256));
    let absmax_all = absmax(50257 * 768)
        + absmax(1024 * 768)
        + 12 * (absmax(768 * 2304) + absmax(768 * 768) + absmax(768 * 3072) + absmax(3072 * 768));
    // The 8-bit states are n bytes each (wte's 38,597,376 is not a multiple of 512: +256 each);
    // the small fp32 states (768·4, 2304·4, 3072·4 bytes) are; the qmaps are 2 · 256 · 4 B.
    let state8 = |n: u64| 2 * r512(n);
    let states8_all = state8(50257 * 768)
        + state8(1024 * 768)
        + 12 * (state8(768 * 2304) + state8(768 * 768) + state8(768 * 3072) + state8(3072 * 768));
    assert_eq!(states8_all, 2 * big + 512);
    let expected = states8_all + 2 * absmax_all + 8 * small + 2048;
    assert_eq!(states("adamw-8bit"), expected);
}

/// Eager attention materialises the probabilities; SDPA's flash kernel keeps a logsumexp
/// instead. For GPT-2 in fp32 with attention dropout 0.1, eager keeps per score element the
/// fp32 softmax (4), the dropout output (4) and its bool mask (1); SDPA keeps the fused qkv
/// views and its output where eager keeps copies of the same size, plus a logsumexp of
/// b·heads·s fp32. Per layer: eager − sdpa = 9·b·a·s² − 4·b·a·s.
#[test]
fn eager_versus_flash_attention() {
    let per_layer = |attn: &str| {
        run(
            json!({"model": "gpt2", "batch": 2, "seq": 512, "precision": "fp32",
            "optimizer": "adamw", "attention": attn}),
        )
        .per_gpu
        .activation_bytes_per_layer
        .unwrap()
    };
    let (b, a, s) = (2u64, 12u64, 512u64);
    assert_eq!(
        per_layer("eager") - per_layer("sdpa"),
        9 * b * a * s * s - 4 * b * a * s
    );
}

/// Full checkpointing keeps each block's output only: b·s·h·4 bytes per layer in fp32
/// (GPT-2: 4 · 1024 · 768 · 4 = 12,582,912).
#[test]
fn full_checkpointing_keeps_the_layer_input() {
    let r = run(
        json!({"model": "gpt2", "batch": 4, "seq": 1024, "precision": "fp32",
        "optimizer": "adamw", "checkpointing": "full"}),
    );
    assert_eq!(
        r.per_gpu.activation_bytes_per_layer,
        Some(4 * 1024 * 768 * 4)
    );
}

/// LoRA r = 8 on q_proj and v_proj of Llama-2-7b: 32 layers × 2 matrices × 8·(4096 + 4096) =
/// 4,194,304 trainable parameters (the PEFT figure users see).
#[test]
fn lora_trainable_count() {
    let r = run(json!({"model": "llama-2-7b", "batch": 1, "seq": 512,
        "peft": {"method": "lora", "rank": 8, "targets": ["q_proj", "v_proj"]}}));
    assert_eq!(r.model.params_trainable, 4_194_304);
    assert_eq!(r.model.params_total, 6_738_415_616);
    // Only the adapters have gradients: 4 B each.
    assert_eq!(r.per_gpu.model_states.gradients, 4 * 4_194_304);
}

/// Components at the peak add up to peak_allocated; reserved ≥ allocated; device_total adds
/// the context.
#[test]
fn report_invariants() {
    let r = run(json!({"model": "llama-3.1-8b", "batch": 1, "seq": 4096,
        "gpu": "h100-80gb"}));
    let p = &r.per_gpu;
    assert_eq!(p.components.allocated(), p.peak_allocated.unwrap());
    assert!(p.peak_reserved.unwrap() >= p.peak_allocated.unwrap());
    assert_eq!(
        p.device_total.unwrap(),
        p.peak_reserved.unwrap() + p.components.cuda_context
    );
    assert_eq!(
        p.components.allocator_reserve,
        p.peak_reserved.unwrap() - p.peak_allocated.unwrap()
    );
    let fit = r.fit.unwrap();
    assert_eq!(fit.capacity, 81559 << 20);
    assert_eq!(fit.fits, p.device_total.unwrap() <= fit.capacity);
    assert!(r.timeline.len() > 2 * 32);
}

/// A LoRA target the model lacks is a clear error naming the field.
#[test]
fn unknown_lora_target_is_named() {
    let job: Job = serde_json::from_value(json!({"model": "gpt2",
        "peft": {"method": "lora", "rank": 8, "targets": ["q_proj"]}}))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let e = estimate(&model.into_input(), &job.resolve(None).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("peft.targets") && e.contains("q_proj"), "{e}");
}

/// Products like batch · seq · vocab · 4 never overflow: the largest accepted batch and
/// sequence give an answer or a clean error.
#[test]
fn extreme_sizes_do_not_overflow() {
    let job: Job = serde_json::from_value(json!({"model": "llama-3.1-405b",
        "batch": 16_777_216, "seq": 67_108_864}))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let _ = estimate(&model.into_input(), &job.resolve(None).unwrap());
}

/// The fit search returns the edge: the answer fits and one more does not.
#[test]
fn fit_finds_the_edge() {
    use vramscope_core::fit::fit;
    let job: Job = serde_json::from_value(json!({"model": "gpt2", "seq": 1024,
        "precision": "bf16-mixed", "gpu": "t4-16gb"}))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap())
        .unwrap()
        .into_input();
    let resolved = job.resolve(Some(1024)).unwrap();
    let cap = vramscope_core::gpu::find("t4-16gb").unwrap().memory_bytes;
    let answer = fit(&model, &resolved).unwrap();
    let b = answer.max_batch.unwrap();
    let total = |batch: u64| {
        let j = vramscope_core::job::ResolvedJob {
            batch,
            ..resolved.clone()
        };
        estimate(&model, &j).unwrap().per_gpu.device_total.unwrap()
    };
    assert!(total(b) <= cap && total(b + 1) > cap, "batch {b}");
    // GPT-2 knows 1024 positions: the sequence search stops there, and says so.
    assert_eq!(answer.max_seq, Some(1024));
    assert!(answer.seq_limited_by_model);
    assert!(answer.notes.iter().any(|n| n.contains("1024")));
}

/// Inference: the KV cache of Llama-3-8B in bf16 is 2 · 8 KV heads · 128 · 32 layers · 2 B =
/// 131,072 bytes per token; 16 sequences of 8192 tokens hold 16 GiB.
#[test]
fn llama_3_8b_kv_cache() {
    let r = run(json!({"model": "llama-3-8b", "task": "infer", "batch": 16, "seq": 8192}));
    assert_eq!(2 * 8 * 128 * 32 * 2, 131_072);
    assert_eq!(r.per_gpu.components.kv_cache, 16 * 8192 * 131_072);
    // Inference keeps no gradients or optimizer states.
    assert_eq!(r.per_gpu.model_states.gradients, 0);
    assert_eq!(r.per_gpu.model_states.optimizer_states, 0);
}

/// A fused linear cross-entropy never holds b·s·V logits: for Llama-3.2-1B (V = 128,256,
/// h = 2048) at b = 2, s = 8192 the standard loss keeps an fp32 log-softmax of
/// 16,384 · 128,256 · 4 = 8,405,385,216 B; the chunked one keeps the input gradient
/// (16,384 · 2048 · 2 B in bf16 under autocast), the head-weight gradient (128,256 · 2048 · 4 B,
/// fp32 weights) and a per-token fp32 loss (16,384 · 4 B), plus the same labels.
#[test]
fn chunked_loss_keeps_gradients_not_logits() {
    let saved = |loss: &str| {
        let r = run(json!({"model": "llama-3.2-1b", "batch": 2, "seq": 8192, "loss": loss}));
        let at = |label: &str| {
            r.timeline
                .iter()
                .find(|p| p.label == label)
                .unwrap()
                .by_category["activations"]
        };
        at("loss") - at("final norm and head")
    };
    // The padded labels b·(s+1)·8 = 131,088 B round up to 131,584; the shifted b·s·8 = 131,072.
    let labels = 131_584 + 131_072;
    assert_eq!(saved("standard"), 16_384 * 128_256 * 4 + labels);
    assert_eq!(
        saved("chunked"),
        16_384 * 2048 * 2 + 128_256 * 2048 * 4 + 16_384 * 4 + labels
    );
}
