#!/usr/bin/env python3
"""Cases of the transformers-release runs (validation/cpu-measured-tversion.json):
scripts/cases_from_measure.py, less the per-layer case of the Nemotron-H runs ("M*-E": four
unlike blocks, whose measured median of three increments is not the estimate's median of four;
validation/README.md gives their attention-block increments instead).

usage: cases_from_measure_tversion.py OUT.json [OUT.json ...] > cases.json
"""
import json
import subprocess
import sys

cases = json.loads(subprocess.check_output(["python3", "scripts/cases_from_measure.py", *sys.argv[1:]]))
cases = [c for c in cases
         if not ("nemotron-h" in c["source_id"] and c["metric"] == "per_gpu.activation_bytes_per_layer")]
json.dump(cases, sys.stdout, indent=1)
print()
