#!/usr/bin/env python3
"""Cases of the measured tiny Nemotron-H steps ("M*-E"): scripts/cases_from_measure.py, with the
per-layer case taken from the attention block (layer 1). The estimate's per-layer figure is the
median of its four blocks (index 2 of the sorted four), which for this pattern is the attention
block (the Mamba block on the torch path keeps more, the MLP and MoE blocks less); the measured
median of the three increments is the MoE block's (see validation/README.md)."""
from per_layer_case import main


def pick(inc):
    """Layer 1, the attention block, of the four."""
    return inc[0], ("Bytes the attention block (layer 1) leaves allocated after its forward "
                    "(its block end minus the Mamba block's end); the MLP block 2 and the MoE "
                    f"block 3 leave {inc[1]:,} and {inc[2]:,}. ")


main(pick)
