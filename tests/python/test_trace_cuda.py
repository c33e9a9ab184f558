"""``vramscope.trace`` on CUDA's terms: the attention backend CUDA's dispatcher picks for the
GPU, the device total (reserve, workspaces, context) and ``trace_max_batch``.

Every expected byte count below is worked out by hand from the tensors' shapes (the formulas'
sources are cited beside them), never read off the trace.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import vramscope
from vramscope._trace import record_bytes

torch = pytest.importorskip("torch")

MIB = 1 << 20
GIB = 1 << 30


class Attention(torch.nn.Module):  # type: ignore[misc]
    """One causal self-attention layer: x [b, s, E] → qkv → SDPA over H heads → out."""

    def __init__(self, embed: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(embed, 3 * embed, bias=False)
        self.out = torch.nn.Linear(embed, embed, bias=False)

    def forward(self, x: Any) -> Any:
        b, s, e = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, e))


B, S = 2, 100  # batch, sequence (not a multiple of 32: the memory-efficient lse is padded)


def attention_allocs(
    dtype: Any, gpu: Any, embed: int = 64, heads: int = 4
) -> list[tuple[str, int]]:
    """(op, bytes) of each allocation in the traced step's forward, in order."""
    model = Attention(embed, heads).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        x = torch.randn(B, S, embed, dtype=dtype)
        model(x).float().sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    snap = pickle.loads(record_bytes(step, model, opt, "cuda", 2, gpu))
    out = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc" and json.loads(e["user_metadata"])["phase"] == "forward":
            out.append((e["frames"][0]["name"].removeprefix("aten::"), e["size"]))
    return out


def sizes_of(allocs: list[tuple[str, int]], op: str) -> list[int]:
    return sorted(n for o, n in allocs if o == op)


def test_flash_on_an_h100_saves_the_output_lse_and_rng_state() -> None:
    # bf16 on sm90, no mask, head dim 16: flash (sdp_utils.cpp can_use_flash_attention). Its
    # outputs (flash_api.cpp mha_fwd): out [2, 4, 100, 16] bf16 = 2·4·100·16·2 = 25,600 B;
    # softmax_lse [2, 4, 100] fp32 = 3,200 B; rng_state [2] uint64 = 16 B; an unused [] uint64
    # = 8 B (both on the device).
    allocs = attention_allocs(torch.bfloat16, "h100-80gb")
    assert sizes_of(allocs, "_scaled_dot_product_flash_attention") == [8, 16, 3200, 25600]
    assert not sizes_of(allocs, "_scaled_dot_product_flash_attention_for_cpu")


def test_fp32_on_an_h100_takes_memory_efficient_with_a_padded_lse() -> None:
    # fp32 is not a flash dtype; memory-efficient takes it on sm80+ (head dim 16 % 4 == 0).
    # out [2, 100, 4, 16] fp32 = 51,200 B; logsumexp [2, 4, ceil(100/32)·32 = 128] fp32 =
    # 4,096 B; seed and offset are host scalars (attention.cu), not device blocks.
    allocs = attention_allocs(torch.float32, "h100-80gb")
    assert sizes_of(allocs, "_scaled_dot_product_efficient_attention") == [4096, 51200]


def test_bf16_on_a_v100_falls_back_to_math_and_its_attention_matrix() -> None:
    # sm70: flash needs sm80+, memory-efficient has no bf16 below sm80: math. It builds the
    # [2, 4, 100, 100] attention matrix: 2·4·100·100 = 80,000 elements, at least 2 B each.
    allocs = attention_allocs(torch.bfloat16, "v100-16gb")
    assert not sizes_of(allocs, "_scaled_dot_product_flash_attention")
    assert not sizes_of(allocs, "_scaled_dot_product_efficient_attention")
    assert max(n for _, n in allocs) >= 80_000 * 2


def test_flash_pads_a_head_dim_to_a_multiple_of_8() -> None:
    # E = 48 over 4 heads: head dim 12, padded to 16 (attention.cpp pad_last_dim<8>): q, k, v
    # each copied to [2, 4, 100, 16] bf16 = 25,600 B, and flash's out is as large, its lse
    # 3,200 B; the 12-wide result is a view of it.
    allocs = attention_allocs(torch.bfloat16, "h100-80gb", embed=48)
    flash = sizes_of(allocs, "_scaled_dot_product_flash_attention")
    assert flash == [8, 16, 3200, 25600]
    assert sum(1 for _, n in allocs if n == 25600) == 3 + 1


