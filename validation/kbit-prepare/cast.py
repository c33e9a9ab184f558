# CPU check of PEFT's prepare_model_for_kbit_training on a tiny unquantized Llama (bf16):
# parameter bytes by dtype before/after, and the dtypes a forward then produces.
import json, sys, torch, transformers, peft
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
cfg = LlamaConfig(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=8192, max_position_embeddings=4096,
                  tie_word_embeddings=False)
torch.manual_seed(0)
def bytes_by_dtype(m):
    out = {}
    for n, p in m.named_parameters():
        k = str(p.dtype)
        out[k] = out.get(k, 0) + p.numel() * p.element_size()
    return out
res = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
for prep in (False, True):
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    if prep:
        m = prepare_model_for_kbit_training(m, use_gradient_checkpointing=True)
    m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    seen = {}
    def hook(name):
        def f(mod, inp, out):
            o = out[0] if isinstance(out, tuple) else out
            seen[name] = str(o.dtype)
        return f
    base = m.base_model.model
    base.model.embed_tokens.register_forward_hook(hook("embed_out"))
    base.model.layers[0].input_layernorm.register_forward_hook(hook("layer0_norm_out"))
    base.model.layers[0].self_attn.q_proj.register_forward_hook(hook("layer0_q_out"))
    base.model.layers[0].register_forward_hook(hook("layer0_out"))
    base.model.norm.register_forward_hook(hook("final_norm_out"))
    ids = torch.randint(0, 8192, (1, 16))
    out = m(input_ids=ids, labels=ids)
    res["prepared" if prep else "plain"] = {
        "param_bytes": bytes_by_dtype(m),
        "gc": base.is_gradient_checkpointing,
        "dtypes": dict(seen), "logits": str(out.logits.dtype),
        "lora_A": str(base.model.layers[0].self_attn.q_proj.lora_A["default"].weight.dtype),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(input_ids=ids, labels=ids)
    res["prepared" if prep else "plain"]["autocast"] = {"dtypes": dict(seen), "logits": str(out.logits.dtype)}
print(json.dumps(res, indent=1))
