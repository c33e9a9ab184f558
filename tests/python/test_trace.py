"""``vramscope.trace``: a step run on fake tensors, its record read by ``analyze``.

The expected bytes come from outside vramscope: a tiny model's parameters, gradients and AdamW
states counted by hand below, and the real CPU steps of ``../shared/measure/measure.py``
(``../shared/validation/dev-cases-cpu-measured.json``: each case's note states the measured
steady-state peak and the components at it, tensor by tensor, rounded to 512 B as CUDA's
allocator counts them, with CUDA's autocast lists, dropout and foreach AdamW/SGD emulated on
the CPU — what ``trace(..., device="cuda")`` emulates).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import vramscope
from conftest import REPO

torch = pytest.importorskip("torch")

MEASURED = REPO.parent / "shared" / "validation" / "dev-cases-cpu-measured.json"


def r512(n: int) -> int:
    """CUDA's caching allocator's block for n bytes (c10 ``round_size``: a multiple of 512)."""
    return 512 * ((n + 511) // 512)


class Tiny(torch.nn.Module):  # type: ignore[misc]
    """A model of our own (not in transformers): 64 → 128 → 10 with a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 10)

    def forward(self, x: Any) -> Any:
        return self.down(torch.relu(self.up(x)))


def tiny_step(device: str = "cpu") -> tuple[Any, Any, Any]:
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        x = torch.randn(32, 64)
        y = torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, opt, step


def traced_tiny(device: str) -> Any:
    """The report of Tiny's AdamW step (`tiny_step`) traced as if on `device`."""
    model, opt, step = tiny_step()
    return vramscope.trace(step, model=model, optimizer=opt, device=device)


# Tiny's tensors in fp32: up.weight 128×64 = 32768 B, up.bias 128 = 512 B, down.weight 10×128 =
# 5120 B, down.bias 10 = 40 B (a 512 B block on CUDA).
TINY_PARAM_BLOCKS = r512(32768) + r512(512) + r512(5120) + r512(40)  # 38912
TINY_PARAM_EXACT = 32768 + 512 + 5120 + 40  # 38440


def test_a_custom_model_traced_on_cuda_counts_its_states_by_hand() -> None:
    r = traced_tiny("cuda")
    c = r["per_gpu"]["components"]
    # Parameters: one block each. AdamW: exp_avg and exp_avg_sq per parameter (the step
    # counters live on the host for CUDA training). Gradients are freed by zero_grad at the
    # step's end, so at the peak (AdamW's step: the foreach sqrt(v) scratch beside the
    # gradients) they are all alive: one per parameter.
    assert c["parameters"] == TINY_PARAM_BLOCKS
    assert c["optimizer_states"] == 2 * TINY_PARAM_BLOCKS
    assert c["gradients"] == TINY_PARAM_BLOCKS
    assert r["per_gpu"]["peak_phase"] == "optimizer"
    # At the peak, foreach AdamW's sqrt(exp_avg_sq): one scratch per parameter, alive together.
    assert c["temporaries"] == TINY_PARAM_BLOCKS
    # Still referenced by the step's locals, made in the forward and alive into the backward:
    # x (32×64 fp32 = 8192 B), y (32 int64 = 256 B → a 512 B block), the loss (4 B → 512 B).
    assert c["activations"] == 8192 + 512 + 512
    # parameters + gradients + two states + the scratch: five blocks of each tensor.
    assert r["per_gpu"]["peak_allocated"] == 5 * TINY_PARAM_BLOCKS + 8192 + 512 + 512
    assert r["source"]["kind"] == "traced_snapshot"
    assert r["timeline"], "a timeline of the step"


def test_cpu_behaviour_keeps_exact_bytes_and_the_for_loop_optimizer() -> None:
    r = traced_tiny("cpu")
    c = r["per_gpu"]["components"]
    # On the CPU nothing is rounded, and AdamW's default is the per-parameter loop: at most one
    # parameter's sqrt scratch at a time (the largest, up.weight: 32768 B, and its quotient).
    assert c["parameters"] == TINY_PARAM_EXACT
    assert c["optimizer_states"] == 2 * TINY_PARAM_EXACT
    # The peak: up.weight's update, `exp_avg_sq.sqrt()` and its quotient by the bias correction
    # (2 × 32768 B) beside every gradient; x (8192 B), y (256 B) and the loss (4 B) still held.
    assert c["temporaries"] == 2 * 32768
    # parameters + gradients + two states: four of each tensor.
    assert r["per_gpu"]["peak_allocated"] == 4 * TINY_PARAM_EXACT + 2 * 32768 + 8192 + 256 + 4


def test_a_model_on_the_meta_device_is_traced_without_its_weights() -> None:
    with torch.device("meta"):
        model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    c = vramscope.trace(step, model=model, optimizer=opt)["per_gpu"]["components"]
    assert c["parameters"] == TINY_PARAM_BLOCKS
    assert c["optimizer_states"] == 0  # plain SGD keeps no state


