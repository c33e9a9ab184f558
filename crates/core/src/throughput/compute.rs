//! Compute time of one micro-batch on one GPU: FLOPs per op class at the GPU's achievable rate.
//!
//! FLOPs follow Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU
//! Clusters Using Megatron-LM", §5.1, eq. 3): a forward costs 2 FLOPs per matmul parameter per
//! token (Kaplan et al. 2020, §2.1) plus the attention core's 4·s² per head-dim per layer
//! (QKᵀ and the weighted sum of V); the backward costs twice the forward; full recomputation
//! adds one forward (Narayanan's 4× instead of 3×), selective recomputation the attention core
//! again (Korthikanti et al. 2022, §5). Model FLOPs (MFU's numerator) count neither
//! recomputation nor the causal mask's skipped half, as both papers and torchtitan's
//! `get_num_flop_per_token` do.

use super::hardware::Hardware;
use super::shape::ModelShape;
use super::Setup;
use crate::job::{AttentionKernel, Checkpointing};

/// The time one micro-batch's forward and backward take on one GPU, by op class.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MicroBatch {
    pub matmul_s: f64,
    pub attention_s: f64,
    pub memory_s: f64,
    /// Model FLOPs of the micro-batch on this GPU (no recomputation, full s² attention).
    pub model_flops: f64,
}

impl MicroBatch {
    pub fn total(&self) -> f64 {
        self.matmul_s + self.attention_s + self.memory_s
    }
}

/// Forward FLOPs of the attention core for one sequence of `s` tokens, the whole s×s score
/// matrix counted (or s×window where a layer attends within a window): 2·s·s_k per head-dim
/// for QKᵀ and again for the weighted sum of V.
pub fn attention_forward_flops(shape: &ModelShape, s: u64) -> f64 {
    shape
        .attention
        .iter()
        .map(|&(width, window)| {
            let sk = window.map_or(s, |w| w.min(s)) as f64;
            2.0 * s as f64 * sk * width
        })
        .sum()
}

/// Model FLOPs of a training step's micro-batch (all GPUs of one replica): Narayanan eq. 3
/// without recomputation, i.e. 3 × (2 N b s + attention forward).
pub fn model_flops(shape: &ModelShape, b: u64, s: u64) -> f64 {
    3.0 * (2.0 * shape.matmul_params * (b * s) as f64
        + b as f64 * attention_forward_flops(shape, s))
}

/// Model FLOPs of a PEFT (LoRA/QLoRA) micro-batch: the frozen weights take no weight
/// gradient, so the matmuls run two passes (forward, input gradients) where full training runs
/// three; attention has no weights and keeps its forward + twice-as-large backward. The
/// adapters' own FLOPs (rank r ≪ h) are left out. MFU is then "the FLOPs the step requires
/// over time × peak" (Chowdhery et al. 2022, PaLM, appendix B) and stays below 1.
pub fn peft_model_flops(shape: &ModelShape, b: u64, s: u64) -> f64 {
    2.0 * 2.0 * shape.matmul_params * (b * s) as f64
        + 3.0 * b as f64 * attention_forward_flops(shape, s)
}

/// One micro-batch on one GPU of the layout: work divided over tp × pp × cp.
pub fn micro_batch(shape: &ModelShape, setup: &Setup, hw: &Hardware) -> MicroBatch {
    let (b, s) = (setup.micro_batch as f64, setup.seq);
    let mp = (setup.tp * setup.pp * setup.cp) as f64;
    let full = setup.checkpointing == Checkpointing::Full;
    // Matmul passes: forward, input gradients, weight gradients (frozen weights under PEFT
    // skip the last), and a second forward under full recomputation.
    let passes = if setup.peft { 2.0 } else { 3.0 } + if full { 1.0 } else { 0.0 };
    let mm_fwd = 2.0 * shape.matmul_params * b * s as f64 / mp;
    let attn_fwd = b * attention_forward_flops(shape, s) / mp;
    let recompute_attn = if setup.checkpointing == Checkpointing::None {
        0.0
    } else {
        1.0
    };
    let attention_s = match setup.attention {
        // Fused kernels skip the masked half; FlashAttention's backward is 2.5 forwards
        // (Dao 2023, §3.1: five matmuls against the forward's two).
        AttentionKernel::Flash | AttentionKernel::Sdpa => {
            hw.attention_s(attn_fwd * 0.5 * (3.5 + recompute_attn))
        }
        // Eager: the whole score matrix in matmuls, and the scores written, soft-maxed and
        // read back through memory (≈6 passes of b·heads·s² values forward and backward).
        AttentionKernel::Eager => {
            let scores = b * shape.heads * (s * s) as f64 / mp * 2.0;
            hw.matmul_s(attn_fwd * (3.0 + recompute_attn)) + hw.memory_s(6.0 * scores)
        }
    };
    MicroBatch {
        matmul_s: hw.matmul_s(mm_fwd * passes),
        attention_s,
        memory_s: hw.memory_s(elementwise_bytes(shape, setup)),
        model_flops: if setup.peft {
            peft_model_flops(shape, setup.micro_batch, s)
        } else {
            model_flops(shape, setup.micro_batch, s)
        } / mp,
    }
}

/// Bytes the memory-bound ops of one micro-batch move on one GPU: the layers' norms, residual
/// adds, rotary and activation (forward once, backward twice — gradient in, gradient out —
/// and the forward again under full recomputation) and the loss's b·s·V logits (fp32: written
/// and read by the soft-max forward and backward, ≈16 bytes each).
fn elementwise_bytes(shape: &ModelShape, setup: &Setup) -> f64 {
    let tokens = (setup.micro_batch * setup.seq) as f64 / setup.cp as f64;
    let tp = setup.tp as f64;
    let rep = shape.elementwise_replicated / if setup.sp { tp } else { 1.0 };
    let per_layer = (rep + shape.elementwise_split / tp) * setup.width as f64;
    let passes = 3.0
        + if setup.checkpointing == Checkpointing::Full {
            1.0
        } else {
            0.0
        };
    let layers = shape.layers as f64 / setup.pp as f64;
    let loss = shape.vocab as f64 * 16.0 / tp / setup.pp as f64;
    tokens * (per_layer * passes * layers + loss)
}
