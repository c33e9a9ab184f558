"""The set-up the measure.py wrappers for composite (conditional-generation) models share
(`measure_gemma4vis.py`, `measure_llama4.py`): read `MEASURE_DIR SPEC OUT` from the command
line, import ../shared/measure/measure.py, copy the text config's `vocab_size` and
`num_hidden_layers` onto the composite config (which has neither at the top level; measure.py's
token draw and layer hooks read them; no shape changes), let the wrapper build the model, and
run the measurement."""

import json
import sys

import transformers


def feed_images(model, mark, inputs):
    """Registers a forward pre-hook on `model` that gives every call a copy of its `input_ids`
    with the image tokens written by `mark(ids)` (in place), and the keyword arguments
    `inputs(ids)` returns (the pixels and what else the model takes beside them); returns
    `model`."""

    def pre(mod, args, kwargs):
        ids = kwargs["input_ids"].clone()
        mark(ids)
        kwargs["input_ids"] = ids
        kwargs.update(inputs(ids))
        return args, kwargs

    model.register_forward_pre_hook(pre, with_kwargs=True)
    return model


def run(model_type, from_config):
    """Runs measure.py on argv's SPEC, writing OUT, with `AutoConfig.for_model` copying the text
    sizes onto a `model_type` config and `AutoModelForCausalLM.from_config(cfg, **kw)` answered
    by `from_config(cfg, spec, default, **kw)`: `spec` the parsed SPEC, `default` the original
    `from_config`."""
    measure_dir, spec_path, out = sys.argv[1:4]
    sys.path.insert(0, measure_dir)
    import measure

    for_model_default = transformers.AutoConfig.for_model
    from_config_default = transformers.AutoModelForCausalLM.from_config
    with open(spec_path) as f:
        spec = json.load(f)

    def for_model(name, **kw):
        cfg = for_model_default(name, **kw)
        if name == model_type:
            cfg.vocab_size = cfg.text_config.vocab_size
            cfg.num_hidden_layers = cfg.text_config.num_hidden_layers
        return cfg

    def build(cfg, **kw):
        return from_config(cfg, spec, from_config_default, **kw)

    transformers.AutoConfig.for_model = for_model
    transformers.AutoModelForCausalLM.from_config = build
    measure.main(spec_path, out)
