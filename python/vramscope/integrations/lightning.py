"""``MemoryCallback`` for Lightning: records one training batch (forward, backward and
optimizer phases) with :func:`vramscope.record`, writes the record
(``vramscope-stepN.pickle``) and its report (``vramscope-stepN.json``) into the trainer's
``log_dir`` (else ``default_root_dir``), and logs the peak per category (bytes,
``vramscope/<category>``) to the trainer's loggers.

>>> from vramscope.integrations.lightning import MemoryCallback
>>> trainer = lightning.Trainer(max_steps=10, callbacks=[MemoryCallback(step=2)])
"""

from __future__ import annotations

from typing import Any

from ._step import RecordedStep, StepChoice, metrics

try:  # the framework is imported only when this module is
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - depends on the environment
    try:
        from pytorch_lightning.callbacks import Callback  # type: ignore[assignment,unused-ignore]
    except ImportError as e:
        raise ImportError(
            "vramscope.integrations.lightning needs lightning (pip install lightning)"
        ) from e


class MemoryCallback(StepChoice, Callback):  # type: ignore[misc,unused-ignore]
    """Records training batch ``step`` (1-based). Phases: ``forward`` from the batch's start,
    ``backward`` from ``on_before_backward``, ``optimizer`` from ``on_after_backward`` to the
    batch's end (Lightning runs forward and backward inside ``optimizer.step``'s closure).
    ``job`` (optional) adds the estimate beside the measurement in the report."""

    def __init__(self, step: int = 2, job: Any = None, max_entries: int = 0) -> None:
        StepChoice.__init__(self, step, job, max_entries)
        self._batches = 0

    def _directory(self, trainer: Any) -> str:
        return str(getattr(trainer, "log_dir", None) or trainer.default_root_dir)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        if self._batches != self.step or self._rec is not None:
            return
        self._rec = RecordedStep(self._directory(trainer), self.step, self.job, self.max_entries)
        self._rec.switch("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._rec is not None:
            self._rec.switch("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._rec is not None:
            self._rec.switch("optimizer")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._rec is None:
            return
        rec, self._rec = self._rec, None
        self.report = rec.close()
        figures: dict[str, float] = metrics(self.report)
        for logger in trainer.loggers:
            logger.log_metrics(figures, step=trainer.global_step)
