"""``vramscope.record`` on the CPU (torch.profiler's memory events): the record it writes is
read by ``analyze``, and what it measures is what the model and optimizer imply, derived here
from parameter counts, not from vramscope's output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import vramscope
from conftest import cli_json, tiny_llama

torch = pytest.importorskip("torch")


def tiny() -> tuple[Any, Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    return model, opt, x, y


def step(model: Any, opt: Any, x: Any, y: Any, rec: Any = None) -> None:
    def phase(name: str) -> Any:
        return rec.phase(name) if rec is not None else _null()

    with phase("forward"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    with phase("backward"):
        loss.backward()
        del loss  # the loss (4 B) would outlive the step otherwise
    with phase("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


def expected_bytes(model: Any) -> tuple[int, int, int, int]:
    """(parameters, gradients, optimizer states, tensors) in bytes for fp32 and AdamW:
    n parameters × 4 B; a gradient per parameter, same dtype; AdamW's exp_avg and exp_avg_sq
    (2 × n × 4 B) plus its `step` counter, a 0-dim float32 tensor per parameter tensor on the
    CPU (torch/optim/adamw.py → adam.py `_init_group`: capturable=False, fused=False)."""
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    k = len(params)
    return n * 4, n * 4, 2 * n * 4 + 4 * k, k


def test_cpu_record_attributes_model_states_exactly(tmp_path: Path, cli_bin: str) -> None:
    model, opt, x, y = tiny()
    step(model, opt, x, y)  # warm-up: AdamW creates its states here
    path = tmp_path / "step.pickle"
    with vramscope.record(path) as rec:
        step(model, opt, x, y, rec)
    report = rec.report()
    p_bytes, g_bytes, s_bytes, _ = expected_bytes(model)
    # 64·128 + 128 + 128·10 + 10 = 9610 parameters → 38,440 B.
    assert p_bytes == 38_440
    held = report["measured"]["per_gpu"]["model_states"]
    assert held["parameters"] == p_bytes
    assert held["gradients"] == g_bytes
    assert held["optimizer_states"] == s_bytes
    at_peak = report["measured"]["per_gpu"]["components"]
    assert at_peak["parameters"] == p_bytes
    assert at_peak["optimizer_states"] == s_bytes

    # The phases, in the order run, in the counters and in the analyzed timeline.
    assert [p["phase"] for p in report["phases"]] == ["forward", "backward", "optimizer"]
    seen = []
    for point in report["measured"]["timeline"]:
        if not seen or seen[-1] != point["phase"]:
            seen.append(point["phase"])
    assert seen == ["setup", "forward", "backward", "optimizer"]

    # Before forward: parameters, AdamW states, and the batch (32×64 fp32 + 32 int64).
    forward = report["phases"][0]
    assert forward["allocated_before"] == p_bytes + s_bytes + 32 * 64 * 4 + 32 * 8
    # zero_grad(set_to_none=True) frees the gradients the step made: the step ends where the
    # forward began.
    assert report["phases"][-1]["allocated_after"] == forward["allocated_before"]
    assert all(p["reserved_delta"] is None for p in report["phases"])  # no allocator on CPU

    # The written file is what `vramscope analyze` reads, and the report holds its answer.
    assert report["measured"] == cli_json(cli_bin, ["analyze", str(path)])
    assert "forward" in str(report) and "KiB" in str(report)


def test_record_with_job_compares_estimate_and_measurement(tmp_path: Path) -> None:
    model = tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 64, (2, 16))
    job = vramscope.job_from(model, opt, batch=2, seq=16)
    with vramscope.record(tmp_path / "llama.pickle", job=job) as rec:
        with rec.phase("forward"):
            loss = model(input_ids=ids, labels=ids).loss
        with rec.phase("backward"):
            loss.backward()
        with rec.phase("optimizer"):
            opt.step()
            opt.zero_grad()
    report = rec.report()
    n = sum(p.numel() for p in model.parameters())
    assert report["measured"]["per_gpu"]["model_states"]["parameters"] == n * 4
    assert "compare" in report
    assert report["compare"] == vramscope.compare(job, tmp_path / "llama.pickle")


def test_record_is_written_when_the_step_raises(tmp_path: Path) -> None:
    model, _opt, x, _y = tiny()
    path = tmp_path / "failed.pickle"
    with (
        pytest.raises(RuntimeError, match="boom"),
        vramscope.record(path) as rec,
        rec.phase("forward"),
    ):
        model(x)
        raise RuntimeError("boom")
    assert path.stat().st_size > 0
    assert vramscope.analyze(path)["per_gpu"]["peak_allocated"] > 0


def test_phase_outside_the_block_is_refused(tmp_path: Path) -> None:
    rec = vramscope.record(tmp_path / "x.pickle")
    with pytest.raises(RuntimeError), rec.phase("forward"):
        pass


def test_gradients_dropped_at_the_top_of_the_step_are_not_counted_twice(tmp_path: Path) -> None:
    """``zero_grad()`` first, as most loops do: the gradients of the previous step were
    allocated before recording began, and the profiler reports no free for them."""
    model, opt, x, y = tiny()

    def loop_step(rec: Any = None) -> None:
        opt.zero_grad(set_to_none=True)
        with rec.phase("forward") if rec else _null():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with rec.phase("backward") if rec else _null():
            loss.backward()
        with rec.phase("optimizer") if rec else _null():
            opt.step()

    loop_step()
    with vramscope.record(tmp_path / "loop.pickle") as rec:
        loop_step(rec)
    p_bytes, g_bytes, s_bytes, _ = expected_bytes(model)
    held = rec.report()["measured"]["per_gpu"]["model_states"]
    assert (held["parameters"], held["gradients"], held["optimizer_states"]) == (
        p_bytes,
        g_bytes,
        s_bytes,
    )


def _at_address(ptr: int, numel: int) -> Any:
    """A new fp32 tensor of ``numel`` elements at the freed address ``ptr``, or None: glibc
    hands a freed block out again to a smaller request (64 tries, the misses released)."""
    misses = []
    for _ in range(64):
        t = torch.zeros(numel)
        if t.data_ptr() == ptr:
            return t
        misses.append(t)
    return None


@pytest.mark.parametrize("becomes", ["temporary", "gradient"])
def test_a_new_tensor_at_a_dropped_gradients_address(tmp_path: Path, becomes: str) -> None:
    """The previous step's gradients are dropped after forward (Lightning's closure runs
    ``zero_grad`` there) and a new tensor takes the first weight's gradient's address. The
    profiler reports no free for a block allocated before it started, so it gave both tensors
    one key and the new one the gradient's category (the Lightning test's 4,752 B of gradients
    for 2,704 B). Each is itself here: the old gradient is in the record from its start, the
    new tensor is a gradient only when it becomes one (assigned as ``model[2].weight.grad``,
    which backward then accumulates into in place)."""
    model, opt, x, y = tiny()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()  # the gradients stay: the recorded step drops them
    weight0 = model[0].weight  # 128 × 64: its gradient is 32,768 B
    old = weight0.grad.data_ptr()
    with vramscope.record(tmp_path / "reuse.pickle") as rec:
        with rec.phase("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        numel = weight0.numel() // 2 if becomes == "temporary" else model[2].weight.numel()
        new = _at_address(old, numel)
        if new is None:
            pytest.skip("the allocator did not hand the gradient's address out again")
        if becomes == "gradient":
            model[2].weight.grad = new.view(10, 128)
        with rec.phase("backward"):
            loss.backward()
            del loss
        with rec.phase("optimizer"):
            opt.step()
        del new
    p_bytes, g_bytes, s_bytes, _ = expected_bytes(model)
    report = rec.report()
    held = report["measured"]["per_gpu"]["model_states"]
    assert (held["parameters"], held["gradients"], held["optimizer_states"]) == (
        p_bytes,
        g_bytes,
        s_bytes,
    )
    # Before forward: parameters, AdamW's states, the old gradients and the batch
    # (32×64 fp32 + 32 int64).
    before = report["phases"][0]["allocated_before"]
    assert before == p_bytes + s_bytes + g_bytes + 32 * 64 * 4 + 32 * 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_record_counters_and_snapshot(tmp_path: Path) -> None:
    """On CUDA: the allocator's counters per phase and a snapshot ``analyze`` reads. The
    parameters are on the device before the step: at least their bytes, each tensor rounded
    up to the caching allocator's 512 B blocks (c10/cuda/CUDACachingAllocator.cpp
    ``round_size``), are allocated when forward begins."""
    model, opt, x, y = tiny()
    model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = x.cuda(), y.cuda()
    step(model, opt, x, y)
    with vramscope.record(tmp_path / "cuda.pickle") as rec:
        step(model, opt, x, y, rec)
    report = rec.report()
    assert report["backend"] == "cuda"
    assert [p["phase"] for p in report["phases"]] == ["forward", "backward", "optimizer"]
    rounded = sum(-(-p.numel() * 4 // 512) * 512 for p in model.parameters())
    forward = report["phases"][0]
    assert forward["allocated_before"] >= 3 * rounded  # parameters and AdamW's two moments
    assert all(p["reserved_before"] is not None for p in report["phases"])
    assert all(p["peak_allocated"] >= p["allocated_after"] for p in report["phases"])
    assert report["measured"]["source"]["kind"] == "cuda_snapshot"
