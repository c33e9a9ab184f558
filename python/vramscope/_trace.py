"""``vramscope.trace``: the user's own step run on fake tensors, every storage's life recorded.

How it works:

- **Fake tensors.** The step runs under ``torch._subclasses.fake_tensor.FakeTensorMode``: every
  op computes its outputs' shapes, dtypes and strides and allocates nothing. The model's
  parameters and buffers (real, or on the ``meta`` device as ``from_pretrained`` leaves them
  under accelerate's ``init_empty_weights``) are replaced by fake tensors of the same shape and
  dtype (tied weights stay tied) and the optimizer's ``param_groups`` follow them. The fake
  tensors are CPU tensors for either ``device``: on a machine without a GPU the autograd engine
  cannot run a backward over fake CUDA tensors (torch 2.15: "hasPrimaryContext expects a valid
  device index"), so CUDA's behaviour is emulated where the CPU's paths differ
  (``_cuda_like.py``: autocast's op lists, fused dropout, foreach optimizers, and the
  attention backend CUDA picks for the GPU named by ``gpu``, ``_sdpa.py``).
- **Allocations.** A ``TorchDispatchMode`` above the fake mode sees every ATen op autograd
  runs, as eager PyTorch runs it on the device. A storage (``Tensor.untyped_storage()``) seen
  for the first time as an op's output is an allocation of ``storage.nbytes()`` bytes, made by
  that op, in the innermost module whose ``forward`` is running (global module hooks), in the
  phase running: ``backward`` while the autograd engine runs a graph task
  (``torch._C._current_graph_task_id()``), ``optimizer`` inside an optimizer's ``step`` (the
  global optimizer step hooks), else ``forward``. A storage first seen as an op's *input* was
  made before tracing (an input batch made outside the fake mode): it is counted from the
  start.
- **Releases.** Fake storages have no free, but PyTorch keeps one Python object per live
  storage (``UntypedStorage``'s PyObject is preserved while its ``StorageImpl`` lives, as
  torch/distributed/_tools/mem_tracker.py relies on): a ``weakref`` to it calls back when the
  storage is released, which is when the caching allocator would get the block back.
- **Categories**, from hooks and autograd structure, in this order: the storages of the
  model's parameters and buffers, and of every optimizer's parameters → ``parameter``;
  a parameter's ``.grad`` (``register_post_accumulate_grad_hook``, and every parameter's
  ``.grad`` after each phase) → ``gradient``; the tensors in ``optimizer.state`` after
  ``step`` → ``optimizer_state`` (the ``step`` counters are left out: torch keeps them on the
  host for CUDA training unless fused or capturable); storages packed by
  ``torch.autograd.graph.saved_tensors_hooks`` in the forward, and any other storage made in
  the forward and still alive when backward starts (activation checkpointing holds its
  segments' inputs itself) → ``activation``; inputs from before the trace → ``input``; the
  rest → ``temporary``.

The last of ``steps`` steps is the record: what is alive when it begins is written as
allocated before it (phase ``setup``), then its events in order; for a CUDA trace the steps
before it go in ``"traced": {"warmup": [[action, addr, size, phase], ...]}``, which ``analyze``
replays first so the recorded step meets the cache they leave. The record is a snapshot
pickle in the layout ``torch.cuda.memory._dump_snapshot`` writes, each entry with the
profiler's ``category`` field, plus ``"traced": {"device": ..., "gpu": ...}``: ``vramscope
analyze`` reads it and, for a CUDA trace, replays its allocations and frees through its model
of PyTorch's caching allocator (``peak_reserved``; under the ``PYTORCH_ALLOC_CONF`` /
``PYTORCH_CUDA_ALLOC_CONF`` of the tracing process, written to the record as a real
snapshot's ``allocator_settings``), then again with the named GPU's
cuBLAS workspaces, and adds that GPU's CUDA context (the estimator's model), giving
``device_total``.

What a trace cannot see: an op without a fake (meta) kernel — a custom CUDA extension — stops
it with an ``InputError`` naming the op (register a shape function with
``torch.library.register_fake``); so do data-dependent shapes and values (``nonzero``,
``.item()``, ``if x.all():``), fake tensors having no values. transformers' own check for
packed sequences is answered as ordinary position ids answer it. Emulating CUDA on the CPU,
tensors a step keeps on the host on purpose count as device memory, except the optimizers'
``step`` counters.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable

from ._api import InputError, Report, analyze


@dataclass
class _Storage:
    """One storage's life."""

    sid: int
    size: int
    dtype: str
    op: str
    module: str
    phase: str
    step: int
    born: int  # event number
    died: int | None = None
    died_phase: str = ""
    pre: bool = False
    marks: set[str] = field(default_factory=set)


