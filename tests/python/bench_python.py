"""Figures for BENCHMARKS.md (not collected by pytest): ``vramscope.estimate`` calls per second
from Python, and the recorder's overhead on a CPU training step of a tiny model.

    python tests/python/bench_python.py            # with the package installed (a release wheel)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import vramscope


def per_second(fn: Callable[[], Any], seconds: float = 3.0) -> float:
    fn()  # warm: presets parsed, caches filled
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - start)


def bench_estimate() -> None:
    jobs = {
        "gpt2 train b8 s1024 (preset)": {"model": "gpt2", "batch": 8, "seq": 1024},
        "llama-3.1-8b train b2 s4096 bf16-mixed adamw h100": {
            "model": "llama-3.1-8b",
            "batch": 2,
            "seq": 4096,
            "precision": "bf16-mixed",
            "optimizer": "adamw",
            "gpu": "h100-80gb",
        },
        "llama-3.1-70b infer b16 s8192 (preset)": {
            "model": "llama-3.1-70b",
            "task": "infer",
            "batch": 16,
            "seq": 8192,
        },
    }
    for name, job in jobs.items():
        print(f"estimate  {name:<52} {per_second(lambda j=job: vramscope.estimate(j)):8.0f} /s")


def median_step_seconds(run: Callable[[], None], repeats: int) -> float:
    times: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_recorder(repeats: int = 15) -> None:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256)

    def step(rec: Any = None) -> None:
        ctx = rec.phase if rec is not None else (lambda _n: _Null())
        with ctx("forward"):
            loss = model(x).pow(2).mean()
        with ctx("backward"):
            loss.backward()
        with ctx("optimizer"):
            opt.step()
            opt.zero_grad()

    step()
    plain = median_step_seconds(step, repeats)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.pickle"

        def recorded() -> None:
            with vramscope.record(path) as rec:
                step(rec)

        def recorded_and_reported() -> None:
            with vramscope.record(path) as rec:
                step(rec)
            rec.report()

        rec_s = median_step_seconds(recorded, repeats)
        full_s = median_step_seconds(recorded_and_reported, repeats)
        size = path.stat().st_size
    n = sum(p.numel() for p in model.parameters())
    print(f"recorder  CPU step, MLP {n:,} params, batch 64, 1 thread (median of {repeats})")
    print(f"  plain step                         {plain * 1e3:8.2f} ms")
    print(f"  recorded (profiler + record write) {rec_s * 1e3:8.2f} ms  ({rec_s / plain:.1f}×)")
    print(f"  recorded + report() (analyze)      {full_s * 1e3:8.2f} ms  ({full_s / plain:.1f}×)")
    print(f"  record file                        {size:8d} B")


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


if __name__ == "__main__":
    print(f"python {sys.version.split()[0]}, vramscope {vramscope.__version__}")
    bench_estimate()
    bench_recorder()
