"""The Python API answers exactly what the CLI prints with ``--json`` (the same Rust functions
behind both), and refuses bad input with the CLI's one-line message as ``InputError``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import vramscope
from conftest import REPO, cli_json, run_cli

# Jobs covering the estimator's paths: a preset in training (AdamW, autocast), inference with
# generation, an inline config, QLoRA, ZeRO-3 on 8 GPUs, a bare parameter count, vLLM.
JOBS: dict[str, dict[str, Any]] = {
    "gpt2-train": {
        "model": "gpt2",
        "task": "train",
        "batch": 4,
        "seq": 512,
        "precision": "bf16-mixed",
        "optimizer": "adamw",
        "gpu": "a100-80gb",
    },
    "llama8b-infer": {
        "model": "llama-3.1-8b",
        "task": "infer",
        "batch": 8,
        "seq": 2048,
        "new_tokens": 256,
        "precision": "bf16",
        "gpu": "h100-80gb",
    },
    "inline-llama": {
        "model": {
            "hf_config": {
                "model_type": "llama",
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 4,
                "vocab_size": 1000,
                "max_position_embeddings": 512,
            }
        },
        "batch": 2,
        "seq": 128,
        "optimizer": "sgd",
        "precision": "fp32",
    },
    "mistral-qlora": {
        "model": "mistral-7b-v0.1",
        "batch": 1,
        "seq": 1024,
        "peft": {
            "method": "qlora",
            "rank": 16,
            "alpha": 32,
            "targets": ["q_proj", "k_proj", "v_proj", "o_proj"],
        },
        "optimizer": "adamw-8bit",
        "checkpointing": "full",
        "gpu": "l4-24gb",
    },
    "zero3": {
        "model": "llama-3.1-8b",
        "batch": 1,
        "seq": 4096,
        "framework": "deepspeed",
        "parallel": {"gpus": 8, "zero": 3},
        "gpu": "a100-80gb",
    },
    "params-only": {"model": {"params": 7.5e9}, "optimizer": "adamw"},
    "vllm": {
        "model": "qwen2.5-7b",
        "task": "infer",
        "framework": "vllm",
        "batch": 16,
        "seq": 1024,
        "new_tokens": 512,
        "gpu": "a100-80gb",
    },
}


def write_job(tmp_path: Path, name: str, job: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(job))
    return str(path)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_estimate_equals_cli_json(name: str, tmp_path: Path, cli_bin: str) -> None:
    job = JOBS[name]
    expected = cli_json(cli_bin, ["estimate", "--job", write_job(tmp_path, name, job)])
    got = vramscope.estimate(job)
    assert got == expected
    assert isinstance(got, dict)
    assert json.loads(json.dumps(got)) == expected  # still plain JSON-serialisable data


def test_estimate_model_string_with_fields(tmp_path: Path, cli_bin: str) -> None:
    expected = cli_json(
        cli_bin,
        [
            "estimate",
            "gpt2",
            "--batch",
            "2",
            "--seq",
            "256",
            "--optimizer",
            "sgd",
            "--gpu",
            "t4-16gb",
        ],
    )
    assert vramscope.estimate("gpt2", batch=2, seq=256, optimizer="sgd", gpu="t4-16gb") == expected


def test_estimate_advise_equals_cli(tmp_path: Path, cli_bin: str) -> None:
    job = {"model": "llama-3.1-8b", "batch": 8, "seq": 4096, "gpu": "a100-40gb"}
    expected = cli_json(cli_bin, ["estimate", "--job", write_job(tmp_path, "a", job), "--advise"])
    got = vramscope.estimate(job, advise=True)
    assert got == expected
    assert "advice" in got


def test_fit_plan_inspect_models_gpus_equal_cli(tmp_path: Path, cli_bin: str) -> None:
    fit_job = JOBS["gpt2-train"]
    path = write_job(tmp_path, "fit", fit_job)
    assert vramscope.fit(fit_job) == cli_json(cli_bin, ["fit", "--job", path])
    plan_job = {"model": "llama-3.1-8b", "batch": 1, "seq": 4096, "gpu": "h100-80gb"}
    path = write_job(tmp_path, "plan", plan_job)
    assert vramscope.plan(plan_job, gpus=8, top=3) == cli_json(
        cli_bin, ["plan", "--job", path, "--gpus", "8", "--top", "3"]
    )
    assert vramscope.inspect("gpt2") == cli_json(cli_bin, ["inspect", "gpt2"])
    assert vramscope.models() == cli_json(cli_bin, ["models"])
    assert vramscope.gpus() == cli_json(cli_bin, ["gpus"])


def test_analyze_path_and_bytes_equal_cli(cli_bin: str) -> None:
    fixtures = REPO.parent / "shared" / "fixtures"
    records = sorted(
        p
        for p in (fixtures / "real-snapshots").glob("*training*.pickle")
        if p.stat().st_size < 5_000_000
    )
    if not records:
        pytest.skip("no snapshot fixture in ../shared/fixtures")
    record = records[0]
    expected = cli_json(cli_bin, ["analyze", str(record)])
    assert vramscope.analyze(record) == expected
    from_bytes = vramscope.analyze(record.read_bytes())
    assert from_bytes["per_gpu"] == expected["per_gpu"]
    assert from_bytes["timeline"] == expected["timeline"]


@pytest.mark.parametrize(
    "call, argv",
    [
        (lambda: vramscope.estimate("gpt2", batch=0), ["estimate", "gpt2", "--batch", "0"]),
        (
            lambda: vramscope.estimate("gpt2", precision="fp7"),
            ["estimate", "gpt2", "--precision", "fp7"],
        ),
        (
            lambda: vramscope.inspect("/nonexistent/model.safetensors"),
            ["inspect", "/nonexistent/model.safetensors"],
        ),
        (
            lambda: vramscope.estimate("gpt2", gpu="no-such-gpu"),
            ["estimate", "gpt2", "--gpu", "no-such-gpu"],
        ),
    ],
)
def test_errors_raise_input_error_with_cli_text(call: Any, argv: Any, cli_bin: str) -> None:
    code, _, err = run_cli(cli_bin, [*argv, "--json"])
    assert code == 2
    assert err.startswith("error: ")
    with pytest.raises(vramscope.InputError) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert info.value.exit_code == 2
    assert str(info.value) == err.strip()[len("error: ") :]


def test_analyze_garbage_raises_the_cli_message(tmp_path: Path, cli_bin: str) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\x01 not a record")
    code, _, err = run_cli(cli_bin, ["analyze", str(bad), "--json"])
    assert code == 2
    with pytest.raises(vramscope.InputError) as info:
        vramscope.analyze(bad)
    assert str(info.value) == err.strip()[len("error: ") :]
    with pytest.raises(vramscope.InputError):
        vramscope.analyze(b"")


def test_report_renders_as_the_picture() -> None:
    report = vramscope.estimate("gpt2", batch=2, seq=128)
    svg = vramscope.picture(report)
    assert svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert report._repr_svg_() == svg
    assert report._repr_html_() == svg


def test_console_script_runs_the_cli_in_process(cli_bin: str) -> None:
    """``vramscope`` from the wheel: same stdout, stderr line and exit codes as the binary."""
    script = [sys.executable, "-m", "vramscope._cli"]
    for argv in (
        ["estimate", "gpt2", "--json"],
        ["estimate", "gpt2", "--batch", "0"],
        ["models", "--json"],
    ):
        p = subprocess.run(
            [*script, *argv],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
            env={"NO_COLOR": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        )
        code, out, err = run_cli(cli_bin, argv)
        assert (p.returncode, p.stdout, p.stderr) == (code, out, err)
    fits = ["estimate", "llama-3.1-70b", "--gpu", "t4-16gb", "--require-fit"]
    p = subprocess.run([*script, *fits], check=False, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 == run_cli(cli_bin, fits)[0]


@pytest.mark.parametrize(
    ("keywords", "argv"),
    [
        # The call: the README promises keywords mirror the command's flags.
        ({"lora": 16, "tp": 2}, ["--lora", "16", "--tp", "2"]),
        (
            {"qlora": 8, "lora_targets": ["q_proj", "v_proj"], "gpus": 4, "zero": 3},
            ["--qlora", "8", "--lora-targets", "q_proj,v_proj", "--gpus", "4", "--zero", "3"],
        ),
        (
            {"task": "infer", "framework": "vllm", "gpu_memory_utilization": 0.8, "gpu": "l4-24gb"},
            ["--task", "infer", "--framework", "vllm", "--gpu-memory-utilization", "0.8"]
            + ["--gpu", "l4-24gb"],
        ),
        (
            {"alloc_conf": "expandable_segments:True", "compile": True},
            ["--alloc-conf"] + ["expandable_segments:True", "--compile"],
        ),
    ],
)
def test_keywords_take_what_the_flags_take(
    keywords: dict[str, Any], argv: list[str], cli_bin: str
) -> None:
    """``estimate(MODEL, **keywords)`` is ``vramscope estimate MODEL FLAGS --json``: the same
    job (LoRA rank 16 and tp 2 for the first) and so the same report."""
    report = vramscope.estimate("llama-3.1-8b", **keywords)
    assert report == cli_json(cli_bin, ["estimate", "llama-3.1-8b", *argv])
    if "lora" in keywords:
        assert report["job"]["peft"]["rank"] == 16
        assert report["job"]["parallel"]["tp"] == 2


def test_unknown_keyword_names_itself_and_the_nearest_flag() -> None:
    with pytest.raises(vramscope.InputError) as info:
        vramscope.estimate("gpt2", lorra=16)
    assert str(info.value).startswith("lorra: not a job field nor a flag")
    assert "did you mean 'lora'" in str(info.value)
    with pytest.raises(vramscope.InputError) as info:
        vramscope.estimate("gpt2", tp={"size": 2})
    assert str(info.value).startswith("tp: takes what --tp takes")
