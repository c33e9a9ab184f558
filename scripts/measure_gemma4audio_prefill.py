"""The prefill of a tiny Gemma 4 with an audio tower (issue 34: E2B / E4B estimated, the audio
tower loaded and not run) in HF `generate` on the CPU: the `gemma4` config of
`validation/specs/cpu-tiny-gemma4audio-fp32-adamw-sdpa.json` built as
`Gemma4ForConditionalGeneration` (fp32, random weights; SDPA for the text model and the vision
tower, eager for the audio tower, which has no SDPA path), and its `text_config` alone as
`Gemma4ForCausalLM`, each given a text prompt (token ids below the special tokens) and asked for
one new token (the prefill, no decode forward), greedy, default `DynamicCache`. Every c10 CPU
allocation and free of the measured call is recorded by `torch.profiler`
(`profile_memory=True`), each rounded up to 512 B as CUDA's caching allocator counts
`allocated_bytes` (`cpu_allocations.peak_over_start`). Prints, per model and prompt, the
call's peak over its start, as JSON.

usage: VENV/bin/python scripts/measure_gemma4audio_prefill.py > validation/cpu-measured-gemma4audio-prefill.json
(torch 2.15.0 and transformers 5.24.0 from PyPI, as `../shared/measure/README.md` installs them)
"""

import copy
import json
import os

import torch
from cpu_allocations import print_record
from measure_generate_swa_cpu import call_peak
from transformers import AutoConfig, AutoModelForCausalLM

SPEC = os.path.join(os.path.dirname(__file__), "..", "validation", "specs",
                    "cpu-tiny-gemma4audio-fp32-adamw-sdpa.json")
BATCH = 2
PROMPTS = [256, 1024]


def configs():
    hf = json.load(open(SPEC))["hf_config"]
    return {"gemma4": hf, "gemma4_text": copy.deepcopy(hf["text_config"])}


def build(hf):
    kw = {k: v for k, v in hf.items() if k not in ("model_type", "architectures")}
    cfg = AutoConfig.for_model(hf["model_type"], **kw)
    attn = "sdpa"
    if hf["model_type"] == "gemma4":
        attn = {"": "sdpa", "text_config": "sdpa", "vision_config": "sdpa", "audio_config": "eager"}
    return AutoModelForCausalLM.from_config(cfg, attn_implementation=attn,
                                            dtype=torch.float32).eval()


def main():
    torch.set_num_threads(1)
    runs = []
    hfs = configs()
    for name, hf in hfs.items():
        torch.manual_seed(0)
        model = build(hf)
        params = sum(p.numel() for p in model.parameters())
        for prompt in PROMPTS:
            ids = torch.randint(1, 8000, (BATCH, prompt))
            mask = torch.ones(BATCH, prompt, dtype=torch.long)
            kwargs = dict(max_new_tokens=1, min_new_tokens=1, do_sample=False, pad_token_id=0,
                          disable_compile=True)
            runs.append({"model": name, "class": type(model).__name__, "params": params,
                         "prompt": prompt, "new_tokens": 1,
                         "peak_over_call_start": call_peak(model, ids, mask, kwargs)})
    print_record(
        "HF generate on the CPU, a tiny Gemma 4 with an audio tower and its text model alone, "
        "prefill only (one new token): peak allocated bytes (512-rounded) of the measured call "
        "over its start (scripts/measure_gemma4audio_prefill.py)",
        hf_configs=hfs, batch=BATCH, precision="fp32", attention="sdpa", runs=runs)


if __name__ == "__main__":
    main()