_PRIORITY = ("parameter", "gradient", "optimizer_state", "activation", "input")


def _category(s: _Storage) -> str:
    for c in _PRIORITY:
        if c in s.marks:
            return c
    return "temporary"


class _Book:
    """Every storage seen, by its Python object (kept alive only weakly)."""

    def __init__(self) -> None:
        self.by_obj: dict[int, tuple[weakref.ref[Any], _Storage]] = {}
        self.all: list[_Storage] = []
        self.clock = 0
        self.step = 0
        self.phase = "forward"
        self.module: list[str] = []
        self.in_optimizer = False
        self.optimizer_ran = False
        self.backward_ran = False
        self.backward_starts: dict[int, int] = {}

    def now(self) -> str:
        """The phase running: ``backward`` inside a graph task of the autograd engine, then
        ``optimizer`` from an optimizer's ``step`` on, ``backward`` between the backward and
        the optimizer, else ``forward``."""
        import torch

        if torch._C._current_graph_task_id() != -1:
            if not self.backward_ran:
                self.backward_ran = True
                self.backward_starts.setdefault(self.step, self.clock)
            self.phase = "backward"
        elif self.in_optimizer or self.optimizer_ran:
            self.phase = "optimizer"
        elif self.backward_ran:
            self.phase = "backward"
        else:
            self.phase = "forward"
        return self.phase

    def new_step(self, i: int) -> None:
        self.step = i
        self.optimizer_ran = self.backward_ran = False
        self.phase = "forward"

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def find(self, st: Any) -> _Storage | None:
        hit = self.by_obj.get(id(st))
        if hit is not None and hit[0]() is st:
            return hit[1]
        return None

    def see(self, st: Any, dtype: Any, op: str, pre: bool = False) -> _Storage:
        known = self.find(st)
        if known is not None:
            if known.size != st.nbytes():  # resized in place: a new block
                self._release(known)
                self.by_obj.pop(id(st), None)
            else:
                return known
        s = _Storage(
            sid=len(self.all),
            size=int(st.nbytes()),
            dtype=str(dtype).replace("torch.", ""),
            op=op,
            module=self.module[-1] if self.module else "",
            phase="setup" if pre else self.now(),
            step=self.step,
            born=0 if pre else self.tick(),
            pre=pre,
        )
        if pre:
            s.marks.add("input")
        self.all.append(s)
        key = id(st)
        self.by_obj[key] = (weakref.ref(st, lambda _r, s=s, k=key: self._gone(s, k)), s)
        return s

    def _gone(self, s: _Storage, key: int) -> None:
        hit = self.by_obj.get(key)
        if hit is not None and hit[1] is s:
            del self.by_obj[key]
        self._release(s)

    def _release(self, s: _Storage) -> None:
        if s.died is None:
            s.died = self.tick()
            s.died_phase = self.now()

    def mark(self, t: Any, mark: str) -> None:
        import torch

        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            s = self.find(st) or self.see(st, t.dtype, "", pre=True)
            s.marks.add(mark)


