//! The host side of an eager PyTorch step: how many kernels a Hugging Face decoder layer
//! issues forward and backward, and how long the CPU takes to issue them. A small model's step
//! is bound by it: the GPU finishes each kernel before the next one is launched.
//!
//! **Counts** follow the modelling files (`transformers` 5.x `models/llama/modeling_llama.py`,
//! `modeling_qwen2.py`, `modeling_gpt2.py`: `LlamaRMSNorm.forward`, `apply_rotary_pos_emb`,
//! `rotate_half`, `LlamaMLP.forward`, `eager_attention_forward`, `repeat_kv`;
//! `integrations/sdpa_attention.py` `sdpa_attention_forward`) op by op, and the backward of each
//! op from PyTorch's derivative rules (`tools/autograd/derivatives.yaml`: `pow_backward`,
//! `rsqrt`'s `-0.5·g·r³`, `mean`'s expand-and-divide, a matmul's two matmuls, a bias's
//! sum, `cat`/`slice` backward, autograd's add where one tensor feeds two ops). Under
//! `torch.autocast` each matmul-class op casts its fp32 inputs (`aten/src/ATen/autocast_mode.cpp`;
//! weights once per forward, the autocast weight cache), and each cast has its own
//! `ToCopyBackward`.
//!
//! **Rates** are this project's measurement, on the host that ran the H200 runs
//! (`../shared/fixtures/gpu-h200/`, a VM, Python 3.12, torch 2.11): the CPU time per kernel
//! launched, Python, dispatcher and autograd included ([`HOST_KERNEL_S`]), per saved tensor
//! passed through checkpointing's hooks ([`HOST_SAVED_HOOK_S`],
//! [`HOST_SAVED_HOOK_BACKWARD_S`]) and per parameter tensor in the
//! optimizer step ([`HOST_OPTIMIZER_TENSOR_S`], [`HOST_ZERO_GRAD_TENSOR_S`]). Each is read off
//! one or two runs (which, and how, in the constant's comment) and checked on all of them
//! (`tests/step_time_measured.rs`). Published figures for the same costs on workstation CPUs are
//! lower — 5–25 µs of CPU per eager op from Python to `cudaLaunchKernel` (PyTorch's dispatcher
//! layers, e.g. jiahuanglin.xyz "From PyTorch op to kernel launch"; Horace He, "Making Deep
//! Learning Go Brrrr From First Principles", 2022, on overhead-bound models) — so a faster host
//! runs a launch-bound step faster than modelled here. The host is not in the job: these rates
//! stand for "a cloud VM like the one measured".

use super::shape::LayerOps;
use super::{OptimizerPass, Setup};
use crate::job::{AttentionKernel, Checkpointing};

/// CPU seconds per kernel an eager step launches (Python, the dispatcher, autograd's node,
/// `cudaLaunchKernel`). Read off the three Qwen2.5-0.5B bf16-mixed b4 × 1024 SDPA runs (the
/// baseline, eager module loading, fused AdamW: the same forward and backward; six measured
/// steps), whose GPU work is a fifth of their time: backward median 91.2 ms over the 2,262
/// kernels [`backward_kernels`] counts → 40.3 µs; their forward, 52.1 ms over 1,271 kernels,
/// reads 41 µs, the same rate.
pub const HOST_KERNEL_S: f64 = 40e-6;
/// CPU seconds per tensor saved through `torch.utils.checkpoint`'s hooks in the forward
/// (`use_reentrant=False`, as transformers 5.x enables it: a Python pack hook per saved
/// tensor). The Qwen2.5-0.5B run with full checkpointing spends 86.3 ms in its forward against
/// 52.1 ms for the same job without, over 24 layers × 40 saved tensors ([`saved_per_layer`])
/// → 36 µs.
pub const HOST_SAVED_HOOK_S: f64 = 36e-6;
/// CPU seconds per saved tensor in the backward under the same checkpointing: the
/// recomputation hook storing each recomputed tensor and the unpack hook handing it over. The
/// same run's backward, 183.6 ms, less the plain backward (91.2 ms) and the forward it
/// recomputes (52.1 ms), over its 960 saved tensors → 42 µs.
pub const HOST_SAVED_HOOK_BACKWARD_S: f64 = 42e-6;
/// CPU seconds per parameter tensor of a foreach (or fused) AdamW step (torch 2.x
/// `optim/adam.py`: `_init_group`'s Python loop over the parameters and their state, the step
/// counters' `.item()` in the bias-correction lists): the LoRA run's step, 7.05 ms for 256
/// adapter tensors whose update moves 0.1 GB (nothing, on the GPU) → 27.5 µs.
pub const HOST_OPTIMIZER_TENSOR_S: f64 = 27.5e-6;
/// CPU seconds per parameter tensor of `zero_grad(set_to_none=True)`, a Python loop setting
/// each `.grad` to `None`: 1.5 ms for Qwen2.5-0.5B's 290 tensors, 1.2 ms for the LoRA run's
/// 256 → 5 µs.
pub const HOST_ZERO_GRAD_TENSOR_S: f64 = 5e-6;

