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

use super::eager::{self, Host};
use super::hardware::Hardware;
use super::memory;
use super::shape::ModelShape;
use super::Setup;
use crate::job::{AttentionKernel, Checkpointing};

/// The time one micro-batch's forward and backward take on one GPU: the GPU's work by op class
/// and by phase, and the host's time to launch it ([`super::eager`]). Each phase takes the
/// longer of the two: the host runs ahead of the GPU while the GPU is busy, and the GPU waits on
/// launches while it is not (each phase ends in a synchronisation, as a training loop that reads
/// its loss or steps its optimizer does).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MicroBatch {
    pub matmul_s: f64,
    pub attention_s: f64,
    pub memory_s: f64,
    /// Model FLOPs of the micro-batch on this GPU (no recomputation, full s² attention).
    pub model_flops: f64,
    /// GPU seconds of the forward, and of the backward (recomputation included).
    pub gpu_forward_s: f64,
    pub gpu_backward_s: f64,
    /// Host seconds launching them.
    pub host: Host,
}

impl MicroBatch {
    pub fn forward_s(&self) -> f64 {
        self.gpu_forward_s.max(self.host.forward_s)
    }

    pub fn backward_s(&self) -> f64 {
        self.gpu_backward_s.max(self.host.backward_s)
    }

    pub fn total(&self) -> f64 {
        self.forward_s() + self.backward_s()
    }

