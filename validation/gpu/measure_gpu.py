#!/usr/bin/env python3
"""Measure what only a GPU has: run a list of specs, each in a fresh process (run_one.py), and
append one JSON line per spec to the results file as soon as it finishes.

usage:
  measure_gpu.py --specs specs.json --out results.jsonl [--snapshots DIR] [--budget-s 520]
                 [--only ID,ID] [--fail-fast N] [--dry-run] [--plan]

The results file (JSONL), one object per line, "type" first:
  {"type": "run", ...}      the header: date, command, host, device (NVML), versions, budget
  {"type": "result", ...}   one per spec run: status (ok | oom | error | timeout | crashed), the
                            spec, the vramscope job describing the run, the readings, "measured"
  {"type": "skipped", ...}  a spec whose estimated time did not fit the remaining budget
  {"type": "end", ...}      counts and wall time (absent when the run was cut off)
A run cut off at any point leaves every line written before: each is flushed and fsynced.

--dry-run shrinks every model to a tiny config of the same architecture, runs on the CPU and
records the CUDA-only readings as null (tests/python/test_measure_gpu_dry.py runs it).
--plan prints each spec's estimated H200 seconds and the total, and runs nothing.
Specs are checked before anything runs (a bad one: a one-line cause, exit 2); when the first
--fail-fast specs (default 3) all fail, the run stops, so a broken stack leaves device time for a
fixed rerun.
"""

import argparse
import copy
import datetime
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PRESETS = os.path.join(REPO, "crates", "formats", "data", "presets")
sys.path.insert(0, HERE)
import meters  # noqa: E402

# Each dimension the dry run shrinks, by config key (any family): small enough for a CPU step in
# well under a second, large enough to keep every structure (GQA groups, tied heads, two layers).
TINY = {"hidden_size": 64, "n_embd": 64, "intermediate_size": 128, "n_inner": 128,
        "num_hidden_layers": 2, "n_layer": 2, "num_attention_heads": 4, "n_head": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "max_window_layers": 2}


def tiny_config(cfg):
    """The same architecture at toy size (keys the config does not have stay absent)."""
    out = dict(cfg)
    for k, v in TINY.items():
        if k in out and out[k] is not None:
            out[k] = v
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = out.get(k)
        if isinstance(v, int) and v >= out["vocab_size"]:
            out[k] = out["vocab_size"] - 1
        elif isinstance(v, list):
            out[k] = [min(x, out["vocab_size"] - 1) for x in v]
    if out.get("num_key_value_heads") and out.get("num_attention_heads"):
        if out["num_attention_heads"] % out["num_key_value_heads"]:
            out["num_key_value_heads"] = out["num_attention_heads"]
    return out


def load_specs(path):
    """{"defaults": {...}, "specs": [{...}, ...]} -> the specs with the defaults filled in."""
    with open(path) as f:
        doc = json.load(f)
    defaults = doc.get("defaults", {})
    specs, seen = [], set()
    for s in doc["specs"]:
        spec = copy.deepcopy(defaults)
        spec.update(copy.deepcopy(s))
        if spec["id"] in seen:
            raise SpecError(f"spec id {spec['id']!r} appears twice")
        seen.add(spec["id"])
        specs.append(spec)
    return specs


class SpecError(ValueError):
    """A spec this script cannot run: a one-line cause naming the spec and the field."""


CHOICES = {"task": ("train", "infer"), "precision": ("fp32", "bf16", "bf16-mixed"),
           "checkpointing": ("none", "full"), "attention": ("eager", "sdpa")}
TRAIN_OPTIMIZERS = ("adamw", "adamw-fused", "sgd", "sgd-momentum")


def check_spec(s):
    """Raises SpecError unless every field run_one.py reads has a value it runs."""
    sid = s.get("id", "?")
    for field, allowed in CHOICES.items():
        if s.get(field) not in allowed:
            raise SpecError(f"spec {sid}: {field} {s.get(field)!r} is not one of {allowed}")
    for field in ("batch", "seq") + (("new_tokens",) if s["task"] == "infer" else ()):
        if not isinstance(s.get(field), int) or isinstance(s.get(field), bool) or s[field] < 1:
            raise SpecError(f"spec {sid}: {field} must be an integer >= 1")
    if s["task"] == "train" and s.get("optimizer") not in TRAIN_OPTIMIZERS:
        raise SpecError(f"spec {sid}: optimizer {s.get('optimizer')!r} is not one of "
                        f"{TRAIN_OPTIMIZERS}")
    if s["task"] == "infer" and s.get("cache") not in ("static", "dynamic"):
        raise SpecError(f"spec {sid}: cache must be 'static' or 'dynamic'")
    preset = os.path.join(PRESETS, f"{s.get('preset')}.json")
    if "hf_config" not in s and not os.path.exists(preset):
        raise SpecError(f"spec {sid}: no hf_config, and preset {s.get('preset')!r} is not in "
                        f"{PRESETS}")


