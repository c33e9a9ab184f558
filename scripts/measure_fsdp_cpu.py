"""One rank of FSDP2 (`fully_shard`) on the CPU with gloo, world size 2: a two-layer Llama
(hidden 256, 4 heads, 2 KV heads, MLP 768, vocabulary 8192, untied), each decoder layer and
the root wrapped, bf16-mixed (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`)
or fp32, AdamW (foreach), b1 x 40. Rank 0's allocations and frees of at least FLOOR bytes in
the third step's forward and backward (profiler, `profile_memory=True`), in order; with
`--all`, every allocation and free of that window too (`all_events`), and those of them CUDA's
path also makes (`cuda_like_events`: without what the ops in CPU_ONLY allocate), for the
peak.

    /work/mvenv/bin/python scripts/measure_fsdp_cpu.py bf16-mixed|fp32 OUT.json \
        [--no-reshard] [--accum N] [--lora] [--all]

`--no-reshard`: `fully_shard(reshard_after_forward=False)` (SHARD_GRAD_OP, `parallel.zero: 2`).
`--accum N`: N forward/backward passes per optimizer step (FSDP2's default: every one
reduce-scattered), the third step's N all recorded. `--lora`: PEFT LoRA r 8 on q_proj and
v_proj before wrapping (the base frozen in bf16, the adapters fp32).

The runs are in validation/cpu-measured-fsdp.json (`runs`: each run's `events`;
`cuda_like_peaks`: its `cuda_like_peak`), which crates/core/tests/fsdp_stream.rs compares with
the stream."""
import json, os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_allocations import allocation_events, r512  # noqa: E402

FLOOR = 131072

# What the CPU path allocates that CUDA's does not allocate through the caching allocator:
# gloo's own buffers inside a collective (NCCL writes in place, from its own memory) and the
# per-gradient fp32 casts of `chunk_cat_mixed_dtype` (CUDA casts during the copy-in).
CPU_ONLY = ("c10d::", "gloo", "chunk_cat_mixed_dtype")


def tagged_events(prof):
    """Every allocation and free in time order as (bytes, made inside a CPU-only op): a free
    carries the tag of the allocation it frees (matched by address)."""
    raw, names = [], set()
    stack = [(e, ()) for e in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        e, up = stack.pop()
        here = up + (e.name,)
        stack.extend((c, here) for c in e.children)
        if e.tag == torch._C._profiler._EventType.Allocation and e.typed[1].alloc_size != 0:
            cpu_only = [n for n in up if any(k in n for k in CPU_ONLY)]
            names.update(cpu_only[:1])
            raw.append((e.start_time_ns, int(e.typed[1].alloc_size), e.typed[1].ptr, bool(cpu_only)))
    raw.sort(key=lambda x: (x[0], -x[1]))
    out, at = [], {}
    for _, size, ptr, cpu_only in raw:
        if size > 0:
            at[ptr] = cpu_only
            out.append((size, cpu_only))
        else:
            out.append((size, at.pop(ptr, cpu_only)))
    return out, sorted(names)


def build(mixed, reshard, lora):
    from transformers import LlamaConfig, LlamaForCausalLM
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=8192,
                      max_position_embeddings=4096, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    if lora:
        from peft import LoraConfig, get_peft_model
        # The base in bf16 as `from_pretrained(torch_dtype=bf16)` loads it; PEFT makes the
        # adapters fp32 (`autocast_adapter_dtype=True`).
        model = get_peft_model(model.to(torch.bfloat16), LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=["q_proj", "v_proj"]))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    layers = model.base_model.model.model.layers if lora else model.model.layers
    for layer in layers:
        fully_shard(layer, mp_policy=mp_policy, reshard_after_forward=reshard)
    # The root left at the default (None: `FSDPState._lazy_init` keeps the root unsharded
    # after forward), or False as its layers.
    fully_shard(model, mp_policy=mp_policy, reshard_after_forward=None if reshard else False)
    return model


def peak(events):
    """The most bytes allocated at once over the window's start, each block 512-rounded."""
    now = top = 0
    for d in events:
        now += r512(d) if d > 0 else -r512(d)
        top = max(top, now)
    return top


def run(rank, opts, out):
    mixed, reshard, accum, lora, everything = opts
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = build(mixed, reshard, lora)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
    ids = torch.randint(0, 8192, (1, 40))
    for step in range(3):
        opt.zero_grad(set_to_none=True)
        if step == 2:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            prof.__enter__()
        for _ in range(accum):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            del loss
        if step == 2:
            prof.__exit__(None, None, None)
        opt.step()
    if rank == 0:
        events = allocation_events(prof)
        record = {"torch": torch.__version__, "mixed": mixed, "reshard_after_forward": reshard,
                  "accum": accum, "lora": lora, "floor": FLOOR,
                  "events": [d for d in events if abs(d) >= FLOOR]}
        if everything:
            record["all_events"] = events
            tagged, names = tagged_events(prof)
            record["cuda_like_events"] = [d for d, cpu_only in tagged if not cpu_only]
            record["cpu_only_ops"] = names
            record["cuda_like_peak"] = peak(record["cuda_like_events"])
        with open(out, "w") as f:
            json.dump(record, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    args = sys.argv[1:]
    mixed = args[0] == "bf16-mixed"
    accum = int(args[args.index("--accum") + 1]) if "--accum" in args else 1
    opts = (mixed, "--no-reshard" not in args, accum, "--lora" in args, "--all" in args)
    mp.spawn(run, args=(opts, args[1]), nprocs=2)
