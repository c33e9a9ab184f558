"""Runs ../shared/measure/measure.py on a `model_type: "gemma3n"` spec (text-only):
`AutoModelForCausalLM` builds `Gemma3nForConditionalGeneration` with its vision tower (timm's
`mobilenetv5_300m_enc`) and audio tower, which a text-only step holds but never runs; both
multimodal embedders run on every forward. `Gemma3nConfig` has no top-level `vocab_size` /
`num_hidden_layers`; `measure_composite.py` copies the text config's onto it.

    MALLOC_MMAP_THRESHOLD_=1048576 python scripts/measure_gemma3n.py ../shared/measure SPEC.json OUT.json
"""

import measure_composite


def from_config(cfg, s, default, **kw):
    return default(cfg, **kw)


measure_composite.run("gemma3n", from_config)