def test_an_op_without_a_fake_kernel_is_named() -> None:
    lib = torch.library.Library("vramscope_test", "DEF")
    lib.define("opaque(Tensor x) -> Tensor")
    lib.impl("opaque", lambda x: x.clone(), "CPU")
    model, opt, _ = tiny_step()

    def step() -> None:
        torch.ops.vramscope_test.opaque(model(torch.randn(2, 64))).sum().backward()

    with pytest.raises(vramscope.InputError, match="vramscope_test::opaque"):
        vramscope.trace(step, model=model, optimizer=opt)


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(vramscope.InputError, match="device"):
        vramscope.trace(lambda: None, device="tpu")
    with pytest.raises(vramscope.InputError, match="steps"):
        vramscope.trace(lambda: None, steps=0)


def test_compare_and_fit_read_the_trace(tmp_path: Path) -> None:
    model, opt, step = tiny_step()
    data = vramscope._trace.record_bytes(step, model, opt, "cuda", 2)
    job = {"model": "llama-3.2-1b", "task": "train", "batch": 1, "seq": 128, "gpu": "h100-80gb"}
    rows = {r["category"]: r for r in vramscope.compare(job, data)["rows"]}
    assert rows["parameters"]["measured"] == TINY_PARAM_BLOCKS
    assert rows["optimizer_states"]["measured"] == 2 * TINY_PARAM_BLOCKS
    path = tmp_path / "tiny.trace.pickle"
    path.write_bytes(data)
    assert vramscope.analyze(path)["per_gpu"] == vramscope.analyze(data)["per_gpu"]
    assert "max_batch" in vramscope.fit(job, measured=path)


# ---- agreement with real CPU steps ------------------------------------------------------------


def _measured_cases() -> list[dict[str, Any]]:
    if not MEASURED.exists():
        return []
    out: dict[str, dict[str, Any]] = {}
    for c in json.loads(MEASURED.read_text()):
        out.setdefault(c["source_id"], c)
    return list(out.values())


def _hf_step(job: dict[str, Any]) -> tuple[Any, Any, Any]:
    """measure.py's step (../shared/measure/measure.py), the model built on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    cfg = copy.deepcopy(job["model"]["hf_config"])
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    masked = model_type == "bert"
    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, attn_implementation=job["attention"], dtype=torch.float32)
    model.train()
    if job["precision"] == "bf16":
        model.to(torch.bfloat16)
    if job["checkpointing"] == "full":
        model.gradient_checkpointing_enable()
    params = [p for p in model.parameters() if p.requires_grad]
    if job["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-4)
    else:
        opt = torch.optim.SGD(params, lr=1e-3)
    ids = torch.randint(0, config.vocab_size, (job["batch"], job["seq"]))
    kwargs: dict[str, Any] = {"input_ids": ids, "labels": ids.clone()}
    if not masked:
        kwargs["use_cache"] = False
    mixed = job["precision"] == "bf16-mixed"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        if mixed:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**kwargs).loss
        else:
            loss = model(**kwargs).loss
        loss.backward()
        opt.step()

    return model, opt, step


@pytest.mark.parametrize("case", _measured_cases(), ids=lambda c: c["source_id"])
def test_trace_agrees_with_the_real_cpu_step(case: dict[str, Any]) -> None:
    note = case["note"]
    peak = int(re.search(r"Steady-state peak ([\d,]+) B", note).group(1).replace(",", ""))  # type: ignore[union-attr]
    comps = json.loads(re.search(r"Components at the peak: (\{.*?\})", note).group(1))  # type: ignore[union-attr]
    model, opt, step = _hf_step(case["job"])
    r = vramscope.trace(step, model=model, optimizer=opt, device="cuda")
    got = r["per_gpu"]
    assert abs(got["peak_allocated"] - peak) <= 0.005 * peak, (got["peak_allocated"], peak)
    assert got["peak_phase"] == re.search(r"Steady-state peak [^)]*\) in (\w+)", note).group(1)  # type: ignore[union-attr]
    for k in ("parameters", "gradients", "optimizer_states", "activations", "temporaries"):
        want = comps[k]
        assert abs(got["components"][k] - want) <= max(0.01 * want, 0.0005 * peak), (
            k,
            got["components"][k],
            want,
        )


def test_the_measured_cases_are_there() -> None:
    if not Path(MEASURED).exists():
        pytest.skip("../shared/validation is not beside the repository")
    assert len(_measured_cases()) >= 10


SCRIPT = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))

with torch.device("meta"):
    model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

def step():
    model(torch.randn(32, 64)).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

if __name__ == "__main__":
    raise SystemExit("the training loop must not run under vramscope trace")
"""


def test_the_trace_command_runs_a_scripts_step(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    p = subprocess.run(
        [sys.executable, "-m", "vramscope._cli", "trace", str(script), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)["per_gpu"]["components"]
    assert c["parameters"] == TINY_PARAM_BLOCKS  # Net is Tiny: the same four tensors
    assert c["optimizer_states"] == 2 * TINY_PARAM_BLOCKS


def test_the_trace_command_needs_a_step(tmp_path: Path) -> None:
    script = tmp_path / "nostep.py"
    script.write_text("x = 1\n")
    p = subprocess.run(
        [sys.executable, "-m", "vramscope._cli", "trace", str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert p.returncode == 2
    assert "defines no step() function" in p.stderr
