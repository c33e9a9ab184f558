//! Liger-Kernel's fused linear cross-entropy in the walk (`loss: "chunked"`): what
//! `LigerFusedLinearCrossEntropyFunction` (`liger_kernel/ops/fused_linear_cross_entropy.py`,
//! release 0.8.2, the default of `pip install liger-kernel`) keeps and makes, with and without
//! autocast. The stream's events are `alloc_events/fused_ce.rs`.

use super::blocks::Numerics;
use super::overhead::round_size;
use super::stages::LossMemory;
use crate::job::{ResolvedJob, TorchVersion};
use crate::model::ModelSpec;

/// A fused linear cross-entropy (Liger-Kernel, Hsu et al. 2024 §3.3;
/// `liger_kernel/ops/fused_linear_cross_entropy.py`): the head's matmul and the loss run in
/// chunks of `next_power_of_2(⌈BT / ⌈V/H⌉⌉)` rows, so a logits chunk is about the size of the
/// hidden states; the gradients of the input (BT·H, the input's dtype: fp32 under autocast)
/// and, when `head_trains`, of the head weight (V·H) are computed in the forward and kept until
/// backward, with a per-token fp32 loss. `fused_linear_cross_entropy_forward` allocates
/// `grad_weight = torch.zeros_like(weight) if weight.requires_grad else None` and steps it
/// only when it exists, so a frozen head (LoRA) keeps no V·H gradient
/// (`stages::head_trains`). Per chunk the forward holds two chunks of logits at once (the next
/// made while the previous is still bound), or one and, when the head trains without
/// autocast, the weight gradient's scratch of the current release
/// ([`liger_grad_weight_scratch`]), whichever is more; under autocast
/// [`autocast_transient`]'s casts (`addmm`: the release's weight-gradient path for the job,
/// [`autocast_addmm`]).
pub fn loss_chunked(
    spec: &ModelSpec,
    (batch, seq): (u64, u64),
    num: Numerics,
    head_trains: bool,
    addmm: bool,
) -> LossMemory {
    let bt = batch * seq;
    let (h, v) = (spec.hidden_size.max(1), spec.vocab_size);
    let chunk = chunk_rows(bt, h, v);
    let w = if num.autocast { 2 } else { num.compute };
    // `grad_input = torch.zeros_like(_input)`: the hidden state's dtype (fp32 under autocast).
    let input_w = if num.autocast { num.param } else { w };
    let labels = round_size(batch * (seq + 1) * 8) + round_size(bt * 8);
    let head_grad = if head_trains {
        round_size(v * h * num.param)
    } else {
        0
    };
    let logits = round_size(chunk * v * w);
    let forward_transient = if num.autocast {
        let c = AutocastChunk {
            logits,
            cast: round_size(chunk * h * 2),
            weight_copy: if num.param == 4 {
                round_size(v * h * 2)
            } else {
                0
            },
            vh: v * h,
            several: bt > chunk,
        };
        autocast_transient(c, head_trains, addmm)
    } else {
        let scratch: u64 = if head_trains {
            liger_grad_weight_scratch(v, h, w)
                .iter()
                .map(|&b| round_size(b))
                .sum()
        } else {
            0
        };
        (2 * logits).max(logits + scratch)
    };
    LossMemory {
        saved: round_size(bt * h * input_w) + head_grad + round_size(bt * 4) + labels,
        forward_transient,
        backward_transient: 0,
        dlogits: 0,
    }
}

/// Liger's chunking of `rows` rows of `hidden` over `vocab`: `inc_factor = ⌈V / H⌉`,
/// `chunk_size = next_power_of_2(⌈BT / inc_factor⌉)`.
pub fn chunk_rows(rows: u64, hidden: u64, vocab: u64) -> u64 {
    let inc = vocab.div_ceil(hidden.max(1)).max(1);
    rows.div_ceil(inc).next_power_of_two().min(rows.max(1))
}

/// One chunk's sizes under autocast: its 16-bit logits, the 16-bit cast of its input rows, the
/// 16-bit copy of an fp32 head weight (0: a 16-bit head), V·H elements, and whether the step
/// has more than one chunk.
#[derive(Debug, Clone, Copy)]
pub struct AutocastChunk {
    pub logits: u64,
    pub cast: u64,
    pub weight_copy: u64,
    pub vh: u64,
    pub several: bool,
}

