#!/usr/bin/env python3
"""Every tensor alive at the end of step 2's forward and at step 2's peak, with the modules and
ops that made it: what a measured run saves, tensor by tensor, to set beside the estimate's
op-by-op programs.

Runs ../shared/measure/measure.py's main (from a patched copy, e.g. with
scripts/measure_vlm.patch applied) and keeps its profiler analysis:

    cp ../shared/measure/*.py /tmp/m && (cd /tmp/m && patch -p1 < "$OLDPWD/scripts/measure_vlm.patch")
    cp scripts/measure_live_tensors.py /tmp/m/
    MALLOC_MMAP_THRESHOLD_=1048576 "$VENV/bin/python" /tmp/m/measure_live_tensors.py SPEC OUT LIVE
    python3 scripts/measure_live_tensors.py --show LIVE [forward_end|peak]

LIVE holds {"forward_end": [...], "peak": [...]}, each row {bytes, r512, cat, chain}: the
profiler's category and the chain of enclosing ops and nn.Modules, innermost first. Rows with an
empty chain and category UNKNOWN are tensors the replay did not see freed (not counted in the
profiler's category totals).
"""

import collections
import json
import sys


def chains_of(an, memprof):
    """(ptr, allocation id) -> enclosing op / module / modeling-file names, innermost first."""
    kind = memprof._EventType
    out = {}
    for e in memprof._dfs(an.tree):
        if e.tag == kind.Allocation and e.typed[1].alloc_size > 0:
            p, chain = e.parent, []
            while p is not None:
                n = p.name
                if p.tag == kind.TorchOp or n.startswith("nn.Module") or "modeling_" in n:
                    chain.append(n.split("/")[-1][:90])
                p = p.parent
            out[(e.typed[1].ptr, e.typed[1].allocation_id)] = chain[:14]
    return out


def live(an, j, chains, memprof):
    """Tensors alive after timeline event j."""
    alive = {}
    for action, key, version, nb in an.tl_ev[: j + 1]:
        if hasattr(key, "storage"):
            k = (key, key.storage.ptr, key.storage.allocation_id)
        else:
            k = (key, id(key))
        if action in ("PREEXISTING", "CREATE"):
            alive[k] = [nb, version]
        elif action == "INCREMENT_VERSION" and k in alive:
            alive[k][1] = version + 1
        elif action == "DESTROY":
            alive.pop(k, None)
    rows = []
    for k, (nb, version) in alive.items():
        chain = chains.get((k[1], k[2]), []) if hasattr(k[0], "storage") else []
        rows.append(
            {
                "bytes": nb,
                "r512": memprof.r512(nb),
                "cat": an._cat_of(k[0], version),
                "chain": chain,
            }
        )
    return rows


def measure_and_dump(spec, out, dump):
    import measure
    import memprof

    held = {}

    class Kept(memprof.Analysis):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            held["an"] = self

    memprof.Analysis = Kept
    measure.main(spec, out)
    an = held["an"]
    chains = chains_of(an, memprof)
    w2 = an.range("## step2 ##")
    fw2 = an.ranges_within("## forward ##", w2)[0]
    j_fwd = an._state_at(an.tl["t"], fw2[1])
    j_peak = an.peak(w2, rounded=True)["timeline"]["index"]
    res = {
        "forward_end": live(an, j_fwd, chains, memprof),
        "peak": live(an, j_peak, chains, memprof),
    }
    with open(dump, "w") as f:
        json.dump(res, f, indent=0)


def show(path, which):
    with open(path) as f:
        rows = json.load(f)[which]
    totals = collections.Counter()
    for r in rows:
        totals[r["cat"]] += r["r512"]
    print(dict(totals))
    for r in sorted(rows, key=lambda r: (r["cat"], " ".join(reversed(r["chain"])))):
        if r["cat"] in ("PARAMETER", "OPTIMIZER_STATE") or not r["chain"]:
            continue
        ch = list(reversed(r["chain"]))
        mods = "/".join(c.replace("nn.Module: ", "") for c in ch if c.startswith("nn.Module"))
        ops = [c for c in ch if c.startswith("aten::")][-2:]
        src = [c for c in ch if "modeling_" in c][-1:]
        print(f"{r['cat'][:6]:6} {r['r512']:>10} {mods[-70:]:70} {src} {ops}")


if __name__ == "__main__":
    if sys.argv[1] == "--show":
        show(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "forward_end")
    else:
        measure_and_dump(*sys.argv[1:4])
