"""The prefill of Gemma 3n's tiny text model (`gemma3n_text`) and of the same text model inside
the conditional-generation model (`gemma3n`: the vision tower, timm's `mobilenetv5_300m_enc`,
and a tiny audio tower held but not run; both multimodal embedders run) through HF `generate`
(greedy, 1 new token: the prefill alone) with the default `DynamicCache`, fp32, SDPA, every c10
CPU allocation and free of the measured call recorded by `torch.profiler`
(`profile_memory=True`), each rounded up to 512 B as CUDA's caching allocator counts
`allocated_bytes` (`cpu_allocations.peak_over_start`). Per model: the call's peak over its
start. The configs are `validation/specs/cpu-tiny-gemma3nfull-fp32-adamw-sdpa.json`'s. Prints
JSON.

usage: VENV/bin/python scripts/measure_generate_gemma3n_cpu.py > validation/cpu-measured-generate-gemma3n.json
(torch 2.15.0 and transformers 5.24.0 from PyPI, as `../shared/measure/README.md` installs them;
timm 1.0.31)
"""

import json
import os

import torch
from cpu_allocations import peak_over_start, print_record
from measure_generate_swa_cpu import call_peak, greedy_inputs
from transformers import AutoConfig, AutoModelForCausalLM

SPEC = os.path.join(os.path.dirname(__file__), "..", "validation", "specs",
                    "cpu-tiny-gemma3nfull-fp32-adamw-sdpa.json")
FULL = json.load(open(SPEC))["hf_config"]
MODELS = {"gemma3n_text": FULL["text_config"], "gemma3n": FULL}
BATCH, PROMPT, NEW = 2, 256, 1


def build(hf):
    kw = {k: v for k, v in hf.items() if k not in ("model_type", "architectures")}
    cfg = AutoConfig.for_model(hf["model_type"], **kw)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def main():
    torch.set_num_threads(1)
    runs = []
    for name, hf in MODELS.items():
        torch.manual_seed(0)
        model = build(hf)
        vocab = FULL["text_config"]["vocab_size"]
        ids, mask, kwargs = greedy_inputs(vocab, BATCH, PROMPT, NEW)
        runs.append({"model": name, "attention": "sdpa", "prompt": PROMPT, "new_tokens": NEW,
                     "peak_over_call_start": call_peak(model, ids, mask, kwargs)})
        del model
    print_record(
        "HF generate on the CPU, Gemma 3n's tiny text model alone and inside gemma3n (towers "
        "held, not run): peak allocated bytes (512-rounded) of the measured call over its start "
        "(scripts/measure_generate_gemma3n_cpu.py)",
        hf_configs=MODELS, batch=BATCH, precision="fp32", runs=runs)


if __name__ == "__main__":
    main()
