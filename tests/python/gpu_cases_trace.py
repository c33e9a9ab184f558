"""A comparison for ACCURACY.md (not collected by pytest): the project's GPU-measured BERT cases
(``../shared/validation/dev-cases.json``: HF Trainer bert-large on a V100 16 GB, 2022; accelerate's
bert-base load) traced with today's torch and transformers, the traced device total beside
each measured figure.

    python tests/python/gpu_cases_trace.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import vramscope

CASES = Path(__file__).resolve().parents[3] / "shared" / "validation" / "dev-cases.json"


def bert(case: dict[str, Any]) -> dict[str, Any]:
    import torch
    import transformers

    job = case["job"]
    cfg = dict(job["model"]["hf_config"])
    arch = cfg["architectures"][0]
    config = transformers.BertConfig(**{k: v for k, v in cfg.items() if k != "architectures"})
    config._attn_implementation = job.get("attention", "eager")
    with torch.device("meta"):
        model = getattr(transformers, arch)(config)
    batch, seq, accum = job["batch"], job["seq"], job.get("grad_accum", 1)
    train = job["task"] == "train"
    if job.get("checkpointing") == "full":
        model.gradient_checkpointing_enable()
    model.train(train)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5) if train else None
    half = job["precision"] == "fp16-mixed"

    def step() -> None:
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        if not train:
            with torch.no_grad():
                model(input_ids=ids)
            return
        for _ in range(accum):
            labels = torch.randint(0, 2, (batch,))
            with torch.autocast("cuda", dtype=torch.float16, enabled=half):
                loss = model(input_ids=ids, labels=labels).loss / accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    gpu = job.get("gpu") or "v100-16gb"
    t0 = time.perf_counter()
    r = vramscope.trace(step, model=model, optimizer=opt, device="cuda", gpu=gpu)
    g = r["per_gpu"]
    eager = vramscope.estimate(job, cuda_module_loading="eager")["per_gpu"]["components"]
    return {
        "id": case["id"],
        "metric": case["metric"],
        "measured": case["expected_bytes"],
        "peak_allocated": g["peak_allocated"],
        "peak_reserved": g["peak_reserved"],
        "device_total_lazy_context": g["device_total"],
        "cuda_context_lazy": g["components"]["cuda_context"],
        "cuda_context_eager": eager["cuda_context"],
        "parameters": g["components"]["parameters"],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ids = sys.argv[1:] or [
        "accelerate-bert-base-cased-load-fp32",
        "hf-bert-large-vanilla-bs4",
        "hf-bert-large-ga4-bs1-gc",
        "hf-bert-large-fp16-bs4",
    ]
    cases = {c["id"]: c for c in json.loads(CASES.read_text())}
    for i in ids:
        print(json.dumps(bert(cases[i])), flush=True)


if __name__ == "__main__":
    main()
