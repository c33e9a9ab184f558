#!/usr/bin/env python3
"""One spec, one fresh process: build a Hugging Face model from its config with random weights,
run warm-up and measured steps (training) or generate calls (inference), and write what the
allocator, NVML and the driver say at each phase. measure_gpu.py starts this once per spec.

usage: run_one.py SPEC.json OUT.json [--snapshot-dir DIR] [--dry-run]

SPEC.json is a resolved spec (measure_gpu.resolve_spec: hf_config filled in). OUT.json is
rewritten after every stage, so a process killed at its timeout still leaves what it measured.

Method (train): each step is  zero_grad(set_to_none=True) -> model(input_ids, labels).loss
(the model's own HF loss; outputs dropped before backward, as HF Trainer does) -> backward ->
optimizer.step(), as ../../../shared/measure/measure.py runs it; bf16-mixed wraps the forward
in torch.autocast(bfloat16) over fp32 parameters. Before each phase the peak counters are reset
(torch.cuda.reset_peak_memory_stats), after it the device is synchronized and the phase's peak
read, so the step's peak is the largest phase peak and the phase holding it is known.
Method (infer): model.generate(greedy, min_new_tokens = max_new_tokens, disable_compile=True)
with the spec's cache ("static": StaticCache of prompt + new tokens; "dynamic": DynamicCache);
forward hooks on the model split the call into prefill (the first forward), decode (the others)
and the work between forwards.
"""

import argparse
import copy
import json
import os
import platform
import re
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import meters  # noqa: E402

ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_MODULE_LOADING",
            "CUDA_VISIBLE_DEVICES", "TORCH_SYMBOLIZE_MODE", "NVIDIA_TF32_OVERRIDE",
            "CUBLAS_WORKSPACE_CONFIG", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT")

# Catalog ids of ../../crates/core/data/gpus.json for the GPUs whose name says which one it is.
GPU_IDS = [("H200", None, "h200-141gb"), ("H100", 85, "h100-80gb"), ("A100", 45, "a100-40gb"),
           ("A100", 90, "a100-80gb"), ("L40S", None, "l40s-48gb"), ("L4", None, "l4-24gb"),
           ("A10", None, "a10-24gb"), ("B200", None, "b200-192gb")]


def gpu_id(name, total):
    """The catalog id for an NVML name and memory total, or None when not sure."""
    if not name:
        return None
    gib = (total or 0) / 2**30
    for key, max_gib, cid in GPU_IDS:
        if re.search(rf"\b{key}(?![0-9A-Za-z])", name) and (max_gib is None or gib <= max_gib):
            return cid
    return None


def job_of(spec, gpu):
    """The vramscope job (../../../shared/contract.md) describing this run: (job, fields the
    contract names that this build's job reader does not take yet, for the cases'
    `job_if_supported`, as ../../../shared/validation/README.md describes)."""
    loading = (spec.get("env") or {}).get("CUDA_MODULE_LOADING", "LAZY").lower()
    job = {"model": {"hf_config": spec["hf_config"]}, "task": spec["task"],
           "batch": spec["batch"], "grad_accum": 1, "seq": spec["seq"],
           "precision": spec["precision"],
           "optimizer": spec["optimizer"] if spec["task"] == "train" else "none",
           "checkpointing": spec.get("checkpointing", "none"), "attention": spec["attention"],
           "peft": spec.get("peft"), "weights": "none", "framework": "pytorch",
           "parallel": {"gpus": 1, "dp": 1, "tp": 1, "pp": 1, "sp": False, "cp": 1, "ep": 1,
                        "zero": 0, "offload": "none", "microbatches": 1},
           "engine": {}, "gpu": gpu,
           "new_tokens": spec.get("new_tokens", 0) if spec["task"] == "infer" else 0,
           "kv_dtype": None}
    return job, {"cuda_module_loading": "eager" if loading == "eager" else "lazy"}


class Recorder:
    """The result of this process, rewritten to OUT.json after each stage."""

    def __init__(self, path, spec):
        self.path = path
        self.rec = {"id": spec["id"], "status": "running", "stage": "start", "error": None}

    def stage(self, name, **fields):
        self.rec["stage"] = name
        self.rec.update(fields)
        self.save()

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.rec, f)
        os.replace(tmp, self.path)


