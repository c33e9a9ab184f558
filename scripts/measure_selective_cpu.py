"""The CPU check of selective checkpointing over eager attention in the training stream
(docs/allocator-stream.md, "Selective checkpointing"): the one-layer Llama of
`crates/core/tests/alloc_stream_selective.rs` (hidden 256, 4 heads of 64, 2 KV heads, MLP 768,
vocabulary 8192, bf16, random weights), eager attention, batch 1 × 80, one steady-state step
(the second) recorded by `torch.profiler` (`profile_memory=True`). Selective is transformers'
`eager_attention_forward` run under `torch.utils.checkpoint(..., use_reentrant=False)` (an
attention function registered with `AttentionInterface`), the attention core alone
checkpointed. Prints, per run, the score-sized allocations and frees in order (bf16 51,200 B
and fp32 102,400 B: 4 heads · 80² elements; +bytes an allocation, −bytes a free) per phase,
the live bytes when backward begins and the step's peak over its start, as JSON.

usage: VENV/bin/python scripts/measure_selective_cpu.py > validation/cpu-measured-selective.json
(torch 2.15.0 and transformers 5.24.0 from PyPI, as `../shared/measure/README.md` installs them)
"""

import torch
import torch.utils.checkpoint as ckpt
from cpu_allocations import peak_over_start, print_record
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

CONFIG = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=8192, max_position_embeddings=4096,
              tie_word_embeddings=False)
BATCH, SEQ = 1, 80
SCORES = (51_200, 102_400)


def selective_eager(module, query, key, value, attention_mask, **kwargs):
    """`eager_attention_forward` inside a non-reentrant checkpoint (its probabilities, also
    returned, dropped: the decoder layer drops them too)."""
    def core(q, k, v, m):
        return eager_attention_forward(module, q, k, v, m, **kwargs)[0]
    return ckpt.checkpoint(core, query, key, value, attention_mask, use_reentrant=False), None


AttentionInterface.register("eager_selective", selective_eager)
# The float mask eager attention gets (`masking_utils.eager_mask`).
AttentionMaskInterface.register("eager_selective", eager_mask)


def events(prof):
    """(time, bytes, phase) of every allocation and free, in time order."""
    phases = []
    out = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.name in ("forward", "backward"):
            phases.append((e.start_time_ns, e.end_time_ns, e.name))
        if e.tag == torch._C._profiler._EventType.Allocation and e.typed[1].alloc_size != 0:
            out.append((e.start_time_ns, int(e.typed[1].alloc_size)))
    out.sort(key=lambda x: (x[0], -x[1]))
    def phase(t):
        return next((n for a, b, n in phases if a <= t <= b), "other")
    return [(t, d, phase(t)) for t, d in out]


def measured(attention):
    torch.manual_seed(0)
    cfg = LlamaConfig(**CONFIG, attn_implementation=attention)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    for k in range(2):
        opt.zero_grad(set_to_none=True)
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True) if k else None
        if prof:
            prof.__enter__()
        with record_function("forward"):
            loss = model(input_ids=ids, labels=ids).loss
        with record_function("backward"):
            loss.backward()
        del loss
        if prof:
            prof.__exit__(None, None, None)
        opt.step()
    ev = events(prof)
    live, at_backward = 0, None
    for _, d, p in ev:
        if p == "backward" and at_backward is None:
            at_backward = live
        live += d
    return {
        "attention": attention,
        "forward_scores": [d for _, d, p in ev if p == "forward" and abs(d) in SCORES],
        "backward_scores": [d for _, d, p in ev if p == "backward" and abs(d) in SCORES],
        "live_at_backward_over_start": at_backward,
        "peak_over_start": peak_over_start(prof),
    }


def main():
    torch.set_num_threads(1)
    runs = [measured(a) for a in ("eager", "eager_selective")]
    print_record(
        "a bf16 training step on the CPU, eager attention plain and with its core under a "
        "non-reentrant checkpoint: score-sized allocations (+) and frees (−) in order, live bytes "
        "at backward and the peak over the step's start (scripts/measure_selective_cpu.py)",
        hf_config=CONFIG, batch=BATCH, seq=SEQ, precision="bf16", optimizer="adamw", runs=runs)


if __name__ == "__main__":
    main()
