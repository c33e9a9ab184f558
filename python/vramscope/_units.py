"""Adaptive binary units for human output, as the CLI prints them
(crates/core/src/text.rs ``bytes``): ``512 B``, ``1.50 KiB``, ``123.4 MiB``."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit under 1024 of it (two decimals, one from 100)."""
    if n < 1024:
        return f"{n} B"
    v = float(n)
    u = 0
    while v >= 1024.0 and u < len(_UNITS) - 1:
        v /= 1024.0
        u += 1
    digits = 1 if v >= 100.0 else 2
    return f"{v:.{digits}f} {_UNITS[u]}"