def reading(meter, nvml, base_used):
    """One joint reading: allocator counters, NVML process/device used, cudaMemGetInfo."""
    meter.sync()
    r = {"allocated": meter.allocated(), "reserved": meter.reserved(),
         "nvml_process_used": None, "nvml_device_used": None, "mem_get_info": meter.mem_get_info()}
    if nvml is not None:
        r["nvml_process_used"] = nvml.process_used()
        r["nvml_device_used"] = nvml.device_used()[0]
    used = r["nvml_device_used"]
    r["device_used_delta"] = None if used is None or base_used is None else used - base_used
    proc, res = r["nvml_process_used"], r["reserved"]
    r["outside_allocator"] = None if proc in (None, 0) or res is None else proc - res
    return r


def probe_context(torch, meter, nvml, base_used):
    """The CUDA context: NVML's process total minus reserved after torch.cuda.init(), after the
    first tensor, and after one bf16 and one fp32 matmul (cuBLAS/cuBLASLt handles and their
    workspaces; torch takes the workspace through its caching allocator, so what stays allocated
    after the operands are freed is the workspace)."""
    if meter.dry:
        return None
    out = {}
    torch.cuda.init()
    out["after_init"] = reading(meter, nvml, base_used)
    x = torch.zeros(1, device="cuda")
    out["after_first_tensor"] = reading(meter, nvml, base_used)
    del x
    for dt in (torch.bfloat16, torch.float32):
        a = torch.randn(1024, 1024, device="cuda", dtype=dt)
        b = a @ a
        del a, b
    out["after_matmul"] = reading(meter, nvml, base_used)
    out["workspace_allocated_after_matmul"] = meter.allocated()
    out["context_bytes"] = out["after_matmul"]["outside_allocator"]
    return out


