"""The recorder's CPU path: a ``torch.profiler`` session (``profile_memory=True``) turned into a
snapshot pickle in the layout ``torch.cuda.memory._dump_snapshot`` writes, which ``vramscope
analyze`` reads like a CUDA one.

What is read, and where PyTorch defines it:

- ``prof._memory_profile()`` (torch/profiler/profiler.py) gives the profiler's
  ``MemoryProfile`` (torch/profiler/_memory_profiler.py): ``timeline`` is every tensor
  allocation, free and version bump as ``(time_ns, Action, (TensorKey, version), bytes)`` and
  ``_categories.get(key, version)`` its category (PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY,
  ACTIVATION, GRADIENT, AUTOGRAD_DETAIL). ``torch.cuda._memory_viz._profile_to_snapshot`` walks
  the same two to draw the profile; this module does likewise and also keeps each event's time.
- Each phase is a ``record_function(name)`` range; its start and end are read from the
  profiler's op tree (``_op_tree.sorted_nodes``, ``start_time_ns`` / ``end_time_ns``), the
  clock of the timeline.

Each allocation carries ``user_metadata = {"phase": NAME}`` (the field
``torch.cuda.memory._set_memory_metadata`` fills on CUDA; the analyzer reads a phase there),
and ``category`` (the field ``_profile_to_snapshot`` writes, read by the analyzer as the
profiler's category). Tensors alive when recording began are written as allocations at the
record's start in phase ``setup``, so the parameters and an optimizer's existing states are in
the record. A key the profiler gave both to such a tensor and to a new one made at its address
once it was dropped is split in two first (``_profile_reuse``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Callable

from . import _profile_reuse

Phase = tuple[str, int, int]  # name, start_ns, end_ns


def phase_windows(prof: Any, names: Sequence[str]) -> list[Phase]:
    """The recorder's phases in order, matched by name and order to the profiler's
    ``record_function`` ranges."""
    from torch._C._profiler import _EventType

    ranges: dict[str, list[tuple[int, int]]] = {}
    for e in prof._memory_profile()._op_tree.sorted_nodes:
        if e.tag == _EventType.TorchOp and e.name in names:
            ranges.setdefault(e.name, []).append((e.start_time_ns, e.end_time_ns))
    out: list[Phase] = []
    seen: dict[str, int] = {}
    for name in names:
        k = seen.get(name, 0)
        seen[name] = k + 1
        found = sorted(ranges.get(name, []))
        if k < len(found):
            out.append((name, found[k][0], found[k][1]))
    return out


def _phase_at(t: int, windows: Sequence[Phase]) -> str:
    """The innermost phase open at ``t`` (``setup`` before the first, else the last one
    closed: frees after a phase belong to no new phase)."""
    best: Phase | None = None
    for w in windows:
        if w[1] <= t <= w[2] and (best is None or w[1] >= best[1]):
            best = w
    if best is not None:
        return best[0]
    earlier = [w for w in windows if w[2] < t]
    return earlier[-1][0] if earlier else "setup"


def allocation_stacks(mp: Any) -> dict[Any, list[dict[str, Any]]]:
    """The Python frames above each allocation, innermost first (as
    ``torch.cuda._memory_viz._profile_to_snapshot`` collects them); names read
    ``path.py(line): function``, which the analyzer's stack signals understand. Identical
    stacks share one list (pickled once)."""
    from torch._C._profiler import _EventType
    from torch.profiler._memory_profiler import TensorKey

    shared: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    out: dict[Any, list[dict[str, Any]]] = {}
    for event in mp._op_tree.sorted_nodes:
        if event.tag != _EventType.Allocation or event.extra_fields.alloc_size <= 0:
            continue
        key = TensorKey.from_allocation(event.extra_fields)
        if key is None:
            continue
        names: list[str] = []
        parent = event.parent
        while parent is not None:
            if parent.tag in (_EventType.PyCall, _EventType.PyCCall):
                names.append(parent.name)
            parent = parent.parent
        frames = shared.setdefault(
            tuple(names), [{"filename": "", "line": 0, "name": n} for n in names]
        )
        out[key] = frames
    return out


def _tracer_parameters(mp: Any) -> tuple[set[int], dict[Any, int]]:
    """The parameters the Python tracer saw (module ``forward`` and optimizer ``step`` calls)
    as tensor ids, and each gradient tensor's parameter (``extract_gradients``)."""
    from torch.profiler._memory_profiler import extract_gradients, extract_parameters

    params: set[int] = set()
    grad_of: dict[Any, int] = {}
    for event in mp._op_tree.dfs():
        for param in extract_parameters(event):
            params.add(param.id)
        for owner, grad in extract_gradients(event):
            if owner is not None:
                grad_of[grad] = owner.id
    return params, grad_of


