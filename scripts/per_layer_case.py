"""The step shared by scripts/cases_from_measure_{hybrid,nemotronh,zamba2}.py: the cases of
scripts/cases_from_measure.py, with each run's per-layer case taken from one chosen block's
increment (a model of unlike blocks, whose measured median of the increments is not the
estimate's median over its blocks; see validation/README.md)."""
import json
import subprocess
import sys

PER_LAYER = "per_gpu.activation_bytes_per_layer"


def main(pick):
    """Prints the cases of the OUT.json files named on the command line as JSON.

    `pick(increments)` gets a run's `layer_increments` (block ends 1-0, 2-1, ...) and returns
    (expected bytes, the note's opening sentence ending in ". "); the rest of the note is the
    one cases_from_measure.py wrote, less its first sentence."""
    outs = sys.argv[1:]
    cases = json.loads(subprocess.check_output(["python3", "scripts/cases_from_measure.py", *outs]))
    for out in outs:
        with open(out) as f:
            r = json.load(f)
        inc = r["steps"]["step2"]["r512"]["layer_increments"]
        for c in cases:
            if c["source_id"] == r["id"] and c["metric"] == PER_LAYER:
                c["expected_bytes"], head = pick(inc)
                c["note"] = head + c["note"].split(". ", 1)[1]
    json.dump(cases, sys.stdout, indent=1)
    print()
