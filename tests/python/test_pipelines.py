"""Diffusers pipelines from Python: a MODEL that is a pipeline directory or a pipeline's Hub id
makes ``vramscope.estimate``/``fit``/``inspect`` answer what the CLI prints for it with
``--json``. The Hub is a loopback server this test starts, serving the real FLUX.1-dev and SDXL
base configs (``crates/formats/tests/fixtures/diffusers``, sources in its README); parameter
counts are diffusers' own from models built on the meta device from those files (its
``count_params.py``): FLUX.1-dev 16,870,599,139; SDXL base's UNet 2,567,463,684."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import vramscope
from conftest import REPO, cli_json

FIXTURES = REPO / "crates" / "formats" / "tests" / "fixtures" / "diffusers"
FLUX = FIXTURES / "flux.1-dev"
SHA = "0e9e39f249a16976918f6564b8830bc894c89659"


def _repo_files(folder: Path) -> dict[str, bytes]:
    """The pipeline as the Hub lists it: its configs, a tokenizer file, and weights that must
    never be asked for."""
    files = {"model_index.json": (folder / "model_index.json").read_bytes()}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        files[f"{sub.name}/config.json"] = (sub / "config.json").read_bytes()
        files[f"{sub.name}/diffusion_pytorch_model.safetensors"] = b"never read"
    files["tokenizer/vocab.json"] = b"{}"
    return files


class _Hub(BaseHTTPRequestHandler):
    repos: ClassVar[dict[str, dict[str, bytes]]] = {}
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.asked.append(self.path)
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            files = self.repos.get("/".join(parts[2:4]))
            listing = {"sha": SHA, "siblings": [{"rfilename": f} for f in files or {}]}
            return self._answer(200 if files else 404, json.dumps(listing).encode())
        files = self.repos.get("/".join(parts[:2]), {})
        body = files.get("/".join(parts[4:])) if parts[2:3] == ["resolve"] else None
        self._answer(200 if body is not None else 404, body or b"{}")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A loopback Hub holding SDXL base; HF_ENDPOINT and fresh caches point at it."""
    _Hub.repos = {
        "stabilityai/stable-diffusion-xl-base-1.0": _repo_files(FIXTURES / "sdxl-base-1.0")
    }
    _Hub.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("VRAMSCOPE_CACHE", str(tmp_path / "cache"))
    yield _Hub.asked
    server.shutdown()


def test_pipeline_directory_answers_what_the_cli_prints(cli_bin: str) -> None:
    fields = {"width": 1024, "height": 768, "offload": "model", "gpu": "rtx4090-24gb"}
    report = vramscope.estimate(str(FLUX), **fields)
    flags = ["--width", "1024", "--height", "768", "--offload", "model", "--gpu", "rtx4090-24gb"]
    assert report == cli_json(cli_bin, ["estimate", str(FLUX), *flags])
    assert report["model"]["params_total"] == 16_870_599_139
    assert [p["phase"] for p in report["phases"]][-2:] == ["denoise", "vae_decode"]
    assert vramscope.fit(str(FLUX), **fields) == cli_json(cli_bin, ["fit", str(FLUX), *flags])
    assert vramscope.inspect(FLUX) == cli_json(cli_bin, ["inspect", str(FLUX)])


def test_pipeline_by_hub_id_fetches_configs_only(hub: list[str]) -> None:
    job = {
        "model": "stabilityai/stable-diffusion-xl-base-1.0",
        "precision": "fp16",
        "batch": 2,
        "vae_slicing": True,
    }
    report = vramscope.estimate(job, gpu="l4-24gb")
    assert report["model"]["source"] == "hub"
    assert report["model"]["origin"]["commit"] == SHA
    unet = next(c for c in report["model"]["components"] if c["name"] == "unet")
    assert unet["params"] == 2_567_463_684
    assert report["job"]["vae_slicing"] is True
    assert not any("safetensors" in p or "tokenizer" in p for p in hub), hub
    answer = vramscope.fit(job, gpu="l4-24gb")
    assert answer["gpu"] == "l4-24gb"
    assert answer["side_step"] == 8


def test_fields_a_pipeline_lacks_are_named() -> None:
    with pytest.raises(vramscope.InputError, match="seq"):
        vramscope.estimate(str(FLUX), seq=2048)
    with pytest.raises(vramscope.InputError, match="width"):
        vramscope.estimate(str(FLUX), width=1000)
    with pytest.raises(vramscope.InputError, match="advise"):
        vramscope.estimate(str(FLUX), advise=True)
