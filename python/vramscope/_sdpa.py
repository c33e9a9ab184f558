"""CUDA's choice of ``scaled_dot_product_attention`` backend, emulated on the CPU's fake tensors
for ``trace(..., device="cuda", gpu=...)``.

On CUDA, ``aten::scaled_dot_product_attention`` (aten/src/ATen/native/transformers/attention.cpp)
asks ``select_sdp_backend`` (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) for the first
backend in the priority order (flash, memory-efficient, math; torch/backends/cuda/__init__.py
``sdp_kernel`` / ``SDPBackend`` name the same three) whose checks pass for the inputs' dtype,
head dim, mask and the GPU's compute capability. What each saves for backward differs:

- **flash** (``_scaled_dot_product_flash_attention``): q, k, v, the output, the logsumexp
  (float32, ``[b, h, s_q]``) and the RNG state (``[2]`` uint64 and an unused ``[]`` uint64, both
  on the device: cuda/flash_attn/flash_api.cpp ``mha_fwd``). A head dim not a multiple of 8 is
  padded first (attention.cpp ``pad_last_dim<8>``), and the padded copies are what it saves.
- **memory-efficient** (``_scaled_dot_product_efficient_attention``): q, k, v, the output, the
  mask when given (a boolean mask turned into one of q's dtype, its last dim padded to a
  multiple of 8 when its strides are not: attention.cpp ``preprocess_mask``), and the
  logsumexp ``[b, h, ceil(s_q / 32) * 32]`` float32 (torch/_meta_registrations.py
  ``meta__scaled_dot_product_efficient_attention``); its seed and offset are host scalars
  (attention.cu ``_efficient_attention_forward``).
- **math** (``_scaled_dot_product_attention_math``): the attention matrix, as the composite ops
  that build it save it.

The CPU takes its own fused kernel (``_scaled_dot_product_flash_attention_for_cpu``) in more
cases than CUDA's flash (masks, float32), so a CUDA trace runs the op CUDA would run instead.
cuDNN attention, preferred on sm90 and sm100 when the cuDNN runtime is newer than 9.15.1
(sdp_utils.cpp ``check_prefer_cudnn_attention``), saves the output and float32 statistics of
``[b, h, s_q, 1]`` (its meta kernel), the same bytes as flash's logsumexp: the trace takes the
default order (flash first) for it.
"""

from __future__ import annotations

import math
from typing import Any, Callable

#: Compute capability of the catalog's NVIDIA GPUs (developer.nvidia.com/cuda-gpus).
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "v100-16gb": (7, 0),
    "v100-32gb": (7, 0),
    "t4-16gb": (7, 5),
    "a10-24gb": (8, 6),
    "a30-24gb": (8, 0),
    "a40-48gb": (8, 6),
    "a100-40gb": (8, 0),
    "a100-80gb": (8, 0),
    "rtx3060-12gb": (8, 6),
    "rtx3090-24gb": (8, 6),
    "rtx-a6000-48gb": (8, 6),
    "l4-24gb": (8, 9),
    "l40-48gb": (8, 9),
    "l40s-48gb": (8, 9),
    "rtx6000-ada-48gb": (8, 9),
    "rtx4070ti-12gb": (8, 9),
    "rtx4080-16gb": (8, 9),
    "rtx4090-24gb": (8, 9),
    "h100-80gb": (9, 0),
    "h100-pcie-80gb": (9, 0),
    "h100-nvl-94gb": (9, 0),
    "gh200-96gb": (9, 0),
    "h200-141gb": (9, 0),
    "b200-192gb": (10, 0),
    "rtx5090-32gb": (12, 0),
    "gb10-128gb": (12, 1),
}

#: The GPU a CUDA trace assumes when none is named: an H100 (sm90).
DEFAULT_GPU = "h100-80gb"


def _sm_in(sm: tuple[int, int], lo: tuple[int, int], hi: tuple[int, int]) -> bool:
    return lo <= sm <= hi


