"""One rank of DeepSpeed ZeRO-1/2 on the CPU (`DS_ACCELERATOR=cpu`, gloo, world size 2):
the two-block Llama of crates/core/tests/zero_stream.rs (hidden 250, 5 heads of 50, MLP 768,
vocabulary 8192, untied), `bf16.enabled` or fp32, torch's AdamW (foreach) handed to
`deepspeed.initialize`, b1 x 40, `engine.backward` / `engine.step`. Rank 0's allocations and
frees of at least FLOOR bytes (profiler, `profile_memory=True`), in order: while
`deepspeed.initialize` builds the ZeRO optimizer ("init"), and over the third step's forward
+ backward ("backward") and `engine.step()` ("step"). With GAS > 1
(`gradient_accumulation_steps`) each step is GAS micro-batches, each `engine.backward` then
`engine.step()` (which steps the optimizer at the accumulation boundary only, the last):
"backward" is the third step's micro-batches (their forward, backward and the non-boundary
`engine.step()` calls) in order, "step" the boundary's `engine.step()`.

    DS_ACCELERATOR=cpu PYTHON scripts/measure_zero_cpu.py STAGE bf16|fp32 OUT.json [GAS] [lora]

`lora`: PEFT LoRA r 8 on every linear of the blocks (`target_modules="all-linear"`, dropout
0.05: fp32 adapters beside the bf16 base, `autocast_adapter_dtype`), the optimizer over the
trainable parameters (the HF Trainer's), FLOOR 65536 (the adapters' buffers are small).

PYTHON: a venv with torch 2.15.0 and transformers 5.24.0 (/work/mvenv) and deepspeed 0.19.8
(`pip install --no-deps --no-build-isolation deepspeed==0.19.8` with hjson, ninja,
py-cpuinfo, msgpack, einops)."""
import json, os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_allocations import allocation_events  # noqa: E402

FLOOR = 65536 if "lora" in sys.argv[5:] else 131072


def profiled(fn):
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
    with prof:
        out = fn()
    return out, [d for d in allocation_events(prof) if abs(d) >= FLOOR]


def run(rank, stage, bf16, out, gas, lora):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29541", RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), DS_ACCELERATOR="cpu")
    import deepspeed
    import importlib
    from transformers import LlamaConfig, LlamaForCausalLM
    # The CPU accelerator's shared-memory all-reduce is a JIT-built C++ op (ninja, a compiler):
    # gloo's all-reduce does the same work without it.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=250, intermediate_size=768, num_hidden_layers=2, num_attention_heads=5,
                      num_key_value_heads=5, head_dim=50, vocab_size=8192, max_position_embeddings=4096,
                      tie_word_embeddings=False, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    if bf16:
        model = model.to(torch.bfloat16)
    if lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05,
                                                 target_modules="all-linear"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": gas,
              "zero_optimization": {"stage": stage}, "bf16": {"enabled": bf16}, "steps_per_print": 10**9}
    (engine, *_), init = profiled(lambda: deepspeed.initialize(model=model, optimizer=opt, config=config))
    ids = torch.randint(0, 8192, (1, 40))
    record = {"deepspeed": deepspeed.__version__, "torch": torch.__version__, "stage": stage, "bf16": bf16,
              "floor": FLOOR, "init": init}
    if gas > 1:
        record["gas"] = gas
    if lora:
        record["lora"] = {"r": 8, "target_modules": "all-linear", "lora_dropout": 0.05}

    def fwd_bwd():
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)

    def micro_batches():
        for micro in range(gas):
            fwd_bwd()
            if micro + 1 < gas:
                engine.step()
    for step in range(3):
        if step == 2:
            _, record["backward"] = profiled(micro_batches)
            _, record["step"] = profiled(engine.step)
        else:
            micro_batches()
            engine.step()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(record, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    gas = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    lora = "lora" in sys.argv[5:]
    mp.spawn(run, args=(int(sys.argv[1]), sys.argv[2] == "bf16", sys.argv[3], gas, lora), nprocs=2)