def resolve_spec(spec, dry):
    """hf_config filled in from the preset (crates/formats/data/presets/ID.json) and config_overrides;
    for a dry run, tiny sizes, small batch and sequence, one warm-up and one measured step."""
    s = copy.deepcopy(spec)
    check_spec(s)
    if "hf_config" not in s:
        with open(os.path.join(PRESETS, s["preset"] + ".json")) as f:
            s["hf_config"] = json.load(f)
    s["hf_config"].update(s.get("config_overrides", {}))
    if dry:
        s["hf_config"] = tiny_config(s["hf_config"])
        s["batch"] = max(1, s["batch"] // 4)
        s["seq"] = max(8, s["seq"] // 64)
        if s["task"] == "infer":
            s["new_tokens"] = min(s["new_tokens"], 4)
        s["warmup"], s["steps"] = 1, 1
        s.pop("env", None)
    return s


def param_count(cfg):
    """Rough parameter count from a decoder config (for the time estimate only)."""
    h = cfg.get("hidden_size") or cfg.get("n_embd")
    n_layer = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    ffn = cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * h
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    gated = cfg.get("model_type") != "gpt2"
    per_layer = h * hd * (2 * heads + 2 * kv) + (3 if gated else 2) * h * ffn
    emb = cfg["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings", True) else 2)
    return n_layer * per_layer + emb


# H200 throughput assumed for the estimate: effective rates well under the datasheet's (990
# TFLOP/s dense bf16, 67 fp32), because the steps are short and launch-bound.
RATE = {"bf16": 250e12, "bf16-mixed": 200e12, "fp32": 25e12}
START_S = 9.0  # process start, imports, CUDA init, the context probe


def est_seconds(spec):
    """Estimated wall seconds of one spec on an H200 (or the spec's own "est_s")."""
    if "est_s" in spec:
        return float(spec["est_s"])
    n = param_count(spec["hf_config"])
    t = START_S + 0.5 + n / 2e9  # model build (random init on the GPU)
    if (spec.get("env") or {}).get("CUDA_MODULE_LOADING", "").upper() == "EAGER":
        t += 20.0  # every kernel of every library loaded at init
    runs = spec.get("warmup", 1) + spec.get("steps", 2 if spec["task"] == "train" else 1)
    tokens = spec["batch"] * spec["seq"]
    if spec["task"] == "train":
        n_train = n if not spec.get("peft") else n / 3  # frozen weights: no weight gradients
        recompute = 2 if spec.get("checkpointing") == "full" else 0
        flops = (6 + recompute) * n_train * tokens
        t += runs * (flops / RATE[spec["precision"]] + 0.3 + 4 * n * 2 / 3e12)  # + optimizer pass
    else:
        layers = spec["hf_config"].get("num_hidden_layers", 24)
        t += runs * (2 * n * tokens / RATE["bf16"] + spec["new_tokens"] * layers * 0.6e-3)
    if spec.get("snapshot"):
        t += 10.0  # history recording and the dump
    return round(t, 1)


def run_header(args, specs_path, nvml):
    import importlib.metadata as md
    vers = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "peft", "accelerate", "nvidia-ml-py"):
        try:
            vers[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            vers[pkg] = None
    with open(specs_path, "rb") as f:
        specs_sha = hashlib.sha256(f.read()).hexdigest()
    return {"type": "run", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "host": platform.node(), "platform": platform.platform(), "dry_run": args.dry_run,
            "budget_s": args.budget_s, "specs": specs_path, "specs_sha256": specs_sha,
            "versions": vers, "device": nvml.device_info() if nvml else None,
            "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_MODULE_LOADING",
                                                  "CUDA_VISIBLE_DEVICES")}}


def child_env(spec):
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["HF_HUB_OFFLINE"] = "1"
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_MODULE_LOADING"):
        env.pop(k, None)  # only what the spec sets: each spec names its own environment
    if spec.get("snapshot"):
        env.setdefault("TORCH_SYMBOLIZE_MODE", "dladdr")  # C++ frame names without addr2line
    env.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
    return env


def run_child(spec, args, timeout, workdir):
    """Runs run_one.py for one resolved spec; returns (child record or None, status, rc, log)."""
    spec_path = os.path.join(workdir, "spec.json")
    out_path = os.path.join(workdir, "out.json")
    log_path = os.path.join(workdir, "log.txt")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    cmd = [args.python, os.path.join(HERE, "run_one.py"), spec_path, out_path]
    if args.snapshots:
        cmd += ["--snapshot-dir", args.snapshots]
    if args.dry_run:
        cmd.append("--dry-run")
    status = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(spec),
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            status = "timeout"
    rec = None
    if os.path.exists(out_path):
        with open(out_path) as f:
            rec = json.load(f)
    if status is None:
        status = rec["status"] if rec and rec.get("status") != "running" else "crashed"
    with open(log_path, errors="replace") as f:
        log_tail = f.read()[-3000:]
    return rec, status, rc, log_tail


