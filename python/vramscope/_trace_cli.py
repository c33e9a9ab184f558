"""``vramscope trace SCRIPT.py [--device cuda|cpu] [--steps N] [analyze's flags]``: the
Python console script's own command (it needs Python and torch, so the Rust binary does not
have it).

SCRIPT.py is run as a module (``__name__`` is ``"__vramscope_trace__"``, so an
``if __name__ == "__main__":`` training loop does not start) and must define ``step()``: one
step of its training or inference. Its top-level ``model`` and ``optimizer``, when defined,
are handed to :func:`vramscope.trace` (build the model on the ``meta`` device, or with
``accelerate.init_empty_weights()``, to need no memory for weights). The traced record is then
shown by ``vramscope analyze`` (the same flags: ``--json``, ``--svg FILE``, ...).
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from collections.abc import Sequence

from . import _native
from ._api import InputError
from ._trace import record_bytes

USAGE = "usage: vramscope trace SCRIPT.py [--device cuda|cpu] [--steps N] [analyze's flags]"


def _options(argv: Sequence[str]) -> tuple[str, str, int, list[str]]:
    """(script, device, steps, the flags left for analyze)."""
    script = ""
    device = "cuda"
    steps = 2
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--device", "--steps"):
            value = next(it, None)
            if value is None:
                raise InputError(f"trace: {a} needs a value")
            if a == "--device":
                device = value
            else:
                try:
                    steps = int(value)
                except ValueError:
                    raise InputError(f"trace: --steps must be an integer, got {value!r}") from None
        elif not script and not a.startswith("-"):
            script = a
        else:
            rest.append(a)
    if not script:
        raise InputError(USAGE)
    return script, device, steps, rest


def run(argv: Sequence[str]) -> int:
    """Traces the script's ``step`` and hands the record to ``analyze``; the exit code."""
    try:
        script, device, steps, rest = _options(argv)
        if not os.path.isfile(script):
            raise InputError(f"trace: {script}: no such file")
        ns = runpy.run_path(script, run_name="__vramscope_trace__")
        step = ns.get("step")
        if not callable(step):
            raise InputError(f"trace: {script} defines no step() function to trace")
        data = record_bytes(step, ns.get("model"), ns.get("optimizer"), device, steps)
    except InputError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return e.exit_code
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, os.path.basename(script) + ".trace.pickle")
        with open(path, "wb") as f:
            f.write(data)
        sys.stdout.flush()
        code: int = _native.cli_main(["vramscope", "analyze", path, *rest])
        return code