    /// Seconds of the phases the host's launches bound.
    pub fn launch_bound_s(&self) -> f64 {
        let fwd = if self.host.forward_s > self.gpu_forward_s {
            self.host.forward_s
        } else {
            0.0
        };
        let bwd = if self.host.backward_s > self.gpu_backward_s {
            self.host.backward_s
        } else {
            0.0
        };
        fwd + bwd
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

/// GPU seconds of one pass's parts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Pass {
    matmul: f64,
    attention: f64,
    memory: f64,
}

impl Pass {
    fn total(&self) -> f64 {
        self.matmul + self.attention + self.memory
    }
}

/// One micro-batch on one GPU of the layout: work divided over tp × pp × cp.
pub fn micro_batch(shape: &ModelShape, setup: &Setup, hw: &Hardware) -> MicroBatch {
    let s = setup.seq;
    let mp = (setup.tp * setup.pp * setup.cp) as f64;
    let (fwd, bwd) = gpu_passes(shape, setup, hw);
    let mut ops = shape.layer_ops;
    ops.lora = setup.lora_per_layer;
    let layers = shape.layers as f64 / setup.pp as f64;
    MicroBatch {
        matmul_s: fwd.matmul + bwd.matmul,
        attention_s: fwd.attention + bwd.attention,
        memory_s: fwd.memory + bwd.memory,
        model_flops: if setup.peft {
            peft_model_flops(shape, setup.micro_batch, s)
        } else {
            model_flops(shape, setup.micro_batch, s)
        } / mp,
        gpu_forward_s: fwd.total(),
        gpu_backward_s: bwd.total(),
        host: eager::host(&ops, layers, setup),
    }
}

/// The GPU's forward and backward (recomputation included) of one micro-batch.
fn gpu_passes(shape: &ModelShape, setup: &Setup, hw: &Hardware) -> (Pass, Pass) {
    let (b, s) = (setup.micro_batch as f64, setup.seq);
    let mp = (setup.tp * setup.pp * setup.cp) as f64;
    let full = f(setup.checkpointing == Checkpointing::Full);
    // Backward matmul passes: input gradients, weight gradients (frozen weights under PEFT
    // skip them), and the forward again under full recomputation.
    let bwd_passes = if setup.peft { 1.0 } else { 2.0 } + full;
    let mm_fwd = 2.0 * shape.matmul_params * b * s as f64 / mp;
    let attn_fwd = b * attention_forward_flops(shape, s) / mp;
    let recompute_attn = f(setup.checkpointing != Checkpointing::None);
    let (attn_f, attn_b) = match setup.attention {
        // Fused kernels skip the masked half; FlashAttention's backward is 2.5 forwards
        // (Dao 2023, §3.1: five matmuls against the forward's two).
        AttentionKernel::Flash | AttentionKernel::Sdpa => (
            hw.attention_s(attn_fwd * 0.5),
            hw.attention_s(attn_fwd * 0.5 * (2.5 + recompute_attn)),
        ),
        AttentionKernel::Eager => {
            let (mf, mb) = eager_scores_bytes(shape, setup);
            (
                hw.matmul_s(attn_fwd) + hw.memory_s(mf),
                hw.matmul_s(attn_fwd * (2.0 + recompute_attn))
                    + hw.memory_s(mb + recompute_attn * mf),
            )
        }
    };
    let (mem_f, mem_b) = elementwise_bytes(shape, setup);
    let fwd = Pass {
        matmul: hw.matmul_s(mm_fwd),
        attention: attn_f,
        memory: hw.memory_s(mem_f),
    };
    let bwd = Pass {
        matmul: hw.matmul_s(mm_fwd * bwd_passes),
        attention: attn_b,
        memory: hw.memory_s(mem_b),
    };
    (fwd, bwd)
}

/// Bytes eager attention moves through its b·heads·s² scores (`eager_attention_forward`; SDPA's
/// math fallback runs the same ops in C++): QKᵀ written (w bytes a score), scaled and masked
/// (each read and written: 4w), soft-maxed in fp32 (read w, write 4), cast back to 16 bits
/// (read 4, write w; no-op in fp32), read by the ·V matmul (w): 7w + 4, and 4 + w more in 16
/// bits (24 bytes a score in bf16, 32 in fp32). Megatron's `FusedScaleMaskSoftmax`: QKᵀ written,
/// read and written once, read by ·V (4w). The backward moves half again as much (softmax's
/// and the matmuls' gradients).
fn eager_scores_bytes(shape: &ModelShape, setup: &Setup) -> (f64, f64) {
    let b = setup.micro_batch as f64;
    let mp = (setup.tp * setup.pp * setup.cp) as f64;
    let scores = b * shape.heads * (setup.seq * setup.seq) as f64 / mp;
    let w = setup.width as f64;
    let per_score = if setup.fused {
        4.0 * w
    } else if setup.width == 2 {
        7.0 * w + 4.0 + 4.0 + w
    } else {
        7.0 * w + 4.0
    };
    let fwd = scores * per_score;
    (fwd, 1.5 * fwd)
}

/// Bytes the memory-bound ops of one micro-batch move on one GPU, forward and backward
/// ([`memory`]): the layers' (forward once, backward twice, and the forward again under full
/// recomputation), the loss's over b·s·V logits, autocast's weight copies.
fn elementwise_bytes(shape: &ModelShape, setup: &Setup) -> (f64, f64) {
    let tokens = (setup.micro_batch * setup.seq) as f64 / setup.cp as f64;
    let tp = setup.tp as f64;
    let (rep, split) = memory::layer_forward_bytes(&shape.layer_ops, setup);
    let per_layer = rep / if setup.sp { tp } else { 1.0 } + split / tp;
    let full = setup.checkpointing == Checkpointing::Full;
    let layers = shape.layers as f64 / setup.pp as f64;
    let logits = tokens * shape.vocab as f64 / tp / setup.pp as f64;
    let (loss_f, loss_b) = memory::loss_bytes(logits, setup.width);
    let weights = shape.params / (tp * setup.pp as f64);
    let (copy_f, copy_b) = if setup.autocast {
        memory::autocast_copy_bytes(weights, !setup.peft, full)
    } else {
        (0.0, 0.0)
    };
    let layer_f = tokens * per_layer * layers;
    let fwd = layer_f + loss_f + copy_f;
    let bwd = layer_f * (2.0 + f(full)) + loss_b + copy_b;
    (fwd, bwd)
}

fn f(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}
