//! The step-time model's formulas against hand arithmetic.

use super::communication::{all_reduce_s, gather_s};
use super::compute::{model_flops, peft_model_flops};
use super::*;
use crate::gpu::find;

/// A GPT-shaped model as Narayanan et al. 2021 count it: 12·l·h² block parameters plus the
/// V·h head, attention width 2h per layer (h for Q·Kᵀ, h for the sum over V).
fn gpt(l: u64, h: u64, v: u64) -> ModelShape {
    let (lf, hf) = (l as f64, h as f64);
    ModelShape {
        attention: vec![(2.0 * hf * lf, None)],
        layers: l,
        hidden: h,
        kv_width: 2 * h,
        vocab: v,
        ..ModelShape::dense(12.0 * lf * hf * hf + (v * h) as f64)
    }
}

/// Narayanan eq. 3 without recomputation: 72·b·s·l·h²·(1 + s/(6h) + V/(12·l·h)). For l 24,
/// h 2304, V 51200, s 2048, b 1: 72 · 2048 · 24 · 2304² = 1.8786e13; the bracket is
/// 1 + 2048/13824 + 51200/663552 = 1.22531; product 2.3019e13.
#[test]
fn model_flops_are_narayanan_eq3() {
    let f = model_flops(&gpt(24, 2304, 51200), 1, 2048);
    let by_hand =
        72.0 * 2048.0 * 24.0 * 2304f64.powi(2) * (1.0 + 2048.0 / 13824.0 + 51200.0 / 663552.0);
    assert!((f / by_hand - 1.0).abs() < 1e-12, "{f} vs {by_hand}");
    assert!((f / 2.3019e13 - 1.0).abs() < 1e-3);
}

/// Ring collectives: an all-reduce of 1 GB over 8 ranks at 100 GB/s moves 2 · 7/8 GB per rank:
/// 17.5 ms; a reduce-scatter half that, 8.75 ms; one rank moves nothing.
#[test]
fn collectives_move_the_ring_volumes() {
    assert!((all_reduce_s(1e9, 8, 1e11) - 0.0175).abs() < 1e-12);
    assert!((gather_s(1e9, 8, 1e11) - 0.00875).abs() < 1e-12);
    assert_eq!(all_reduce_s(1e9, 1, 1e11), 0.0);
}

fn setup(pp: u64, m: u64) -> Setup {
    Setup {
        framework: Framework::Megatron,
        dp: 1,
        tp: 1,
        pp,
        cp: 1,
        ep: 1,
        sp: false,
        zero: 0,
        offload: Offload::None,
        checkpointing: Checkpointing::None,
        attention: AttentionKernel::Flash,
        micro_batch: 1,
        microbatches: m,
        seq: 2048,
        width: 2,
        grad_width: 4,
        step_bytes: 0,
        peft: false,
        trainable_params: 1e9,
        trainable_tensors: 0.0,
        autocast: false,
        fused: true,
        lora_per_layer: 0.0,
        lora_cast: false,
        optimizer_pass: OptimizerPass::Flat,
    }
}

/// 1F1B's bubble is (p − 1) micro-batch times: with p 4 and m 8 it is 3/8 of the ideal
/// m micro-batches — their compute and their pipeline sends, single data-parallel replica, no
/// optimizer bytes — (Narayanan et al. 2021 §2.2.1), whatever the GPU.
#[test]
fn pipeline_bubble_is_p_minus_1_over_m() {
    let hw = Hardware::of(find("a100-80gb").unwrap(), Precision::Bf16Mixed).unwrap();
    let t = train_step(&gpt(32, 4096, 32000), &setup(4, 8), &hw);
    let ideal = t.parts.compute_s + t.parts.communication_s;
    assert!(
        (t.parts.bubble_s / ideal - 3.0 / 8.0).abs() < 1e-9,
        "{}",
        t.parts.bubble_s / ideal
    );
}

