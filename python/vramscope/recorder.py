"""``vramscope.record``: one real training (or inference) step, recorded phase by phase.

On CUDA it records the caching allocator's history
(``torch.cuda.memory._record_memory_history``, bounded by ``max_entries``), tags each phase's
allocations with ``_set_memory_metadata({"phase": name})`` (the snapshot's ``user_metadata``,
read by ``vramscope analyze``) and a ``record_function(name)`` range (the snapshot's
``external_annotations``: torch/csrc/cuda/memory_snapshot.cpp ``_initRecordAnnotations`` adds
``{"name", "stage": "START" | "END", "time_us"}`` for every user-scope ``record_function``),
reads ``memory_allocated`` / ``memory_reserved`` / ``max_memory_allocated`` around each phase,
and dumps the snapshot (``_dump_snapshot``) that ``analyze``, ``compare``, ``fit --measured``
and the web UI read.

Without CUDA the same phases are recorded through ``torch.profiler`` (``profile_memory=True``)
and written as a snapshot of the same layout (see ``_profile_record``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the package imports nothing beyond the standard library
    from typing_extensions import Self

from . import _profile_record
from ._api import PathLike, analyze, compare
from ._units import human_bytes

#: Allocator events kept on CUDA (a ring buffer: older ones are dropped past it). One training
#: step of a 7B model with HF's Trainer makes tens of thousands; each costs a few hundred bytes
#: of host memory with Python stacks.
DEFAULT_MAX_ENTRIES = 1_000_000


class RecordReport(dict):  # type: ignore[type-arg]
    """What ``Recorder.report()`` returns: a plain dict (bytes as integers) that prints, and
    renders in Jupyter, in adaptive units."""

    def __str__(self) -> str:
        return render_text(self)

    def _repr_html_(self) -> str:
        return "<pre>" + render_text(self).replace("&", "&amp;").replace("<", "&lt;") + "</pre>"


def _fmt(v: int | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    s = human_bytes(abs(v)) if signed else human_bytes(v)
    if signed:
        return ("+" if v >= 0 else "-") + s
    return s


def render_text(r: Mapping[str, Any]) -> str:
    """The report as a table in adaptive units (the dict itself holds bytes)."""
    lines = [f"record: {r['path']} ({r['backend']})", ""]
    lines.append(
        f"{'phase':<14}{'allocated':>12}{'Δ alloc':>12}{'peak':>12}{'Δ peak':>12}{'Δ reserved':>12}"
    )
    for p in r["phases"]:
        lines.append(
            f"{p['phase']:<14}{_fmt(p['allocated_after']):>12}"
            f"{_fmt(p['allocated_delta'], True):>12}{_fmt(p['peak_allocated']):>12}"
            f"{_fmt(p['peak_delta'], True):>12}{_fmt(p['reserved_delta'], True):>12}"
        )
    per_gpu = r["measured"].get("per_gpu") or {}
    comps = per_gpu.get("components") or {}
    lines += [
        "",
        f"at the peak ({_fmt(per_gpu.get('peak_allocated'))}, {per_gpu.get('peak_phase') or '?'}):",
    ]
    for name, v in comps.items():
        if v:
            lines.append(f"  {name:<20}{_fmt(v):>12}")
    cmp = r.get("compare")
    if cmp is not None:
        lines += ["", "estimate vs measured: see report()['compare']"]
    return "\n".join(lines)


class Recorder:
    """Records a step phase by phase; use through :func:`record`."""

    def __init__(
        self,
        path: PathLike,
        job: str | Mapping[str, Any] | None = None,
        *,
        device: Any | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        stacks: str = "all",
    ) -> None:
        self.path = os.fspath(path)
        self.stacks = stacks
        self.job = job
        self.max_entries = int(max_entries)
        self._device = device
        self.backend = ""
        self._names: list[str] = []
        self._counters: list[dict[str, Any]] = []
        self._prof: Any = None
        self._closed = False

    # -- the session -------------------------------------------------------------------
    def __enter__(self) -> Self:
        import torch

        dev = torch.device(self._device) if self._device is not None else None
        use_cuda = torch.cuda.is_available() and (dev is None or dev.type == "cuda")
        self.backend = "cuda" if use_cuda else "cpu"
        if use_cuda:
            if dev is not None and dev.index is not None:
                torch.cuda.set_device(dev)
            torch.cuda.synchronize()
            torch.cuda.memory._record_memory_history(
                max_entries=self.max_entries, stacks=self.stacks
            )
        else:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(
                activities=[ProfilerActivity.CPU],
                profile_memory=True,
                record_shapes=True,
                with_stack=True,
            )
            self._prof.__enter__()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        # The record is written even when the step raised (an out-of-memory error is when
        # it is wanted most).
        self._finish()

    def _finish(self) -> None:
        if self._closed:
            return
        self._closed = True
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        if self.backend == "cuda":
            import torch

            torch.cuda.synchronize()
            torch.cuda.memory._dump_snapshot(self.path)  # type: ignore[no-untyped-call,unused-ignore]
            torch.cuda.memory._record_memory_history(enabled=None)
            _set_metadata("")
        else:
            self._finish_cpu()

    def _finish_cpu(self) -> None:
        import pickle

        self._prof.__exit__(None, None, None)
        windows = _profile_record.phase_windows(self._prof, self._names)
        snapshot, trace = _profile_record.build_snapshot(self._prof, windows)
        self._counters = _profile_record.phase_counters(trace, windows)
        with open(self.path, "wb") as f:
            pickle.dump(snapshot, f, protocol=2)
        self._prof = None

    # -- phases ------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Marks the code inside as phase ``name`` (``forward``, ``backward`` and
        ``optimizer`` are the names ``analyze`` knows; any other is kept in the counters)."""
        import torch

        if self._closed or not self.backend:
            raise RuntimeError("Recorder.phase() is used inside `with vramscope.record(...)`")
        self._names.append(name)
        if self.backend != "cuda":
            with torch.profiler.record_function(name):
                yield
            return
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        reserved_before = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        previous = _get_metadata()
        _set_metadata(_profile_record._meta(name))
        try:
            with torch.profiler.record_function(name):
                yield
        finally:
            _set_metadata(previous)
            torch.cuda.synchronize()
            self._counters.append(
                _profile_record._counter(
                    name,
                    before,
                    torch.cuda.memory_allocated(),
                    torch.cuda.max_memory_allocated(),
                    reserved_before,
                    torch.cuda.memory_reserved(),
                )
            )

    # -- the answer --------------------------------------------------------------------
    def report(self) -> RecordReport:
        """Per phase the allocated / reserved / peak bytes and their deltas, the attribution
        by category (``analyze`` of the written record) and, with a job, the estimate beside
        the measurement (``compare``)."""
        if not self._closed:
            raise RuntimeError("Recorder.report() is called after the `with` block")
        out: dict[str, Any] = {
            "path": self.path,
            "backend": self.backend,
            "phases": list(self._counters),
            "measured": dict(analyze(self.path)),
        }
        if self.job is not None:
            out["compare"] = compare(self.job, self.path)
        return RecordReport(out)