/// The fused loss's forward transient under autocast (`bf16-mixed`), over its saved tensors.
/// `fused_linear_cross_entropy_forward` runs inside the model's autocast region
/// (`@amp_custom_fwd`: `torch.amp.custom_fwd` without `cast_inputs`), so per chunk
/// (measured on the CPU with CUDA's autocast lists, `scripts/measure_liger_autocast_cpu.py`):
/// - `_input_chunk @ weight.t()`: `matmul` is on autocast's lower-precision list
///   (`aten/src/ATen/autocast_mode.cpp`): the fp32 input rows are cast to 16 bit and so is
///   the fp32 weight's transpose — a view, which `cached_cast` never caches (`!arg.is_view()`),
///   so a V·H 16-bit copy is made and freed by every chunk's first matmul; the previous
///   chunk's logits are still bound (`grad_logits_chunk`, and where the head trains
///   `grad_logits_t`, until the next weight step) while the new ones are made;
/// - `grad_input[rows] = grad_logits_chunk @ weight`: the weight itself is a leaf that
///   requires grad when the head trains, so its 16-bit copy is cached at the first chunk and
///   held to the region's exit (the model's forward returns right after the loss); a frozen
///   fp32 head (LoRA) is cast anew per chunk; the 16-bit product is copied into the fp32
///   `grad_input` and freed;
/// - the weight gradient (a trained head; `grad_weight` is fp32, the weight's dtype): with
///   `addmm` (0.8.2 on torch ≥ 2.8 on CUDA capability ≥ 8: [`autocast_addmm`]),
///   `input_chunk = _input_chunk.to(bf16)` — held until the next chunk rebinds it — and
///   `torch.addmm(..., out_dtype=torch.float32, out=grad_weight)` in place; otherwise
///   `grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()`: the input rows
///   cast for the `mm` (freed as it returns), the 16-bit V·H product and its fp32 copy.
pub fn autocast_transient(c: AutocastChunk, head_trains: bool, addmm: bool) -> u64 {
    let cached = if head_trains { c.weight_copy } else { 0 };
    let uncached = c.weight_copy - cached;
    let held = if head_trains && addmm { c.cast } else { 0 };
    // The first matmul of a later chunk (the earlier chunk's logits, the cached copy and the
    // held input cast live); of the only chunk, when there is one.
    let first = if c.several {
        2 * c.logits + c.cast + c.weight_copy + cached + held
    } else {
        c.logits + c.cast + c.weight_copy
    };
    // `grad_input[rows] = ...`: where the head trains, `grad_logits_t` still binds the
    // previous chunk's logits (rebound by the weight step that follows).
    let prev = if head_trains && c.several {
        c.logits
    } else {
        0
    };
    let second = c.logits + prev + cached + uncached + c.cast + held;
    let step = match (head_trains, addmm) {
        (false, _) => 0,
        (true, true) => c.logits + cached + c.cast,
        (true, false) => {
            let (mm, copy) = (round_size(c.vh * 2), round_size(c.vh * 4));
            c.logits + cached + (c.cast + mm).max(mm + copy)
        }
    };
    first.max(second).max(step)
}

/// Whether Liger 0.8.2 accumulates the head's gradient in place under autocast:
/// `fused_linear_cross_entropy_forward` takes `torch.addmm(..., out_dtype=torch.float32,
/// out=grad_weight)` when `_ADDMM_SUPPORTS_OUT_DTYPE` (torch ≥ 2.8), the device is CUDA (ROCm
/// included) of `torch.cuda.get_device_capability()[0] >= 8`, `grad_weight` is fp32 and the
/// logits 16-bit — under autocast, the last two hold. The torch release is the job's
/// `torch_version` (none named: a current one, ≥ 2.8); the capability the job's GPU's
/// architecture (Volta 7.0, Turing 7.5 and Apple's GPUs, whose device is not CUDA: the
/// `mm(...).float()` path; Ampere, Ada, Hopper, Blackwell and AMD's CDNA/RDNA, whose ROCm
/// capability majors are 9 and 11: `addmm`). No GPU named: the documented default of the
/// catalog's current GPUs, capability ≥ 8.
pub fn autocast_addmm(job: &ResolvedJob) -> bool {
    let torch = job
        .torch_version
        .is_none_or(|v| v >= TorchVersion::new(2, 8));
    let capable = job
        .gpu
        .as_deref()
        .and_then(|g| crate::gpu::find(g).ok())
        .is_none_or(|g| {
            !matches!(g.arch.as_str(), "volta" | "turing") && !g.arch.starts_with("apple")
        });
    torch && capable
}