/// MFU is model FLOPs over step time × peak: one A100 GPU, no communication, so the step is
/// compute and MFU = model FLOPs / (compute seconds × 312e12), below the MAMF fraction 0.859.
#[test]
fn mfu_is_model_flops_over_time_and_peak() {
    let hw = Hardware::of(find("a100-80gb").unwrap(), Precision::Bf16Mixed).unwrap();
    let shape = gpt(24, 2304, 51200);
    let t = train_step(&shape, &setup(1, 1), &hw);
    let by_hand = model_flops(&shape, 1, 2048) / (t.step_s * 312e12);
    assert!((t.mfu - by_hand).abs() < 1e-12);
    assert!(t.mfu < 0.859 && t.mfu > 0.5, "{}", t.mfu);
}

/// Under PEFT the frozen weights take no weight gradient: the model FLOPs are two matmul
/// passes, not three. For Narayanan's model at b 1, s 2048 (eq. 3's terms above): matmuls
/// 2 · 2 · 2048 · (12 · 24 · 2304² + 51200 · 2304) = 1.34905e13 and attention 3 · 2 · 2048² ·
/// 2 · 2304 · 24 = 2.78314e12 → 1.62736e13, and the MFU stays a fraction (it read 1.5× the
/// hardware's efficiency when the FLOPs counted a weight-gradient pass the step does not run).
#[test]
fn peft_model_flops_skip_the_weight_gradient_pass() {
    let shape = gpt(24, 2304, 51200);
    let f = peft_model_flops(&shape, 1, 2048);
    assert!((f / 1.62736e13 - 1.0).abs() < 1e-4, "{f:e}");
    let hw = Hardware::of(find("a100-80gb").unwrap(), Precision::Bf16Mixed).unwrap();
    let mut s = setup(1, 1);
    s.peft = true;
    let t = train_step(&shape, &s, &hw);
    assert!((t.mfu - f / (t.step_s * 312e12)).abs() < 1e-12);
    assert!(t.mfu < 0.859 && t.mfu > 0.5, "{}", t.mfu);
}

/// The A100's BF16 peak is 312 TFLOP/s (datasheet), its one-way NVLink 300 GB/s (600 both
/// ways), PCIe Gen4 32 GB/s one way; fp32 jobs use the 19.5 TFLOP/s FP32 units.
#[test]
fn hardware_reads_the_catalog() {
    let a100 = find("a100-80gb").unwrap();
    let hw = Hardware::of(a100, Precision::Bf16Mixed).unwrap();
    assert_eq!((hw.peak, hw.intra, hw.host), (312e12, 300e9, 32e9));
    assert_eq!(Hardware::of(a100, Precision::Fp32).unwrap().peak, 19.5e12);
    // No speeds in the catalog: a reason, no figures.
    let e = Hardware::of(find("apple-m4max-128gb").unwrap(), Precision::Bf16).unwrap_err();
    assert!(e.contains("no speeds"), "{e}");
    // The V100 has no bf16 units.
    assert!(Hardware::of(find("v100-32gb").unwrap(), Precision::Bf16Mixed).is_err());
}

/// A DPO training step (TRL: chosen and rejected rows concatenated) is the policy's step on
/// twice the pairs; a frozen reference adds one no-grad forward over those rows — a third of
/// eq. 3's FLOPs at b 2 — and a precomputed one nothing. Tokens per step are 2 · seq.
#[test]
fn dpo_step_trains_both_rows_and_runs_the_reference_forward() {
    let hw = Hardware::of(find("a100-80gb").unwrap(), Precision::Bf16Mixed).unwrap();
    let shape = gpt(24, 2304, 51200);
    let pairs = setup(1, 1);
    let mut rows = pairs;
    rows.micro_batch = 2;
    let plain = train_step(&shape, &rows, &hw);
    let pre = rl::dpo_train_step(&shape, &pairs, &hw, false);
    assert_eq!(pre, plain);
    let frozen = rl::dpo_train_step(&shape, &pairs, &hw, true);
    let reference = hw.matmul_s(model_flops(&shape, 2, 2048) / 3.0);
    assert!((frozen.step_s - plain.step_s - reference).abs() < 1e-12);
    let tokens = frozen.tokens_per_s_per_gpu * frozen.step_s;
    assert!((tokens - 2.0 * 2048.0).abs() < 1e-6, "{tokens}");
}

