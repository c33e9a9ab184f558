"""What is live at the peak of an HF `generate` prefill on the CPU, tensor by tensor, and each
decoder layer's top: the runs of `measure_gemma4audio_prefill.py` (the tiny Gemma 4 wrapper or
its text model, batch 2, one new token), every c10 allocation and free of the measured call
recorded by `torch.profiler` (`profile_memory=True`, `with_stack=True`), each 512-rounded as
`cpu_allocations.peak_over_start` counts them. Prints the call's peak over its start, the
allocations live then (size, event index, the op and module chain that made them), then per
module (a decoder layer's attention, its MLP, the rest) the highest total reached inside it.

usage: VENV/bin/python scripts/generate_live_at_peak.py gemma4_text 256
(the figures of validation/README.md's Gemma 4 prefill paragraph and `crates/core/tests/prefill.rs`)
"""

import sys

import torch
from cpu_allocations import r512
from measure_gemma4audio_prefill import BATCH, build, configs
from torch.profiler import ProfilerActivity, profile


def events(prof):
    """(time, signed bytes, pointer, enclosing ops / modules / source lines, innermost first)."""
    kind = torch._C._profiler._EventType
    out, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == kind.Allocation and e.typed[1].alloc_size != 0:
            p, chain = e.parent, []
            while p is not None:
                if p.tag == kind.TorchOp or "nn.Module" in p.name or ".py(" in p.name:
                    chain.append(p.name.split("/")[-1][:70])
                p = p.parent
            out.append((e.start_time_ns, int(e.typed[1].alloc_size), e.typed[1].ptr, chain))
    out.sort(key=lambda x: (x[0], -x[1]))
    return out


def where(chain):
    """The decoder layer and its attention / MLP module an allocation was made in."""
    mods = [c.split(": ")[1] for c in chain if c.startswith("nn.Module")]
    layer = next((m for m in mods if "DecoderLayer_" in m), None)
    if layer is None:
        return mods[0] if mods else "generate"
    sub = next((m for m in mods if "Attention" in m or "MLP" in m), "")
    return f"{layer} {sub}".strip()


def main(name, prompt):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build(configs()[name])
    ids = torch.randint(1, 8000, (BATCH, prompt))
    mask = torch.ones(BATCH, prompt, dtype=torch.long)
    kw = dict(max_new_tokens=1, min_new_tokens=1, do_sample=False, pad_token_id=0,
              disable_compile=True)
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, **kw)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     with_stack=True) as prof:
            out = model.generate(ids, attention_mask=mask, **kw)
        del out
    cur = peak = 0
    live, at_peak, tops = {}, {}, {}
    for i, (_, d, ptr, chain) in enumerate(events(prof)):
        if d > 0:
            cur += r512(d)
            live[ptr] = (r512(d), i, chain)
        else:
            cur -= r512(d)
            live.pop(ptr, None)
        if cur > peak:
            peak, at_peak = cur, dict(live)
        key = where(chain)
        tops[key] = max(tops.get(key, 0), cur)
    print(f"{name} prompt {prompt}: peak over the call's start {peak}")
    for b, i, chain in sorted(at_peak.values(), key=lambda r: r[1]):
        print(f"{b:>10} {i:>6}  {' < '.join(chain[:6])}")
    print("per module, the highest total inside it:")
    for key, top in tops.items():
        print(f"{top:>10}  {key}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
