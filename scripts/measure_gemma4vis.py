"""Runs ../shared/measure/measure.py on a `model_type: "gemma4"` spec, with or without images,
without an audio tower (`audio_config: null`, as Gemma 4 26B / 31B) or with one (E2B / E4B: the
tower is built, its attention eager, and never run): `AutoModelForCausalLM` builds
`Gemma4ForConditionalGeneration`. `Gemma4Config` has no top-level `vocab_size` /
`num_hidden_layers`; `measure_composite.py` copies the text config's onto it.

A spec with `images` ({"count", "width", "height"}, all alike) runs, with the image processor's
budget `max_soft_tokens` from the config's `vision_soft_tokens_per_image` (280 unless given), with images as `Gemma4ImageProcessor` returns them:
each image resized by `get_aspect_ratio_preserving_size` to `ph × pw` patches, its
`pixel_values` `[max_soft_tokens · k², 3 · patch²]` fp32 rows padded with zeros and its
`image_position_ids` (x, y) with -1 on the padding (made once before the steps, like the step's
input); in each sequence `processing_gemma4.py`'s `<boi>` + `ph·pw/k²` image tokens + `<eoi>`
after the first token. The measured `seq` holds them. With `"mm_token_type_ids": true` in the spec
the step also gets the processor's `mm_token_type_ids` (1 on the image tokens, 0 elsewhere:
`processing_gemma4.py` returns them by default), which a text config with
`use_bidirectional_attention: "vision"` (the 26B and 31B) turns into materialised masks
(`create_masks_for_vision_model`).

    MALLOC_MMAP_THRESHOLD_=1048576 python scripts/measure_gemma4vis.py ../shared/measure SPEC.json OUT.json
"""

import measure_composite
from transformers.models.gemma4.processing_gemma4 import get_aspect_ratio_preserving_size


def with_images(model, cfg, s):
    import torch

    im, b = s["images"], s["batch"]
    v = cfg.vision_config
    k, p = v.pooling_kernel_size, v.patch_size
    max_patches = s["hf_config"].get("vision_soft_tokens_per_image", 280) * k * k
    h, w = get_aspect_ratio_preserving_size(im["height"], im["width"], p, max_patches, k)
    ph, pw = h // p, w // p
    soft = ph * pw // (k * k)
    n = b * im["count"]
    g = torch.Generator().manual_seed(7)
    pix = torch.zeros(n, max_patches, 3 * p * p)
    pix[:, : ph * pw] = torch.rand(n, ph * pw, 3 * p * p, generator=g)
    xs = torch.arange(pw).repeat(ph)
    ys = torch.arange(ph).repeat_interleave(pw)
    pos = torch.full((n, max_patches, 2), -1, dtype=torch.long)
    pos[:, : ph * pw, 0] = xs
    pos[:, : ph * pw, 1] = ys

    def mark(ids):
        at = 1
        for _ in range(im["count"]):
            ids[:, at] = cfg.boi_token_id
            ids[:, at + 1 : at + 1 + soft] = cfg.image_token_id
            ids[:, at + 1 + soft] = cfg.eoi_token_id
            at += soft + 2

    def inputs(ids):
        extra = {"pixel_values": pix, "image_position_ids": pos}
        if s.get("mm_token_type_ids"):
            extra["mm_token_type_ids"] = (ids == cfg.image_token_id).long()
        return extra

    return measure_composite.feed_images(model, mark, inputs)


def from_config(cfg, s, default, **kw):
    if cfg.model_type == "gemma4" and cfg.audio_config is not None:
        # `Gemma4AudioModel` has no SDPA path (`_supports_sdpa` unset: asking for it raises);
        # what transformers picks when no implementation is named is eager for it, the
        # requested kernel for the rest. The audio tower does not run on text or images.
        a = kw["attn_implementation"]
        kw["attn_implementation"] = {"": a, "text_config": a, "vision_config": a, "audio_config": "eager"}
    model = default(cfg, **kw)
    if cfg.model_type == "gemma4" and s.get("images"):
        return with_images(model, cfg, s)
    return model


measure_composite.run("gemma4", from_config)