/// A Qwen2 decoder layer (`modeling_qwen2.py`): two RMSNorms, q/k/v (with biases) and o,
/// gate/up/down, rotary, SiLU, grouped-query attention.
fn qwen2_layer() -> shape::LayerOps {
    shape::LayerOps {
        rms_norms: 2.0,
        layer_norms: 0.0,
        projections: 7.0,
        biases: 3.0,
        fp32_inputs: 5.0,
        shared_input_adds: 3.0,
        rotary: true,
        repeat_kv: true,
        act_kernels: 1.0,
        gated: true,
        hidden_dropouts: 0.0,
        attention_dropout: false,
        lora: 0.0,
        hidden: 896.0,
        rotary_width: (14.0 + 2.0) * 64.0,
        act_width: 4864.0,
        head_dim: 64,
    }
}

fn hf(precision: Precision) -> Setup {
    let mut s = setup(1, 1);
    s.framework = Framework::Pytorch;
    s.attention = AttentionKernel::Sdpa;
    s.width = precision.compute_bytes();
    s.autocast = autocast(Framework::Pytorch, precision);
    s.fused = false;
    s.optimizer_pass = OptimizerPass::Foreach;
    s
}

/// Kernels of one Qwen2 layer under bf16 autocast, forward: 2 norms × 6 (pow, mean, add, rsqrt,
/// mul, weight ×; the casts are no-ops on the fp32 residual) = 12; 7 GEMMs; autocast's casts of
/// 7 weights, 3 biases and the 5 fp32 inputs (q, k, v, gate, up) = 15; rotary 10 and the casts
/// of q and k back = 12; SDPA 1; the output's contiguous copy 1, 2 residual adds, SiLU, the
/// gate's multiply = 5: 52. Backward: norms 2 × 14 = 28; GEMMs 7 × 2 + 3 bias sums + the 10
/// weight/bias casts' and the 5 input casts' backwards = 32; 3 adds of shared inputs; rotary
/// 18 + 2; SDPA's 3; residuals 2 + 2 casts; SiLU 1; the gate's 2: 93. In pure bf16 the norms
/// cast up and back (8 forward, 16 backward) and autocast's casts go: 39 and 78.
#[test]
fn eager_kernels_of_a_qwen2_layer() {
    let o = qwen2_layer();
    let mixed = hf(Precision::Bf16Mixed);
    assert_eq!(eager::forward_kernels(&o, &mixed), 52.0);
    assert_eq!(eager::backward_kernels(&o, &mixed), 93.0);
    let bf16 = hf(Precision::Bf16);
    assert_eq!(eager::forward_kernels(&o, &bf16), 39.0);
    assert_eq!(eager::backward_kernels(&o, &bf16), 78.0);
    // 24 layers and the model around them (23 kernels forward under autocast, 30 backward) at
    // 40 µs a kernel: (24 · 52 + 23) · 40 µs = 50.84 ms; (24 · 93 + 30) · 40 µs = 90.48 ms.
    let h = eager::host(&o, 24.0, &mixed);
    assert!((h.forward_s - 0.05084).abs() < 1e-9, "{h:?}");
    assert!((h.backward_s - 0.09048).abs() < 1e-9, "{h:?}");
    // Full checkpointing: 40 saved tensors a layer (2 norms × 6, 7 projections × 2, rotary's
    // 4, SDPA's 7, SiLU's 1, the gate's 2) through the pack hook at 36 µs: +34.56 ms forward;
    // the backward runs the layers' forward again (24 · 52 · 40 µs = 49.92 ms) and 42 µs a
    // saved tensor (40.32 ms).
    assert_eq!(eager::saved_per_layer(&o), 40.0);
    let mut full = mixed;
    full.checkpointing = Checkpointing::Full;
    let c = eager::host(&o, 24.0, &full);
    assert!((c.forward_s - (0.05084 + 0.03456)).abs() < 1e-9, "{c:?}");
    assert!(
        (c.backward_s - (0.09048 + 0.04992 + 0.04032)).abs() < 1e-9,
        "{c:?}"
    );
}

