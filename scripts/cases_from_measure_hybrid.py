#!/usr/bin/env python3
"""Cases of the measured hybrid (Jamba) steps: scripts/cases_from_measure.py, with the
per-layer case taken from the Mamba block (see validation/README.md)."""
import json, subprocess, sys
outs = sys.argv[1:]
cases = json.loads(subprocess.check_output(["python3", "scripts/cases_from_measure.py", *outs]))
for out in outs:
    r = json.load(open(out))
    s = r["steps"]["step2"]["r512"]
    inc = s["layer_increments"]  # between consecutive block ends: blocks 1, 2, 3
    for c in cases:
        if c["source_id"] == r["id"] and c["metric"] == "per_gpu.activation_bytes_per_layer":
            # Block 2 is a Mamba block; the estimate's median over the 4 blocks (index 2 of
            # the sorted four) is a Mamba block's, while the measured median of the three
            # increments is an attention block's.
            c["expected_bytes"] = inc[1]
            c["note"] = ("Bytes the Mamba block (layer 2) leaves allocated after its forward (its "
                         "block end minus the previous block's end); the increments of the "
                         f"attention + experts blocks 1 and 3 are {inc[0]:,} and {inc[2]:,}. "
                         + c["note"].split(". ", 1)[1])
json.dump(cases, sys.stdout, indent=1)
print()