#: The first PyTorch release whose memory-efficient kernel takes grouped k/v
#: (pytorch/pytorch#191085; before it ``can_use_mem_efficient_attention`` ran the
#: ``supports_gqa = false`` check). The estimator's ``MEM_EFFICIENT_GQA_FROM``
#: (crates/core/src/estimate/blocks/sdpa.rs), which says why 2.15.
MEM_EFFICIENT_GQA_FROM = (2, 15)


def _torch_release() -> tuple[int, int]:
    """(major, minor) of the installed torch (a development build counts as the newest)."""
    import torch

    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (99, 0)


def _heads_ok(q: Any, k: Any, v: Any, enable_gqa: bool) -> bool:
    """sdp_utils ``check_batch_size_and_num_heads_dense`` (dense inputs): grouped k/v pass
    only under ``enable_gqa`` for a backend that supports them (flash always; memory-efficient
    from ``MEM_EFFICIENT_GQA_FROM``)."""
    if not (q.size(0) == k.size(0) == v.size(0)) or k.size(1) != v.size(1):
        return False
    if q.size(1) == k.size(1):
        return True
    return enable_gqa and k.size(1) > 0 and q.size(1) % k.size(1) == 0


def _dense_ok(q: Any, k: Any, v: Any, enable_gqa: bool) -> bool:
    """Four-dimensional, nonzero sequence lengths, contiguous last dim (``check_tensor_shapes``,
    ``check_nonzero_sequence_lengths_dense``, ``check_last_dim_stride_equals_1_dense``)."""
    if not (q.dim() == k.dim() == v.dim() == 4):
        return False
    if q.size(2) == 0 or k.size(2) == 0:
        return False
    if any(t.stride(-1) != 1 and t.size(-1) != 1 for t in (q, k, v)):
        return False
    return _heads_ok(q, k, v, enable_gqa)


def _low(t: Any) -> bool:
    import torch

    return t.dtype in (torch.float16, torch.bfloat16)


def can_use_flash(
    sm: tuple[int, int], q: Any, k: Any, v: Any, mask: Any, p: float, causal: bool, gqa: bool
) -> bool:
    """sdp_utils.cpp ``can_use_flash_attention``."""
    import torch

    d = q.size(-1)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if mask is not None or not _dense_ok(q, k, v, gqa):
        return False
    if not (d == k.size(-1) == v.size(-1) and d <= 256):
        return False
    if not _sm_in(sm, (8, 0), (12, 1)):
        return False
    sm86_89_120 = _sm_in(sm, (8, 6), (8, 9)) or _sm_in(sm, (12, 0), (12, 1))
    if needs_grad and sm86_89_120 and not (d <= 192 or (p == 0.0 and d > 224)):
        return False
    if causal and q.size(2) != k.size(2):
        return False
    return _low(q) and k.dtype == q.dtype == v.dtype


def _gemm_alignment(sm: tuple[int, int], q: Any) -> int:
    """sdp_utils.cpp ``minimum_gemm_alignment``: elements a head dim must be a multiple of."""
    half = _low(q)
    tensor_cores = sm[0] >= 8 or (sm[0] >= 7 and half)
    mn = 4 if sm[0] >= 8 else 1
    return max(mn, 128 // (16 if half else 32)) if tensor_cores else mn


def can_use_efficient(sm: tuple[int, int], q: Any, k: Any, v: Any, gqa: bool) -> bool:
    """sdp_utils.cpp ``can_use_mem_efficient_attention`` (dense inputs)."""
    import torch

    supports_gqa = _torch_release() >= MEM_EFFICIENT_GQA_FROM
    if not _sm_in(sm, (5, 0), (12, 1)) or not _dense_ok(q, k, v, gqa and supports_gqa):
        return False
    align = _gemm_alignment(sm, q)
    dq, dv = q.size(-1), v.size(-1)
    if not (dq == k.size(-1) and dq % align == 0 and dv % align == 0 and dq > 0 and dv > 0):
        return False
    # check_data_ptr_alignment_mem_efficient (sm80 and newer)
    if sm[0] >= 8 and any(t.storage_offset() % align != 0 for t in (q, k, v)):
        return False
    dtypes = (torch.float16, torch.float32) + ((torch.bfloat16,) if sm[0] >= 8 else ())
    return q.dtype in dtypes and k.dtype == q.dtype == v.dtype


def _bool_to_float_mask(mask: Any, dtype: Any) -> Any:
    """attention.cpp ``convert_boolean_attn_mask``: True keeps, False is −inf."""
    import torch

    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask.logical_not(), -math.inf, zero)