/// What the CPU does in one micro-batch's forward and backward, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Host {
    pub forward_s: f64,
    pub backward_s: f64,
}

/// The dtype facts of a step that change what it launches.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Dtypes {
    /// `torch.autocast` over fp32 parameters: casts before every matmul.
    autocast: bool,
    /// The residual stream is 16-bit (pure bf16/fp16): RMSNorm casts up and back.
    act16: bool,
}

fn dtypes(s: &Setup) -> Dtypes {
    Dtypes {
        autocast: s.autocast,
        act16: !s.autocast && s.width == 2,
    }
}

/// A layer as a framework with fused kernels runs it (Megatron-LM's `FusedLayerNorm`,
/// `bias_gelu_impl`, `FusedScaleMaskSoftmax`, fused RoPE): one kernel per norm and per
/// activation.
pub fn fused_view(o: &LayerOps) -> LayerOps {
    LayerOps {
        rms_norms: 0.0,
        layer_norms: o.rms_norms + o.layer_norms,
        act_kernels: o.act_kernels.min(1.0),
        ..*o
    }
}

/// Kernels the forward of one layer launches, from the modelling file's ops.
pub fn forward_kernels(o: &LayerOps, s: &Setup) -> f64 {
    let d = dtypes(s);
    let (ac, a16) = (f(d.autocast), f(d.act16));
    // RMSNorm: to(fp32) [16-bit], pow, mean, add, rsqrt, mul, to(dtype) [16-bit], weight ×.
    // LayerNorm: F.layer_norm, one kernel.
    let norms = o.rms_norms * (6.0 + 2.0 * a16) + o.layer_norms;
    // Projections: one GEMM each (the bias in its epilogue). Autocast casts the fp32 weight
    // (and bias) once per forward and the fp32 input at every call.
    let projections = o.projections + ac * (o.projections + o.biases + o.fp32_inputs);
    // apply_rotary_pos_emb on q and k: x·cos, rotate_half (neg, cat), ·sin, +; q·cos is fp32
    // under autocast (fp32 cos), so the attention casts q and k back. Fused: one each.
    let rotary = match (o.rotary, s.fused) {
        (false, _) => 0.0,
        (true, true) => 2.0,
        (true, false) => 10.0 + 2.0 * ac,
    };
    let attention = match s.attention {
        AttentionKernel::Sdpa | AttentionKernel::Flash => 1.0,
        // QKᵀ, the fused scale-mask-softmax, · V.
        AttentionKernel::Eager if s.fused => 3.0,
        // repeat_kv (expand + reshape copy) on k and v under GQA, QKᵀ, · scale, + mask,
        // softmax (fp32), to(dtype) [16-bit], dropout [p > 0], · V (its input cast under
        // autocast).
        AttentionKernel::Eager => {
            let repeat = if o.repeat_kv { 2.0 } else { 0.0 };
            repeat + 5.0 + f(s.width == 2) + f(o.attention_dropout) + ac
        }
    };
    // The output's transpose + contiguous copy; the residual adds, hidden dropouts, the
    // activation and the gate's multiply.
    let rest = 1.0 + 2.0 + o.hidden_dropouts + o.act_kernels + f(o.gated);
    // LoRA per adapted projection (PEFT `lora/layer.py` `Linear.forward`): lora_A, lora_B,
    // · scaling, + (dropout is `nn.Identity` at p = 0); fp32 adapters over a 16-bit base cast
    // the input up and the result back.
    let lora = o.lora * (4.0 + 2.0 * f(s.lora_cast));
    norms + projections + rotary + attention + rest + lora
}

