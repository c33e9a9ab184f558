"""What both trainer callbacks share: one recorded step whose phases are switched from the
framework's hooks, its files, and the figures logged to the trainer's loggers."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from ..recorder import DEFAULT_MAX_ENTRIES, Recorder, RecordReport


class StepChoice:
    """The settings both callbacks take: which step to record (1-based), the optional ``job``
    estimated beside it, and the record's entry limit (0: the recorder's default)."""

    def __init__(self, step: int = 2, job: Any = None, max_entries: int = 0) -> None:
        self.step = int(step)
        self.job = job
        self.max_entries = int(max_entries)
        self.report: dict[str, Any] | None = None
        self._rec: RecordedStep | None = None


class RecordedStep:
    """A recorder held open across framework hooks: ``switch(name)`` ends the current phase
    and begins ``name``; ``close()`` ends the record and writes the report beside it."""

    def __init__(self, directory: str, step: int, job: Any = None, max_entries: int = 0) -> None:
        os.makedirs(directory, exist_ok=True)
        stem = os.path.join(directory, f"vramscope-step{step}")
        self.record_path = stem + ".pickle"
        self.report_path = stem + ".json"
        self.recorder = Recorder(
            self.record_path, job, max_entries=max_entries or DEFAULT_MAX_ENTRIES
        )
        self.recorder.__enter__()
        self._phase: contextlib.ExitStack | None = None
        self.current = ""
        self.hooks: list[Any] = []

    def switch(self, name: str) -> None:
        if name == self.current:
            return
        self._end_phase()
        stack = contextlib.ExitStack()
        stack.enter_context(self.recorder.phase(name))
        self._phase = stack
        self.current = name

    def _end_phase(self) -> None:
        if self._phase is not None:
            self._phase.close()
            self._phase = None
            self.current = ""

    def close(self) -> RecordReport:
        for h in self.hooks:
            h.remove()
        self.hooks = []
        self._end_phase()
        self.recorder.__exit__(None, None, None)
        report = self.recorder.report()
        with open(self.report_path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        return report

    def watch_forward(self, module: Any) -> None:
        """Phases from the module's own calls: ``forward`` when it is called, ``backward``
        when it returns (the loss is then computed and backpropagated)."""
        self.hooks.append(module.register_forward_pre_hook(lambda *_: self.switch("forward")))
        self.hooks.append(module.register_forward_hook(lambda *_: self.switch("backward")))


def metrics(report: RecordReport, prefix: str = "vramscope/") -> dict[str, float]:
    """Bytes at the measured peak per category, and the peak itself, for the loggers."""
    per_gpu = report["measured"].get("per_gpu") or {}
    out: dict[str, float] = {}
    for name, v in (per_gpu.get("components") or {}).items():
        if isinstance(v, int) and v:
            out[prefix + name] = float(v)
    for key in ("peak_allocated", "peak_reserved"):
        v = per_gpu.get(key)
        if isinstance(v, int):
            out[prefix + key] = float(v)
    return out
