//! Which kernel `scaled_dot_product_attention` runs for a layer, and what the math fallback
//! saves when no fused kernel takes the call.
//!
//! Two choices are made in a row, each in its own source:
//!
//! 1. transformers 5.x (`integrations/sdpa_attention.py`, `use_gqa_in_sdpa` and
//!    `sdpa_attention_forward`): on CUDA a module with `num_key_value_groups` passes its grouped
//!    k/v as they are with `enable_gqa=True` when torch ≥ 2.5 and no mask is given; otherwise
//!    `repeat_kv` copies them out to every query head (the copies are what the kernel saves).
//! 2. PyTorch (`aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`, `select_sdp_backend`):
//!    the first backend in the priority order whose checks pass. Flash
//!    (`can_use_flash_attention`) needs fp16/bf16 (`check_dtypes_flash_attention`), no mask
//!    (`check_for_attn_mask`), head dim ≤ 256 (`check_head_dim_size_flash`), sm80–sm121
//!    (`check_flash_attention_hardware_support`), and accepts grouped k/v under `enable_gqa`
//!    (`check_batch_size_and_num_heads_dense<supports_gqa = true>`). Memory-efficient
//!    (`can_use_mem_efficient_attention`) takes fp32 and fp16, bf16 from sm80 on, a head dim
//!    that is a multiple of `minimum_gemm_alignment` (`check_head_dim_size_mem_efficient`), a
//!    mask; but until PyTorch added grouped k/v to it (pytorch/pytorch#191085, opened
//!    2026-07-25) its dense check was the `supports_gqa = false` instantiation: grouped k/v
//!    fail it (the 2.11 docstring of `scaled_dot_product_attention`: GQA "currently works only
//!    for Flash_attention and math kernel on CUDA tensor"). ROCm's memory-efficient kernel never
//!    takes them. cuDNN (`can_use_cudnn_attention`, preferred on sm90/sm100 with cuDNN > 9.15.1
//!    by `check_prefer_cudnn_attention`) needs fp16/bf16 too and saves what flash saves (the
//!    output and fp32 statistics of `[b, h, s_q]`), so it is not told apart here. Whatever none
//!    takes runs the math fallback (`_scaled_dot_product_attention_math`, attention.cpp), which
//!    materialises the scores.
//!
//! So fp32 training of a grouped-query model without a mask (the causal case, `is_causal`) runs
//! the math kernel on PyTorch 2.5 up to the release that added the memory-efficient GQA path:
//! measured on an H200 with torch 2.11 (Llama-3.2-1B fp32, batch 2 × 2048: 48.8 GiB peak where
//! the fused kernels' saves give 32.1 GiB, `validation/gpu-h200-measured.json`).

use super::attention::{Qkv, Widths};
use super::Prog;
use crate::estimate::tape::Id;
use crate::job::{Precision, ResolvedJob, TorchVersion};
use crate::model::Attention;

/// The first PyTorch release assumed to carry the memory-efficient kernel's grouped k/v
/// (pytorch/pytorch#191085, opened 2026-07-25). The 2.14 branch was cut in the week of
/// 2026-08-10 (its release tracker, pytorch/pytorch#193034); the pull request's merge date was
/// not in what could be read, so 2.15 is taken (the conservative side: 2.14 is modelled with
/// the math fallback). 2.11 lacks it (measured, above).
pub const MEM_EFFICIENT_GQA_FROM: TorchVersion = TorchVersion::new(2, 15);

/// `enable_gqa` and transformers' use of it (`use_gqa_in_sdpa`: torch ≥ 2.5).
const ENABLE_GQA_FROM: TorchVersion = TorchVersion::new(2, 5);

/// The backend `select_sdp_backend` returns. cuDNN attention is reported as `Flash`: it takes
/// the same inputs here and saves the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdpaBackend {
    Flash,
    Efficient,
    Math,
}

/// What the choice depends on beyond the call: the PyTorch release and the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpaStack {
    /// The job's `torch_version`; None is today's PyTorch.
    pub torch: Option<TorchVersion>,
    /// Compute capability major of the GPU (8 for the default device, an A100).
    pub sm_major: u32,
    /// An AMD GPU (ROCm's kernels: no grouped k/v in the memory-efficient one).
    pub rocm: bool,
    /// The job's 16-bit type is bf16 (fp16 otherwise): the memory-efficient kernel takes bf16
    /// from sm80 on only.
    pub bf16: bool,
}

impl Default for SdpaStack {
    /// Today's PyTorch on the documented default device (A100, sm80).
    fn default() -> Self {
        SdpaStack {
            torch: None,
            sm_major: 8,
            rocm: false,
            bf16: true,
        }
    }
}

