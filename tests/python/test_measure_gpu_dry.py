"""The GPU measurement script (validation/gpu/measure_gpu.py) run in its CPU dry mode, so it
cannot rot between the rare runs on a GPU; and the spec list it will run there.

The dry run goes through the same code as the GPU run (fresh process per spec, model built from
its config, phases, JSONL written as each spec ends, job JSON, case derivation); only the
CUDA-only readings are null and the allocator counters come from a CPU stand-in.
"""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU = os.path.join(REPO, "validation", "gpu")
sys.path.insert(0, GPU)

import measure_gpu  # noqa: E402
import snapshots  # noqa: E402

DRY_SPECS = ["llama8b-infer-static-b4-p1024-n128",       # generate, static cache
             "qwen0.5b-bf16mix-adamw-sdpa-full-b4s1024",  # autocast, AdamW foreach, checkpointing
             "smollm2-snap-bf16-lora16-sdpa-b4s512"]      # peft LoRA, pure bf16, snapshot spec
CONTRACT_JOB_KEYS = {"model", "task", "batch", "grad_accum", "seq", "precision", "optimizer",
                     "checkpointing", "attention", "peft", "weights", "framework", "parallel",
                     "engine", "gpu", "new_tokens", "kv_dtype"}


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    d = tmp_path_factory.mktemp("dry")
    out = d / "results.jsonl"
    p = subprocess.run([sys.executable, os.path.join(GPU, "measure_gpu.py"), "--dry-run",
                        "--out", str(out), "--snapshots", str(d / "snapshots"),
                        "--only", ",".join(DRY_SPECS)], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return d, out, lines, {x["id"]: x for x in lines if x.get("type") == "result"}


def test_jsonl_has_header_results_in_spec_order_and_end(dry):
    _, _, lines, _ = dry
    assert lines[0]["type"] == "run" and lines[0]["dry_run"] is True
    assert lines[0]["command"] and lines[0]["date"]
    assert [x["id"] for x in lines[1:-1]] == DRY_SPECS  # the file's order (specs.json)
    assert lines[-1]["type"] == "end" and lines[-1]["counts"] == {"ok": 3}


def test_each_result_is_ok_with_contract_job_and_null_cuda_readings(dry):
    _, _, _, res = dry
    for sid, r in res.items():
        assert r["status"] == "ok", (sid, r.get("error"), r.get("log_tail"))
        assert set(r["job"]) == CONTRACT_JOB_KEYS, sid
        assert r["job"]["model"]["hf_config"] == r["spec"]["hf_config"]
        assert r["job"]["gpu"] is None  # the dry run ran on no GPU
        assert r["context"] is None
        m = r["measured"]
        assert m["peak_reserved"] is None and m["device_total"] is None
        assert m["num_alloc_retries"] is None
        for s in r["steps"]:
            assert s["end"]["nvml_process_used"] is None and s["end"]["mem_get_info"] is None


def test_tiny_models_have_the_hand_counted_sizes(dry):
    _, _, _, res = dry
    # Tiny Llama-3.1 (h 64, 2 layers, 4 heads of 16, 2 KV heads, FFN 128, vocab 512, untied):
    # per layer q 64*64 + k 64*32 + v 64*32 + o 64*64 + 3*64*128 + 2 norms*64 = 36,992;
    # 2 layers 73,984 + embedding 32,768 + lm_head 32,768 + final norm 64 = 139,584.
    r = res["llama8b-infer-static-b4-p1024-n128"]
    assert r["params_total"] == 139_584
    # Its bytes in bf16, each tensor rounded up to 512 B: per layer q 8,192 + k 4,096 + v 4,096
    # + o 8,192 + 3 * 16,384 + 2 norms * 512 = 74,752; x2 = 149,504; + embedding 65,536 +
    # lm_head 65,536 + final norm 512 = 281,088; + the rotary inv_freq and its
    # original_inv_freq copy (8 fp32 each: 512 + 512) = 282,112.
    assert r["after_build"]["allocated"] == 282_112
    # generate starts with input_ids (1 x 16 int64 = 128 B -> 512) and the mask (512) added.
    assert r["steps"][-1]["phases"][0]["start_allocated"] == 282_112 + 1_024
    # Tiny Qwen2.5 (tied, q/k/v biases): per layer 4,096+64 + 2,048+32 + 2,048+32 + 4,096 +
    # 24,576 + 128 = 37,120; x2 = 74,240 + embedding 32,768 + final norm 64 = 107,072.
    assert res["qwen0.5b-bf16mix-adamw-sdpa-full-b4s1024"]["params_total"] == 107_072
    # LoRA r16 on q/k/v/o of tiny SmolLM2 (h 64, 4 heads of 16, 2 KV heads): per layer
    # q,o: 16*(64+64) = 2,048 each; k,v: 16*(64+32) = 1,536 each -> 7,168; x2 layers = 14,336.
    assert res["smollm2-snap-bf16-lora16-sdpa-b4s512"]["params_trainable"] == 14_336


def check_phases(sid, phases):
    for p in phases:
        assert p["peak_allocated"] >= p["start_allocated"], (sid, p)
        assert p["peak_allocated"] >= p["end_allocated"], (sid, p)
    for a, b in zip(phases, phases[1:]):
        assert b["start_allocated"] <= a["end_allocated"], (sid, a["phase"], b["phase"])


def test_phase_figures_are_consistent(dry):
    _, _, _, res = dry
    for sid, r in res.items():
        steps = r["steps"]
        for s in steps:
            check_phases(sid, s["phases"])
        measured = [p for s in steps if s["measured"] for p in s["phases"]]
        m = r["measured"]
        assert m["peak_allocated"] == max(p["peak_allocated"] for p in measured)
        if r["spec"]["task"] == "train":
            assert [p["phase"] for p in steps[-1]["phases"]] == \
                ["zero_grad", "forward", "backward", "optimizer"]
            last = max(steps[-1]["phases"], key=lambda p: p["peak_allocated"])
            assert m["peak_phase"] == last["phase"]
            # nothing happens between steps: step 2 starts where step 1's optimizer ended
            first, second = steps[0]["phases"], steps[1]["phases"]
            assert second[0]["start_allocated"] == first[-1]["end_allocated"]
        else:
            g = steps[-1]["phases"][0]
            parts = {p["phase"]: p for p in g["parts"]}
            assert parts["prefill"]["count"] == 1
            assert parts["decode"]["count"] == r["spec"]["new_tokens"] - 1
            assert g["generated_tokens"] == r["spec"]["new_tokens"]
            assert g["peak_allocated"] == max(p["peak_allocated"] for p in g["parts"])
            assert m["peak_phase"] == max(g["parts"], key=lambda p: p["peak_allocated"])["phase"]


def test_cases_from_dry_results(dry):
    d, out, _, res = dry
    script = os.path.join(REPO, "scripts", "gpu_cases_from_results.py")
    refused = subprocess.run([sys.executable, script, str(out)], capture_output=True, text=True)
    assert refused.returncode == 0 and json.loads(refused.stdout) == []
    p = subprocess.run([sys.executable, script, str(out), "--allow-dry"], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    cases = json.loads(p.stdout)
    # a dry run has no reserved or device-total figure: one allocated case per spec
    assert sorted(c["id"] for c in cases) == sorted(f"gpu-{s}-allocated" for s in DRY_SPECS)
    for c in cases:
        r = res[c["source_id"][len("gpu-"):]]
        assert c["kind"] == "dry-run" and c["metric"] == "per_gpu.peak_allocated"
        assert c["expected_bytes"] == r["measured"]["peak_allocated"]
        assert c["job"] == r["job"]
        assert c["provenance"]["command"].count("--dry-run") == 1
        assert c["provenance"]["torch"] == r["versions"]["torch"]
    bin_path = os.environ.get("VRAMSCOPE_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "debug", "vramscope")
    assert os.path.exists(bin_path), f"{bin_path} missing: run cargo test (scripts/test.sh) first"
    for c in cases:
        job = d / "job.json"
        job.write_text(json.dumps(c["job"]))
        e = subprocess.run([bin_path, "estimate", "--job", str(job), "--json"],
                           capture_output=True, text=True)
        assert e.returncode == 0, (c["id"], e.stderr)
        assert json.loads(e.stdout)["job"]["task"] == c["job"]["task"]


def test_snapshot_store_keeps_gzips_or_drops_by_size(tmp_path):
    small = tmp_path / "a"
    small.write_bytes(b"\x80" + b"x" * 999)
    got = snapshots.store_snapshot(str(small), str(tmp_path), "s1", limit=1000)
    assert got["file"] == "snapshot-s1.pickle" and got["bytes"] == 1000 and not got["gzipped"]
    big = tmp_path / "b"
    big.write_bytes(b"\x80" + b"x" * 5000)  # compresses far under 1,000 B
    got = snapshots.store_snapshot(str(big), str(tmp_path), "s2", limit=1000)
    assert got["file"] == "snapshot-s2.pickle.gz" and got["gzipped"] and got["bytes"] <= 1000
    noise = tmp_path / "c"
    noise.write_bytes(os.urandom(5000))  # random bytes do not compress
    got = snapshots.store_snapshot(str(noise), str(tmp_path), "s3", limit=1000)
    assert got["file"] is None and got["dropped"]
    assert sorted(os.listdir(tmp_path)) == ["snapshot-s1.pickle", "snapshot-s2.pickle.gz"]


def test_spec_list_covers_the_mechanisms_and_fits_the_budget():
    specs = [measure_gpu.resolve_spec(s, dry=False)
             for s in measure_gpu.load_specs(os.path.join(GPU, "specs.json"))]
    assert 28 <= len(specs) <= 34
    train = [s for s in specs if s["task"] == "train"]
    infer = [s for s in specs if s["task"] == "infer"]
    assert {s["precision"] for s in train} == {"fp32", "bf16", "bf16-mixed"}
    assert {s["optimizer"] for s in train} >= {"adamw", "adamw-fused", "sgd"}
    assert {s["checkpointing"] for s in train} == {"none", "full"}
    assert {s["attention"] for s in train} == {"eager", "sdpa"}
    assert any(s.get("peft") for s in train)
    assert {s["hf_config"]["model_type"] for s in specs} >= {"llama", "qwen2", "gpt2"}
    static = {(s["hf_config"]["model_type"], s["seq"]) for s in infer if s["cache"] == "static"}
    assert len(static) >= 2
    envs = [s.get("env") or {} for s in specs]
    assert sum(e.get("CUDA_MODULE_LOADING") == "EAGER" for e in envs) == 1
    assert sum(e.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True" for e in envs) == 1
    assert 2 <= sum(bool(s.get("snapshot")) for s in specs) <= 3
    # two batch x seq points of every training configuration that has a slope partner
    key = (lambda s: (s["preset"], s["precision"], s["optimizer"], s["checkpointing"],
                      s["attention"], bool(s.get("peft")), json.dumps(s.get("env"))))
    pairs = {}
    for s in train:
        pairs.setdefault(key(s), set()).add(s["batch"] * s["seq"])
    assert sum(len(v) >= 2 for v in pairs.values()) >= 4
    # the script's own estimate of the whole list stays inside the device command's budget
    assert sum(measure_gpu.est_seconds(s) for s in specs) <= 520


def test_gpu_ids_from_nvml_names():
    import run_one
    assert run_one.gpu_id("NVIDIA H200", 150_754_820_096) == "h200-141gb"  # 143,771 MiB
    assert run_one.gpu_id("NVIDIA H100 80GB HBM3", 85_520_809_984) == "h100-80gb"
    assert run_one.gpu_id("NVIDIA A100-SXM4-40GB", 42_949_672_960) == "a100-40gb"
    assert run_one.gpu_id("NVIDIA A100-SXM4-80GB", 85_899_345_920) == "a100-80gb"
    assert run_one.gpu_id("NVIDIA H100 NVL", 100_000_000_000) is None  # 93 GiB: not in the catalog
    assert run_one.gpu_id("NVIDIA L40", 48_305_799_168) is None  # not an L4, not an L40S
    assert run_one.gpu_id("NVIDIA A10", 25_769_803_776) == "a10-24gb"
    assert run_one.gpu_id(None, None) is None


def test_cases_from_a_gpu_shaped_result(dry, tmp_path):
    """The converter on a result shaped as the GPU writes it (figures chosen here): reserved and
    device-total cases appear, except under a non-default allocator setting; NVML's device-wide
    reading stands in when the process figure is missing; EAGER loading and the PyTorch release
    go to job_if_supported, and so does the transformers release."""
    _, _, lines, res = dry
    header = dict(lines[0], dry_run=False)
    base = res["qwen0.5b-bf16mix-adamw-sdpa-full-b4s1024"]
    a = json.loads(json.dumps(base))
    a.update(id="a", env={"PYTORCH_CUDA_ALLOC_CONF": None, "CUDA_MODULE_LOADING": "EAGER"},
             job_if_supported={"cuda_module_loading": "eager"},
             measured=dict(base["measured"], peak_allocated=1000, peak_reserved=1200,
                           device_total=None, device_total_from_device_used=1800))
    b = json.loads(json.dumps(base))
    b.update(id="b", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
             measured=dict(base["measured"], peak_allocated=2000, peak_reserved=2100,
                           device_total=2600))
    path = tmp_path / "gpu.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (header, dict(a, type="result"),
                                                      dict(b, type="result"))) + "\n")
    p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gpu_cases_from_results.py"),
                        str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = {c["id"]: c for c in json.loads(p.stdout)}
    assert {k: v["expected_bytes"] for k, v in got.items()} == {
        "gpu-a-allocated": 1000, "gpu-a-reserved": 1200, "gpu-a-device-total": 1800,
        "gpu-b-allocated": 2000}
    assert all(c["kind"] == "measured" for c in got.values())
    # the run's PyTorch release, major.minor, as the job's torch_version takes it
    major, minor = base["versions"]["torch"].split("+")[0].split(".")[:2]
    release = f"{major}.{minor}"
    # and the run's transformers release as printed (job field `transformers_version`)
    tf = base["versions"]["transformers"]
    assert got["gpu-a-allocated"]["job_if_supported"] == {"cuda_module_loading": "eager",
                                                          "torch_version": release,
                                                          "transformers_version": tf}
    assert got["gpu-b-allocated"]["job_if_supported"] == {"torch_version": release,
                                                          "transformers_version": tf}
    assert got["gpu-a-device-total"]["metric"] == "per_gpu.device_total"
    # allocated within 2 %, reserved and nvidia-smi's total within 3 % (issue 30)
    assert {k: v["tolerance"] for k, v in got.items()} == {
        "gpu-a-allocated": 0.02, "gpu-a-reserved": 0.03, "gpu-a-device-total": 0.03,
        "gpu-b-allocated": 0.02}
    assert {v["provenance"]["file"] for v in got.values()} == {"gpu.jsonl"}


FAKE_SMI = """#!/bin/sh
case "$*" in
  *query-compute-apps*) printf '4242, 1536\\n777, 80\\n' ;;
  *query-gpu=memory.used*) printf '2048, 143771\\n' ;;
  *query-gpu=name*) printf 'NVIDIA H200, 580.159.04, 143771\\n' ;;
  *) exit 1 ;;
esac
"""


def test_nvml_falls_back_to_nvidia_smi(tmp_path, monkeypatch):
    """Without pynvml, the readings come from nvidia-smi's CSV (MiB figures)."""
    import meters
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    nv = meters.Nvml()
    assert nv.source == "nvidia-smi"
    assert nv.process_used(pid=4242) == 1536 * 2**20
    assert nv.process_used(pid=777) == 80 * 2**20
    assert nv.process_used(pid=1) == 0  # not on the GPU
    assert nv.device_used() == (2048 * 2**20, 143771 * 2**20)
    info = nv.device_info()
    assert (info["gpu_name"], info["driver"], info["memory_total"]) == \
        ("NVIDIA H200", "580.159.04", 143771 * 2**20)


def test_nvml_reads_pynvml(monkeypatch):
    """With pynvml, the process's usedGpuMemory and the driver's figures as NVML returns them."""
    import types
    import meters
    proc = types.SimpleNamespace
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: ("gpu", i),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [proc(pid=11, usedGpuMemory=None),
                                                        proc(pid=12, usedGpuMemory=5_000_000)],
        nvmlDeviceGetMemoryInfo=lambda h: proc(used=7, total=150_754_820_096),
        nvmlDeviceGetName=lambda h: b"NVIDIA H200", nvmlSystemGetDriverVersion=lambda: "580.1",
        nvmlSystemGetCudaDriverVersion=lambda: 13000)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nv = meters.Nvml()
    assert nv.source == "pynvml"
    assert nv.process_used(pid=12) == 5_000_000
    assert nv.process_used(pid=11) is None  # NVML could not say
    assert nv.device_used() == (7, 150_754_820_096)
    info = nv.device_info()
    assert (info["gpu_name"], info["driver"], info["driver_cuda"]) == \
        ("NVIDIA H200", "580.1", "13.0")  # 13000 = 1000 * 13 + 10 * 0


