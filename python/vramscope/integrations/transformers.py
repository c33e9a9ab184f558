"""``MemoryCallback`` for the Hugging Face ``Trainer``: records one optimizer step (forward,
backward and optimizer phases) with :func:`vramscope.record`, writes the record
(``vramscope-stepN.pickle``) and its report (``vramscope-stepN.json``) into the run's
``output_dir``, and logs the peak per category (bytes, ``vramscope/<category>``) to the
trainer's loggers.

>>> from vramscope.integrations.transformers import MemoryCallback
>>> trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemoryCallback(step=2)])
"""

from __future__ import annotations

from typing import Any

from ._step import RecordedStep, StepChoice, metrics

try:  # the framework is imported only when this module is
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "vramscope.integrations.transformers needs transformers (pip install transformers)"
    ) from e


class MemoryCallback(StepChoice, TrainerCallback):  # type: ignore[misc,unused-ignore]
    """Records optimizer step ``step`` (1-based, as ``state.global_step`` counts them).

    Phases: ``forward`` from the step's start (and each micro-batch's model call),
    ``backward`` from the model's return (loss and backward, gradient clipping), ``optimizer``
    from ``on_pre_optimizer_step`` to the step's end (step, scheduler, ``zero_grad``). ``job``
    (optional) adds the estimate beside the measurement in the report."""

    def __init__(self, step: int = 2, job: Any = None, max_entries: int = 0) -> None:
        StepChoice.__init__(self, step, job, max_entries)
        self._pending: dict[str, float] = {}

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step + 1 != self.step or self._rec is not None or self.report:
            return
        self._rec = RecordedStep(args.output_dir, self.step, self.job, self.max_entries)
        model = kwargs.get("model")
        if model is not None:
            self._rec.watch_forward(model)
        self._rec.switch("forward")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._rec is not None:
            self._rec.switch("optimizer")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._rec is None:
            return
        rec, self._rec = self._rec, None
        self.report = rec.close()
        self._pending = metrics(self.report)
        control.should_log = True

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        """Adds the figures to the first log after the recorded step (this and later
        callbacks see them; ``state.log_history`` keeps them)."""
        if not self._pending or logs is None:
            return
        logs.update(self._pending)
        if state.log_history:
            state.log_history[-1].update(self._pending)
        self._pending = {}