/// The head weight's gradient scratch per chunk in Liger-Kernel's fused linear cross-entropy
/// as its current release (0.8.2, what `pip install liger-kernel` gives) runs it without
/// autocast and with `accum_dtype=None` (what Liger's own `LigerForCausalLMLoss`, which its
/// patched models call, passes: `liger_kernel/transformers/model/loss_utils.py`): `[the product, its
/// fp32 copy]` in bytes, for a head of `vocab` × `hidden` in `width`-byte logits.
///
/// `fused_linear_cross_entropy_forward` (`liger_kernel/ops/fused_linear_cross_entropy.py`),
/// per chunk, by release:
/// - ≤ 0.6.1: `torch.addmm(input=grad_weight, ..., out=grad_weight)`, in place: no scratch.
/// - 0.6.2–0.8.0: `grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()`: the
///   V·H product in the logits' dtype, then `.float()`'s fp32 copy while the product is still
///   referenced (a no-op returning the product itself when it is already fp32); the product is
///   dropped when `.float()` returns, the copy after the in-place add (on CUDA a bf16 `+=` of
///   fp32 casts inside the kernel: `aten/src/ATen/TensorIterator.cpp`, `compute_types`, makes
///   its dtype temporaries only when `common_device == kCPU`).
///   A 16-bit model: 2·V·H + 4·V·H = 6·V·H bytes at once; fp32: 4·V·H.
/// - 0.8.1+ (`c9fc646f`, `bab144c7`; 0.8.2 adds the capability guard `ed08f6ea`): `torch.addmm(
///   grad_weight, grad_logits_t, input_chunk, out_dtype=torch.float32, out=grad_weight)` in
///   place, but only when torch ≥ 2.8, the device is CUDA of compute capability ≥ 8,
///   `grad_weight` is fp32 and the logits are 16-bit — under autocast or `accum_dtype=float32`.
///   Without autocast `grad_weight = torch.zeros_like(weight)` has the logits' own dtype, so
///   the release keeps 0.6.2's `mm(...).float()` path, whatever the GPU and torch.
///
/// Under autocast (`bf16-mixed`) the current release on capability ≥ 8 with torch ≥ 2.8 takes
/// the in-place `addmm` (no V·H scratch); older GPUs or torch take the 6·V·H path
/// ([`autocast_addmm`], [`autocast_transient`]).
pub fn liger_grad_weight_scratch(vocab: u64, hidden: u64, width: u64) -> [u64; 2] {
    let vh = vocab.saturating_mul(hidden);
    let upcast = if width == 4 { 0 } else { vh.saturating_mul(4) };
    [vh.saturating_mul(width), upcast]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.2-1B (V 128,256, H 2048) in bf16-mixed at b2 × 2048: ⌈V/H⌉ = 63, chunks of
    /// next_power_of_2(⌈4096/63⌉ = 66) = 128 rows: 16-bit logits 128·128,256·2 = 32,833,536 B,
    /// the input rows' cast 128·2048·2 = 524,288, the fp32 weight's 16-bit copy 128,256·2048·2
    /// = 525,336,576. A trained head with `addmm`: a later chunk's first matmul holds two
    /// logits, its cast, the transposed weight's copy, the cached copy and the held input cast:
    /// 65,667,072 + 524,288 + 2 · 525,336,576 + 524,288 = 1,117,388,800. With `mm(...).float()`
    /// the weight step is larger: one logits, the cached copy, the 16-bit V·H product and its
    /// fp32 copy: 32,833,536 + 525,336,576 + 525,336,576 + 1,050,673,152 = 2,134,179,840. A
    /// frozen head: the first matmul without a cached copy nor a held cast, 65,667,072 +
    /// 524,288 + 525,336,576 = 591,527,936 (its second matmul's own copy: 32,833,536 +
    /// 525,336,576 + 524,288 = 558,694,400, less).
    #[test]
    fn autocast_chunk_moments() {
        let c = AutocastChunk {
            logits: 32_833_536,
            cast: 524_288,
            weight_copy: 525_336_576,
            vh: 128_256 * 2048,
            several: true,
        };
        assert_eq!(chunk_rows(4096, 2048, 128_256), 128);
        assert_eq!(autocast_transient(c, true, true), 1_117_388_800);
        assert_eq!(autocast_transient(c, true, false), 2_134_179_840);
        assert_eq!(autocast_transient(c, false, true), 591_527_936);
    }
}
