"""``vramscope.job_from``: the contract's job read off the live objects a user trains — a
Hugging Face model (its ``config``, a peft adapter's settings, a bitsandbytes quantization
config) and a ``torch.optim`` optimizer — so the estimate compared against is the job run."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ._api import InputError, models

Job = dict[str, Any]

#: torch dtype name → the contract's pure precision (parameters held in that dtype).
_DTYPE_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

#: HF ``attn_implementation`` → the contract's ``attention``.
_ATTENTION = {
    "eager": "eager",
    "sdpa": "sdpa",
    "flash_attention_2": "flash",
    "flash_attention_3": "flash",
    "flex_attention": "flash",
}


def _optimizer_name(optimizer: Any) -> str:
    """The contract's optimizer id of a live optimizer: its class, and for torch's AdamW / SGD
    the settings that change memory (``fused``; ``momentum``)."""
    cls = type(optimizer).__name__
    module = type(optimizer).__module__
    defaults: Mapping[str, Any] = getattr(optimizer, "defaults", {}) or {}
    if module.startswith("bitsandbytes"):
        table = {
            "AdamW8bit": "adamw-8bit",
            "Adam8bit": "adamw-8bit",
            "PagedAdamW8bit": "adamw-8bit-paged",
            "PagedAdamW": "adamw-paged",
            "PagedAdamW32bit": "adamw-paged",
            "Lion": "lion",
            "Lion8bit": "lion",
        }
        if cls in table:
            return table[cls]
    if cls == "AdamW":
        return "adamw-fused" if defaults.get("fused") else "adamw"
    if cls == "Adam":
        return "adam"
    if cls == "SGD":
        return "sgd-momentum" if defaults.get("momentum") else "sgd"
    if cls == "Adafactor":
        return "adafactor"
    if cls == "Lion":
        return "lion"
    raise InputError(
        f"job_from: optimizer {module}.{cls} is not one vramscope models "
        "(adamw, adam, sgd, adafactor, lion, bitsandbytes 8-bit/paged AdamW); pass optimizer=..."
    )


def _known_model(name: str) -> bool:
    """Whether vramscope resolves ``name`` without the network: a local path, or a preset id
    or alias."""
    if not name:
        return False
    if os.path.exists(name):
        return True
    for m in models():
        if name == m.get("id") or name in (m.get("aliases") or []):
            return True
    return False


def _base_model(model: Any) -> Any:
    """The transformers model under a peft wrapper (``PeftModel.get_base_model()``)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _model_field(model: Any) -> Any:
    """``model``: the config's ``_name_or_path`` when vramscope resolves it, else the config
    inline (``{"hf_config": {...}}``) naming the live class in ``architectures``."""
    base = _base_model(model)
    config = getattr(base, "config", None)
    if config is None:
        raise InputError("job_from: the model has no `config` (a transformers model is expected)")
    name = str(getattr(config, "_name_or_path", "") or "")
    if _known_model(name):
        return name
    d = config.to_dict()
    d.pop("quantization_config", None)
    if not d.get("architectures"):
        d["architectures"] = [type(base).__name__]
    return {"hf_config": d}


def _targets(target_modules: Any) -> list[str]:
    if target_modules is None:
        return []
    if isinstance(target_modules, str):
        return [target_modules]
    return sorted(str(t) for t in target_modules)


def _peft_field(model: Any, quantized_4bit: bool) -> dict[str, Any] | None:
    """``peft`` from a peft model's active adapter (LoRA; on a 4-bit base, QLoRA)."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    name = getattr(model, "active_adapter", None)
    if not isinstance(name, str) or name not in configs:
        name = next(iter(configs))
    c = configs[name]
    kind = str(getattr(c, "peft_type", "")).split(".")[-1].lower()
    if kind != "lora":
        raise InputError(f"job_from: peft method {kind!r} is not modelled (lora is)")
    return {
        "method": "qlora" if quantized_4bit else "lora",
        "rank": int(c.r),
        "alpha": int(c.lora_alpha),
        "targets": _targets(getattr(c, "target_modules", None)),
    }


def _weights_field(config: Any) -> str | None:
    """``weights`` from a bitsandbytes ``quantization_config`` (dict or object)."""
    q = getattr(config, "quantization_config", None)
    if q is None:
        return None
    get = q.get if isinstance(q, Mapping) else (lambda k, d=None: getattr(q, k, d))
    if get("load_in_4bit", False):
        kind = str(get("bnb_4bit_quant_type", "fp4") or "fp4")
        return f"{kind}-dq" if kind == "nf4" and get("bnb_4bit_use_double_quant", False) else kind
    if get("load_in_8bit", False):
        return "int8"
    return None


def _precision(params: Iterable[Any]) -> str | None:
    """Pure precision of the trainable parameters' dtype (autocast is not visible on the
    objects: pass ``precision="bf16-mixed"`` for it)."""
    for p in params:
        if getattr(p, "requires_grad", False):
            return _DTYPE_PRECISION.get(str(p.dtype).replace("torch.", ""))
    return None


def job_from(
    model: Any,
    optimizer: Any = None,
    *,
    batch: int = 1,
    seq: int | None = None,
    precision: str | None = None,
    **fields: Any,
) -> Job:
    """The job a live model (and optimizer) run: ``model`` from its config (the name when
    vramscope knows it, else the config inline), ``peft`` from a peft adapter, ``weights``
    from a bitsandbytes quantization config, ``optimizer`` from the optimizer's class and
    settings (and ``task="train"``; without one, ``task="infer"``), ``precision`` from the
    trainable parameters' dtype unless given, ``attention`` and ``checkpointing`` from the
    model's settings. Keyword ``fields`` (``gpu``, ``grad_accum``, ...) are added as given.

    >>> job = vramscope.job_from(model, opt, batch=8, seq=2048, gpu="h100-80gb")
    >>> vramscope.estimate(job)
    """
    base = _base_model(model)
    config = getattr(base, "config", None)
    job: Job = {"model": _model_field(model), "batch": int(batch)}
    if seq is not None:
        job["seq"] = int(seq)
    job["task"] = "train" if optimizer is not None else "infer"
    if optimizer is not None:
        job["optimizer"] = _optimizer_name(optimizer)
    weights = _weights_field(config)
    if weights is not None:
        job["weights"] = weights
    peft = _peft_field(model, quantized_4bit=weights in ("nf4", "nf4-dq", "fp4"))
    if peft is not None:
        job["peft"] = peft
    params = model.parameters() if hasattr(model, "parameters") else []
    job["precision"] = precision or _precision(params) or "fp32"
    attn = _ATTENTION.get(str(getattr(config, "_attn_implementation", "") or ""))
    if attn is not None:
        job["attention"] = attn
    if getattr(base, "is_gradient_checkpointing", False):
        job["checkpointing"] = "full"
    job.update(fields)
    return job
