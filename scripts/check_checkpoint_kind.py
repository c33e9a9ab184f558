#!/usr/bin/env python3
"""Which checkpoint kind (`use_reentrant`) the common entry points give a decoder's layers, on
the CPU with a two-layer Llama (no weights, no bitsandbytes: `is_loaded_in_8bit` is set by hand
so that PEFT's `prepare_model_for_kbit_training` takes its quantized-model branch).

    /work/mvenv/bin/python scripts/check_checkpoint_kind.py

Printed (torch 2.15.0, transformers 5.24.0, peft 0.21.2): `gradient_checkpointing_enable()`
gives the layers `{'use_reentrant': False}`; `prepare_model_for_kbit_training(model)` gives
them `{}`, and a training step then runs torch's reentrant `CheckpointFunction` (torch's
`checkpoint` without `use_reentrant` takes True). See docs/allocator-stream.md, "LLM.int8"."""
import warnings; warnings.simplefilter("ignore")
import torch, transformers, peft
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
def kind(m):
    f = m.model.layers[0]._gradient_checkpointing_func
    return getattr(f, "keywords", None)
m = LlamaForCausalLM(cfg); m.gradient_checkpointing_enable()
print("transformers", transformers.__version__, "gradient_checkpointing_enable():", kind(m))
m = LlamaForCausalLM(cfg); m.is_loaded_in_8bit = True
peft.prepare_model_for_kbit_training(m)
print("peft", peft.__version__, "prepare_model_for_kbit_training(model):", kind(m))
# what torch's checkpoint does with no use_reentrant: which implementation runs
import torch.utils.checkpoint as cp
seen = []
orig = cp.CheckpointFunction.apply
cp.CheckpointFunction.apply = staticmethod(lambda *a: (seen.append("reentrant"), orig(*a))[1])
m.train()
ids = torch.randint(0, 256, (1, 8))
m(input_ids=ids, labels=ids).loss.backward()
print("torch", torch.__version__, "checkpoint() without use_reentrant ran:", seen[:1] or ["non-reentrant"])