def _tensors(x: Any) -> Iterator[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _dispatch_mode(book: _Book) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            for t in _tensors((args, kwargs)):
                st = t.untyped_storage()
                if book.find(st) is None and st.nbytes() > 0:
                    book.see(st, t.dtype, "", pre=True)
            out = func(*args, **kwargs)
            name = str(func.overloadpacket.__name__)
            for t in _tensors(out):
                st = t.untyped_storage()
                if st.nbytes() > 0:
                    book.see(st, t.dtype, name)
            return out

    return Record()


class _Hooks:
    """Module, optimizer and autograd hooks that tell the book the module, phase and what
    each storage is."""

    def __init__(self, book: _Book, names: dict[int, str]) -> None:
        self.book = book
        self.names = names
        self.optimizers: dict[int, Any] = {}
        self.params: dict[int, Any] = {}
        self.handles: list[Any] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        import torch
        from torch.nn.modules import module as module_mod
        from torch.optim import optimizer as optimizer_mod

        book = self.book

        def pre(mod: Any, _args: Any) -> None:
            if not book.module and torch._C._current_graph_task_id() == -1:
                # A new forward (gradient accumulation runs several per step).
                book.backward_ran = book.optimizer_ran = False
            book.module.append(self.names.get(id(mod), type(mod).__name__))

        def post(_mod: Any, _args: Any, _out: Any) -> None:
            if book.module:
                book.module.pop()

        def opt_pre(opt: Any, _args: Any, _kwargs: Any) -> None:
            self.note_optimizer(opt)
            self.sweep_gradients()
            book.in_optimizer = True

        def opt_post(opt: Any, _args: Any, _kwargs: Any) -> None:
            book.in_optimizer = False
            book.optimizer_ran = True
            self.note_states(opt)

        def pack(t: Any) -> Any:
            if book.now() == "forward":
                book.mark(t, "activation")
            return t

        self.handles += [
            module_mod.register_module_forward_pre_hook(pre),
            module_mod.register_module_forward_hook(post, always_call=True),
            optimizer_mod.register_optimizer_step_pre_hook(opt_pre),
            optimizer_mod.register_optimizer_step_post_hook(opt_post),
        ]
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                yield
        finally:
            for h in self.handles:
                h.remove()
            self.handles.clear()

    def note_params(self, params: Any) -> None:
        for p in params:
            if id(p) not in self.params:
                self.params[id(p)] = p
                self.book.mark(p, "parameter")
                if p.requires_grad:
                    self.handles.append(
                        p.register_post_accumulate_grad_hook(
                            lambda q: self.book.mark(q.grad, "gradient")
                        )
                    )

    def note_optimizer(self, opt: Any) -> None:
        if id(opt) not in self.optimizers:
            self.optimizers[id(opt)] = opt
            self.note_params(p for g in opt.param_groups for p in g["params"])

    def note_states(self, opt: Any) -> None:
        for state in opt.state.values():
            for key, t in state.items():
                if key == "step":
                    self.book.mark(t, "host")
                else:
                    for x in _tensors(t):
                        self.book.mark(x, "optimizer_state")

    def sweep_gradients(self) -> None:
        for p in self.params.values():
            if p.grad is not None:
                self.book.mark(p.grad, "gradient")

    def step_done(self) -> None:
        self.sweep_gradients()
        for opt in self.optimizers.values():
            self.note_states(opt)


@contextlib.contextmanager
def _fake_counts_as_tensor() -> Iterator[None]:
    """``torch.optim`` takes its foreach path by default only for parameters whose type is in
    ``_foreach_supported_types`` (``Tensor``, ``Parameter``; torch/optim/optimizer.py
    ``_default_to_fused_or_foreach``): a fake parameter's type is ``FakeTensor``, which must
    not change the path taken."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.optim import optimizer as optimizer_mod

    old = optimizer_mod._foreach_supported_types
    optimizer_mod._foreach_supported_types = [*old, FakeTensor]
    try:
        yield
    finally:
        optimizer_mod._foreach_supported_types = old


@contextlib.contextmanager
def _unpacked_sequences() -> Iterator[None]:
    """transformers asks the position ids whether sequences are packed
    (masking_utils.py ``find_packed_sequence_indices``: ``(mask[:, -1] == 0).all()``); of a
    fake tensor it cannot ask (``is_tracing``) and assumes they are, building an explicit
    attention mask that SDPA then saves per layer — which the real step, with ordinary
    positions, does not. The trace answers as ordinary positions do: not packed."""
    import sys

    masking = sys.modules.get("transformers.masking_utils")
    if masking is None or not hasattr(masking, "find_packed_sequence_indices"):
        yield
        return
    old = masking.find_packed_sequence_indices
    masking.find_packed_sequence_indices = lambda *_a, **_k: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = old


def _fake_like(t: Any, device: Any) -> Any:
    import torch

    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)


def _refuse_distributed(model: Any) -> None:
    """DDP and FSDP2 cannot be traced in torch 2.15 (found by trying, under the ``fake``
    process group of torch/testing/_internal/distributed/fake_pg.py):

    - DDP built on real parameters hooks them in its C++ ``Reducer``, so the fake ones the
      trace swaps in would run a plain step without its gradient buckets; DDP built on fake
      parameters fails in ``DistributedDataParallel.__init__`` at
      ``dist._verify_params_across_processes`` (torch/distributed/utils.py), which reads their
      data ("its data is not allocated yet").
    - FSDP2 (``fully_shard``) keeps DTensor parameters: swapping them fails at its lazy init
      (``FSDPParam.reset_sharded_param``: "'FakeTensor' object has no attribute
      '_local_tensor'"); calling ``fully_shard`` under the fake mode fails in
      ``init_device_mesh`` (``.tolist()`` of a fake tensor: ``aten._local_scalar_dense``)."""
    import torch

    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise InputError(
            "trace: a DistributedDataParallel model cannot be traced (its reducer hooks the "
            "real parameters; on fake ones DDP's init reads their data): trace the bare module"
        )
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return
    if any(isinstance(p, DTensor) for p in model.parameters()):
        raise InputError(
            "trace: a model with DTensor parameters (FSDP2's fully_shard, tensor parallel) "
            "cannot be traced: FSDP2's lazy init rejects fake local tensors"
        )


def _to_fake(model: Any, optimizer: Any, fake_mode: Any, device: Any) -> None:
    """Parameters and buffers replaced in place by fake tensors of the same shape and dtype
    (one fake per original, so tied weights stay tied); the optimizer's groups follow."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if model is not None:
        _refuse_distributed(model)

    swapped: dict[int, Any] = {}
    with fake_mode:
        for mod in model.modules() if model is not None else ():
            for name, p in list(mod._parameters.items()):
                if p is None or isinstance(p, FakeTensor):
                    continue
                if id(p) not in swapped:
                    swapped[id(p)] = torch.nn.Parameter(
                        _fake_like(p, device), requires_grad=p.requires_grad
                    )
                mod._parameters[name] = swapped[id(p)]
            for name, b in list(mod._buffers.items()):
                if b is None or isinstance(b, FakeTensor):
                    continue
                if id(b) not in swapped:
                    swapped[id(b)] = _fake_like(b, device)
                mod._buffers[name] = swapped[id(b)]
    if optimizer is not None:
        for g in optimizer.param_groups:
            g["params"] = [swapped.get(id(p), p) for p in g["params"]]
        if optimizer.state:
            raise InputError(
                "trace: the optimizer already holds state; pass one that has not stepped yet"
            )


def _existing_fake_mode(model: Any) -> Any:
    """The fake mode a model was built under (``with FakeTensorMode(): model = ...``), if any:
    its tensors cannot mix with another mode's."""
    from torch._subclasses.fake_tensor import FakeTensor

    for t in list(model.parameters()) + list(model.buffers()) if model is not None else ():
        if isinstance(t, FakeTensor):
            t.fake_mode.allow_non_fake_inputs = True
            return t.fake_mode
    return None


def _device(device: Any) -> tuple[str, str]:
    """(the device the fake tensors are on, the device whose behaviour is traced)."""
    text = str(device)
    kind = text.split(":")[0]
    if kind not in ("cuda", "cpu"):
        raise InputError(f'trace: device must be "cuda" or "cpu", got {text!r}')
    return "cpu", kind


def _op_name(e: BaseException) -> str:
    func = e.args[0] if e.args else None
    return str(getattr(func, "_name", None) or func)


def _untraceable(e: BaseException) -> str | None:
    """The one-line reason a fake-tensor error gives, naming the op: a kernel it cannot run
    without data, or a step that reads tensor values."""
    from torch._subclasses import fake_tensor

    def kinds(*names: str) -> tuple[type, ...]:
        return tuple(getattr(fake_tensor, n) for n in names if hasattr(fake_tensor, n))

    if isinstance(e, kinds("UnsupportedOperatorException")):
        op = _op_name(e)
        return (
            f"the op {op} has no fake (meta) kernel, so its output shapes are unknown "
            f"without running it; register one with @torch.library.register_fake({op!r})"
        )
    if isinstance(e, kinds("DynamicOutputShapeException", "DataDependentOutputException")):
        return (
            f"the op {_op_name(e)} needs the tensors' values (a data-dependent shape or "
            f"value), which fake tensors do not have"
        )
    return None


def _run_steps(step: Callable[[], Any], steps: int, book: _Book, hooks: _Hooks) -> int:
    """Runs the steps; returns the clock when the last one began."""
    last_start = 0
    for i in range(steps):
        book.new_step(i)
        if i == steps - 1:
            last_start = book.tick()
        try:
            step()
        except InputError:
            raise
        except Exception as e:
            why = _untraceable(e)
            if why is not None:
                raise InputError(f"trace: {why}") from e
            raise
        hooks.step_done()
    return last_start


def _mark_forward_survivors(book: _Book, backward_starts: dict[int, int]) -> None:
    """Made in a step's forward and alive when its backward began: held for backward."""
    for s in book.all:
        start = backward_starts.get(s.step)
        if (
            start is not None
            and s.phase == "forward"
            and not s.pre
            and s.born < start
            and (s.died is None or s.died > start)
        ):
            s.marks.add("activation")


def _entries(book: _Book, last_start: int) -> list[dict[str, Any]]:
    """The device trace of the last step: storages alive at its start, then its events."""
    frames_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
    events: list[tuple[int, int, str, _Storage]] = []
    for s in book.all:
        if "host" in s.marks or s.size <= 0:
            continue
        if s.born >= last_start:
            events.append((s.born, 0, "alloc", s))
        elif s.died is None or s.died > last_start:
            events.append((last_start - 1, 0, "setup", s))
        else:
            continue
        if s.died is not None and s.died > last_start:
            events.append((s.died, 1, "free", s))
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[dict[str, Any]] = []
    for clock, _order, kind, s in events:
        frames = frames_of.setdefault(
            (s.op, s.module),
            [{"filename": s.module, "line": 0, "name": f"aten::{s.op}" if s.op else ""}],
        )
        base = {"addr": 512 * (s.sid + 1), "size": s.size, "stream": 0, "frames": frames}
        if kind == "free":
            meta = json.dumps({"phase": s.died_phase}, separators=(",", ":"))
            for action in ("free_requested", "free_completed"):
                out.append({**base, "action": action, "user_metadata": meta, "time_us": clock})
        else:
            phase = "setup" if kind == "setup" else s.phase
            meta = json.dumps({"phase": phase}, separators=(",", ":"))
            out.append(
                {
                    **base,
                    "action": "alloc",
                    "category": _category(s),
                    "user_metadata": meta,
                    "time_us": clock,
                }
            )
    return out


def _warmup(book: _Book, last_start: int) -> list[list[Any]]:
    """The steps before the last, as the caching allocator saw them: ``[action, addr, size,
    phase]`` for each allocation and free before ``last_start``, what was alive before the
    first step first. ``analyze`` replays them before the record, so the recorded step starts
    from the cache they leave (segments a real run's earlier steps leave reserved)."""
    events: list[tuple[int, int, str, str, _Storage]] = []
    for s in book.all:
        if "host" in s.marks or s.size <= 0 or s.born >= last_start:
            continue
        events.append((s.born, 0, "alloc", "setup" if s.pre else s.phase, s))
        if s.died is not None and s.died <= last_start:
            events.append((s.died, 1, "free", s.died_phase, s))
    events.sort(key=lambda e: (e[0], e[1]))
    return [[kind, 512 * (s.sid + 1), s.size, phase] for _, _, kind, phase, s in events]


def record_bytes(
    step: Callable[[], Any],
    model: Any = None,
    optimizer: Any = None,
    device: Any = "cuda",
    steps: int = 2,
    gpu: Any = None,
) -> bytes:
    """The traced record (a snapshot pickle ``analyze`` reads) of ``step``'s last run."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ._cuda_like import cuda_like
    from ._sdpa import DEFAULT_GPU, resolve_gpu

    if not callable(step):
        raise InputError("trace: step must be a callable running one step")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"trace: steps must be a positive integer, got {steps!r}")
    fake_device, behaviour = _device(device)
    sm, gpu_id = (0, 0), None
    if behaviour == "cuda":
        sm, gpu_id = resolve_gpu(gpu if gpu is not None else DEFAULT_GPU)
    # No fallback kernels: an op without a fake (meta) kernel would otherwise run for real on
    # zero-filled inputs, allocating host memory (and failing for CUDA-only extensions).
    fake_mode = _existing_fake_mode(model) or FakeTensorMode(
        allow_non_fake_inputs=True, allow_fallback_kernels=False
    )
    _to_fake(model, optimizer, fake_mode, torch.device(fake_device))
    names = {id(m): n for n, m in model.named_modules()} if model is not None else {}
    book = _Book()
    hooks = _Hooks(book, names)
    mode = _dispatch_mode(book)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_fake_counts_as_tensor())
        stack.enter_context(_unpacked_sequences())
        if behaviour == "cuda":
            stack.enter_context(cuda_like(sm, lambda t: book.mark(t, "host")))
        stack.enter_context(fake_mode)
        stack.enter_context(hooks.installed())
        stack.enter_context(mode)
        if model is not None:
            hooks.note_params(list(model.parameters()))
            for b in model.buffers():
                book.mark(b, "parameter")
        if optimizer is not None:
            hooks.note_optimizer(optimizer)
        last_start = _run_steps(step, steps, book, hooks)
    _mark_forward_survivors(book, book.backward_starts)
    traced: dict[str, Any] = {"device": behaviour, **({"gpu": gpu_id} if gpu_id else {})}
    warmup = _warmup(book, last_start) if behaviour == "cuda" else []
    if warmup:
        traced["warmup"] = warmup
    snapshot: dict[str, Any] = {
        "segments": [],
        "device_traces": [_entries(book, last_start)],
        "traced": traced,
    }
    conf = _alloc_conf()
    if behaviour == "cuda" and conf:
        snapshot["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": conf}
    return pickle.dumps(snapshot, protocol=2)


def _alloc_conf() -> str | None:
    """The caching allocator's settings this process would run with: ``PYTORCH_ALLOC_CONF``,
    else ``PYTORCH_CUDA_ALLOC_CONF`` (c10/core/AllocatorConfig.h: the first is primary, the
    second kept with lower priority). ``analyze`` replays a CUDA trace under them."""
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        value = os.environ.get(name)
        if value:
            return value
    return None


def trace(
    step: Callable[[], Any],
    model: Any = None,
    optimizer: Any = None,
    device: Any = "cuda",
    steps: int = 2,
    gpu: Any = None,
) -> Report:
    """Runs ``step()`` (one training or inference step of your own code) ``steps`` times on
    fake tensors — no GPU, no weights — and returns ``analyze``'s answer for the last one:
    ``per_gpu.components`` by category, ``peak_allocated``, ``peak_phase``, ``timeline``.

    ``model`` (a ``torch.nn.Module``) has its parameters and buffers replaced by fake ones of
    the same shapes and dtypes (it may be on the ``meta`` device); ``optimizer`` (not yet
    stepped) follows them. Build the step's inputs inside ``step`` (they are fake there too).
    ``device="cuda"`` allocates as CUDA does (autocast's lists, fused dropout, foreach
    optimizers, the caching allocator's 512-byte blocks, and the attention backend CUDA's
    ``scaled_dot_product_attention`` picks — flash, memory-efficient or math — for ``gpu``: a
    catalog id or alias (``vramscope gpus``) or a compute capability ``(major, minor)``;
    default ``"h100-80gb"``, sm90); ``"cpu"`` as the CPU does.

    >>> model = MyModel(); opt = torch.optim.AdamW(model.parameters())
    >>> def step():
    ...     loss = model(torch.randn(8, 512)).sum(); loss.backward(); opt.step(); opt.zero_grad()
    >>> vramscope.trace(step, model=model, optimizer=opt)["per_gpu"]["peak_allocated"]
    """
    return analyze(record_bytes(step, model, optimizer, device, steps, gpu))