def _zero_grad_ranges(mp: Any) -> list[tuple[int, int]]:
    """``Optimizer.zero_grad`` ranges (torch/optim/optimizer.py wraps ``zero_grad`` in
    ``record_function("Optimizer.zero_grad#<class>.zero_grad")``), in time order."""
    from torch._C._profiler import _EventType

    return sorted(
        (e.start_time_ns, e.end_time_ns)
        for e in mp._op_tree.sorted_nodes
        if e.tag == _EventType.TorchOp and e.name.startswith("Optimizer.zero_grad")
    )


def _replaced_gradients(
    events: Sequence[Any],
    is_gradient: Callable[[Any, int], bool],
    grad_of: dict[Any, int],
    zero_grads: Sequence[tuple[int, int]],
) -> list[Any]:
    """Frees the profiler cannot report: a gradient allocated before recording began and
    dropped during it (``zero_grad(set_to_none=True)`` at the top of a step) has no free event
    (c10's CPU allocator does not know its size: "Memory block of unknown size was allocated
    before the profiling started"). Such a gradient is freed

    - at the end of the first ``Optimizer.zero_grad`` range when nothing touches it from that
      range's start on (``zero_grad(set_to_none=False)`` zeroes it in place: a version bump);
    - else, when its parameter gets a new gradient tensor (the Python tracer pairs them), at
      that tensor's creation;

    and in either case no later than its address is allocated again.
    """
    from torch.profiler._memory_profiler import Action

    pre: dict[Any, tuple[int, int]] = {}  # key -> (version, size)
    last_touch: dict[Any, int] = {}
    for t, action, (key, version), size in events:
        if action == Action.PREEXISTING and is_gradient(key, version):
            pre[key] = (version, size)
        elif key in pre:
            last_touch[key] = t
    # The free happened before its address was handed out again (the snapshot's reader
    # pairs frees with allocations by address).
    reused: dict[int, list[int]] = {}
    for t, action, (key, _version), _size in events:
        if action == Action.CREATE:
            reused.setdefault(int(key.storage.ptr or 0), []).append(t)

    def at(key: Any, t: int) -> int:
        after = last_touch.get(key, -1)
        again = [r for r in reused.get(int(key.storage.ptr or 0), []) if r > after]
        return min([t, *again])

    out: list[Any] = []
    if zero_grads:
        z_start, z_end = zero_grads[0]
        for key in [k for k in pre if last_touch.get(k, -1) < z_start]:
            version, size = pre.pop(key)
            out.append((at(key, z_end), Action.DESTROY, (key, version), size))
    old_of_param = {grad_of[k]: k for k in pre if k in grad_of}
    for t, action, (key, _version), _size in events:
        p = grad_of.get(key)
        if action == Action.CREATE and p in old_of_param and old_of_param[p] != key:
            okey = old_of_param.pop(p)
            oversion, osize = pre.pop(okey)
            out.append((at(okey, t), Action.DESTROY, (okey, oversion), osize))
    return out


def _reused_addresses(events: Sequence[Any], already: Sequence[Any]) -> list[Any]:
    """Any other tensor from before recording whose address a new tensor takes was freed
    before it (the profiler reports no free for it either): freed at that moment."""
    from torch.profiler._memory_profiler import Action

    done = {key for _t, _a, (key, _v), _s in already}
    live: dict[int, tuple[Any, int, int]] = {}  # address -> (key, version, size)
    out: list[Any] = []
    for t, action, (key, version), size in events:
        addr = int(key.storage.ptr or 0)
        if action == Action.PREEXISTING and key not in done:
            live[addr] = (key, version, size)
        elif (
            action in (Action.DESTROY, Action.INCREMENT_VERSION)
            and live.get(addr, (None,))[0] == key
        ):
            if action == Action.DESTROY:
                del live[addr]
            else:
                live[addr] = (key, version + 1, size)
        elif action == Action.CREATE and addr in live and live[addr][0] != key:
            okey, oversion, osize = live.pop(addr)
            out.append((t, Action.DESTROY, (okey, oversion), osize))
    return out


def _meta(phase: str) -> str:
    return json.dumps({"phase": phase}, separators=(",", ":"))


