#!/usr/bin/env python3
"""Turns the results file of validation/gpu/measure_gpu.py (JSONL) into validation cases in the
job format of ../shared/validation/README.md (`kind: measured`, `split: project`).

For every spec that finished (`status: ok`), one case per figure the GPU measured:
  per_gpu.peak_allocated   max torch.cuda.max_memory_allocated() over the measured steps' phases
  per_gpu.peak_reserved    max torch.cuda.max_memory_reserved() likewise
  per_gpu.device_total     the largest NVML used memory of the process (what nvidia-smi shows)
each with the tolerance the project holds that figure to (`TOLERANCE`: allocated 2 %, reserved and
device total 3 %, issue 30) and the run's provenance (GPU, driver, CUDA, torch, transformers,
date, the command that ran, the results file and the spec id) in `note` and, structured, in
`provenance`. The transformers release goes to `job_if_supported.transformers_version` as printed.
The PyTorch release the run used goes to `job_if_supported.torch_version` (major.minor,
as the job field takes it): what a release does differently (SDPA's kernel choice, cuBLAS's
workspaces) is modelled by that field, and unset it means today's PyTorch. Reserved and device-total
cases are left out for a spec that set PYTORCH_CUDA_ALLOC_CONF (the job has no field for the
allocator's settings). A spec that set CUDA_MODULE_LOADING carries it in `job_if_supported`, and so
does a spec that ran HF generate with `cache_implementation="static"` (spec `cache: "static"`;
run_one.py's `infer_calls`): as the job's `engine.cache`, which the contract added after the run.

Dry-run results (CPU, tiny configs) are refused unless --allow-dry is given; then only the
CPU stand-in's allocated figure is turned into a case, marked `kind: dry-run` (for the tests of
this script; such cases are never validation data).

usage: gpu_cases_from_results.py RESULTS.jsonl [...] [--allow-dry] > cases.json
"""
import argparse
import json
import os
import sys

#: Relative tolerance per figure: what `crates/core/tests/gpu_measured.rs` holds each to.
TOLERANCE = {"peak_allocated": 0.02, "peak_reserved": 0.03, "device_total": 0.03}

METRICS = [("peak_allocated", "per_gpu.peak_allocated", "allocated",
            "max torch.cuda.max_memory_allocated() over the measured steps"),
           ("peak_reserved", "per_gpu.peak_reserved", "reserved",
            "max torch.cuda.max_memory_reserved() over the measured steps"),
           ("device_total", "per_gpu.device_total", "device-total",
            "the largest NVML used memory of the process over the measured steps (nvidia-smi's "
            "figure: reserved + CUDA context + memory outside PyTorch's allocator)")]


def read_runs(path):
    """[(header, [result lines])] of one JSONL file (a file appended to by several runs holds
    several headers)."""
    runs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e.msg}); a cut-off run's last line? "
                                 "remove it") from None
            if obj.get("type") == "run":
                runs.append((obj, []))
            elif obj.get("type") == "result":
                if not runs:
                    raise SystemExit(f"{path}:{n}: a result before any run header")
                runs[-1][1].append(obj)
    return runs


def torch_release(version):
    """`2.11.0+cu130` -> `2.11` (the job's torch_version takes major.minor); None if unreadable."""
    parts = (version or "").split("+")[0].split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return f"{parts[0]}.{parts[1]}"


def provenance(header, r, path):
    dev = r.get("device") or {}
    v = r.get("versions") or {}
    return {"file": os.path.basename(path), "gpu": dev.get("gpu_name") or dev.get("torch_device_name"), "driver": dev.get("driver"),
            "driver_cuda": dev.get("driver_cuda"), "torch": v.get("torch"),
            "torch_cuda": v.get("torch_cuda"), "cudnn": v.get("cudnn"),
            "transformers": v.get("transformers"), "peft": v.get("peft"),
            "python": v.get("python"), "date": header.get("date"), "command": header.get("command"),
            "host": header.get("host"), "spec": r["id"], "env": r.get("env"),
            "dry_run": bool(header.get("dry_run"))}


