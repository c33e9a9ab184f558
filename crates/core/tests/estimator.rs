//! The estimator on real models, against values derived by hand from papers and from the models'
//! shapes (never from vramscope's own output).

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
use vramscope_core::report::Report;
use vramscope_formats::model_source::load_job_model;

use common::run_job as run;

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
    assert!(r.per_gpu.peaks.peak_allocated.is_none());
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
        .peaks
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
        .peaks
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
        r.per_gpu.peaks.activation_bytes_per_layer,
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
    assert_eq!(p.components.allocated(), p.peaks.peak_allocated.unwrap());
    assert!(p.peaks.peak_reserved.unwrap() >= p.peaks.peak_allocated.unwrap());
    assert_eq!(
        p.peaks.device_total.unwrap(),
        p.peaks.peak_reserved.unwrap() + p.components.cuda_context
    );
    assert_eq!(
        p.components.allocator_reserve,
        p.peaks.peak_reserved.unwrap() - p.peaks.peak_allocated.unwrap()
    );
    let fit = r.fit.unwrap();
    assert_eq!(fit.target.capacity, 81559 << 20);
    assert_eq!(
        fit.fits,
        p.peaks.device_total.unwrap() <= fit.target.capacity
    );
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
    let total = |batch| common::device_total_at(&model, &resolved, batch);
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
/// (`torch.zeros_like(_input)`: the final norm's output, fp32 under autocast — the residual
/// stream of fp32 weights is fp32 and Liger casts nothing —, 16,384 · 2048 · 4 B), the
/// head-weight gradient (128,256 · 2048 · 4 B, fp32 weights) and a per-token fp32 loss
/// (16,384 · 4 B), plus the same labels.
#[test]
fn chunked_loss_keeps_gradients_not_logits() {
    let saved = |loss: &str| {
        let r = run(json!({"model": "llama-3.2-1b", "batch": 2, "seq": 8192, "loss": loss}));
        common::activations_at(&r, "loss") - common::activations_at(&r, "final norm and head")
    };
    // The padded labels b·(s+1)·8 = 131,088 B round up to 131,584; the shifted b·s·8 = 131,072.
    let labels = 131_584 + 131_072;
    assert_eq!(saved("standard"), 16_384 * 128_256 * 4 + labels);
    assert_eq!(
        saved("chunked"),
        16_384 * 2048 * 4 + 128_256 * 2048 * 4 + 16_384 * 4 + labels
    );
}

fn kv(job: Value) -> u64 {
    run(job).per_gpu.components.kv_cache
}

/// T5-small generating: each of its 6 decoder layers caches self-attention K and V over the
/// generated tokens and cross-attention K and V over the encoder's input, 8 heads × 64 each,
/// in fp32. 128 new tokens after a 512-token input: 6 · 2 · 512 · 4 B · (128 + 512) =
/// 3,145,728 + 12,582,912 = 15,728,640 B (the encoder keeps no cache).
#[test]
fn encoder_decoder_kv_holds_self_and_cross_attention() {
    let job = json!({"model": "t5-small", "task": "infer", "batch": 1, "seq": 512,
                     "new_tokens": 128, "precision": "fp32"});
    assert_eq!(kv(job), 6 * 2 * 512 * 4 * (128 + 512));
    // Two sequences double it; the input length moves only the cross-attention part.
    let job = json!({"model": "t5-small", "task": "infer", "batch": 2, "seq": 256,
                     "new_tokens": 128, "precision": "fp32"});
    assert_eq!(kv(job), 2 * 6 * 2 * 512 * 4 * (128 + 256));
}

/// KV per token, by hand: Llama-2-70B keeps 8 KV heads of 128 over 80 layers in 16 bit:
/// 2 · 8 · 128 · 80 · 2 = 327,680 B; DeepSeek-V3 caches the MLA latent and rotary key,
/// (512 + 64) · 61 layers · 2 B = 70,272 B, as vLLM stores it (in 16-token blocks).
#[test]
fn kv_cache_per_token() {
    assert_eq!(
        kv(json!({"model": "llama-2-70b", "task": "infer", "batch": 1, "seq": 1})),
        327_680
    );
    assert_eq!(
        kv(
            json!({"model": "deepseek-v3", "task": "infer", "batch": 1, "seq": 16,
                  "framework": "vllm", "gpu": "h200-141gb",
                  "parallel": {"tp": 8}})
        ),
        16 * 70_272
    );
}

