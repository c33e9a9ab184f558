"""The CPU analogue of the H200 generate runs (docs/allocator-stream.md, "Inference"): a small
Llama (fp32, random weights) through HF `generate` (greedy, 4 new tokens) with the default
`DynamicCache` and with `cache_implementation="static"`, every c10 CPU allocation and free of the
measured call recorded by `torch.profiler` (`profile_memory=True`), each rounded up to 512 B as
CUDA's caching allocator counts `allocated_bytes`. Prints, per cache, the call's peak over what
was allocated before it (the weights and the prompt), as JSON.

usage: VENV/bin/python scripts/measure_generate_cpu.py > validation/cpu-measured-generate.json
(torch 2.15.0 and transformers 5.24.0 from PyPI, as `../shared/measure/README.md` installs them)
"""

import torch
from cpu_allocations import peak_over_start, print_record
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(hidden_size=512, intermediate_size=4096, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096,
              model_type="llama", architectures=["LlamaForCausalLM"], torch_dtype="float32")
BATCH, PROMPT, NEW = 2, 512, 4



def call_peak(model, ids, mask, kwargs):
    """Peak bytes over the call's start: a warm-up call, then the measured one."""
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, **kwargs)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model.generate(ids, attention_mask=mask, **kwargs)
    return peak_over_start(prof)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = LlamaConfig(**{k: v for k, v in CONFIG.items() if k not in ("model_type", "architectures", "torch_dtype")},
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, PROMPT))
    mask = torch.ones(BATCH, PROMPT, dtype=torch.long)
    base = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0,
                disable_compile=True)
    runs = []
    for cache in ["dynamic", "static"]:
        kwargs = dict(base, **({"cache_implementation": "static"} if cache == "static" else {}))
        runs.append({"cache": cache, "peak_over_call_start": call_peak(model, ids, mask, kwargs)})
    print_record(
        "HF generate on the CPU: peak allocated bytes (512-rounded) of the measured call "
        "over its start, per cache implementation (scripts/measure_generate_cpu.py)",
        hf_config=CONFIG, batch=BATCH, prompt=PROMPT, new_tokens=NEW,
        precision="fp32", attention="sdpa", runs=runs)


if __name__ == "__main__":
    main()
