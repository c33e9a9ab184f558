"""``vramscope trace SCRIPT.py [--device cuda|cpu] [--gpu ID] [--steps N] [analyze's flags]``
and ``vramscope trace SCRIPT.py --max-batch [--gpu ID] [--steps N] [--json]``: the Python
console script's own command (it needs Python and torch, so the Rust binary does not have it).

SCRIPT.py is run as a module (``__name__`` is ``"__vramscope_trace__"``, so an
``if __name__ == "__main__":`` training loop does not start) and must define ``step()``: one
step of its training or inference. Its top-level ``model`` and ``optimizer``, when defined,
are handed to :func:`vramscope.trace` (build the model on the ``meta`` device, or with
``accelerate.init_empty_weights()``, to need no memory for weights). The traced record is then
shown by ``vramscope analyze`` (the same flags: ``--json``, ``--svg FILE``, ...). ``--gpu``
names the GPU whose attention backends and CUDA context the trace takes (default
``h100-80gb``).

With ``--max-batch`` the script defines ``make(batch)`` instead, returning ``step`` or
``(step, model, optimizer)`` built for that batch: :func:`vramscope.trace_max_batch` finds the
largest batch that fits ``--gpu``, and prints it (``--json``: its whole answer but the report).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _native
from ._api import InputError
from ._trace import record_bytes
from ._units import human_bytes as human

USAGE = (
    "usage: vramscope trace SCRIPT.py [--device cuda|cpu] [--gpu ID] [--steps N] "
    "[--max-batch] [analyze's flags]"
)


@dataclass
class _Options:
    script: str = ""
    device: str = "cuda"
    gpu: str | None = None
    steps: int = 2
    max_batch: bool = False
    rest: list[str] = field(default_factory=list)


def _options(argv: Sequence[str]) -> _Options:
    o = _Options()
    it = iter(argv)
    for a in it:
        if a == "--max-batch":
            o.max_batch = True
        elif a in ("--device", "--steps", "--gpu"):
            value = next(it, None)
            if value is None:
                raise InputError(f"trace: {a} needs a value")
            if a == "--device":
                o.device = value
            elif a == "--gpu":
                o.gpu = value
            else:
                try:
                    o.steps = int(value)
                except ValueError:
                    raise InputError(f"trace: --steps must be an integer, got {value!r}") from None
        elif not o.script and not a.startswith("-"):
            o.script = a
        else:
            o.rest.append(a)
    if not o.script:
        raise InputError(USAGE)
    return o


def _script(path: str, name: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise InputError(f"trace: {path}: no such file")
    ns = runpy.run_path(path, run_name="__vramscope_trace__")
    if not callable(ns.get(name)):
        what = "make(batch)" if name == "make" else "step()"
        raise InputError(f"trace: {path} defines no {what} function to trace")
    return ns


def _max_batch(o: _Options) -> int:
    from ._max_batch import trace_max_batch

    if o.device != "cuda":
        raise InputError("trace: --max-batch traces CUDA's behaviour (--device cuda)")
    unknown = [a for a in o.rest if a != "--json"]
    if unknown:
        raise InputError(f"trace: --max-batch takes --gpu, --steps and --json, not {unknown[0]}")
    ns = _script(o.script, "make")
    answer = trace_max_batch(ns["make"], **({"gpu": o.gpu} if o.gpu else {}), steps=o.steps)
    answer.pop("report")
    if "--json" in o.rest:
        print(json.dumps(answer, indent=2))
        return 0
    best = answer["max_batch"]
    print(
        f"{answer['gpu']}: {human(answer['usable'])} usable; largest batch that fits: "
        f"{best if best is not None else 'none (batch 1 does not fit)'}"
    )
    for t in answer["traces"]:
        mark = "fits" if t["fits"] else "does not fit"
        print(f"  batch {t['batch']:>6}: {human(t['device_total']):>12} on the device, {mark}")
    return 0


def run(argv: Sequence[str]) -> int:
    """Traces the script's ``step`` and hands the record to ``analyze`` (or searches the
    largest batch with ``--max-batch``); the exit code."""
    try:
        o = _options(argv)
        if o.max_batch:
            return _max_batch(o)
        ns = _script(o.script, "step")
        data = record_bytes(
            ns["step"], ns.get("model"), ns.get("optimizer"), o.device, o.steps, o.gpu
        )
    except InputError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return e.exit_code
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, os.path.basename(o.script) + ".trace.pickle")
        with open(path, "wb") as f:
            f.write(data)
        sys.stdout.flush()
        code: int = _native.cli_main(["vramscope", "analyze", path, *o.rest])
        return code