/// Bytes per token of a Llama-3.1-8B layer's memory-bound forward in pure bf16 (h 4096, q 32 ×
/// 128, k 8 × 128, MLP 14336): norms 2 × 36 · 4096 = 294,912; residual adds 2 × (2·2 + 2) ·
/// 4096 = 49,152 — replicated 344,064; rotary (4096 + 1024) · 20 = 102,400, the attention
/// output's copy 2 · 2 · 4096 = 16,384, SiLU and the gate 14336 · (2·2 + 3·2) = 143,360 —
/// split 262,144. Under autocast (fp32 residual): norms 2 × 28 · 4096 = 229,376, residual adds
/// 2 × (2·4 + 2) · 4096 = 81,920, the 5 input casts 6 · 5 · 4096 = 122,880 → 434,176; rotary
/// at 36 bytes 184,320 + 16,384 + 143,360 = 344,064.
#[test]
fn memory_bound_bytes_of_a_llama_layer() {
    let o = shape::LayerOps {
        projections: 7.0,
        biases: 0.0,
        hidden: 4096.0,
        rotary_width: 5120.0,
        act_width: 14336.0,
        ..qwen2_layer()
    };
    assert_eq!(
        memory::layer_forward_bytes(&o, &hf(Precision::Bf16)),
        (344_064.0, 262_144.0)
    );
    assert_eq!(
        memory::layer_forward_bytes(&o, &hf(Precision::Bf16Mixed)),
        (434_176.0, 344_064.0)
    );
    // The loss over 1e6 16-bit logits: 18 bytes each forward, 22 backward.
    assert_eq!(memory::loss_bytes(1e6, 2), (18e6, 22e6));
}

/// A foreach AdamW step (`_multi_tensor_adam`, 21 accesses an element) over N fp32
/// parameters moves 84·N bytes at 4.8 TB/s × 0.64 (for Narayanan's 1.6468e9-parameter model,
/// 1.3833e11 bytes: 45.03 ms), longer than the host's 100 tensors × 27.5 µs = 2.75 ms; `zero_grad`'s 100 × 5 µs
/// = 0.5 ms follows.
/// Pure bf16 halves the bytes (42 a parameter); `fused=True` moves 7 accesses (28 bytes).
#[test]
fn foreach_adamw_moves_21_accesses_a_parameter() {
    let hw = Hardware::of(find("h200-141gb").unwrap(), Precision::Bf16Mixed).unwrap();
    let mut s = hf(Precision::Bf16Mixed);
    s.trainable_tensors = 100.0;
    let s = s.with_step_bytes(Optimizer::AdamW, Precision::Bf16Mixed);
    assert_eq!(s.step_bytes, 84);
    let t = train_step(
        &gpt(24, 2304, 51200),
        &Setup {
            trainable_params: 1e9,
            ..s
        },
        &hw,
    );
    let params = gpt(24, 2304, 51200).params;
    let expected = params * 84.0 / (4.8e12 * 0.64) + 100.0 * 5e-6;
    assert!(
        (t.optimizer_s - expected).abs() < 1e-12,
        "{}",
        t.optimizer_s
    );
    assert!((t.optimizer_s - 0.04553).abs() < 1e-4, "{}", t.optimizer_s);
    let bf16 = hf(Precision::Bf16).with_step_bytes(Optimizer::AdamW, Precision::Bf16);
    assert_eq!(bf16.step_bytes, 42);
    let mut fused = hf(Precision::Bf16Mixed);
    fused.optimizer_pass = OptimizerPass::Fused;
    assert_eq!(
        fused
            .with_step_bytes(Optimizer::AdamWFused, Precision::Bf16Mixed)
            .step_bytes,
        28
    );
}

