"""vramscope: where did my GPU memory go?

The engine from Python: every function returns plain JSON-shaped data equal to what the CLI
prints with ``--json`` (the same Rust code answers both), and bad input raises
:class:`InputError` with the CLI's one-line message.

>>> import vramscope
>>> report = vramscope.estimate("llama-3.1-8b", task="train", batch=2, seq=4096, gpu="h100-80gb")
>>> report["per_gpu"]["peak_allocated"]          # bytes
>>> with vramscope.record("step.pickle") as rec:  # a real step, phase by phase
...     with rec.phase("forward"): loss = model(**batch).loss
>>> rec.report()
>>> vramscope.trace(step, model=model, optimizer=opt)  # the same step on fake tensors, no GPU
"""

from ._api import (
    InputError,
    Report,
    analyze,
    compare,
    estimate,
    fit,
    gpus,
    inspect,
    models,
    picture,
    plan,
)
from ._max_batch import trace_max_batch
from ._native import __version__
from ._trace import trace
from .jobs import job_from
from .recorder import Recorder, RecordReport, record

__all__ = [
    "InputError",
    "RecordReport",
    "Recorder",
    "Report",
    "__version__",
    "analyze",
    "compare",
    "estimate",
    "fit",
    "gpus",
    "inspect",
    "job_from",
    "models",
    "picture",
    "plan",
    "record",
    "trace",
    "trace_max_batch",
]
