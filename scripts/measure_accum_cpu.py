"""The CPU check of the training stream's gradient accumulation and `zero_grad(set_to_none=False)`
(docs/allocator-stream.md, "Gradient accumulation"): a small Llama (fp32, eager attention, random
weights) trained with foreach AdamW, every c10 CPU allocation and free of one steady-state step
(the second, from its first forward on; the first makes the optimizer's states) recorded by
`torch.profiler`
(`profile_memory=True`), each rounded up to 512 B as CUDA's caching allocator counts
`allocated_bytes`. A step is `zero_grad`, then per micro-batch `(model(**batch).loss / n).backward()`,
then `optimizer.step()`, as the PyTorch recipe for accumulation writes it. Prints, per setting,
the bytes allocated when the first forward begins (parameters, optimizer states and, under
`set_to_none=False`, the zeroed gradients) and the step's peak over them, as JSON.

usage: VENV/bin/python scripts/measure_accum_cpu.py > validation/cpu-measured-accum.json
(torch 2.15.0 and transformers 5.24.0 from PyPI, as `../shared/measure/README.md` installs them)
"""

import torch
from cpu_allocations import peak_over_start, print_record, r512
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096,
              tie_word_embeddings=False, model_type="llama", architectures=["LlamaForCausalLM"],
              torch_dtype="float32")
BATCH, SEQ = 2, 256
SETTINGS = [(1, True), (2, True), (3, True), (1, False), (2, False)]



def step(model, opt, ids, micro, set_to_none, zero=True):
    if zero:
        opt.zero_grad(set_to_none=set_to_none)
    for _ in range(micro):
        loss = model(input_ids=ids, labels=ids).loss / micro
        loss.backward()
        del loss
    opt.step()


def measured(micro, set_to_none):
    torch.manual_seed(0)
    cfg = LlamaConfig(**{k: v for k, v in CONFIG.items()
                         if k not in ("model_type", "architectures", "torch_dtype")},
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    step(model, opt, ids, micro, set_to_none)
    # zero_grad outside the recording: the profiler drops frees of blocks made before it
    # started (the previous step's gradients), so the step is measured from its first forward.
    opt.zero_grad(set_to_none=set_to_none)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(model, opt, ids, micro, set_to_none, zero=False)
    peak = peak_over_start(prof)
    start = sum(r512(p.numel() * p.element_size()) for p in model.parameters())
    start += sum(r512(t.numel() * t.element_size()) for s in opt.state.values()
                 for t in s.values() if torch.is_tensor(t))
    if not set_to_none:
        start += sum(r512(p.grad.numel() * p.grad.element_size()) for p in model.parameters())
    return {"grad_accum": micro, "zero_grad": "none" if set_to_none else "zeros",
            "peak_over_forward_start": peak, "resident_at_start": start}


def main():
    torch.set_num_threads(1)
    runs = [measured(m, z) for m, z in SETTINGS]
    print_record(
        "training steps on the CPU: peak allocated bytes (512-rounded) of one "
        "steady-state step over its first forward's start, per gradient accumulation and zero_grad "
        "(scripts/measure_accum_cpu.py)",
        hf_config=CONFIG, batch=BATCH, seq=SEQ, precision="fp32",
        attention="eager", optimizer="adamw", runs=runs)


if __name__ == "__main__":
    main()
