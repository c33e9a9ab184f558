"""``vramscope.job_from`` reads the job off live objects; the estimate of that job counts the
live model's parameters (checked against ``model.parameters()``, not vramscope's output)."""

from __future__ import annotations

from typing import Any

import pytest

import vramscope
from conftest import tiny_llama as conftest_tiny_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def tiny_llama() -> Any:
    return conftest_tiny_llama(kv_heads=2)


def test_tiny_llama_with_adamw() -> None:
    model = tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    job = vramscope.job_from(model, opt, batch=2, seq=16, gpu="a10-24gb")
    inline = model.config.to_dict()
    inline["architectures"] = ["LlamaForCausalLM"]
    assert job == {
        "model": {"hf_config": inline},
        "batch": 2,
        "seq": 16,
        "task": "train",
        "optimizer": "adamw",
        "precision": "fp32",
        "attention": "sdpa",
        "gpu": "a10-24gb",
    }
    report = vramscope.estimate(job)
    n = sum(p.numel() for p in model.parameters())
    assert report["model"]["params_total"] == n
    # fp32 parameters, each tensor rounded up to the CUDA caching allocator's 512 B blocks
    # (c10/cuda/CUDACachingAllocator.cpp `round_size`, kMinBlockSize = 512).
    rounded = sum(-(-p.numel() * 4 // 512) * 512 for p in model.parameters())
    assert report["per_gpu"]["model_states"]["parameters"] == rounded


def test_settings_that_change_memory_are_read() -> None:
    model = tiny_llama()
    model.gradient_checkpointing_enable()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    job = vramscope.job_from(model, sgd, batch=1, seq=8, precision="bf16-mixed")
    assert job["optimizer"] == "sgd-momentum"
    assert job["checkpointing"] == "full"
    assert job["precision"] == "bf16-mixed"
    assert vramscope.job_from(model)["task"] == "infer"
    fused = torch.optim.AdamW(model.parameters(), fused=True)
    assert vramscope.job_from(model, fused)["optimizer"] == "adamw-fused"


def test_a_known_name_is_kept() -> None:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2))
    model.config._name_or_path = "openai-community/gpt2"
    assert vramscope.job_from(model, batch=1, seq=8)["model"] == "openai-community/gpt2"


def test_peft_lora_adapter() -> None:
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(
        tiny_llama(),
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    job = vramscope.job_from(model, opt, batch=2, seq=16)
    assert job["peft"] == {"method": "lora", "rank": 4, "alpha": 8, "targets": ["q_proj", "v_proj"]}
    report = vramscope.estimate(job)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    assert report["model"]["params_trainable"] == trainable
    assert report["model"]["params_total"] == frozen


def test_bitsandbytes_quantization_config_sets_weights() -> None:
    model = tiny_llama()
    model.config.quantization_config = {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
    }
    assert vramscope.job_from(model)["weights"] == "nf4-dq"
    model.config.quantization_config = {"load_in_8bit": True}
    assert vramscope.job_from(model)["weights"] == "int8"


def test_an_unknown_optimizer_is_refused() -> None:
    model = tiny_llama()
    with pytest.raises(vramscope.InputError, match="Adagrad"):
        vramscope.job_from(model, torch.optim.Adagrad(model.parameters()))
