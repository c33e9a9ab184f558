"""``vramscope.trace_max_batch``: the largest batch of the user's own step that fits a GPU, from
traces.

A batch fits when the traced step's device total — the caching allocator's
``max_memory_reserved`` over the step (its allocations, frees and cuBLAS workspaces replayed
through vramscope's model of the allocator) plus the GPU's CUDA context (the estimator's model
of that GPU), as ``analyze`` gives it for a CUDA trace — is at most the catalog's capacity less
``reserve``.

For a fixed sequence length a step's memory is affine in the batch (parameters, gradients and
optimizer states do not grow with it; activations and temporaries grow linearly), so two traces
(batch 1 and 2) give a candidate, ``1 + (usable - total(1)) // (total(2) - total(1))``. The
allocator's rounding makes the line only nearly exact, so the candidate and its neighbour are
traced to confirm it, and where they disagree the search gallops and bisects on traces alone:
the answer is always a batch that was traced and fits with the next one traced and not fitting
(or the limit).
"""

from __future__ import annotations

from typing import Any, Callable

from ._api import InputError, Report, analyze, gpus
from ._sdpa import DEFAULT_GPU
from ._trace import record_bytes


def _unpack(built: Any) -> tuple[Callable[[], Any], Any, Any]:
    """``make(batch)``'s answer: a step, or ``(step, model, optimizer)``."""
    if callable(built):
        return built, None, None
    if isinstance(built, tuple) and len(built) == 3 and callable(built[0]):
        return built[0], built[1], built[2]
    raise InputError("trace_max_batch: make(batch) must return step or (step, model, optimizer)")


def _capacity(gpu: str) -> tuple[str, int]:
    name = str(gpu).lower()
    for g in gpus():
        if name in [g["id"].lower(), *(a.lower() for a in g.get("aliases", []))]:
            return str(g["id"]), int(g["memory_bytes"])
    raise InputError(f"trace_max_batch: unknown gpu {gpu!r} (see `vramscope gpus`)")


class _Search:
    """The traces made so far, by batch."""

    def __init__(self, make: Callable[[int], Any], gpu: str, steps: int, usable: int) -> None:
        self.make, self.gpu, self.steps, self.usable = make, gpu, steps, usable
        self.reports: dict[int, Report] = {}

    def total(self, batch: int) -> int:
        if batch not in self.reports:
            step, model, optimizer = _unpack(self.make(batch))
            data = record_bytes(step, model, optimizer, "cuda", self.steps, self.gpu)
            self.reports[batch] = analyze(data)
        total = self.reports[batch]["per_gpu"]["device_total"]
        if total is None:
            raise InputError("trace_max_batch: the trace carries no device total")
        return int(total)

    def fits(self, batch: int) -> bool:
        return self.total(batch) <= self.usable

    def boundary(self, lo: int, hi: int) -> int:
        """The largest fitting batch between ``lo`` (fits) and ``hi`` (does not), bisected."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.fits(mid) else (lo, mid)
        return lo

    def around(self, candidate: int, limit: int) -> int:
        """The answer near ``candidate`` (≥ 2, 2 fits): it and its neighbour traced, then a
        gallop away from it until the boundary is bracketed."""
        if self.fits(candidate):
            lo, step = candidate, 1
            while lo < limit:
                nxt = min(lo + step, limit)
                if not self.fits(nxt):
                    return self.boundary(lo, nxt)
                lo, step = nxt, 2 * step
            return limit
        hi, step = candidate, 1
        while True:
            nxt = max(hi - step, 2)
            if self.fits(nxt):
                return self.boundary(nxt, hi)
            hi, step = nxt, 2 * step


def trace_max_batch(
    make: Callable[[int], Any],
    gpu: str = DEFAULT_GPU,
    steps: int = 2,
    reserve: int = 0,
    limit: int = 1 << 16,
) -> dict[str, Any]:
    """The largest batch whose traced step fits ``gpu`` (a catalog id or alias).

    ``make(batch)`` builds a fresh model, optimizer and step for that batch (on the ``meta``
    device, or small enough to build) and returns ``step`` or ``(step, model, optimizer)``, as
    :func:`vramscope.trace` takes them. ``reserve`` bytes of the GPU are kept free. Returns
    ``{"gpu", "capacity", "usable", "max_batch" (None when batch 1 does not fit),
    "extrapolated" (the candidate the first two traces gave), "traces": [{"batch",
    "peak_allocated", "device_total", "fits"}], "report"}`` — ``report`` is the trace at
    ``max_batch`` (or at 1 when nothing fits).

    >>> def make(batch):
    ...     model = MyModel(); opt = torch.optim.AdamW(model.parameters())
    ...     def step():
    ...         model(torch.randn(batch, 512)).sum().backward(); opt.step(); opt.zero_grad()
    ...     return step, model, opt
    >>> vramscope.trace_max_batch(make, gpu="a100-80gb")["max_batch"]
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"trace_max_batch: limit must be a positive integer, got {limit!r}")
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
        raise InputError(f"trace_max_batch: reserve must be bytes >= 0, got {reserve!r}")
    gpu_id, capacity = _capacity(gpu)
    s = _Search(make, gpu_id, steps, capacity - reserve)
    best: int | None = None
    candidate: int | None = None
    if s.fits(1):
        best = 1
        if limit >= 2 and s.fits(2):
            slope = s.total(2) - s.total(1)
            candidate = limit if slope <= 0 else 1 + (s.usable - s.total(1)) // slope
            best = s.around(max(2, min(candidate, limit)), limit)
    return {
        "gpu": gpu_id,
        "capacity": capacity,
        "usable": s.usable,
        "max_batch": best,
        "extrapolated": candidate,
        "traces": [
            {
                "batch": b,
                "peak_allocated": r["per_gpu"]["peak_allocated"],
                "device_total": r["per_gpu"]["device_total"],
                "fits": r["per_gpu"]["device_total"] <= s.usable,
            }
            for b, r in sorted(s.reports.items())
        ],
        "report": s.reports[best if best is not None else 1],
    }
