"""The contract's commands from Python: each builds the command's JSON input, hands it to the
Rust application layer (``vramscope._native.call_json``, the functions the CLI's ``--json`` and
the web server call) and returns its answer as plain JSON-shaped data."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Union

from . import _native

Job = dict[str, Any]
PathLike = Union[str, "os.PathLike[str]"]
PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class InputError(ValueError):
    """Bad input: the CLI's one-line message (what follows ``error:``); ``exit_code`` is the
    code the CLI exits with for it (2 for bad input or usage)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Report(dict):  # type: ignore[type-arg]
    """A Report (``estimate``'s answer): a plain ``dict``, equal to what ``estimate --json``
    prints, that Jupyter renders as vramscope's picture."""

    def _repr_svg_(self) -> str | None:
        try:
            return picture(self)
        except InputError:
            return None

    def _repr_html_(self) -> str | None:
        return self._repr_svg_()


def _plain(o: Any) -> Any:
    """JSON for numbers that are not ``int``/``float`` (numpy scalars, tensors' ``.item()``
    missed): integers where the value is integral, else floats."""
    if hasattr(o, "__index__"):
        return int(o.__index__())
    if hasattr(o, "__float__"):
        return float(o)
    raise TypeError(f"{type(o).__name__} is not JSON-serialisable")


def _call(command: str, payload: Mapping[str, Any]) -> Any:
    """Runs one command of the application layer; bad input raises :class:`InputError`."""
    text = json.dumps(payload, default=_plain)
    try:
        answer = _native.call_json(command, text)
    except _native.VramscopeError as e:
        message, code = e.args
        raise InputError(message, code) from None
    return json.loads(answer)


def _job(job_or_model: str | Mapping[str, Any], keywords: Mapping[str, Any]) -> Job:
    """A job dict: a MODEL string or a job dict, with the keywords laid over it as the command
    line lays flags over a job file. A keyword naming a job field is that field, as in a job
    dict (``batch=2``, ``peft={...}``, ``reserve`` in bytes; a diffusion pipeline's ``width``,
    ``height``, ``offload``, ...); any other keyword is
    ``vramscope estimate``'s flag of that name with underscores, taking what the flag takes
    (``lora=16`` is ``--lora 16``, ``tp=2`` is ``--tp 2``, ``lora_targets=["q_proj"]``,
    ``gpu_memory_utilization=0.85``, ``alloc_conf="expandable_segments:True"``); the same
    Rust code reads both (``commands/keywords.rs``)."""
    if isinstance(job_or_model, (str, os.PathLike)):
        job: Job = {"model": os.fspath(job_or_model)}
    elif isinstance(job_or_model, Mapping):
        job = dict(job_or_model)
    else:
        raise InputError(
            f"job: expected a MODEL string or a job dict, got {type(job_or_model).__name__}"
        )
    if not keywords:
        return job
    try:
        text = _native.job_with_keywords(
            json.dumps(job, default=_plain), json.dumps(dict(keywords), default=_plain)
        )
    except _native.VramscopeError as e:
        message, code = e.args
        raise InputError(message, code) from None
    laid: Job = json.loads(text)
    return laid


def estimate(
    job_or_model: str | Mapping[str, Any], *, advise: bool = False, **fields: Any
) -> Report:
    """Estimate a job's GPU memory: exactly the Report ``vramscope estimate --json`` prints.

    ``job_or_model`` is a job dict (the contract's Job) or a MODEL string (preset id, path,
    Hub repo); keywords are job fields (``task``, ``batch``, ``seq``, ``precision``,
    ``optimizer``, ``gpu``, ...) or the command's flags (``lora=16``, ``tp=2``,
    ``zero=3``, ...) and override the dict's. A MODEL naming a diffusers pipeline
    (a directory or Hub repo with ``model_index.json``) makes it a diffusion job
    (``width``, ``height``, ``batch``, ``offload``, ``vae_tiling``, ...; docs/diffusion.md)
    whose report lists the call's ``phases``. ``advise=True`` adds the cheapest
    changes that make the job fit (``--advise``).

    >>> r = vramscope.estimate("llama-3.1-8b", batch=2, seq=4096, gpu="h100-80gb")
    >>> r["per_gpu"]["peak_allocated"]
    >>> vramscope.estimate("llama-3.1-8b", lora=16, tp=2)  # as --lora 16 --tp 2
    """
    payload: dict[str, Any] = {"job": _job(job_or_model, fields)}
    if advise:
        payload["advise"] = True
    return Report(_call("estimate", payload))


