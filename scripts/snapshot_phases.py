#!/usr/bin/env python3
"""The allocation events of an allocator snapshot taken by validation/gpu/run_one.py, per phase:
the context probe, the model build, and each training step's forward, backward and optimizer.

usage: snapshot_phases.py SNAPSHOT.pickle [--step N] [--min-mib M]

Prints, per phase, the allocations of at least M MiB (default 1) in order (MiB, two decimals), the count of
smaller ones, and the segments cudaMalloc'd. A phase is told by the run_one.py frame of an
allocation's Python stack (probe_context, build_model, forward) or the optimizer's (_init_group,
_multi_tensor_adam, ...); the backward's allocations come from autograd's thread and have no
Python frames: they are those after a forward and before the next optimizer frame. This is what
crates/core/tests/alloc_stream.rs compares the estimator's event stream against (its numbers
are this script's output on the two H200 snapshots, ../shared/fixtures/gpu-h200/).
"""
import argparse
import pickle

MIB = 1 << 20
OPT = ("_init_group", "_multi_tensor_adam", "_fused_adam", "_multi_tensor_sgd", "step")


def tag(e):
    names = [f["name"] for f in e.get("frames", []) if f["filename"].endswith(".py")]
    files = [f["filename"] for f in e.get("frames", []) if f["filename"].endswith(".py")]
    for n, fn in zip(names, files):
        if fn.endswith("run_one.py"):
            if n in ("probe_context", "build_model", "forward"):
                return {"probe_context": "context", "build_model": "load"}.get(n, n)
    if any(n in OPT for n in names[:3]):
        return "optimizer"
    return None if not names else "other"


def phases(trace, floor=MIB):
    out, cur, step = [], None, -1
    for e in trace:
        a = e["action"]
        if a not in ("alloc", "segment_alloc"):
            continue
        t = tag(e) if a == "alloc" else None
        if a == "alloc":
            if t is None and cur == "forward":
                t = "backward"
            elif t is None or t == "other":
                t = cur
            if t == "forward" and cur != "forward":
                step += 1
            if t != cur:
                out.append({"phase": t, "step": step if t in ("forward", "backward", "optimizer") else None,
                            "big": [], "small": 0, "segments": []})
                cur = t
            if e["size"] >= floor:
                out[-1]["big"].append(round(e["size"] / MIB, 2))
            else:
                out[-1]["small"] += 1
        elif out:
            out[-1]["segments"].append(round(e["size"] / MIB, 2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshot")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--min-mib", type=float, default=1.0)
    a = ap.parse_args()
    with open(a.snapshot, "rb") as f:
        d = pickle.load(f)
    for p in phases(d["device_traces"][0], int(a.min_mib * MIB)):
        if a.step is not None and p["step"] not in (None, a.step):
            continue
        print(f"{p['phase']} step {p['step']}: {len(p['big'])} big, {p['small']} small, "
              f"segments {p['segments']}")
        print("  ", p["big"])


if __name__ == "__main__":
    main()