/// The backward of one layer: kernels the autograd engine launches (no Python).
pub fn backward_kernels(o: &LayerOps, s: &Setup) -> f64 {
    let d = dtypes(s);
    let (ac, a16) = (f(d.autocast), f(d.act16));
    let frozen = f(s.peft);
    // RMSNorm: the weight's grad (mul + sum), grad·w, the mul's two grads (one summed),
    // rsqrt's three, mean's one, pow's three, the two paths' add; the casts' [16-bit].
    let rms = 14.0 + 2.0 * a16 - 2.0 * frozen;
    let ln = 2.0 - frozen;
    // Projections: the input's GEMM, the weight's GEMM and the bias's sum unless frozen; each
    // autocast cast's ToCopyBackward.
    let weights = (1.0 - frozen) * (o.projections + o.biases);
    let projections = o.projections + weights + ac * (weights + o.fp32_inputs);
    let rotary = match (o.rotary, s.fused) {
        (false, _) => 0.0,
        (true, true) => 2.0,
        (true, false) => 18.0 + 2.0 * ac,
    };
    let attention = match s.attention {
        // The fused kernel's backward: dO·O's row sums, the main kernel, dQ's conversion.
        AttentionKernel::Sdpa | AttentionKernel::Flash => 3.0,
        AttentionKernel::Eager if s.fused => 5.0,
        AttentionKernel::Eager => {
            let repeat = if o.repeat_kv { 2.0 } else { 0.0 };
            4.0 + 2.0 + f(s.width == 2) + f(o.attention_dropout) + repeat + ac
        }
    };
    // Residuals: the add of the two paths' gradients, and under autocast the cast of the
    // 16-bit branch's; dropouts' mask multiply; the activation's; the gate's two.
    let residual = 2.0 + 2.0 * ac + o.hidden_dropouts;
    let act = o.act_kernels * if o.act_kernels > 1.0 { 1.5 } else { 1.0 };
    let gate = if o.gated { 2.0 } else { 0.0 };
    // LoRA: A's and B's two GEMMs each, the scale, the add into x's gradient, the casts.
    let lora = o.lora * (6.0 + 2.0 * f(s.lora_cast));
    o.rms_norms * rms
        + o.layer_norms * ln
        + projections
        + o.shared_input_adds
        + rotary
        + attention
        + residual
        + act
        + gate
        + lora
}

/// Tensors one layer saves for backward (what checkpointing's hooks see): RMSNorm's six
/// (pow's and the mul's input, rsqrt's result twice, the weight and the normed input),
/// LayerNorm's four, each projection's input and weight, rotary's cos and sin for q and k, the
/// attention kernel's seven (q, k, v, out, logsumexp, the RNG's seed and offset), the
/// activation's input, the gate multiply's two.
pub fn saved_per_layer(o: &LayerOps) -> f64 {
    o.rms_norms * 6.0
        + o.layer_norms * 4.0
        + 2.0 * o.projections
        + if o.rotary { 4.0 } else { 0.0 }
        + 7.0
        + 1.0
        + if o.gated { 2.0 } else { 0.0 }
}

/// The model around the layers, per micro-batch: the embedding, the final norm, the head and
/// the loss (HF `ForCausalLMLoss`: `logits.float()`, the labels' pad and shift, log-softmax,
/// NLL), rotary's cos/sin and the mask: about 20 kernels forward (3 more casts under
/// autocast), 30 backward (the embedding's sort-based backward, the loss's, the head's two
/// GEMMs and the final norm's).
fn model_kernels(s: &Setup) -> (f64, f64) {
    (20.0 + 3.0 * f(s.autocast), 30.0)
}

/// The host time of one micro-batch on one GPU over `layers` layers.
pub fn host(o: &LayerOps, layers: f64, s: &Setup) -> Host {
    let fused;
    let o = if s.fused {
        fused = fused_view(o);
        &fused
    } else {
        o
    };
    let (model_fwd, model_bwd) = model_kernels(s);
    let layer_fwd = forward_kernels(o, s) * HOST_KERNEL_S;
    let mut fwd = layer_fwd * layers + model_fwd * HOST_KERNEL_S;
    let mut bwd = (backward_kernels(o, s) * layers + model_bwd) * HOST_KERNEL_S;
    if s.checkpointing == Checkpointing::Full {
        // Pack hooks in the forward; in the backward the layer's forward again, its tensors
        // stored through the recomputation hook and unpacked.
        let saved = saved_per_layer(o) * layers;
        fwd += saved * HOST_SAVED_HOOK_S;
        bwd += layer_fwd * layers + saved * HOST_SAVED_HOOK_BACKWARD_S;
    }
    Host {
        forward_s: fwd,
        backward_s: bwd,
    }
}

/// The optimizer step's host time over `tensors` trainable tensors: PyTorch's Python loop per
/// tensor (foreach and fused launch per chunk of tensors, so the loop is what remains);
/// frameworks that step one flat buffer (DeepSpeed, Megatron's distributed optimizer) have none.
pub fn optimizer_host_s(tensors: f64, pass: OptimizerPass) -> f64 {
    match pass {
        OptimizerPass::Foreach | OptimizerPass::Fused => tensors * HOST_OPTIMIZER_TENSOR_S,
        OptimizerPass::Flat => 0.0,
    }
}

/// `zero_grad(set_to_none=True)`'s host time over `tensors` trainable tensors (a phase of its
/// own: nothing on the GPU).
pub fn zero_grad_s(tensors: f64) -> f64 {
    tensors * HOST_ZERO_GRAD_TENSOR_S
}

fn f(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}