def describe(r, p):
    s = r["spec"]
    m = r["measured"]
    what = (f"{r.get('model_class')} from its config with random weights "
            f"({r.get('params_total'):,} params, {r.get('params_trainable'):,} trainable), "
            f"{s['task']} {s['precision']}, batch {s['batch']} x seq {s['seq']}")
    if s["task"] == "train":
        what += (f", {r.get('optimizer_impl')}, checkpointing {s.get('checkpointing')}, "
                 f"attention {r.get('attn_implementation')}"
                 + (f", LoRA r{s['peft']['rank']} on {'/'.join(s['peft']['targets'])}"
                    if s.get("peft") else "")
                 + f"; {s.get('warmup', 1)} warm-up + {s.get('steps', 2)} measured steps")
    else:
        what += (f", generate {s['new_tokens']} new tokens greedy with a {s.get('cache')} cache; "
                 f"{s.get('warmup', 1)} warm-up + {s.get('steps', 1)} measured calls")
    env = {k: v for k, v in (p["env"] or {}).items() if v is not None}
    return (f"Measured on {p['gpu']} (driver {p['driver']}, driver CUDA {p['driver_cuda']}) with "
            f"torch {p['torch']} (CUDA {p['torch_cuda']}), transformers {p['transformers']}, peft "
            f"{p['peft']}, on {p['date']} by `{p['command']}` (validation/gpu/measure_gpu.py, spec "
            f"{r['id']}): {what}. Peak in {m['peak_phase']}. Environment {json.dumps(env)}.")


def cases_of(header, r, allow_dry, path):
    if r.get("status") != "ok" or not r.get("measured"):
        return []
    p = provenance(header, r, path)
    dry = p["dry_run"]
    if dry and not allow_dry:
        return []
    alloc_conf = (p["env"] or {}).get("PYTORCH_CUDA_ALLOC_CONF")
    base = {"source_id": f"gpu-{r['id']}", "kind": "dry-run" if dry else "measured",
            "split": "project", "job": r["job"]}
    extra = {}
    if (r.get("job_if_supported") or {}).get("cuda_module_loading") == "eager":
        extra.update(r["job_if_supported"])
    if (r.get("spec") or {}).get("cache") == "static":
        extra["engine"] = dict(r["job"].get("engine") or {}, cache="static")
    release = torch_release(p["torch"])
    if release and not dry:
        extra["torch_version"] = release
    if p["transformers"] and not dry:
        # The transformers release's modelling code (job field `transformers_version`).
        extra["transformers_version"] = p["transformers"]
    if extra:
        base["job_if_supported"] = extra
    out = []
    for key, metric, suffix, meaning in METRICS:
        value = r["measured"].get(key)
        if key == "device_total" and value is None and not dry:
            # NVML could not name the process (e.g. a PID namespace): the device's used memory
            # minus its value before the process touched CUDA says the same on an idle GPU.
            value = r["measured"].get("device_total_from_device_used")
            meaning = ("the largest device used memory (NVML) minus its value before the process "
                       "touched CUDA, over the measured steps (per-process NVML figure "
                       "unavailable; nvidia-smi's total on an otherwise idle GPU)")
        if value is None or (key != "peak_allocated" and (alloc_conf or dry)):
            continue
        out.append(dict(base, id=f"gpu-{r['id']}-{suffix}", metric=metric,
                        expected_bytes=int(value), tolerance=TOLERANCE[key],
                        note=f"{meaning}: {int(value):,} B. " + describe(r, p),
                        provenance=p))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="results JSONL -> validation cases (JSON on stdout)")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--allow-dry", action="store_true",
                    help="also turn dry-run results into (kind: dry-run) cases, for tests")
    a = ap.parse_args(argv)
    cases, skipped = [], 0
    for path in a.results:
        for header, results in read_runs(path):
            for r in results:
                got = cases_of(header, r, a.allow_dry, path)
                skipped += 0 if got else 1
                cases.extend(got)
    ids = [c["id"] for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"the same spec measured twice: {', '.join(sorted(dup))}; keep one run")
    print(f"{len(cases)} cases; {skipped} results gave none (not ok, or dry without "
          "--allow-dry)", file=sys.stderr)
    json.dump(cases, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
