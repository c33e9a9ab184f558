#!/usr/bin/env python3
"""Marks every case of the project's CPU-measured case files as measured on the CPU.

Each case of a `validation/cpu-measured-*.json` file that is a list of cases gets
`"measured_on": "cpu"` (placed after `split`), so `vramscope validate` and the Rust tests
(`crates/core/tests/measured/mod.rs`) compare its `per_gpu.peak_allocated` net of the BLAS
workspaces a CPU run does not have (validation/README.md). Files that are not lists of cases
(the stream measurements: accum, fsdp, generate*, selective) are left alone. Idempotent: a case
already marked is kept as it is, and a file is rewritten only when a case changed, in the form
it was written in (indent 1, its ASCII escaping and trailing newline kept).

usage: python3 scripts/add_measured_on.py [FILE ...]   (default: validation/cpu-measured-*.json)
"""
import glob
import json
import sys


def marked(case):
    """The case with `measured_on: cpu` after `split` (or last); an existing value is kept."""
    if "measured_on" in case:
        return case
    out = {}
    for k, v in case.items():
        out[k] = v
        if k == "split":
            out["measured_on"] = "cpu"
    out.setdefault("measured_on", "cpu")
    return out


def mark_file(path):
    """Marks the cases of `path`; returns how many it marked (None: not a list of cases)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    cases = json.loads(text)
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        return None
    new = [marked(c) for c in cases]
    changed = sum(1 for c in cases if "measured_on" not in c)
    if changed:
        ascii_only = text.isascii()
        body = json.dumps(new, indent=1, ensure_ascii=ascii_only)
        with open(path, "w", encoding="utf-8") as f:
            f.write(body + ("\n" if text.endswith("\n") else ""))
    return changed


def main(argv):
    paths = argv or sorted(glob.glob("validation/cpu-measured-*.json"))
    for p in paths:
        n = mark_file(p)
        print(f"{p}: " + ("not a list of cases, left alone" if n is None else f"{n} marked"))


if __name__ == "__main__":
    main(sys.argv[1:])