class _Trace:
    """The snapshot's device trace, built event by event, with the live bytes kept per event
    (for the per-phase counters)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.live: dict[tuple[Any, int], dict[str, Any]] = {}
        self.allocated = 0
        self.points: list[tuple[int, int]] = []  # (time_ns, allocated after the event)

    def alloc(
        self, key: Any, size: int, t: int, category: str, phase: str, frames: list[Any]
    ) -> None:
        entry = {
            "action": "alloc",
            "addr": int(key[0].storage.ptr or 0),
            "size": int(size),
            "stream": 0,
            "frames": frames,
            "category": category,
            "user_metadata": _meta(phase),
            "time_us": t // 1000,
        }
        self.entries.append(entry)
        self.live[key] = entry
        self.allocated += int(size)
        self.points.append((t, self.allocated))

    def free(self, key: Any, t: int, phase: str) -> None:
        entry = self.live.pop(key, None)
        if entry is None:
            return
        for action in ("free_requested", "free_completed"):
            self.entries.append(
                {
                    "action": action,
                    "addr": entry["addr"],
                    "size": entry["size"],
                    "stream": 0,
                    "frames": entry["frames"],
                    "user_metadata": _meta(phase),
                    "time_us": t // 1000,
                }
            )
        self.allocated -= entry["size"]
        self.points.append((t, self.allocated))


def build_snapshot(prof: Any, windows: Sequence[Phase]) -> tuple[dict[str, Any], _Trace]:
    """The snapshot dict of a finished profiler session, and its trace (for the counters)."""
    from torch.profiler._memory_profiler import Action, TensorKey

    mp = prof._memory_profile()
    stacks = allocation_stacks(mp)
    params, grad_of = _tracer_parameters(mp)
    trace = _Trace()
    events, split = _profile_reuse.split_reused(
        mp,
        sorted(
            (
                ev
                for ev in mp.timeline
                if isinstance(ev[2][0], TensorKey) and ev[2][0].device.type == "cpu"
            ),
            key=lambda ev: ev[0],
        ),
    )
    for key, (_size, role) in split.earlier.items():
        if role == "GRADIENT" and key in grad_of:
            grad_of[_profile_reuse.Earlier(key)] = grad_of[key]

    def is_gradient(key: Any, version: int) -> bool:
        return split.category(mp, key, version) == "GRADIENT"

    freed = _replaced_gradients(events, is_gradient, grad_of, _zero_grad_ranges(mp))
    freed += _reused_addresses(events, freed)
    # Stable: a synthesized free sorts before the events at its time.
    events = sorted(freed + events, key=lambda ev: ev[0])
    # Tensors alive before recording began are placed just before everything recorded.
    times = [ev[0] for ev in events if ev[0] >= 0] + [w[1] for w in windows]
    start = min(times, default=1) - 1

    def alloc(key: Any, version: int, size: int, t: int, phase: str) -> None:
        category = (split.category(mp, key, version) or "unknown").lower()
        # The profiler's data-flow fallback also calls PARAMETER what only flows like one
        # (e.g. clip_grad_norm_'s total norm); parameters are what the tracer saw.
        if category == "parameter" and params and key.id not in params:
            category = "unknown"
        trace.alloc((key, version), size, t, category, phase, stacks.get(key, []))

    for t, action, (key, version), size in events:
        if action == Action.PREEXISTING:
            alloc(key, version, size, start, "setup")
        elif action == Action.CREATE:
            alloc(key, version, size, t, _phase_at(t, windows))
        elif action == Action.DESTROY:
            trace.free((key, version), t, _phase_at(t, windows))
        elif action == Action.INCREMENT_VERSION:
            phase = _phase_at(t, windows)
            trace.free((key, version), t, phase)
            alloc(key, version + 1, size, t, phase)
    snapshot = {
        "segments": [],
        "device_traces": [trace.entries],
        "external_annotations": [
            {"name": n, "stage": stage, "device": 0, "time_us": at // 1000}
            for n, s, e in windows
            for stage, at in (("START", s), ("END", e))
        ],
    }
    return snapshot, trace


def phase_counters(trace: _Trace, windows: Sequence[Phase]) -> list[dict[str, Any]]:
    """Per phase: bytes allocated when it began and ended, and the most during it (the
    profiler's tensor bytes; the CPU has no caching allocator, so nothing is reserved)."""
    out: list[dict[str, Any]] = []
    for name, s, e in windows:
        before = 0
        after = 0
        peak: int | None = None
        for t, allocated in trace.points:
            if t < s:
                before = allocated
            if t <= e:
                after = allocated
            if s <= t <= e:
                peak = allocated if peak is None else max(peak, allocated)
        top = before if peak is None else max(peak, before)
        out.append(_counter(name, before, after, top, None, None))
    return out


def _counter(
    name: str,
    before: int,
    after: int,
    peak: int,
    reserved_before: int | None,
    reserved_after: int | None,
) -> dict[str, Any]:
    return {
        "phase": name,
        "allocated_before": before,
        "allocated_after": after,
        "allocated_delta": after - before,
        "peak_allocated": peak,
        "peak_delta": peak - before,
        "reserved_before": reserved_before,
        "reserved_after": reserved_after,
        "reserved_delta": (
            None
            if reserved_before is None or reserved_after is None
            else reserved_after - reserved_before
        ),
    }
