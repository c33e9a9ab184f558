"""A figure for BENCHMARKS.md (not collected by pytest): ``vramscope.trace`` of a Llama-style
training step built on the meta device (no weights in memory), its wall time and the process's
peak resident memory.

    python tests/python/bench_trace.py 8b      # Llama-3.1-8B shapes, batch 1 × 4096, bf16-mixed AdamW
    python tests/python/bench_trace.py 70b     # Llama-3.1-70B shapes
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

import vramscope

# Llama 3.1 configs (config.json of meta-llama/Llama-3.1-8B and -70B).
SHAPES: dict[str, dict[str, Any]] = {
    "8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "70b": {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
}


def main(size: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        **SHAPES[size],
    )
    t0 = time.perf_counter()
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, config.vocab_size, (1, 4096))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()

    t1 = time.perf_counter()
    cpu1 = time.process_time()
    r = vramscope.trace(step, model=model, optimizer=opt, device="cuda")
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    g = r["per_gpu"]
    print(
        f"llama-{size}: built on meta in {t1 - t0:.1f} s, traced (2 steps) in {t2 - t1:.1f} s "
        f"({cpu:.1f} s of CPU), "
        f"peak RSS {rss / 2**30:.2f} GiB; peak_allocated {g['peak_allocated'] / 2**30:.2f} GiB "
        f"in {g['peak_phase']}"
    )
    for k, v in g["components"].items():
        if v:
            print(f"  {k:<18}{v / 2**30:>10.2f} GiB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "8b")