def run_driver(tmp_path, *extra):
    out = tmp_path / "r.jsonl"
    p = subprocess.run([sys.executable, os.path.join(GPU, "measure_gpu.py"), "--out", str(out),
                        *extra], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return p, lines


def test_budget_skips_what_would_not_fit_and_fail_fast_stops(tmp_path):
    """The driver's own logic, with an interpreter that fails at once (/bin/false) in place of
    the spec processes."""
    small, big = "qwen0.5b-bf16mix-adamw-sdpa-b4s1024", "llama8b-bf16-adamw-sdpa-full-b1s2048"
    small2 = "qwen0.5b-bf16mix-adamw-sdpa-b8s1024"
    specs = {s["id"]: measure_gpu.resolve_spec(s, dry=False)
             for s in measure_gpu.load_specs(os.path.join(GPU, "specs.json"))}
    est = {k: measure_gpu.est_seconds(specs[k]) for k in (small, big, small2)}
    assert est[small] < 11.5 and est[small2] < 11.5 and est[big] > 12  # so a 12 s budget
    p, lines = run_driver(tmp_path, "--only", f"{small},{big},{small2}", "--budget-s", "12",
                          "--python", "/bin/false", "--fail-fast", "5")
    assert p.returncode == 0, p.stderr
    # --only keeps the file's order: small, small2, then big
    assert [(x["type"], x.get("id"), x.get("status")) for x in lines[1:]] == [
        ("result", small, "crashed"), ("result", small2, "crashed"), ("skipped", big, None),
        ("end", None, None)]
    (tmp_path / "again").mkdir()
    p, lines = run_driver(tmp_path / "again", "--only", f"{small},{big},{small2}",
                          "--python", "/bin/false", "--fail-fast", "2")
    assert [x.get("id") for x in lines if x["type"] == "result"] == [small, small2]
    assert lines[-1]["type"] == "end" and lines[-1]["counts"] == {"crashed": 2, "aborted": True}


def test_a_bad_spec_is_refused_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"specs": [{"id": "x", "preset": "gpt2", "task": "train",
                                          "precision": "fp16", "batch": 1, "seq": 8}]}))
    p, lines = run_driver(tmp_path, "--specs", str(bad))
    assert p.returncode == 2 and lines == []
    assert p.stderr.strip().endswith("spec x: precision 'fp16' is not one of "
                                     "('fp32', 'bf16', 'bf16-mixed')")
