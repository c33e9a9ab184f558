"""Storage keys the profiler gives to two tensors: one from before recording began, and one made
during recording at the same address.

Why the profiler conflates them (torch 2.15):

- torch/csrc/profiler/data_flow.cpp ``calculateUniqueTensorIDs`` numbers a storage by its data
  address ("Assign IDs to solve ABA for Storage") and starts a new number at an address only
  after it has seen a free there;
- c10's CPU allocator reports no free for a block allocated before profiling started
  (c10/core/CPUAllocator.cpp ``ProfiledCPUMemoryReporter::Delete``: "Memory block of unknown
  size was allocated before the profiling started, profiler results will not include the
  deallocation event").

So when such a tensor is dropped during recording (the previous step's gradient, set to
``None`` by ``zero_grad``) and glibc hands its address to a new tensor, both get one allocation
id, hence one ``TensorKey``. torch/profiler/_memory_profiler.py then writes no PREEXISTING event
for the old tensor (``MemoryProfile.timeline``: its key has an allocation), and the new one
takes the old one's category wherever that was set by tensor id (``set_by_id``: GRADIENT and
PARAMETER from the Python tracer, OPTIMIZER_STATE): an AdamW step temporary at the address of a
dropped gradient was counted as a gradient for as long as it lived.

A key seen (an op's input, or a parameter, gradient or optimizer state the Python tracer
reported) before its allocation is split here: what happened to it before the allocation is the
earlier tensor's, under its own key (``Earlier``, present when recording began, with the size
and the role it was seen with then); from the allocation on it is the new tensor's, which keeps
a by-id role only if it was itself seen in that role.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

#: The categories ``_memory_profiler`` sets by tensor id, from what the Python tracer reported.
ROLES = ("PARAMETER", "GRADIENT", "OPTIMIZER_STATE")


@dataclasses.dataclass(frozen=True)
class Earlier:
    """The tensor from before recording that held ``key``'s address until a new tensor took it
    (a distinct key: equal only to another ``Earlier`` of the same key)."""

    key: Any

    @property
    def storage(self) -> Any:
        return self.key.storage

    @property
    def id(self) -> int:
        return int(self.key.id)

    @property
    def device(self) -> Any:
        return self.key.device


@dataclasses.dataclass
class Split:
    """Per conflated key: when the new tensor was allocated, the earlier tensor's bytes and
    role, the roles the new tensor was seen in, and how many version bumps the earlier one
    had (the profiler numbers the new tensor's versions on from them)."""

    created: dict[Any, int] = dataclasses.field(default_factory=dict)
    earlier: dict[Any, tuple[int, str | None]] = dataclasses.field(default_factory=dict)
    later_roles: dict[Any, set[str]] = dataclasses.field(default_factory=dict)
    bumps: dict[Any, int] = dataclasses.field(default_factory=dict)

    def category(self, mp: Any, key: Any, version: int) -> str | None:
        """The profiler's category name for ``key`` at ``version``, told apart for a split key:
        an ``Earlier`` has the role it was seen with; the new tensor loses a by-id role it was
        not itself seen in (keeping what the profiler set for its own key or version)."""
        if isinstance(key, Earlier):
            return self.earlier[key.key][1]
        version += self.bumps.get(key, 0)
        c = mp._categories.get(key, version)
        name = c.name if c is not None else None
        if key in self.created and name in ROLES and name not in self.later_roles[key]:
            element = mp._categories._values[key.id]
            own = element.by_key.get(key) or element.by_version.get((key, version))
            name = own.name if own is not None else None
        return name


def _bytes(t: Any) -> int:
    """A tensor's storage bytes as torch/profiler/_memory_profiler.py ``SizeMap`` reckons them
    from its metadata: the largest size × stride, times the element size."""
    n = max(i * s for i, s in zip(t.sizes or [1], t.strides or [1]))
    return int(n) * int(t.dtype.itemsize)


def _sightings(mp: Any) -> Iterator[tuple[int, Any, Any, str | None]]:
    """Every (time, key, metadata, role) the record shows a tensor in: each op's inputs (no
    role), the gradient an ``AccumulateGrad`` takes (``extract_gradients``; no metadata: its
    size is its allocation's), and what the Python tracer reported at each module's and optimizer's
    first call (later calls repeat the first one's cached values, as data_flow.cpp notes)."""
    from torch._C._profiler import _EventType, _TensorMetadata
    from torch.profiler._memory_profiler import TensorKey, extract_gradients

    first_calls: set[int] = set()
    for node in mp._op_tree.sorted_nodes:
        t = node.start_time_ns
        if node.tag == _EventType.TorchOp:
            for i in node.extra_fields.inputs:
                for m in i if isinstance(i, list) else [i]:
                    if isinstance(m, _TensorMetadata):
                        yield t, TensorKey.from_tensor(m), m, None
            for _owner, key in extract_gradients(node):
                yield t, key, None, "GRADIENT"
        elif node.tag == _EventType.PyCall:
            for m, role in _tracer_roles(node.extra_fields, first_calls):
                yield t, TensorKey.from_tensor(m), m, role


def _tracer_roles(fields: Any, first_calls: set[int]) -> Iterator[tuple[Any, str]]:
    """The parameters, gradients and optimizer states a module's or optimizer's first call
    reported (``_extract_parameters_and_gradients``, ``_set_optimizer_state``)."""
    entries: list[tuple[Any, Any, Any]] = []  # (parameter, gradient, [(name, state)])
    module, optimizer = fields.module, fields.optimizer
    if module is not None and module.self_ptr not in first_calls:
        first_calls.add(module.self_ptr)
        entries += [(p, grad, ()) for _name, p, grad in module.parameters]
    if optimizer is not None and optimizer.self_ptr not in first_calls:
        first_calls.add(optimizer.self_ptr)
        entries += list(optimizer.parameters)
    for p, grad, states in entries:
        yield p, "PARAMETER"
        if grad is not None:
            yield grad, "GRADIENT"
        for _name, state in states:
            yield state, "OPTIMIZER_STATE"


def split_reused(mp: Any, events: Sequence[Any]) -> tuple[list[Any], Split]:
    """``events`` (the timeline) with each conflated key split (see the module doc): a
    PREEXISTING event for the earlier tensor, its events before the allocation under its
    ``Earlier`` key, and the new tensor's versions numbered from 0."""
    from torch.profiler._memory_profiler import Action

    created: dict[Any, int] = {}
    for t, action, (key, _version), _size in events:
        if action == Action.CREATE:
            created.setdefault(key, t)
    split = Split()
    for t, key, meta, role in _sightings(mp):
        if key not in created:
            continue
        if t < created[key]:
            known, seen = split.earlier.get(key, (0, None))
            size = _bytes(meta) if meta is not None else 0
            split.earlier[key] = (max(known, size), seen or role)
        elif role is not None:
            split.later_roles.setdefault(key, set()).add(role)
    split.created = {k: created[k] for k in split.earlier}
    split.later_roles = {k: split.later_roles.get(k, set()) for k in split.earlier}
    out: list[Any] = [
        (-1, Action.PREEXISTING, (Earlier(k), 0), size) for k, (size, _) in split.earlier.items()
    ]
    for ev in events:
        t, action, (key, version), size = ev
        if key in split.created and t < split.created[key]:
            ev = (t, action, (Earlier(key), version), split.earlier[key][0])
            if action == Action.INCREMENT_VERSION:
                split.bumps[key] = split.bumps.get(key, 0) + 1
        elif key in split.bumps and action != Action.CREATE:
            ev = (t, action, (key, version - split.bumps[key]), size)
        out.append(ev)
    return out, split