def _preprocess_mask(mask: Any, q: Any, k: Any) -> Any:
    """attention.cpp ``preprocess_mask``: a mask whose strides are not multiples of 8 is padded
    (``pad_bias<8>``), then expanded to ``[b, h, s_q, s_k]``."""
    import torch

    align = 8
    if any(mask.stride(i) % align != 0 for i in range(mask.dim() - 1)):
        last = mask.size(-1)
        pad = align - last % align
        mask = torch.nn.functional.pad(mask, (0, pad))[..., :last]
    return mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))


def _flash(q: Any, k: Any, v: Any, p: float, causal: bool, scale: Any) -> Any:
    """attention.cpp's flash branch on CUDA: head dim padded to a multiple of 8, the scale of
    the original head dim, the output sliced back."""
    import torch

    d = q.size(-1)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if d % 8:
        pad = (0, 8 - d % 8)
        q, k, v = (torch.nn.functional.pad(t, pad) for t in (q, k, v))
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, p, causal, False, scale=scale)
    return out[0][..., :d] if d % 8 else out[0]


def sdpa_kernel(sm: tuple[int, int], host: Callable[[Any], None]) -> Callable[..., Any]:
    """A ``CompositeImplicitAutograd`` kernel for ``aten::scaled_dot_product_attention`` that
    runs what CUDA's dispatcher would on a GPU of compute capability ``sm``; ``host`` is told of
    tensors CUDA keeps on the host."""
    import torch

    def kernel(
        q: Any,
        k: Any,
        v: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: Any = None,
        enable_gqa: bool = False,
    ) -> Any:
        if can_use_flash(sm, q, k, v, attn_mask, dropout_p, is_causal, enable_gqa):
            return _flash(q, k, v, dropout_p, is_causal, scale)
        if can_use_efficient(sm, q, k, v, enable_gqa):
            mask = _bool_to_float_mask(attn_mask, q.dtype)
            if mask is not None:
                mask = _preprocess_mask(mask, q, k)
            lse = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            out = torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, mask, lse, dropout_p, is_causal, scale=scale
            )
            host(out[2])
            host(out[3])
            return out[0]
        return torch.ops.aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
        )[0]

    return kernel


def resolve_gpu(gpu: Any) -> tuple[tuple[int, int], str | None]:
    """(compute capability, catalog id) of a catalog GPU (id or alias), or of a
    ``(major, minor)`` pair (no catalog id: the trace then carries no CUDA context)."""
    from ._api import InputError, gpus

    if isinstance(gpu, tuple) and len(gpu) == 2 and all(isinstance(x, int) for x in gpu):
        return (int(gpu[0]), int(gpu[1])), None
    name = str(gpu).lower()
    for g in gpus():
        names = [g["id"].lower(), *(a.lower() for a in g.get("aliases", []))]
        if name in names:
            if g["id"] in COMPUTE_CAPABILITY:
                return COMPUTE_CAPABILITY[g["id"]], g["id"]
            raise InputError(
                f"trace: {g['id']} is not an NVIDIA CUDA GPU; CUDA's attention backends are "
                f"emulated for NVIDIA GPUs only"
            )
    raise InputError(f"trace: unknown gpu {gpu!r} (see `vramscope gpus`), or give (major, minor)")
