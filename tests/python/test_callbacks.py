"""The trainer callbacks on a tiny model for two steps on the CPU: step 2 is recorded, the
record and its report land in the run's directory, and the peak per category reaches the
trainer's loggers. Expected bytes come from parameter counts (fp32: 4 B each; AdamW: two
moments of 4 B plus a 4 B `step` counter per parameter tensor, torch/optim/adam.py
`_init_group`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import tiny_llama

torch = pytest.importorskip("torch")


def adamw_bytes(model: Any) -> dict[str, int]:
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    return {
        "parameters": n * 4,
        "gradients": n * 4,
        "optimizer_states": 2 * n * 4 + 4 * len(params),
    }


def test_transformers_callback_records_step_two(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from vramscope.integrations.transformers import MemoryCallback

    model = tiny_llama()
    ids = torch.randint(0, 64, (8, 16))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        optim="adamw_torch",
        disable_tqdm=True,
    )
    cb = MemoryCallback(step=2)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    trainer.train()

    record = tmp_path / "vramscope-step2.pickle"
    report_file = tmp_path / "vramscope-step2.json"
    assert record.exists() and report_file.exists()
    assert not (tmp_path / "vramscope-step1.pickle").exists()
    report = json.loads(report_file.read_text())
    assert report == json.loads(json.dumps(cb.report))
    assert [p["phase"] for p in report["phases"]] == ["forward", "backward", "optimizer"]

    want = adamw_bytes(model)
    held = report["measured"]["per_gpu"]["model_states"]
    for name in ("parameters", "gradients", "optimizer_states"):
        assert held[name] == want[name], name

    logged = [h for h in trainer.state.log_history if "vramscope/peak_allocated" in h]
    assert len(logged) == 1 and logged[0]["step"] == 2
    comps = report["measured"]["per_gpu"]["components"]
    assert logged[0]["vramscope/parameters"] == comps["parameters"] == want["parameters"]
    assert logged[0]["vramscope/peak_allocated"] == report["measured"]["per_gpu"]["peak_allocated"]


def test_lightning_callback_records_step_two(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger

    from vramscope.integrations.lightning import MemoryCallback

    class Tiny(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
            )

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 16), torch.randint(0, 4, (16,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    module = Tiny()
    cb = MemoryCallback(step=2)
    logger = CSVLogger(str(tmp_path), name="run")
    trainer = pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=[cb],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        log_every_n_steps=1,
    )
    trainer.fit(module, loader)

    log_dir = Path(trainer.log_dir)
    assert (log_dir / "vramscope-step2.pickle").exists()
    report = json.loads((log_dir / "vramscope-step2.json").read_text())
    assert [p["phase"] for p in report["phases"]] == ["forward", "backward", "optimizer"]
    want = adamw_bytes(module)
    held = report["measured"]["per_gpu"]["model_states"]
    for name in ("parameters", "gradients", "optimizer_states"):
        assert held[name] == want[name], name

    logger.save()
    with open(log_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("vramscope/parameters")]
    assert len(rows) == 1
    assert float(rows[0]["vramscope/parameters"]) == want["parameters"]
