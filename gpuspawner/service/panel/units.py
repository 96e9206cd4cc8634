"""GPU counts as the panel prints them, shares of one GPU included: a
team's use in GPU units ("0.25", "3.75", never "0" or "1.0") and a
workload's GPUs ("1/4" for a quarter share, "2" for two GPUs). Pure; the
templates use them as the ``units`` and ``gpus`` filters."""
from __future__ import annotations

from fractions import Fraction
from typing import Mapping


def units_text(units: float) -> str:
    """0.25 -> "0.25", 1.0 -> "1", 0.0625 (a 1/16 share) -> "0.0625"."""
    if units == int(units):
        return str(int(units))
    return f"{units:.4f}".rstrip("0")


def gpus_text(workload: Mapping) -> str:
    """A workload's GPUs: its share of one GPU as a fraction, or its count."""
    share = workload.get("gpu_share")
    if share:
        return str(Fraction(share).limit_denominator(64))
    return str(workload.get("gpus", 0))