def _set_metadata(meta: str) -> None:
    import torch

    setter = getattr(torch.cuda.memory, "_set_memory_metadata", None)
    if setter is not None:
        setter(meta)


def _get_metadata() -> str:
    import torch

    getter = getattr(torch.cuda.memory, "_get_memory_metadata", None)
    return getter() if getter is not None else ""


def record(
    path: PathLike,
    job: str | Mapping[str, Any] | None = None,
    *,
    device: Any | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    stacks: str = "all",
) -> Recorder:
    """Records the code inside ``with`` into ``path`` (a snapshot pickle ``vramscope analyze``
    reads); ``rec.phase(name)`` marks phases; after the block ``rec.report()`` says what each
    phase took and where the bytes went (and, with a ``job``, the estimate beside it).

    On CUDA, ``max_entries`` bounds the allocator's event ring buffer and ``stacks`` is
    ``_record_memory_history``'s: ``"all"`` (Python and C++ frames: the autograd engine's
    threads, which run backward, have only C++ ones, and the analyzer tells gradients from
    temporaries by them) or ``"python"`` (cheaper).

    >>> with vramscope.record("step.pickle", job=job) as rec:
    ...     with rec.phase("forward"):
    ...         loss = model(**batch).loss
    ...     with rec.phase("backward"):
    ...         loss.backward()
    ...     with rec.phase("optimizer"):
    ...         opt.step(); opt.zero_grad()
    >>> print(rec.report())
    """
    return Recorder(path, job, device=device, max_entries=max_entries, stacks=stacks)
