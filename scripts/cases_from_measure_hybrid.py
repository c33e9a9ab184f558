#!/usr/bin/env python3
"""Cases of the measured hybrid (Jamba) steps: scripts/cases_from_measure.py, with the
per-layer case taken from the Mamba block (see validation/README.md)."""
from per_layer_case import main


def pick(inc):
    """Block 2 is a Mamba block; the estimate's median over the 4 blocks (index 2 of the sorted
    four) is a Mamba block's, while the measured median of the three increments is an attention
    block's."""
    return inc[1], ("Bytes the Mamba block (layer 2) leaves allocated after its forward (its "
                    "block end minus the previous block's end); the increments of the "
                    f"attention + experts blocks 1 and 3 are {inc[0]:,} and {inc[2]:,}. ")


main(pick)
