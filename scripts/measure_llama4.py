"""Runs ../shared/measure/measure.py on a `model_type: "llama4"` spec, building
`Llama4ForConditionalGeneration` (the published checkpoints' class) instead of what
`AutoModelForCausalLM` maps `llama4` to (`Llama4ForCausalLM`, which cannot take the composite
`Llama4Config`). The step is text-only: `input_ids` and `labels`, no `pixel_values`, so the
vision tower and projector hold parameters, gradients and AdamW states but run no forward.
transformers 5.24's `Llama4ForConditionalGeneration.forward` ends by reading
`outputs.image_outputs` from the language model's `MoeCausalLMOutputWithPast`, which has no such
field (an AttributeError on every call with `return_dict`); the wrapper gives that output class
an `image_outputs` of None, which allocates nothing. `Llama4Config` has no top-level `vocab_size` / `num_hidden_layers`; the text config's are
copied onto it for measure.py's token draw and layer hooks (no shape changes).

    MALLOC_MMAP_THRESHOLD_=1048576 python scripts/measure_llama4.py ../shared/measure SPEC.json OUT.json
"""

import sys

import transformers
from transformers import Llama4ForConditionalGeneration
from transformers.modeling_outputs import MoeCausalLMOutputWithPast

measure_dir, spec, out = sys.argv[1:4]
sys.path.insert(0, measure_dir)
import measure  # noqa: E402

_for_model = transformers.AutoConfig.for_model
_from_config = transformers.AutoModelForCausalLM.from_config


def for_model(model_type, **kw):
    cfg = _for_model(model_type, **kw)
    if model_type == "llama4":
        cfg.vocab_size = cfg.text_config.vocab_size
        cfg.num_hidden_layers = cfg.text_config.num_hidden_layers
    return cfg


def from_config(cfg, **kw):
    if cfg.model_type == "llama4":
        return Llama4ForConditionalGeneration._from_config(cfg, **kw)
    return _from_config(cfg, **kw)


MoeCausalLMOutputWithPast.image_outputs = None
transformers.AutoConfig.for_model = for_model
transformers.AutoModelForCausalLM.from_config = from_config
measure.main(spec, out)