/// One SDPA call as the checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpaCall {
    /// q, k and v are fp16/bf16 (pure 16-bit training, or autocast's cast of SDPA's inputs).
    pub half: bool,
    /// k/v reach the kernel with fewer heads than q (`enable_gqa=True`).
    pub grouped: bool,
    pub masked: bool,
    pub head_dim: u64,
}

impl SdpaStack {
    /// The stack of `job`: its `torch_version` and its GPU's architecture (the default device
    /// without one).
    pub fn of(job: &ResolvedJob) -> Self {
        let arch = job
            .gpu
            .as_deref()
            .and_then(|id| crate::gpu::find(id).ok())
            .map(|g| g.arch.to_ascii_lowercase());
        let (sm_major, rocm) = match arch.as_deref() {
            None => (8, false),
            Some(a) => sm_of_arch(a),
        };
        SdpaStack {
            torch: job.torch_version,
            sm_major,
            rocm,
            bf16: matches!(job.precision, Precision::Bf16 | Precision::Bf16Mixed),
        }
    }

    fn at_least(self, v: TorchVersion) -> bool {
        self.torch.is_none_or(|t| t >= v)
    }

    /// transformers' `use_gqa_in_sdpa`: grouped k/v go to SDPA as they are (`enable_gqa=True`)
    /// on torch ≥ 2.5 without a mask; otherwise `repeat_kv` copies them to every head.
    pub fn passes_grouped_kv(self, masked: bool) -> bool {
        !masked && self.at_least(ENABLE_GQA_FROM)
    }

    /// `select_sdp_backend` for one call.
    pub fn backend(self, call: SdpaCall) -> SdpaBackend {
        if self.flash_ok(call) {
            SdpaBackend::Flash
        } else if self.efficient_ok(call) {
            SdpaBackend::Efficient
        } else {
            SdpaBackend::Math
        }
    }

    /// `can_use_flash_attention` (dense inputs, no dropout-specific limits).
    fn flash_ok(self, c: SdpaCall) -> bool {
        c.half && !c.masked && c.head_dim <= 256 && self.sm_major >= 8
    }

    /// `can_use_mem_efficient_attention` (dense inputs).
    fn efficient_ok(self, c: SdpaCall) -> bool {
        // fp32 and fp16 everywhere, bf16 from sm80 on (`check_tensor_dtype` with the sm80 list).
        let dtype_ok = !(c.half && self.bf16) || self.sm_major >= 8 || self.rocm;
        let aligned = c.head_dim > 0 && c.head_dim.is_multiple_of(self.gemm_alignment(c.half));
        let heads_ok = !c.grouped || (!self.rocm && self.at_least(MEM_EFFICIENT_GQA_FROM));
        dtype_ok && aligned && heads_ok
    }

    /// `minimum_gemm_alignment`: elements a head dim must be a multiple of (tensor cores from
    /// sm80, or sm70 in 16 bit: 128 bits; else 4 from sm80, 1 before).
    fn gemm_alignment(self, half: bool) -> u64 {
        let base = if self.sm_major >= 8 { 4 } else { 1 };
        let tensor_cores = self.sm_major >= 8 || (self.sm_major >= 7 && half);
        if tensor_cores {
            base.max(128 / if half { 16 } else { 32 })
        } else {
            base
        }
    }
}

/// (compute capability major, ROCm) of a catalog architecture (developer.nvidia.com/cuda-gpus).
fn sm_of_arch(arch: &str) -> (u32, bool) {
    match arch {
        a if a.starts_with("cdna") || a.starts_with("rdna") => (9, true),
        "kepler" => (3, false),
        "maxwell" => (5, false),
        "pascal" => (6, false),
        "volta" | "turing" => (7, false),
        "ampere" | "ada" => (8, false),
        "hopper" => (9, false),
        "blackwell" => (10, false),
        _ => (8, false),
    }
}