def test_a_compute_capability_stands_for_a_gpu() -> None:
    # (8, 0) is an A100's: flash for bf16 as on the H100.
    allocs = attention_allocs(torch.bfloat16, (8, 0))
    assert sizes_of(allocs, "_scaled_dot_product_flash_attention") == [8, 16, 3200, 25600]


def test_a_gpu_that_is_not_nvidia_is_refused() -> None:
    with pytest.raises(vramscope.InputError, match="not an NVIDIA"):
        attention_allocs(torch.bfloat16, "mi300x-192gb")
    with pytest.raises(vramscope.InputError, match="unknown gpu"):
        attention_allocs(torch.bfloat16, "no-such-gpu")


def gib_step(batch: int) -> Any:
    """A step with no model: x (1 GiB per sample) and x + 1 alive together, then freed."""

    def step() -> None:
        x = torch.empty(batch, GIB, dtype=torch.uint8)
        y = x + 1
        del x, y

    return step


# H100 (catalog): 85,520,809,984 B. The estimator's CUDA context for Hopper is the H200's
# measured 794,820,608 B = 758 MiB, and its one cuBLAS handle (no backward: inference) holds
# 32 MiB of workspace (overhead.rs; today's cuBLASLt shares it), a block of 10 MiB or more in
# its own segment of its size. The step's blocks are whole GiB (their own segments):
# device total(b) = 2·b GiB + 32 MiB + 758 MiB.
H100 = 85_520_809_984
FIXED = 32 * MIB + 758 * MIB


def test_the_device_total_of_a_cuda_trace() -> None:
    r = vramscope.trace(gib_step(3), device="cuda", gpu="h100-80gb")
    g = r["per_gpu"]
    assert g["peak_allocated"] == 6 * GIB
    assert g["peak_reserved"] == 6 * GIB
    assert g["components"]["cuda_context"] == 758 * MIB
    assert g["device_total"] == 6 * GIB + FIXED


def _churn_step() -> None:
    """100 MiB made and dropped, then two blocks of 64 MiB alive together."""
    x = torch.empty(100 * MIB, dtype=torch.uint8)
    del x
    a = torch.empty(64 * MIB, dtype=torch.uint8)
    b = torch.empty(64 * MIB, dtype=torch.uint8)
    del a, b


def test_the_reserve_of_a_cuda_trace_is_the_caching_allocators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    # The allocator's rules (c10/cuda/CUDACachingAllocator.cpp, default settings) on
    # `_churn_step`: 100 MiB (≥ 10 MiB: a segment of its size rounded to 2 MiB) is freed and cached;
    # the first 64 MiB takes that cached block and splits it (36 MiB left > 1 MiB); the second
    # 64 MiB finds no free block that large: a new 64 MiB segment. Reserved 100 + 64 = 164 MiB
    # (a packing of the blocks live at the peak plus the 100 MiB left cached would say 228).
    # The one cuBLAS handle's 32 MiB workspace is taken before the first allocation, nothing
    # cached then: a segment of its own. Device total = 164 + 32 + 758 MiB (H100's context).
    g = vramscope.trace(_churn_step, device="cuda", gpu="h100-80gb")["per_gpu"]
    assert g["peak_allocated"] == 128 * MIB
    assert g["peak_reserved"] == 164 * MIB
    assert g["components"]["allocator_reserve"] == 36 * MIB
    assert g["device_total"] == 164 * MIB + FIXED