def build_model(torch, spec, device):
    """AutoModelForCausalLM.from_config on the device, in the parameter dtype, random init."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = copy.deepcopy(spec["hf_config"])  # transformers edits nested dicts (rope_scaling)
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    dtype = torch.bfloat16 if spec["precision"] == "bf16" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=spec["attention"],
                                                 dtype=dtype)
    if spec.get("peft"):
        from peft import LoraConfig, get_peft_model
        pc = spec["peft"]
        model = get_peft_model(model, LoraConfig(
            r=pc["rank"], lora_alpha=pc["alpha"], lora_dropout=pc.get("dropout", 0.05),
            target_modules=pc["targets"], bias="none"))
    if spec["task"] == "train":
        model.train()
        if spec.get("checkpointing") == "full":
            model.gradient_checkpointing_enable()  # transformers 5.x: use_reentrant=False
            if spec.get("peft"):
                model.enable_input_require_grads()
    else:
        model.eval()
    return model, config


def make_optimizer(torch, spec, params):
    """torch's AdamW / SGD as the job's optimizer names them (contract: adamw = foreach)."""
    name = spec["optimizer"]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, foreach=True), "AdamW(foreach=True)"
    if name == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-5, fused=True), "AdamW(fused=True)"
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, foreach=True), "SGD(foreach=True, momentum=0)"
    if name == "sgd-momentum":
        return (torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=True),
                "SGD(foreach=True, momentum=0.9)")
    raise SystemExit(f"spec {spec['id']}: optimizer {name!r} is not one this script runs")


def phase(meter, nvml, base_used, name, fn, full):
    """Runs fn as one phase: resets the peak counters first, synchronizes and reads them after."""
    meter.sync()
    start_alloc, start_res = meter.allocated(), meter.reserved()
    meter.reset_peak()
    t0 = time.perf_counter()
    out = fn()
    meter.sync()
    p = {"phase": name, "seconds": round(time.perf_counter() - t0, 4),
         "start_allocated": start_alloc, "start_reserved": start_res,
         "peak_allocated": meter.peak_allocated(), "peak_reserved": meter.peak_reserved(),
         "end_allocated": meter.allocated(), "end_reserved": meter.reserved()}
    if full:
        p["reading"] = reading(meter, nvml, base_used)
        p["memory_stats"] = meter.stats()
    return out, p


def train_steps(torch, spec, model, config, meter, nvml, base_used, rec, device):
    params = [p for p in model.parameters() if p.requires_grad]
    opt, opt_desc = make_optimizer(torch, spec, params)
    b, s = spec["batch"], spec["seq"]
    g = torch.Generator(device="cpu").manual_seed(1234)
    ids = torch.randint(0, config.vocab_size, (b, s), generator=g).to(device)
    labels = ids.clone()
    if meter.dry:
        meter.track(ids), meter.track(labels)
    mixed = spec["precision"] == "bf16-mixed"
    kwargs = {"input_ids": ids, "labels": labels, "use_cache": False}
    rec.rec["optimizer_impl"] = opt_desc
    rec.rec["steps"] = []
    n_warm, n_meas = spec.get("warmup", 1), spec.get("steps", 2)

    def forward():
        if mixed:
            with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
                return model(**kwargs).loss
        return model(**kwargs).loss

    for i in range(n_warm + n_meas):
        full = i == n_warm + n_meas - 1
        phases = []
        _, p = phase(meter, nvml, base_used, "zero_grad",
                     lambda: opt.zero_grad(set_to_none=True), full)
        phases.append(p)
        loss, p = phase(meter, nvml, base_used, "forward", forward, full)
        phases.append(p)
        _, p = phase(meter, nvml, base_used, "backward", loss.backward, full)
        phases.append(p)
        loss_value = float(loss.detach())
        del loss
        _, p = phase(meter, nvml, base_used, "optimizer", opt.step, full)
        phases.append(p)
        rec.rec["steps"].append({"step": i + 1, "measured": i >= n_warm, "loss": loss_value,
                                 "phases": phases, "end": reading(meter, nvml, base_used)})
        rec.stage(f"step{i + 1}")
    return opt


def infer_calls(torch, spec, model, config, meter, nvml, base_used, rec, device):
    b, s, n = spec["batch"], spec["seq"], spec["new_tokens"]
    g = torch.Generator(device="cpu").manual_seed(1234)
    ids = torch.randint(0, config.vocab_size, (b, s), generator=g).to(device)
    mask = torch.ones_like(ids)
    if meter.dry:
        meter.track(ids), meter.track(mask)
    state = {"calls": 0, "parts": []}

    def mark(label):
        meter.sync()
        state["parts"].append({"phase": label, "peak_allocated": meter.peak_allocated(),
                               "peak_reserved": meter.peak_reserved(),
                               "end_allocated": meter.allocated()})
        meter.reset_peak()

    def pre(mod, args, kwargs):
        mark("setup" if state["calls"] == 0 else "between")

    def post(mod, args, kwargs, out):
        state["calls"] += 1
        mark("prefill" if state["calls"] == 1 else "decode")

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    gen = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, disable_compile=True,
               pad_token_id=0)
    if spec.get("cache", "dynamic") == "static":
        gen["cache_implementation"] = "static"
    rec.rec["generate_kwargs"] = {k: v for k, v in gen.items()}
    rec.rec["steps"] = []
    n_warm, n_meas = spec.get("warmup", 1), spec.get("steps", 1)
    for i in range(n_warm + n_meas):
        state["calls"], state["parts"] = 0, []
        with torch.no_grad():
            out, p = phase(meter, nvml, base_used, "generate",
                           lambda: model.generate(input_ids=ids, attention_mask=mask, **gen),
                           i == n_warm + n_meas - 1)
        # The hooks reset the peak counters inside generate: the phase's own reading covers only
        # the stretch after the last forward, and the call's peak is the largest part's.
        state["parts"].append({"phase": "after_last_forward", "peak_allocated": p["peak_allocated"],
                               "peak_reserved": p["peak_reserved"],
                               "end_allocated": p["end_allocated"]})
        p["parts"] = collapse_parts(state["parts"])
        p["peak_allocated"] = max(q["peak_allocated"] for q in p["parts"])
        res = [q["peak_reserved"] for q in p["parts"] if q["peak_reserved"] is not None]
        p["peak_reserved"] = max(res) if res else None
        p["generated_tokens"] = int(out.shape[1] - s)
        p["forward_calls"] = state["calls"]
        del out
        rec.rec["steps"].append({"step": i + 1, "measured": i >= n_warm, "phases": [p],
                                 "end": reading(meter, nvml, base_used)})
        rec.stage(f"generate{i + 1}")
    h1.remove(), h2.remove()


def collapse_parts(parts):
    """Per-label maxima of the hook-delimited parts of one generate call."""
    out = {}
    for p in parts:
        o = out.setdefault(p["phase"], {"phase": p["phase"], "count": 0, "peak_allocated": 0,
                                        "peak_reserved": None})
        o["count"] += 1
        o["peak_allocated"] = max(o["peak_allocated"], p["peak_allocated"])
        if p["peak_reserved"] is not None:
            o["peak_reserved"] = max(o["peak_reserved"] or 0, p["peak_reserved"])
    return list(out.values())


def summarize(rec):
    """The figures a case compares against, from the measured steps."""
    meas = [s for s in rec.get("steps", []) if s["measured"]]
    if not meas:
        return None
    last = meas[-1]
    phases = [p for s in meas for p in s["phases"]]
    peak_phase = max(last["phases"], key=lambda p: p["peak_allocated"])["phase"]
    if last["phases"][0]["phase"] == "generate":
        parts = last["phases"][0].get("parts") or []
        if parts:
            peak_phase = max(parts, key=lambda p: p["peak_allocated"])["phase"]
    res = [p["peak_reserved"] for p in phases if p["peak_reserved"] is not None]
    readings = [s["end"] for s in meas] + [p["reading"] for s in meas for p in s["phases"]
                                           if "reading" in p]
    nv = [r["nvml_process_used"] for r in readings if r.get("nvml_process_used")]
    dd = [r["device_used_delta"] for r in readings if r.get("device_used_delta") is not None]
    stats = next((p["memory_stats"] for p in reversed(last["phases"]) if p.get("memory_stats")),
                 None)
    return {
        "peak_allocated": max(p["peak_allocated"] for p in phases),
        "peak_reserved": max(res) if res else None,
        "device_total": max(nv) if nv else None,
        "device_total_from_device_used": max(dd) if dd else None,
        "peak_phase": peak_phase,
        "peak_allocated_all_steps": max(p["peak_allocated"] for s in rec["steps"]
                                        for p in s["phases"]),
        "num_alloc_retries": None if stats is None else stats.get("num_alloc_retries"),
        "num_ooms": None if stats is None else stats.get("num_ooms"),
    }


def start_history(torch, spec, meter, snapshot_dir):
    if not (spec.get("snapshot") and snapshot_dir and not meter.dry):
        return False
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all",
                                             max_entries=spec.get("snapshot_max_entries", 100000))
    return True


def dump_history(torch, spec, snapshot_dir, rec):
    """Dumps the snapshot and keeps it only if it fits (store_snapshot)."""
    import snapshots
    raw = os.path.join(snapshot_dir, f".{spec['id']}.pickle.partial")
    t0 = time.perf_counter()
    torch.cuda.memory._dump_snapshot(raw)
    torch.cuda.memory._record_memory_history(enabled=None)
    rec.rec["snapshot"] = snapshots.store_snapshot(raw, snapshot_dir, spec["id"])
    rec.rec["snapshot"]["dump_seconds"] = round(time.perf_counter() - t0, 2)


def versions(torch):
    import importlib.metadata as md
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "torch_cuda": torch.version.cuda, "cudnn": None}
    for pkg in ("transformers", "peft", "accelerate"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            v[pkg] = None
    try:
        if torch.cuda.is_available():
            v["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        pass
    return v


def backend_settings(torch):
    """The settings that choose kernels (and so workspaces and saved tensors): the allocator
    backend, fp32 matmul precision, the SDPA kernels enabled, cuDNN."""
    out = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    probes = {"allocator_backend": lambda: torch.cuda.get_allocator_backend(),
              "matmul_allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
              "sdp_flash": lambda: torch.backends.cuda.flash_sdp_enabled(),
              "sdp_mem_efficient": lambda: torch.backends.cuda.mem_efficient_sdp_enabled(),
              "sdp_cudnn": lambda: torch.backends.cuda.cudnn_sdp_enabled(),
              "sdp_math": lambda: torch.backends.cuda.math_sdp_enabled(),
              "cudnn_enabled": lambda: torch.backends.cudnn.enabled}
    for k, f in probes.items():
        try:
            out[k] = f() if torch.cuda.is_available() or k.startswith(("sdp", "matmul")) else None
        except Exception as e:  # noqa: BLE001 - an older torch without the call
            out[k] = f"unavailable: {type(e).__name__}"
    return out


def run(spec, rec, snapshot_dir, dry):
    nvml = None if dry else meters.Nvml()
    base = nvml.device_used()[0] if nvml else None
    rec.stage("import", env={k: os.environ.get(k) for k in ENV_VARS},
              nvml_device_used_before=base, pid=os.getpid())
    import torch
    device = "cpu" if dry else "cuda"
    meter = meters.CpuMeter(torch) if dry else meters.CudaMeter(torch)
    info = nvml.device_info() if nvml else {}
    if not dry:
        info["torch_device_name"] = torch.cuda.get_device_name(0)
        info["capability"] = list(torch.cuda.get_device_capability(0))
    rec.stage("context", versions=versions(torch), device=info, backends=backend_settings(torch),
              **dict(zip(("job", "job_if_supported"),
                         job_of(spec, None if dry else gpu_id(info.get("gpu_name") or
                                                               info.get("torch_device_name"),
                                                               info.get("memory_total"))))))
    # A snapshot's history starts before anything is allocated, so that every block in it (the
    # cuBLAS workspaces of the context probe, the weights) has its allocation stack.
    recording = start_history(torch, spec, meter, snapshot_dir)
    rec.stage("context", context=probe_context(torch, meter, nvml, base))
    if dry:
        meter.__enter__()
    model, config = build_model(torch, spec, device)
    if dry:
        for t in list(model.parameters()) + list(model.buffers()):
            meter.track(t)
    n_params = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    after_build = reading(meter, nvml, base)
    meter.empty_cache()
    rec.stage("built", model_class=type(model).__name__, params_total=n_params,
              params_trainable=n_train, attn_implementation=config._attn_implementation,
              after_build=after_build, after_empty_cache=reading(meter, nvml, base))
    if spec["task"] == "train":
        train_steps(torch, spec, model, config, meter, nvml, base, rec, device)
    else:
        infer_calls(torch, spec, model, config, meter, nvml, base, rec, device)
    rec.rec["final_memory_stats"] = meter.stats()
    rec.rec["measured"] = summarize(rec.rec)
    rec.stage("measured")
    if recording:
        try:
            dump_history(torch, spec, snapshot_dir, rec)
        except Exception as e:  # noqa: BLE001 - the measurement stands without its snapshot
            rec.rec["snapshot"] = {"file": None, "dropped": f"{type(e).__name__}: {e}"[:2000]}
    if dry:
        meter.__exit__(None, None, None)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--snapshot-dir")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    with open(a.spec) as f:
        spec = json.load(f)
    rec = Recorder(a.out, spec)
    try:
        run(spec, rec, a.snapshot_dir, a.dry_run)
        rec.rec["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - every failure is data for the record
        oom = type(e).__name__ == "OutOfMemoryError"
        rec.rec["status"] = "oom" if oom else "error"
        rec.rec["error"] = f"{type(e).__name__}: {e}"[:4000]
        rec.rec["traceback"] = traceback.format_exc()[-4000:]
        try:
            import torch
            if torch.cuda.is_available():
                rec.rec["final_memory_stats"] = meters.CudaMeter(torch).stats()
        except Exception:  # noqa: BLE001
            pass
    rec.stage("done")
    return 0 if rec.rec["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