impl Prog<'_> {
    /// SDPA on a layer with no mask (full causal attention, `is_causal`): transformers' grouped
    /// k/v handling, then the backend PyTorch picks for the call (module doc).
    pub(super) fn sdpa_unmasked_core(&mut self, mut p: Qkv, w: Widths, att: &Attention) -> Id {
        let stack = self.c.num.sdpa;
        let grouped = w.kv_heads > 0 && w.kv_heads < w.heads;
        let passes = stack.passes_grouped_kv(false);
        if grouped && !passes {
            self.repeat_kv(&mut p, w);
        }
        let call = SdpaCall {
            half: self.matmul_width() == 2,
            grouped: grouped && passes,
            masked: false,
            head_dim: att.kind.qk_head_dim(),
        };
        match stack.backend(call) {
            SdpaBackend::Math => self.math_core(&p, w, call.grouped),
            _ => self.fused_core(&p, w),
        }
    }

    /// transformers' `repeat_kv`: k and v copied out to every query head.
    pub(super) fn repeat_kv(&mut self, p: &mut Qkv, w: Widths) {
        let rep = w.heads / w.kv_heads.max(1);
        let (kw, vw) = (self.w(p.k), self.w(p.v));
        p.k = self.t.op(&[p.k], &[], p.kn * rep, kw);
        p.v = self.t.op(&[p.v], &[], p.vn * rep, vw);
        p.kn *= rep;
        p.vn *= rep;
    }

    /// `_scaled_dot_product_attention_math` (attention.cpp) on a causal call, op by op: 16-bit
    /// inputs up to fp32 (`query_.to(at::kFloat)`, unless the reduced-precision math flag is
    /// set), q times √scale (saves nothing), the `[s, kv_s]` causal mask (`ones(...).tril()`
    /// and its additive fp32 form), grouped k/v repeated to every head
    /// (`pre_process_group_query_attention_input`: `repeat_interleave`), k times √scale, the
    /// scores (`matmul` saves both operands), the mask added in place, `_safe_softmax` (from
    /// 2.5: softmax, the `== -inf` map and `where`, whose result is saved), dropout, the
    /// context (`matmul` saves the probabilities and v), cast back; then transformers'
    /// `transpose(1, 2).contiguous()` copies the `[b, h, s, d]` context for `o_proj`.
    fn math_core(&mut self, p: &Qkv, w: Widths, grouped: bool) -> Id {
        let acc = 4;
        let origin = self.matmul_width();
        let up = |s: &mut Self, x: Id, n: u64| {
            let x = s.mm_input(x);
            if s.w(x) == acc {
                x
            } else {
                s.t.op(&[x], &[], n, acc)
            }
        };
        let (b, s, kv_s) = (self.c.batch, self.c.seq, self.c.kv_seq);
        let q = up(self, p.q, p.qn);
        let k = up(self, p.k, p.kn);
        let v = up(self, p.v, p.vn);
        let qs = self.t.op(&[q], &[], p.qn, acc);
        // `is_causal` (transformers passes it for a causal layer with more than one query).
        let mask = (self.c.causal && s > 1).then(|| {
            let ones = self.t.op(&[], &[], s * kv_s, 1);
            self.t.op(&[ones], &[], s * kv_s, acc)
        });
        let all_heads = p.kv_tokens * w.q;
        let (k, v) = if grouped {
            let vn = p.kv_tokens * w.out;
            (
                self.t.op(&[k], &[], all_heads, acc),
                self.t.op(&[v], &[], vn, acc),
            )
        } else {
            (k, v)
        };
        let ks = self.t.op(&[k], &[], all_heads, acc);
        let n = b * w.heads * s * kv_s;
        let scores = self.t.op(&[qs, ks], &[qs, ks], n, acc);
        let probs = self.safe_softmax(scores, n, b * w.heads * s);
        let probs = self.dropout(probs, self.c.attn_dropout);
        let ctx = self
            .t
            .op(&[probs, v], &[probs, v], self.tokens * w.out, acc);
        // The function's locals (the fp32 inputs, the repeated k, the mask) live until it
        // returns.
        for id in [q, k, v].into_iter().chain(mask) {
            self.t.touch(id);
        }
        let ctx = self.t.cast(ctx, origin);
        self.t.op(&[ctx], &[], self.tokens * w.out, origin)
    }

    /// `_safe_softmax` (aten `SoftMax.cpp`, used by the math kernel from PyTorch 2.5): the
    /// softmax, a bool map of `-inf` scores and its all-rows reduction, then `where` — the
    /// result saved (`derivatives.yaml`: `_softmax_backward_data(grad, result, ...)`), the
    /// scores alive until it returns. Earlier releases call `softmax` alone.
    fn safe_softmax(&mut self, scores: Id, n: u64, rows: u64) -> Id {
        let w = self.w(scores);
        let sm = self.t.op(&[scores], &[], n, w);
        if !self.c.num.sdpa.at_least(ENABLE_GQA_FROM) {
            self.t.keep(sm);
            return sm;
        }
        let neg_inf = self.t.op(&[scores], &[], n, 1);
        let masked_rows = self.t.op(&[neg_inf], &[], rows, 1);
        let out = self.t.op(&[sm, masked_rows, neg_inf, scores], &[], n, w);
        self.t.keep(out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Option<TorchVersion> {
        Some(TorchVersion::parse("torch_version", s).unwrap())
    }

    fn stack(torch: Option<TorchVersion>, sm_major: u32) -> SdpaStack {
        SdpaStack {
            torch,
            sm_major,
            rocm: false,
            bf16: false,
        }
    }

    fn call(half: bool, grouped: bool, masked: bool) -> SdpaCall {
        SdpaCall {
            half,
            grouped,
            masked,
            head_dim: 64,
        }
    }

    /// Llama-3.2-1B in fp32 on an H200 with torch 2.11, no mask, 32 query heads over 8 k/v
    /// heads: flash wants 16 bit, memory-efficient refuses grouped k/v, so math (the measured
    /// run's 48.8 GiB).
    #[test]
    fn fp32_grouped_without_mask_falls_back_to_math_before_mem_efficient_gqa() {
        let h200 = stack(v("2.11"), 9);
        assert!(h200.passes_grouped_kv(false));
        assert_eq!(h200.backend(call(false, true, false)), SdpaBackend::Math);
        // The same call in bf16 (autocast or pure): flash.
        assert_eq!(h200.backend(call(true, true, false)), SdpaBackend::Flash);
        // Equal heads (multi-head attention) in fp32: memory-efficient.
        assert_eq!(
            h200.backend(call(false, false, false)),
            SdpaBackend::Efficient
        );
        // From the release with grouped k/v in the memory-efficient kernel, and today's.
        assert_eq!(
            stack(v("2.15"), 9).backend(call(false, true, false)),
            SdpaBackend::Efficient
        );
        assert_eq!(
            stack(None, 9).backend(call(false, true, false)),
            SdpaBackend::Efficient
        );
        assert_eq!(
            stack(v("2.14"), 9).backend(call(false, true, false)),
            SdpaBackend::Math
        );
    }

    /// Before torch 2.5 transformers repeats k/v (no `enable_gqa`), and with a mask it always
    /// does; the repeated call has equal heads.
    #[test]
    fn transformers_repeats_kv_with_a_mask_or_before_2_5() {
        assert!(!stack(v("2.4"), 8).passes_grouped_kv(false));
        assert!(stack(v("2.5"), 8).passes_grouped_kv(false));
        assert!(!stack(None, 8).passes_grouped_kv(true));
        assert_eq!(
            stack(v("2.4"), 8).backend(call(false, false, false)),
            SdpaBackend::Efficient
        );
    }

    /// A mask rules flash out; memory-efficient takes it.
    #[test]
    fn a_mask_goes_to_mem_efficient() {
        assert_eq!(
            stack(v("2.11"), 9).backend(call(true, false, true)),
            SdpaBackend::Efficient
        );
    }

    /// Before sm80 flash is out; a V100 in fp16 with grouped k/v (torch 2.11) runs math, with
    /// equal heads memory-efficient; in bf16 not even that.
    #[test]
    fn volta_has_no_flash() {
        let v100 = stack(v("2.11"), 7);
        assert_eq!(v100.backend(call(true, true, false)), SdpaBackend::Math);
        assert_eq!(
            v100.backend(call(true, false, false)),
            SdpaBackend::Efficient
        );
        let bf16 = SdpaStack { bf16: true, ..v100 };
        assert_eq!(bf16.backend(call(true, false, false)), SdpaBackend::Math);
        assert_eq!(
            SdpaStack {
                bf16: true,
                ..stack(None, 8)
            }
            .backend(call(true, false, true)),
            SdpaBackend::Efficient
        );
    }

    /// `minimum_gemm_alignment`: sm80 fp32 4, sm80 16-bit 8, sm70 16-bit 8, sm70 fp32 1. A
    /// head dim of 100 is no multiple of 8: no memory-efficient kernel in 16 bit.
    #[test]
    fn head_dim_alignment() {
        assert_eq!(stack(None, 8).gemm_alignment(false), 4);
        assert_eq!(stack(None, 8).gemm_alignment(true), 8);
        assert_eq!(stack(None, 7).gemm_alignment(true), 8);
        assert_eq!(stack(None, 7).gemm_alignment(false), 1);
        let odd = SdpaCall {
            head_dim: 100,
            ..call(true, false, true)
        };
        assert_eq!(stack(None, 8).backend(odd), SdpaBackend::Math);
    }

    /// ROCm's memory-efficient kernel never takes grouped k/v.
    #[test]
    fn rocm_mem_efficient_has_no_gqa() {
        let mi300 = SdpaStack {
            rocm: true,
            ..stack(None, 9)
        };
        assert_eq!(mi300.backend(call(false, true, false)), SdpaBackend::Math);
    }

    #[test]
    fn catalog_architectures() {
        assert_eq!(sm_of_arch("hopper"), (9, false));
        assert_eq!(sm_of_arch("volta"), (7, false));
        assert_eq!(sm_of_arch("cdna3"), (9, true));
        assert_eq!(sm_of_arch("something-new"), (8, false));
    }
}
