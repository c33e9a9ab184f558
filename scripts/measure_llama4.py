"""Runs ../shared/measure/measure.py on a `model_type: "llama4"` spec, building
`Llama4ForConditionalGeneration` (the published checkpoints' class) instead of what
`AutoModelForCausalLM` maps `llama4` to (`Llama4ForCausalLM`, which cannot take the composite
`Llama4Config`). The step is text-only: `input_ids` and `labels`, no `pixel_values`, so the
vision tower and projector hold parameters, gradients and AdamW states but run no forward.
transformers 5.24's `Llama4ForConditionalGeneration.forward` ends by reading
`outputs.image_outputs` from the language model's `MoeCausalLMOutputWithPast`, which has no such
field (an AttributeError on every call with `return_dict`); the wrapper gives that output class
an `image_outputs` of None, which allocates nothing. `Llama4Config` has no top-level `vocab_size` / `num_hidden_layers`; `measure_composite.py`
copies the text config's onto it.

A spec with `images` ({"count", "width", "height"}, each image a whole number of tiles, all
alike) runs with images: `pixel_values` as `Llama4ImageProcessor` returns them (fp32, one row
per tile, `rows × cols` tiles plus the global tile when more than one, made once before the
steps, like the step's input), and in each sequence the image tokens `processing_llama4.py`
writes — every tile's `(tile/patch)² · ratio²` `<|patch|>` tokens are `image_token_index` (the
ids the projected features replace); the few separators stay ordinary ids. The measured `seq`
holds them.

    MALLOC_MMAP_THRESHOLD_=1048576 python scripts/measure_llama4.py ../shared/measure SPEC.json OUT.json
"""

import measure_composite
from transformers import Llama4ForConditionalGeneration
from transformers.modeling_outputs import MoeCausalLMOutputWithPast


def with_images(model, cfg, im, b):
    """Feeds `im` images per sequence (batch `b`) through a forward pre-hook (see the module's
    note)."""
    import torch

    v = cfg.vision_config
    tile, patch = v.image_size, v.patch_size
    rows, cols = im["height"] // tile, im["width"] // tile
    tiles = rows * cols + (1 if rows * cols > 1 else 0)
    per_tile = (tile // patch) ** 2 // round(1 / v.pixel_shuffle_ratio**2)
    n_img = im["count"] * tiles * per_tile
    g = torch.Generator().manual_seed(7)
    pix = torch.randn(b * im["count"] * tiles, v.num_channels, tile, tile, generator=g)

    def mark(ids):
        ids[:, 1 : 1 + n_img] = cfg.image_token_index

    return measure_composite.feed_images(model, mark, lambda ids: {"pixel_values": pix})


def from_config(cfg, s, default, **kw):
    if cfg.model_type == "llama4":
        model = Llama4ForConditionalGeneration._from_config(cfg, **kw)
        im = s.get("images")
        return with_images(model, cfg, im, s["batch"]) if im else model
    return default(cfg, **kw)


MoeCausalLMOutputWithPast.image_outputs = None
measure_composite.run("llama4", from_config)
