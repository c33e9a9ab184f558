"""Sliding-window layers' cache in HF `generate` on the CPU (issue 34): tiny fp32 models whose
layers keep a window (Mistral with `sliding_window`; Gemma-3's text model, five sliding layers to
one global) run a prompt longer than the window through `generate` (greedy) with the default
`DynamicCache`, every c10 CPU allocation and free of the measured call recorded by
`torch.profiler` (`profile_memory=True`), each rounded up to 512 B as CUDA's caching allocator
counts `allocated_bytes` (`cpu_allocations.peak_over_start`). Per model and number of new tokens:
the call's peak over its start, and what each layer's cache holds when the call returns — the
shape of its keys and the bytes of the storage under them (`DynamicSlidingWindowLayer.update`
keeps a view of the `torch.cat` it made). Prints JSON.

usage: VENV/bin/python scripts/measure_generate_swa_cpu.py > validation/cpu-measured-generate-swa.json
(torch 2.15.0 and transformers 5.24.0 from PyPI, as `../shared/measure/README.md` installs them)
"""

import torch
from cpu_allocations import peak_over_start, print_record
from torch.profiler import ProfilerActivity, profile
from transformers import AutoConfig, AutoModelForCausalLM

COMMON = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=8,
              head_dim=64, vocab_size=1000, max_position_embeddings=4096, sliding_window=128,
              torch_dtype="float32")
MODELS = {
    "mistral": dict(COMMON, num_hidden_layers=4, model_type="mistral",
                    architectures=["MistralForCausalLM"]),
    "gemma3_text": dict(COMMON, num_hidden_layers=6, model_type="gemma3_text",
                        architectures=["Gemma3ForCausalLM"]),
}
BATCH = 2
# (attention, prompt, new tokens): a prompt 8× the window, generating 1 (no decode forward) and 4;
# a prompt half the window generating 256 (the cache passes the window during the decode); a
# prompt of 2,048 (16× the window), where the prefill's sliding-window mask (`[b, 1, p, p]`) is a
# visible share, under SDPA (a bool mask) and eager attention (float masks, full and sliding).
SHAPES = [("sdpa", 1024, 1), ("sdpa", 1024, 4), ("sdpa", 64, 256), ("sdpa", 2048, 1),
          ("eager", 2048, 1)]


def build(hf, attention):
    kw = {k: v for k, v in hf.items() if k not in ("model_type", "architectures", "torch_dtype")}
    cfg = AutoConfig.for_model(hf["model_type"], **kw)
    cfg._attn_implementation = attention
    return AutoModelForCausalLM.from_config(cfg, attn_implementation=attention).eval()


def cache_layers(model, ids, mask, kwargs):
    """Each layer's keys when the call returns: shape and the bytes of their storage."""
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, return_dict_in_generate=True, **kwargs)
    return [{"class": type(l).__name__, "keys_shape": list(l.keys.shape),
             "keys_storage_bytes": l.keys.untyped_storage().nbytes()}
            for l in (getattr(out, "cache", None) or out.past_key_values).layers]


def greedy_inputs(vocab, batch, prompt, new):
    """A random prompt (ids drawn from the seeded generator), its all-ones mask and greedy
    `generate` keywords for exactly `new` tokens."""
    ids = torch.randint(1, vocab, (batch, prompt))
    mask = torch.ones(batch, prompt, dtype=torch.long)
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                  disable_compile=True)
    return ids, mask, kwargs


def call_peak(model, ids, mask, kwargs):
    """Peak bytes over the call's start: a warm-up call, then the measured one."""
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, **kwargs)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model.generate(ids, attention_mask=mask, **kwargs)
        del out
    return peak_over_start(prof)


def main():
    torch.set_num_threads(1)
    runs = []
    for name, hf in MODELS.items():
        for attention, prompt, new in SHAPES:
            torch.manual_seed(0)
            model = build(hf, attention)
            ids, mask, kwargs = greedy_inputs(hf["vocab_size"], BATCH, prompt, new)
            runs.append({"model": name, "attention": attention, "prompt": prompt,
                         "new_tokens": new,
                         "peak_over_call_start": call_peak(model, ids, mask, kwargs),
                         "cache_at_return": cache_layers(model, ids, mask, kwargs)})
    print_record(
        "HF generate on the CPU, sliding-window models, prompt longer than the window: "
        "peak allocated bytes (512-rounded) of the measured call over its start, and each "
        "layer's cache when the call returns (scripts/measure_generate_swa_cpu.py)",
        hf_configs=MODELS, batch=BATCH, precision="fp32", runs=runs)


if __name__ == "__main__":
    main()
