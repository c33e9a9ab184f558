"""The CPU check of torchtune's chunked output under autocast in the training stream
(docs/allocator-stream.md, "Chunked losses"): `TransformerDecoder.chunked_output`'s pattern — a
256 → 8192 `nn.Linear` head (fp32 weight) over `tensor_split(8, dim=1)` of an fp32 [1, 64, 256]
hidden state under `torch.autocast(bfloat16)` — and `CEWithChunkedOutputLoss`'s
`cross_entropy(chunk.float(), labels, reduction="sum")` per chunk, then backward; with
`--bf16` the same without autocast on a bf16 head. Every allocation of at least 4,096 B of one
steady step recorded by `torch.profiler` (`profile_memory=True`) in order (+bytes an
allocation, −bytes a free; CPU kernels' own scratch of 71,296, 173,824 and 267,904 B included),
forward and backward, as JSON.

usage: VENV/bin/python scripts/measure_chunked_autocast_cpu.py [--bf16]
(torch 2.15.0 from PyPI, as `../shared/measure/README.md` installs it)
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

BF16 = "--bf16" in sys.argv
torch.manual_seed(0)
H, V, S = 256, 8192, 64
head = nn.Linear(H, V, bias=False).to(torch.bfloat16 if BF16 else torch.float32)
x = torch.randn(1, S, H, dtype=torch.bfloat16 if BF16 else torch.float32, requires_grad=True)
labels = torch.randint(0, V, (1, S))
def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not BF16):
        h = x * 1.0
        logits = [head(c) for c in h.tensor_split(8, dim=1)]
        lab = [t.reshape(-1) for t in labels.tensor_split(8, dim=1)]
        loss = 0.0
        for l, t in zip(logits, lab):
            loss = loss + F.cross_entropy(l.reshape(-1, V).float(), t, reduction="sum")
    del logits
    with record_function("backward"):
        loss.backward()
step(); head.weight.grad = None; x.grad = None
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    step()
out = []
phases = []
stack = list(prof.profiler.kineto_results.experimental_event_tree())
while stack:
    e = stack.pop(); stack.extend(e.children)
    if e.name == "backward": phases.append((e.start_time_ns, e.end_time_ns))
    if e.tag == torch._C._profiler._EventType.Allocation and e.typed[1].alloc_size != 0:
        out.append((e.start_time_ns, int(e.typed[1].alloc_size)))
out.sort(key=lambda x: (x[0], -x[1]))
bw = lambda t: any(a <= t <= b for a, b in phases)
print(json.dumps({
    "what": "chunked output head and loss, one steady step: allocations (+) and frees (-) of at "
            "least 4,096 B (scripts/measure_chunked_autocast_cpu.py)",
    "torch": torch.__version__, "autocast": not BF16, "hidden": H, "vocab": V, "seq": S,
    "forward": [d for t, d in out if not bw(t) and abs(d) >= 4096],
    "backward": [d for t, d in out if bw(t) and abs(d) >= 4096]}))
