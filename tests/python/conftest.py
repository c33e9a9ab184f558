"""Shared fixtures of the Python package's tests: the CLI binary the API is compared with
(``$VRAMSCOPE_BIN``, else target/debug/vramscope), run without the network."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("RUST_BACKTRACE", None)


def _bin() -> str:
    return os.environ.get("VRAMSCOPE_BIN") or str(REPO / "target" / "debug" / "vramscope")


@pytest.fixture(scope="session")
def cli_bin() -> str:
    path = _bin()
    if not os.path.exists(path):
        pytest.fail(
            f"the CLI binary {path} is missing (cargo build -p vramscope, or VRAMSCOPE_BIN)"
        )
    return path


def run_cli(bin_path: str, args: list[str]) -> tuple[int, str, str]:
    """The CLI's exit code, stdout and stderr."""
    env = dict(os.environ, NO_COLOR="1")
    p = subprocess.run(
        [bin_path, *args], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    return p.returncode, p.stdout, p.stderr


def cli_json(bin_path: str, args: list[str]) -> Any:
    code, out, err = run_cli(bin_path, [*args, "--json"])
    assert code == 0, err
    return json.loads(out)


def tiny_llama(kv_heads: int = 4) -> Any:
    """A two-layer Llama of width 32 (vocabulary 64, 4 heads, ``kv_heads`` key-value heads),
    seeded, on the CPU: the model the Python tests record, estimate and compare."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        vocab_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)