/// Mistral-7B-v0.1 attends over a 4096-token window (32 layers, 8 KV heads of 128, 16 bit:
/// 2 · 8 · 128 · 32 · 2 = 131,072 B per token over the layers). A generation that peaks in its
/// decode holds the window: 16 prompt tokens and 8,192 new leave each layer min(16 + 8,191,
/// 4,096) = 4,096 tokens at the last step — 4,096 · 131,072 = 536,870,912 B, half of an
/// unwindowed cache. A long prompt peaks in its prefill, where each sliding layer still holds
/// the whole prompt (transformers 5.24 `DynamicSlidingWindowLayer.update` keeps a view of the
/// prompt's `torch.cat` until the first decode step): 8,000 · 131,072 = 1,048,576,000 B.
#[test]
fn sliding_window_caps_the_cache() {
    let decode = run(
        json!({"model": "mistral-7b-v0.1", "task": "infer", "batch": 1, "seq": 16,
                            "new_tokens": 8192}),
    );
    assert_eq!(decode.per_gpu.peaks.peak_phase.as_deref(), Some("decode"));
    assert_eq!(decode.per_gpu.components.kv_cache, 4096 * 131_072);
    let prefill = run(
        json!({"model": "mistral-7b-v0.1", "task": "infer", "batch": 1,
                             "seq": 8000, "new_tokens": 192}),
    );
    assert_eq!(prefill.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
    assert_eq!(prefill.per_gpu.components.kv_cache, 8000 * 131_072);
    // An fp8 cache halves it.
    assert_eq!(
        kv(
            json!({"model": "mistral-7b-v0.1", "task": "infer", "batch": 1, "seq": 16,
                  "new_tokens": 8192, "kv_dtype": "fp8"})
        ),
        4096 * 131_072 / 2
    );
}

/// Llama-2-7B in llama-quantize's Q4_K_M mix, by hand (llama.cpp `llama_tensor_get_type`):
/// `output` in Q6_K; `attn_v` and `ffn_down` in Q6_K on the 16 layers `use_more_bits` picks
/// (the first and last 4, and every third between: 6, 9, ..., 27), Q4_K elsewhere; all other
/// matrices Q4_K (144 B per 256 values), Q6_K 210 B per 256, norms F32. Tensor counts: 65 F32,
/// 193 Q4_K, 33 Q6_K (as llama.cpp's loader logs for this file).
/// token_embd 73,728,000 + 16 layers of 129,818,624 + 16 of 113,868,800 + output 107,520,000 +
/// output_norm 16,384 = 4,080,263,168 B — TheBloke's llama-2-7b.Q4_K_M.gguf is 4,081,004,224 B,
/// the rest being its header (the 32,000-token vocabulary).
#[test]
fn gguf_q4_k_m_mix_by_hand() {
    let q4k = |n: u64| n / 256 * 144;
    let q6k = |n: u64| n / 256 * 210;
    let (h, f, v) = (4096u64, 11008u64, 32000u64);
    let norms = 2 * h * 4;
    let more = 3 * q4k(h * h) + q6k(h * h) + 2 * q4k(h * f) + q6k(f * h) + norms;
    let plain = 4 * q4k(h * h) + 3 * q4k(h * f) + norms;
    assert_eq!((more, plain), (129_818_624, 113_868_800));
    let total = q4k(v * h) + 16 * more + 16 * plain + q6k(v * h) + h * 4;
    assert_eq!(total, 4_080_263_168);
    let r = run(json!({"model": "llama-2-7b", "task": "infer", "seq": 512,
        "framework": "llama.cpp", "weights": "gguf:Q4_K_M"}));
    let e = r.engine.unwrap();
    let weights = e["gpu_weights"].as_u64().unwrap() + e["host_weights"].as_u64().unwrap();
    assert_eq!(weights, total);
    // The token embedding stays on the host.
    assert_eq!(e["host_weights"].as_u64().unwrap(), q4k(v * h));
}

/// vLLM: gpu_memory_utilization must lie in (0, 1]; the pool is what is left of it.
#[test]
fn vllm_budget_and_bad_utilization() {
    let job: Job = serde_json::from_value(json!({"model": "llama-3-8b", "task": "infer",
        "framework": "vllm", "gpu": "a100-80gb", "engine": {"gpu_memory_utilization": 1.5}}))
    .unwrap();
    // Resolution reads the engine's settings once; the error comes from there.
    assert_refused(&job, "engine.gpu_memory_utilization");
    let r = run(
        json!({"model": "llama-3-8b", "task": "infer", "framework": "vllm",
        "gpu": "a100-80gb", "engine": {"gpu_memory_utilization": 0.9}}),
    );
    let b = r.engine.unwrap();
    let usable = (81920u64 << 20) as f64 * 0.9;
    assert_eq!(b["usable"].as_u64().unwrap(), usable as u64);
    let pool = b["kv_pool"].as_u64().unwrap();
    let parts = ["weights", "profile_peak", "cuda_graphs", "non_torch"]
        .iter()
        .map(|k| b[*k].as_u64().unwrap())
        .sum::<u64>();
    // The pool is the remainder, cut into whole blocks of 16 tokens × 131,072 B.
    assert!(pool <= usable as u64 - parts && usable as u64 - parts - pool < 16 * 131_072);
    assert_eq!(b["block_bytes"], 16 * 131_072);
    assert_eq!(r.per_gpu.kv_pool, Some(pool));
}

/// Names that do not exist are named back: a KV dtype, a GGUF type.
#[test]
fn unknown_kv_dtype_and_gguf_type() {
    for (job, field) in [
        (
            json!({"model": "gpt2", "task": "infer", "kv_dtype": "fp7"}),
            "kv_dtype",
        ),
        (
            json!({"model": "gpt2", "task": "infer", "weights": "gguf:Q9_K"}),
            "weights",
        ),
    ] {
        let job: Job = serde_json::from_value(job).unwrap();
        assert_refused(&job, field);
    }
}

/// config.json's `quantization_config` sets the weights' format: a bitsandbytes 4-bit NF4
/// checkpoint with double quantization (QLoRA §2) stores each quantizable projection of n
/// values in n/2 packed bytes + n/64 one-byte absmax values + an fp32 scale per 256 blocks +
/// a 4-byte offset + a 64-byte code table (a [4096, 4096] matrix: 8,654,916 B, 8,655,360 as
/// allocated, against 33,554,432 in bf16).
#[test]
fn quantization_config_is_read() {
    let mut cfg: Value = serde_json::from_str(
        vramscope_formats::presets::find("llama-2-7b")
            .unwrap()
            .config,
    )
    .unwrap();
    cfg["quantization_config"] = json!({"quant_method": "bitsandbytes", "load_in_4bit": true,
        "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true});
    let q = run(json!({"model": {"hf_config": cfg}, "task": "infer", "seq": 16}));
    let plain = run(json!({"model": "llama-2-7b", "task": "infer", "seq": 16}));
    let r512 = |b: u64| b.div_ceil(512) * 512;
    let nf4dq = |n: u64| r512(n / 2 + n / 64 + 4 * (n / 64).div_ceil(256) + 4 + 64);
    assert_eq!(nf4dq(4096 * 4096), 8_655_360);
    // 32 layers of q, k, v, o and gate, up, down; embedding, head and 65 norms stay bf16.
    let layer = 4 * nf4dq(4096 * 4096) + 3 * nf4dq(4096 * 11008);
    let expected = 32 * layer + 2 * 32000 * 4096 * 2 + 65 * 4096 * 2;
    let qp = q.per_gpu.components.parameters;
    assert_eq!(qp, expected);
    let pp = plain.per_gpu.components.parameters;
    assert_eq!(pp, 6_738_415_616 * 2);
}

/// Korthikanti et al. 2022 §4.2.3: with 1F1B pipelining the first stage holds p micro-batches
/// of its L/p layers — L layers' worth of activations. GPT-3 175B with t = 8 and sequence
/// parallelism keeps sbh/t·(34 + 5as/h) = sbh·114/8 per layer; with p = 4 and 8 micro-batches
/// the first stage keeps 24 layers × 4 micro-batches = 96 layers' worth.
#[test]
fn pipeline_first_stage_holds_l_layers() {
    let cfg = json!({"model_type": "gpt2", "n_embd": 12288, "n_head": 96, "n_layer": 96,
        "n_positions": 2048, "vocab_size": 51200});
    let r = run(json!({"model": {"hf_config": cfg}, "seq": 2048, "batch": 1,
        "precision": "fp16-mixed", "framework": "megatron", "attention": "eager",
        "parallel": {"tp": 8, "sp": true, "pp": 4, "dp": 1, "microbatches": 8}}));
    let per_layer = r.per_gpu.peaks.activation_bytes_per_layer.unwrap();
    assert_eq!(per_layer, 2048 * 12288 * 114 / 8);
    let acts = |label: &str| common::activations_at(&r, label);
    // 24 layers on the first stage, 4 micro-batches in flight each.
    assert_eq!(acts("layer 23") - acts("embeddings"), 96 * per_layer);
    assert!(r.timeline.iter().all(|p| p.label != "layer 24"));
}

/// Layouts that cannot run are named: TP not dividing the heads, more stages than layers,
/// experts on a dense model.
#[test]
fn impossible_layouts_are_named() {
    for (par, field) in [
        (json!({"tp": 5, "gpus": 5}), "parallel.tp"),
        (json!({"pp": 64, "gpus": 64}), "parallel.pp"),
        (json!({"ep": 2, "gpus": 2}), "parallel.ep"),
    ] {
        let job: Job =
            serde_json::from_value(json!({"model": "llama-3.2-1b", "parallel": par})).unwrap();
        assert_refused(&job, field);
    }
}

/// DDP's reducer keeps a bucketed copy of every gradient (torch docs on
/// `gradient_as_bucket_view`): with dp = 2 the GPU holds the gradients twice at the step.
#[test]
fn ddp_buckets_copy_the_gradients() {
    let one = run(json!({"model": "gpt2", "seq": 128, "precision": "fp32"}));
    let two = run(json!({"model": "gpt2", "seq": 128, "precision": "fp32",
        "parallel": {"dp": 2}}));
    let opt = |r: &Report| {
        r.timeline
            .iter()
            .find(|p| p.phase == "optimizer")
            .unwrap()
            .allocated
    };
    assert_eq!(opt(&two) - opt(&one), 124_439_808 * 4);
}

fn plan_of(model: &str, gpu: &str, gpus: u64, mb: u64) -> vramscope_core::plan::PlanResult {
    let job: Job = serde_json::from_value(json!({"model": model, "seq": 4096})).unwrap();
    let (input, resolved) = common::prepared(&job);
    let g = vramscope_core::gpu::find(gpu).unwrap();
    vramscope_core::plan::plan(&input, &resolved, gpus, g, mb, 10).unwrap()
}

/// On one GPU the space is small enough to count by hand: Megatron with ZeRO 0/1 × 3
/// recomputation policies; DeepSpeed stages 0–3 with their offload choices (1 + 2 + 2 + 3
/// modes) × 2 policies; FSDP NO_SHARD / SHARD_GRAD_OP / FULL_SHARD × 2 policies — each at
/// micro-batches 1 and 2: (6 + 16 + 6) · 2 = 56 layouts.
#[test]
fn plan_space_on_one_gpu() {
    assert_eq!(plan_of("gpt2", "a100-80gb", 1, 2).evaluated, 56);
}

/// Llama-3.1-70B on 16 H100s: some layouts fit, and each one the full simulation confirms is
/// within the GPU; Llama-3.1-405B on two T4s: nothing fits, and the plan says what would.
#[test]
fn plan_finds_layouts_or_says_what_would() {
    let p = plan_of("llama-3.1-70b", "h100-80gb", 16, 8);
    assert!(p.fitting > 0);
    for c in &p.best {
        if let Some(per_gpu) = &c.estimate {
            assert!(per_gpu.peaks.device_total.unwrap() <= p.capacity);
        }
    }
    let none = plan_of("llama-3.1-405b", "t4-16gb", 2, 4);
    assert_eq!(none.fitting, 0);
    assert!(none.advice.iter().any(|a| a.contains("offload")));
}

/// Expert parallelism divides the routed experts: Mixtral-8x7B's 32 layers × 8 experts of
/// 3·4096·14336 parameters (45,097,156,608) over ep = 8 leave one expert per layer per GPU;
/// everything else (1,605,636,096 parameters) is replicated. In bf16: 2 bytes each.
#[test]
fn expert_parallelism_splits_the_experts() {
    let experts: u64 = 32 * 8 * 3 * 4096 * 14336;
    assert_eq!(experts, 45_097_156_608);
    let rest = 46_702_792_704 - experts;
    let r = run(json!({"model": "mixtral-8x7b", "task": "infer", "seq": 16,
        "parallel": {"ep": 8, "dp": 8}}));
    assert_eq!(r.per_gpu.components.parameters, 2 * (experts / 8 + rest));
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const MODELS: &[&str] = &[
        "gpt2",
        "bert-base-uncased",
        "smollm2-135m",
        "t5-small",
        "qwen1.5-moe-a2.7b",
        "deepseek-v2-lite",
        "gemma-2-2b",
        "opt-125m",
    ];
    const PRECISIONS: &[&str] = &["fp32", "fp16", "bf16", "fp16-mixed", "bf16-mixed"];
    const OPTIMIZERS: &[&str] = &[
        "none",
        "sgd",
        "sgd-momentum",
        "adam",
        "adamw",
        "adamw-fused",
        "adamw-8bit",
        "adafactor",
        "lion",
    ];
    const FRAMEWORKS: &[&str] = &[
        "pytorch",
        "deepspeed",
        "megatron",
        "fsdp",
        "vllm",
        "llama.cpp",
    ];
    const WEIGHTS: &[&str] = &[
        "none",
        "int8",
        "nf4",
        "nf4-dq",
        "fp8",
        "gptq:4",
        "awq:4",
        "gguf:Q4_K_M",
        "gguf:Q8_0",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// Any combination of the job's knobs on any family gives a report or a named error —
        /// never a panic — and a report's components add up to its peak.
        #[test]
        fn random_jobs_never_panic(
            m in 0..MODELS.len(), task in any::<bool>(), batch in 1u64..64, seq in 1u64..4096,
            p in 0..PRECISIONS.len(), o in 0..OPTIMIZERS.len(), f in 0..FRAMEWORKS.len(),
            w in 0..WEIGHTS.len(), ck in 0usize..3, eager in any::<bool>(),
            tp in prop::sample::select(vec![1u64, 2, 4]), pp in prop::sample::select(vec![1u64, 2]),
            dp in 1u64..4, zero in 0u64..4, lora in any::<bool>(),
        ) {
            let ckpt = ["none", "selective", "full"][ck];
            let job = json!({"model": MODELS[m], "task": if task {"train"} else {"infer"},
                "batch": batch, "seq": seq, "precision": PRECISIONS[p],
                "optimizer": OPTIMIZERS[o], "framework": FRAMEWORKS[f], "weights": WEIGHTS[w],
                "checkpointing": ckpt,
                "attention": if eager {"eager"} else {"sdpa"},
                "parallel": {"tp": tp, "pp": pp, "dp": dp, "zero": zero},
                "peft": if lora { json!({"method": "lora", "rank": 8}) } else { Value::Null },
                "gpu": "a100-80gb"});
            let job: Job = serde_json::from_value(job).unwrap();
            let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
            if let Ok(resolved) = job.resolve(None) {
                if let Ok(r) = estimate(&model.into_input(), &resolved) {
                    if let Some(peak) = r.per_gpu.peaks.peak_allocated {
                        prop_assert_eq!(r.per_gpu.components.allocated(), peak);
                    }
                }
            }
        }
    }
}

/// Gradient accumulation adds each micro-batch's gradients in place into the `.grad` kept from
/// the earlier ones (torch `AccumulateGrad`: `variable_grad += new_grad`), so gradients never
/// hold more than one copy. GPT-2 in fp32: 124,439,808 parameters (the shared `params-gpt2`
/// case), every tensor a multiple of 512 B, so 4 × 124,439,808 = 497,759,232 B of gradients.
#[test]
fn accumulated_gradients_are_one_copy() {
    for accum in [1, 4] {
        let r = run(
            json!({"model": "gpt2", "batch": 1, "seq": 256, "grad_accum": accum,
                           "precision": "fp32", "optimizer": "sgd", "attention": "eager"}),
        );
        let most = r
            .timeline
            .iter()
            .map(|p| p.by_category.get("gradients").copied().unwrap_or(0))
            .max()
            .unwrap();
        assert_eq!(most, 497_759_232, "grad_accum {accum}");
    }
}

/// Asserts that `job` is refused at resolution (which parses the job's typed values once)
/// with an error that starts with `field`.
fn assert_refused(job: &Job, field: &str) {
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let e = job
        .resolve(None)
        .and_then(|j| estimate(&model.into_input(), &j))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(field), "{e}");
}
