#!/usr/bin/env python3
"""The GPU table of ACCURACY.md: runs `vramscope estimate --job FILE --json` on every case of a
measured-on-GPU cases file (default validation/gpu-h200-measured.json) and prints, per figure
(allocated, reserved, device total), how many cases are within their tolerance, the median signed
error and the worst one, as a Markdown table; `--cases-table` adds one row per case.

A case's `job_if_supported` fields (the PyTorch release, the module loading) are merged into its
job, as `../shared/validation/score.py` does with a build that accepts them (every build since
`torch_version` was added does).

usage: gpu_accuracy_table.py [--bin PATH] [--cases FILE] [--cases-table]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = [("per_gpu.peak_allocated", "peak allocated (`max_memory_allocated`)"),
           ("per_gpu.peak_reserved", "peak reserved (`max_memory_reserved`)"),
           ("per_gpu.device_total", "device total (nvidia-smi's process figure)")]


def lookup(report, dotted):
    node = report
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise ValueError(f"no number at {dotted}")
    return node


def estimate(binary, job):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
        path = f.name
    try:
        p = subprocess.run([binary, "estimate", "--job", path, "--json"], capture_output=True,
                           text=True, timeout=120)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed")
    return json.loads(p.stdout)


def pct(x):
    return f"{x * 100:+.2f} %"


def main(argv=None):
    ap = argparse.ArgumentParser(description="per-figure accuracy table of GPU-measured cases")
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "vramscope"))
    ap.add_argument("--cases", default=os.path.join(REPO, "validation", "gpu-h200-measured.json"))
    ap.add_argument("--cases-table", action="store_true")
    a = ap.parse_args(argv)
    cases = json.load(open(a.cases))
    rows = []
    for c in cases:
        job = dict(c["job"], **(c.get("job_if_supported") or {}))
        try:
            got = lookup(estimate(a.bin, job), c["metric"])
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"{c['id']}: {e}", file=sys.stderr)
            return 1
        err = (got - c["expected_bytes"]) / c["expected_bytes"]
        rows.append((c, got, err))
    print("| what | within | median error | worst |")
    print("|---|---|---|---|")
    for metric, name in FIGURES:
        sel = [(c, e) for c, _, e in rows if c["metric"] == metric]
        if not sel:
            continue
        tol = {c["tolerance"] for c, _ in sel}
        tol_s = "/".join(f"{t * 100:g} %" for t in sorted(tol))
        within = sum(abs(e) <= c["tolerance"] for c, e in sel)
        worst_c, worst = max(sel, key=lambda ce: abs(ce[1]))
        print(f"| {name} | {tol_s}: {within} of {len(sel)} | "
              f"{pct(statistics.median(e for _, e in sel))} | {pct(worst)} "
              f"({worst_c['source_id'][len('gpu-'):]}) |")
    if a.cases_table:
        print()
        print("| case | measured | estimated | error |")
        print("|---|---|---|---|")
        for c, got, err in rows:
            print(f"| {c['id']} | {c['expected_bytes']:,} | {int(got):,} | {pct(err)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