/// A phase takes the longer of the GPU's work and the host's launches: a small model at a
/// small batch is launch-bound (its forward is the host's time), a large one at a large batch
/// is compute-bound (its forward is the GPU's).
#[test]
fn phases_take_the_longer_of_host_and_gpu() {
    let hw = Hardware::of(find("h200-141gb").unwrap(), Precision::Bf16Mixed).unwrap();
    let mut small = gpt(24, 896, 151936);
    small.layer_ops = qwen2_layer();
    let mut s = hf(Precision::Bf16Mixed);
    s.seq = 128;
    let t = train_step(&small, &s, &hw);
    // (24 · 52 + 23) · 40 µs.
    assert!((t.forward_s - 0.05084).abs() < 1e-9, "{t:?}");
    assert_eq!(t.bound(), "launch");
    let mut big = gpt(32, 4096, 128256);
    big.layer_ops = qwen2_layer();
    s.seq = 8192;
    s.micro_batch = 8;
    let t = train_step(&big, &s, &hw);
    assert!(t.forward_s > 0.05084 * 32.0 / 24.0 * 2.0, "{t:?}");
    assert_eq!(t.bound(), "compute");
}

/// SDPA's backend decides how attention is timed (`estimate::blocks::sdpa`): in torch 2.11 a
/// grouped-query model in bf16 gets the flash kernel (fused), in fp32 neither flash (16-bit
/// only) nor memory-efficient (no grouped k/v before 2.15) — the math fallback, timed as eager.
#[test]
fn sdpa_math_fallback_is_timed_as_eager() {
    let mut shape = gpt(16, 2048, 128256);
    shape.layer_ops = qwen2_layer();
    let job = |precision: &str| -> ResolvedJob {
        serde_json::from_value::<crate::job::Job>(serde_json::json!({
            "model": {"params": 1_000_000_000u64}, "gpu": "h200-141gb", "precision": precision,
            "attention": "sdpa", "torch_version": "2.11"
        }))
        .unwrap()
        .resolve(None)
        .unwrap()
    };
    assert_eq!(
        attention_kernel(&job("fp32"), &shape),
        AttentionKernel::Eager
    );
    assert_eq!(
        attention_kernel(&job("bf16"), &shape),
        AttentionKernel::Sdpa
    );
}

/// The share of the weights an MoE decode step reads (`ModelShape::decode_weight_share`), by
/// hand for 8 experts, top-2, the experts half of 1,000 parameters: one token reads 2 of 8
/// experts (500 + 500 · 2/8 = 625 → 0.625); four tokens 8 · (1 − (6/8)⁴) = 8 · 0.68359375 =
/// 5.46875 of 8 (500 + 500 · 0.68359375 = 841.796875 → 0.841796875); a dense model all of them.
#[test]
fn moe_decode_reads_the_experts_its_tokens_pick() {
    let moe = ModelShape {
        params: 1000.0,
        experts: 8,
        top_k: 2,
        expert_params: 500.0,
        ..gpt(1, 8, 8)
    };
    assert!((moe.decode_weight_share(1) - 0.625).abs() < 1e-12);
    assert!((moe.decode_weight_share(4) - 0.841_796_875).abs() < 1e-12);
    assert!(moe.decode_weight_share(10_000) > 0.999_999);
    assert_eq!(gpt(2, 64, 100).decode_weight_share(1), 1.0);
}
