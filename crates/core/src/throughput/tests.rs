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
        matmul_params: 12.0 * lf * hf * hf + (v * h) as f64,
        params: 12.0 * lf * hf * hf + (v * h) as f64,
        attention: vec![(2.0 * hf * lf, None)],
        heads: 0.0,
        layers: l,
        hidden: h,
        kv_width: 2 * h,
        vocab: v,
        moe_layers: 0,
        top_k: 0,
        layer_ops: Default::default(),
        param_tensors: 0.0,
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
    let ideal = t.compute_s + t.communication_s;
    assert!(
        (t.bubble_s / ideal - 3.0 / 8.0).abs() < 1e-9,
        "{}",
        t.bubble_s / ideal
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
