#!/usr/bin/env python3
"""Cases of the measured tiny Zamba2 steps (layers mamba, hybrid, mamba, hybrid, mamba, hybrid):
scripts/cases_from_measure.py, with the per-layer case taken from the first hybrid block (layer
1). The estimate's per-layer figure is the median of its six blocks (index 3 of the sorted six),
which for this pattern is a hybrid block (each keeps its shared block's and its Mamba layer's
saved tensors; a Mamba block keeps less); the measured median of the five increments is the
last hybrid block's, whose output the final norm reads (see validation/README.md)."""
import json, subprocess, sys
outs = sys.argv[1:]
cases = json.loads(subprocess.check_output(["python3", "scripts/cases_from_measure.py", *outs]))
for out in outs:
    r = json.load(open(out))
    inc = r["steps"]["step2"]["r512"]["layer_increments"]  # block ends 1-0, 2-1, ..., 5-4
    for c in cases:
        if c["source_id"] == r["id"] and c["metric"] == "per_gpu.activation_bytes_per_layer":
            c["expected_bytes"] = inc[0]
            c["note"] = ("Bytes the first hybrid block (layer 1) leaves allocated after its "
                         "forward (its block end minus the Mamba block's end); the Mamba block 2 "
                         f"leaves {inc[1]:,}, the last hybrid block {inc[4]:,}. "
                         + c["note"].split(". ", 1)[1])
json.dump(cases, sys.stdout, indent=1)
print()