def fit(
    job_or_model: str | Mapping[str, Any],
    *,
    measured: PathLike | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The largest micro-batch and sequence (train) or batch and context (infer) that fit the
    job's GPU, as ``vramscope fit --json``; ``measured`` calibrates against a record
    (``--measured``)."""
    payload: dict[str, Any] = {"job": _job(job_or_model, fields)}
    if measured is not None:
        payload["measured"] = os.fspath(measured)
    result: dict[str, Any] = _call("fit", payload)
    return result


def plan(
    job_or_model: str | Mapping[str, Any],
    *,
    gpus: int | None = None,
    top: int | None = None,
    max_micro_batch: int | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Parallel layouts for a training job on ``gpus`` GPUs that fit, ranked, as
    ``vramscope plan --json``."""
    payload: dict[str, Any] = {"job": _job(job_or_model, fields)}
    for key, value in (("gpus", gpus), ("top", top), ("max_micro_batch", max_micro_batch)):
        if value is not None:
            payload[key] = value
    result: dict[str, Any] = _call("plan", payload)
    return result


def inspect(model: PathLike) -> dict[str, Any]:
    """A model's parameters, tensor by tensor: ``{"model": {...}, "tensors": [...]}``."""
    result: dict[str, Any] = _call("inspect", {"model": os.fspath(model)})
    return result


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    return bytes(data)


def analyze(path_or_bytes: PathOrBytes) -> Report:
    """Where every byte of a PyTorch memory record went (CUDA snapshot pickle, profiler
    timeline, Chrome trace; engine logs, an OOM message): ``{"per_gpu": {...}, "timeline":
    [...]}`` as ``vramscope analyze --json``. Accepts a path or the record's bytes."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        try:
            answer = _native.analyze_bytes(_as_bytes(path_or_bytes))
        except _native.VramscopeError as e:
            message, code = e.args
            raise InputError(message, code) from None
        return Report(json.loads(answer))
    return Report(_call("analyze", {"path": os.fspath(path_or_bytes)}))


def compare(
    job: str | Mapping[str, Any], path_or_bytes: PathOrBytes, **fields: Any
) -> dict[str, Any]:
    """An estimate and a measurement side by side, per category, with the residual explained,
    as ``vramscope compare --json``. ``path_or_bytes`` is a record's path or its bytes;
    keywords are job fields or the estimate's flags, as for :func:`estimate`."""
    payload: dict[str, Any] = {"job": _job(job, fields)}
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        text = json.dumps(payload, default=_plain)
        try:
            answer = _native.compare_bytes(text, _as_bytes(path_or_bytes))
        except _native.VramscopeError as e:
            message, code = e.args
            raise InputError(message, code) from None
        result: dict[str, Any] = json.loads(answer)
        return result
    payload["path"] = os.fspath(path_or_bytes)
    result = _call("compare", payload)
    return result


def models() -> list[dict[str, Any]]:
    """The built-in model presets, as ``vramscope models --json``."""
    result: list[dict[str, Any]] = _call("models", {})
    return result


def gpus() -> list[dict[str, Any]]:
    """The GPU catalog, as ``vramscope gpus --json``."""
    result: list[dict[str, Any]] = _call("gpus", {})
    return result


def picture(report: Mapping[str, Any]) -> str:
    """vramscope's one picture of a Report (``estimate``'s answer), as SVG text."""
    svg: str = _call("picture", {"report": dict(report)})
    return svg