def write_line(fh, obj):
    fh.write(json.dumps(obj) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def one_line(rec):
    m = (rec.get("measured") or {})
    gib = (lambda v: "-" if v is None else f"{v / 2**30:.2f}")
    return (f"{rec['id']:<44} {rec['status']:<8} {rec['wall_s']:>6.1f}s  alloc "
            f"{gib(m.get('peak_allocated'))}  reserved {gib(m.get('peak_reserved'))}  nvml "
            f"{gib(m.get('device_total'))} GiB  peak in {m.get('peak_phase')}")


FAILED = ("error", "crashed", "timeout")


def run_all(args, specs, out):
    t_start = time.monotonic()
    counts = {}
    snapshots_left = args.max_snapshots
    for spec in specs:
        spent = time.monotonic() - t_start
        left = args.budget_s - spent
        est = est_seconds(spec)
        if not args.dry_run and est > left:
            write_line(out, {"type": "skipped", "id": spec["id"], "est_s": est,
                             "reason": f"estimated {est:.0f} s, {left:.0f} s of the budget left"})
            counts["skipped"] = counts.get("skipped", 0) + 1
            print(f"{spec['id']:<44} skipped (est {est:.0f} s > {left:.0f} s left)", flush=True)
            continue
        if spec.get("snapshot"):
            spec["snapshot"] = snapshots_left > 0 and bool(args.snapshots)
            snapshots_left -= 1 if spec["snapshot"] else 0
        timeout = spec.get("timeout_s", max(90.0, 3 * est))
        if not args.dry_run:  # a dry run (CPU) keeps no budget: it only tests the code
            timeout = min(timeout, max(left, 10.0))
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="vramscope-gpu-") as wd:
            rec, status, rc, log_tail = run_child(spec, args, timeout, wd)
        line = {"type": "result", "id": spec["id"], "status": status, "returncode": rc,
                "wall_s": round(time.monotonic() - t0, 2), "est_s": est, "timeout_s": timeout,
                "why": spec.get("why"), "spec": spec}
        line.update({k: v for k, v in (rec or {}).items() if k not in ("id", "status")})
        line["log_tail"] = log_tail if status != "ok" else log_tail[-600:]
        write_line(out, line)
        counts[status] = counts.get(status, 0) + 1
        print(one_line(line), flush=True)
        if not counts.get("ok") and sum(counts.get(k, 0) for k in FAILED) >= args.fail_fast:
            print(f"stopping: the first {args.fail_fast} specs all failed (see log_tail in "
                  f"{args.out}); fix and run again", flush=True)
            counts["aborted"] = True
            break
    return counts, time.monotonic() - t_start


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specs", default=os.path.join(HERE, "specs.json"))
    ap.add_argument("--out", help="results file (JSONL), appended to")
    ap.add_argument("--snapshots", help="folder for memory snapshots (specs with snapshot: true)")
    ap.add_argument("--budget-s", type=float, default=520.0,
                    help="wall seconds for the whole list; specs that would not fit are skipped")
    ap.add_argument("--max-snapshots", type=int, default=3)
    ap.add_argument("--fail-fast", type=int, default=3,
                    help="stop when this many specs failed before any succeeded (a broken stack "
                         "should not spend the device time)")
    ap.add_argument("--only", help="comma-separated spec ids to run, in the file's order")
    ap.add_argument("--dry-run", action="store_true", help="tiny configs on the CPU")
    ap.add_argument("--plan", action="store_true", help="print estimated seconds, run nothing")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the spec processes")
    args = ap.parse_args(argv)
    try:
        specs = load_specs(args.specs)
        if args.only:
            want = set(args.only.split(","))
            missing = want - {s["id"] for s in specs}
            if missing:
                raise SpecError(f"--only: no spec named {', '.join(sorted(missing))}")
            specs = [s for s in specs if s["id"] in want]
        specs = [resolve_spec(s, args.dry_run) for s in specs]
    except (SpecError, OSError, json.JSONDecodeError, KeyError) as e:
        print(f"{args.specs}: {e}", file=sys.stderr)
        return 2
    if args.plan:
        total = 0.0
        for s in specs:
            total += est_seconds(s)
            print(f"{s['id']:<44} {est_seconds(s):>6.1f} s   cumulative {total:>6.1f} s")
        print(f"total {total:.0f} s for {len(specs)} specs (budget {args.budget_s:.0f} s)")
        return 0
    if not args.out:
        print("--out is required (the results file)", file=sys.stderr)
        return 2
    if args.snapshots:
        os.makedirs(args.snapshots, exist_ok=True)
    nvml = None if args.dry_run else meters.Nvml()
    with open(args.out, "a") as out:
        write_line(out, run_header(args, args.specs, nvml))
        counts, wall = run_all(args, specs, out)
        write_line(out, {"type": "end", "wall_s": round(wall, 1), "counts": counts})
    print(f"done in {wall:.0f} s: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
