#!/usr/bin/env python3
"""Cases of the measured tiny Zamba2 steps (layers mamba, hybrid, mamba, hybrid, mamba, hybrid):
scripts/cases_from_measure.py, with the per-layer case taken from the first hybrid block (layer
1). The estimate's per-layer figure is the median of its six blocks (index 3 of the sorted six),
which for this pattern is a hybrid block (each keeps its shared block's and its Mamba layer's
saved tensors; a Mamba block keeps less); the measured median of the five increments is the
last hybrid block's, whose output the final norm reads (see validation/README.md)."""
from per_layer_case import main


def pick(inc):
    """Layer 1, the first hybrid block, of the six."""
    return inc[0], ("Bytes the first hybrid block (layer 1) leaves allocated after its "
                    "forward (its block end minus the Mamba block's end); the Mamba block 2 "
                    f"leaves {inc[1]:,}, the last hybrid block {inc[4]:,}. ")


main(pick)
