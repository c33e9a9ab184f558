"""What makes a traced step allocate as it would on CUDA while it runs on the CPU's fake tensors
(``trace(..., device="cuda")``).

PyTorch allocates the same tensors for the same ops on either device, except where the CPU
takes another path. These are switched to CUDA's for the duration of a trace, and restored:

1. **Autocast.** ``torch.autocast("cuda", ...)`` is disabled with a warning where CUDA is not
   available; it is run as CPU autocast instead, with CUDA's float32 op lists:
   aten/src/ATen/autocast_mode.cpp (``AT_FORALL_FP32`` and ``AT_FORALL_FP32_SET_OPT_DTYPE``,
   the CUDA policies) run softmax, log_softmax, layer_norm, pow, exp, sum, ... in float32 where
   CPU autocast keeps bfloat16. An ``AutocastCPU`` kernel for each casts as CUDA's policy does
   (through autograd, so the float32 copies are what the op saves, as on CUDA).
2. **Dropout.** ``at::dropout`` on CUDA calls the fused ``native_dropout`` and saves a 1-byte
   mask; on the CPU it builds a noise tensor of the input's dtype. ``F.dropout`` is routed to
   ``torch.native_dropout`` while tracing.
3. **Attention.** ``aten::scaled_dot_product_attention`` runs the backend CUDA's dispatcher
   picks for the GPU's compute capability (``_sdpa.py``), not the CPU's fused kernel.
4. **Optimizers.** ``torch.optim`` picks the foreach implementation by default only for
   devices in ``_get_foreach_kernels_supported_devices()`` (torch/optim/optimizer.py
   ``_default_to_fused_or_foreach``): CUDA's default is taken for the CPU too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Callable

#: CUDA autocast's float32 ops (autocast_mode.cpp ``AT_FORALL_FP32``).
FP32_OPS = [
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
]

#: CUDA autocast's float32-unless-a-dtype-is-given ops (``AT_FORALL_FP32_SET_OPT_DTYPE``).
FP32_SET_OPT_DTYPE_OPS = [
    "prod",
    "prod.dim_int",
    "cumprod",
    "cumsum",
    "softmax.int",
    "log_softmax.int",
    "sum",
    "sum.dim_IntList",
    "nansum",
]

_LOW = ("bfloat16", "float16")


def _op(qualname: str) -> Any:
    import torch

    name, _, overload = qualname.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _to_fp32(a: Any) -> Any:
    import torch

    if isinstance(a, torch.Tensor):
        low = a.is_floating_point() and str(a.dtype).split(".")[-1] in _LOW
        return a.float() if low else a
    if isinstance(a, (list, tuple)):
        return type(a)(_to_fp32(x) for x in a)
    return a


def _fp32_kernel(op: Any, keyset: Any) -> Any:
    import torch

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(keyset):
            return op(*_to_fp32(args), **{k: _to_fp32(v) for k, v in kwargs.items()})

    return kernel


def _set_opt_dtype_kernel(op: Any, pos: int, keyset: Any) -> Any:
    import torch

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(keyset):
            first = args[0] if args else None
            eligible = (
                isinstance(first, torch.Tensor)
                and first.is_floating_point()
                and first.dtype != torch.float64
            )
            given = kwargs.get("dtype") if len(args) <= pos else args[pos]
            if eligible and given is None:
                if len(args) > pos:
                    args = (*args[:pos], torch.float32, *args[pos + 1 :])
                else:
                    kwargs["dtype"] = torch.float32
            return op(*args, **kwargs)

    return kernel


def _autocast_library() -> Any:
    """An ``aten`` IMPL library with CUDA's float32 policies as ``AutocastCPU`` kernels."""
    import torch

    lib = torch.library.Library("aten", "IMPL")
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    for qn in FP32_OPS:
        try:
            op = _op(qn)
        except AttributeError:
            continue
        lib.impl(qn, _fp32_kernel(op, keyset), "AutocastCPU")
    for qn in FP32_SET_OPT_DTYPE_OPS:
        try:
            op = _op(qn)
        except AttributeError:
            continue
        names = [a.name for a in op._schema.arguments]
        if "dtype" in names:
            lib.impl(qn, _set_opt_dtype_kernel(op, names.index("dtype"), keyset), "AutocastCPU")
    return lib


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def cuda_like(sm: tuple[int, int], host: Callable[[Any], None]) -> Iterator[None]:
    """CUDA's autocast lists, dropout, attention backends (of a GPU of compute capability
    ``sm``; ``host`` is told of tensors CUDA keeps on the host) and optimizer defaults on the
    CPU, restored on exit."""
    import warnings

    import torch
    import torch.nn.functional as F
    import torch.optim.optimizer as optimizer_mod
    from torch.amp import autocast_mode

    orig_dropout = F.dropout
    orig_devices = optimizer_mod._get_foreach_kernels_supported_devices
    orig_init = autocast_mode.autocast.__init__

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if training and 0.0 < p < 1.0 and input.numel() > 0 and not inplace:
            return torch.native_dropout(input, p, True)[0]
        return orig_dropout(input, p, training, inplace)

    def devices() -> list[str]:
        return [*orig_devices(), "cpu"]

    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == "cuda" and not torch.cuda.is_available():
            device_type = "cpu"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            orig_init(self, device_type, *args, **kwargs)

    from ._sdpa import sdpa_kernel

    lib = _autocast_library()
    attention = torch.library.Library("aten", "IMPL")
    attention.impl(
        "scaled_dot_product_attention", sdpa_kernel(sm, host), "CompositeImplicitAutograd"
    )
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_patched(F, "dropout", dropout))
            stack.enter_context(
                _patched(optimizer_mod, "_get_foreach_kernels_supported_devices", devices)
            )
            stack.enter_context(_patched(autocast_mode.autocast, "__init__", init))
            yield
    finally:
        attention._destroy()
        lib._destroy()