def test_a_cuda_trace_runs_under_the_processs_alloc_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    # The step above under PYTORCH_ALLOC_CONF=expandable_segments:True (the variable PyTorch
    # reads first; c10/core/AllocatorConfig.h): one segment per (stream, pool), mapped in
    # 20 MiB pages in the large pool (`ExpandableSegment`). 100 MiB maps 5 pages and stays
    # mapped when freed; the first 64 MiB is cut from it, the second needs 28 MiB beyond the
    # 36 MiB left at its end: 2 more pages. Reserved 140 MiB.
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    g = vramscope.trace(_churn_step, device="cuda", gpu="h100-80gb")["per_gpu"]
    assert g["peak_reserved"] == 140 * MIB
    # The record carries it as a real snapshot's allocator_settings.
    data = pickle.loads(record_bytes(_churn_step, None, None, "cuda", 2, "h100-80gb"))
    assert data["allocator_settings"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_a_cuda_trace_starts_from_the_cache_its_first_step_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A state made on the first step only (as an optimizer makes its states), between two
    # 100 MiB transients. Step 1, by the allocator's rules (default settings): t takes a
    # 100 MiB segment, freed; the 64 MiB state splits that cached block (36 MiB left > 1 MiB);
    # u finds no free 100 MiB: a second 100 MiB segment. Reserved 200 MiB, and step 2 (the
    # record) reuses the cached second segment for t and u: 200 MiB. Replayed alone, step 2
    # would start with the state in a 64 MiB segment and nothing cached: 164 MiB.
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    state: list[Any] = []

    def step() -> None:
        t = torch.empty(100 * MIB, dtype=torch.uint8)
        del t
        if not state:
            state.append(torch.empty(64 * MIB, dtype=torch.uint8))
        u = torch.empty(100 * MIB, dtype=torch.uint8)
        del u

    g = vramscope.trace(step, device="cuda", gpu="h100-80gb", steps=2)["per_gpu"]
    assert g["peak_allocated"] == 164 * MIB
    assert g["peak_reserved"] == 200 * MIB
    # The record carries step 1 as its warm-up: t, the state, u, in order.
    state.clear()
    data = pickle.loads(record_bytes(step, None, None, "cuda", 2, "h100-80gb"))
    sizes = [(w[0], w[2]) for w in data["traced"]["warmup"]]
    assert sizes == [
        ("alloc", 100 * MIB),
        ("free", 100 * MIB),
        ("alloc", 64 * MIB),
        ("alloc", 100 * MIB),
        ("free", 100 * MIB),
    ]


def test_max_batch_by_hand() -> None:
    # 2·b GiB + 790 MiB ≤ 85,520,809,984 B: b ≤ (85,520,809,984 − 828,375,040) / 2,147,483,648
    # = 39.44: 39.
    a = vramscope.trace_max_batch(gib_step, gpu="h100-80gb")
    assert (828_375_040, a["capacity"]) == (FIXED, H100)
    assert a["max_batch"] == 39
    fits = {t["batch"]: t["fits"] for t in a["traces"]}
    assert fits[39] is True and fits[40] is False  # both traced
    # Two traces give the line; the candidate and its neighbour confirm it: 4 traces in all.
    assert a["extrapolated"] == 39 and len(a["traces"]) == 4
    # 10 GiB kept free: (85,520,809,984 − 10,737,418,240 − 828,375,040) / 2 GiB = 34.44: 34.
    assert vramscope.trace_max_batch(gib_step, gpu="h100-80gb", reserve=10 * GIB)["max_batch"] == 34


def test_max_batch_when_nothing_fits() -> None:
    # 1 sample of 20 GiB, twice: 40 GiB + the V100's fixed bytes > a 16 GiB V100.
    def make(batch: int) -> Any:
        def step() -> None:
            x = torch.empty(batch, 20 * GIB, dtype=torch.uint8)
            y = x + 1
            del x, y

        return step

    a = vramscope.trace_max_batch(make, gpu="v100-16gb")
    assert a["max_batch"] is None and [t["batch"] for t in a["traces"]] == [1]


def test_max_batch_of_a_real_model_is_a_traced_boundary() -> None:
    # The Attention layer trained with AdamW at seq 4096: the answer fits and one more does
    # not, both traced (the allocator's rounding makes the line only nearly exact).
    def make(batch: int) -> Any:
        with torch.device("meta"):
            model = Attention(1024, 16).to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters())

        def step() -> None:
            model(torch.randn(batch, 4096, 1024, dtype=torch.bfloat16)).float().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step, model, opt

    a = vramscope.trace_max_batch(make, gpu="l4-24gb")
    best = a["max_batch"]
    fits = {t["batch"]: t["fits"] for t in a["traces"]}
    assert best is not None and best > 2
    assert fits[best] is True and fits[best + 1] is False


def test_max_batch_command(tmp_path: Path) -> None:
    script = tmp_path / "big.py"
    script.write_text(
        "import torch\n"
        "def make(batch):\n"
        "    def step():\n"
        "        x = torch.empty(batch, 1 << 30, dtype=torch.uint8)\n"
        "        y = x + 1\n"
        "    return step\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "vramscope._cli", "trace", str(script), "--max-batch", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["max_batch"] == 39  # as test_max_batch_by_hand
    p = subprocess.run(
        [sys.executable, "-m", "vramscope._cli", "trace", str(script), "--max-batch", "--svg", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 2 and "--svg" in p.stderr


def test_ddp_and_fsdp2_are_refused_with_the_reason() -> None:
    dist = pytest.importorskip("torch.distributed")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=2)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
        with pytest.raises(vramscope.InputError, match="DistributedDataParallel"):
            vramscope.trace(lambda: None, model=ddp)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8))
        fully_shard(net)
        with pytest.raises(vramscope.InputError, match="DTensor"):
            vramscope.trace(lambda: None, model=net)
    finally:
        dist.destroy_process_group()
