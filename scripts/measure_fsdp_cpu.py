"""One rank of FSDP2 (`fully_shard`) on the CPU with gloo, world size 2: a two-layer Llama
(hidden 256, 4 heads, 2 KV heads, MLP 768, vocabulary 8192, untied), each decoder layer and
the root wrapped, bf16-mixed (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`)
or fp32, AdamW (foreach), b1 x 40. Rank 0's allocations and frees of at least FLOOR bytes in
the third step's forward and backward (profiler, `profile_memory=True`), in order.

    /work/mvenv/bin/python scripts/measure_fsdp_cpu.py bf16-mixed|fp32 OUT.json

Both runs are in validation/cpu-measured-fsdp.json (`runs`), which
crates/core/tests/fsdp_stream.rs compares with the stream."""
import json, os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_allocations import allocation_events  # noqa: E402

FLOOR = 131072


def run(rank, mixed, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from transformers import LlamaConfig, LlamaForCausalLM
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=8192,
                      max_position_embeddings=4096, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp_policy)
    fully_shard(model, mp_policy=mp_policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, 8192, (1, 40))
    for step in range(3):
        opt.zero_grad(set_to_none=True)
        if step == 2:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            prof.__enter__()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if step == 2:
            prof.__exit__(None, None, None)
        opt.step()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"torch": torch.__version__, "mixed": mixed, "floor": FLOOR, "events": [d for d in allocation_events(prof) if abs(d) >= FLOOR]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    mixed = sys.argv[1] == "bf16-mixed"
    mp.spawn(run, args=(mixed, sys.argv[2]), nprocs=2)
