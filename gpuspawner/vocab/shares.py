"""Asking for part of one GPU: ``gpu_share`` ("1/4", 0.25) and/or
``gpu_memory`` ("35GiB", "35G", 35 as GiB) in a request, and how a pool that
shares its GPUs turns that into slots.

Pure: parsing needs only the request; resolving needs the pool's sharing
settings and its GPUs' memory, which the engine passes in. A share is one
dimension, as MPS and Run:ai fractions count it: a k/N share has k/N of the
GPU's memory and k/N of its compute, so asking for 35 GiB of a 141 GiB GPU
in quarters gets a quarter (35.25 GiB).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Optional

from gpuspawner.vocab.errors import SpecError

# Slots a shared GPU may be split into: powers of two, so that shares add up
# exactly in floating point (four quarters are exactly 1.0 GPU of quota).
SHARE_UNITS = (2, 4, 8, 16)
MEMORY_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(GiB|GB|G|MiB|MB|M)?\s*", re.IGNORECASE)
FRACTION_RE = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*")


@dataclass(frozen=True)
class ShareRequest:
    """What a request asked for: a fraction of a GPU, GPU memory, or both
    (the larger wins)."""

    fraction: Optional[Fraction] = None
    memory_mib: Optional[int] = None


@dataclass(frozen=True)
class PoolSharing:
    """A pool whose GPUs may be shared, in ``units`` equal slots each."""

    pool: str
    units: int
    gpu_memory_mib: int  # the smallest GPU of the pool: what a share's memory is a part of
    model: str = ""      # that GPU's model, as the inventory names it
    # Where each GPU's MPS control daemon listens ({uuid}: the GPU's), None: no MPS.
    mps_pipe_directory: Optional[str] = None


SHARING_KEYS = ("share_units", "mps_pipe_directory")


def parse_sharing(config: Mapping[str, Any]) -> dict[str, int]:
    """``GpuHubService.gpu_sharing`` ({pool: {"share_units": 4}} or {pool: 4})
    as pool -> slots per GPU. Raises ValueError naming the pool."""
    out = {}
    for pool, value in dict(config or {}).items():
        units = value.get("share_units") if isinstance(value, dict) else value
        if isinstance(value, dict) and set(value) - set(SHARING_KEYS):
            raise ValueError(f"gpu_sharing[{pool!r}]: unknown key(s) "
                             f"{', '.join(sorted(set(value) - set(SHARING_KEYS)))}; "
                             f"known: {', '.join(SHARING_KEYS)}")
        pipe = value.get("mps_pipe_directory") if isinstance(value, dict) else None
        if pipe is not None and (not isinstance(pipe, str) or not pipe.startswith("/")):
            raise ValueError(f"gpu_sharing[{pool!r}]: mps_pipe_directory must be an absolute "
                             f"path (with {{uuid}} for each GPU's daemon), got {pipe!r}")
        if isinstance(units, bool) or units not in SHARE_UNITS:
            raise ValueError(f"gpu_sharing[{pool!r}]: share_units must be one of "
                             f"{', '.join(map(str, SHARE_UNITS))} (slots per GPU), got {units!r}")
        out[str(pool)] = units
    return out


def parse_mps(config: Mapping[str, Any]) -> dict[str, str]:
    """pool -> the pipe directory of its GPUs' MPS control daemons
    (``{uuid}`` stands for each GPU's), for the pools that have one."""
    return {str(pool): value["mps_pipe_directory"] for pool, value in dict(config or {}).items()
            if isinstance(value, dict) and value.get("mps_pipe_directory")}


def parse_share(body: Mapping[str, Any]) -> Optional[ShareRequest]:
    """The share a request asks for, or None for whole GPUs. Raises
    ``SpecError`` naming ``gpu_share`` or ``gpu_memory``."""
    fraction = _fraction(body.get("gpu_share")) if body.get("gpu_share") is not None else None
    memory = _memory_mib(body.get("gpu_memory")) if body.get("gpu_memory") is not None else None
    if fraction is None and memory is None:
        return None
    gpus = body.get("gpus_per_node", body.get("gpus", 1))
    if gpus != 1 or body.get("nodes", 1) != 1:
        field = "gpu_share" if fraction is not None else "gpu_memory"
        raise SpecError(field, "is a share of one GPU: leave gpus (and nodes) at 1, or ask "
                               "for whole GPUs without it")
    return ShareRequest(fraction, memory)


def _fraction(value: Any) -> Fraction:
    if isinstance(value, str) and FRACTION_RE.fullmatch(value):
        num, den = (int(x) for x in FRACTION_RE.fullmatch(value).groups())
        if den == 0:
            raise SpecError("gpu_share", f"{value!r} divides by zero")
        share = Fraction(num, den)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        share = Fraction(value).limit_denominator(1000)
    else:
        raise SpecError("gpu_share", f"must be a fraction of one GPU such as '1/4' or 0.25, "
                                     f"got {value!r}")
    if not 0 < share < 1:
        raise SpecError("gpu_share", f"must be more than 0 and less than one GPU, got {value!r} "
                                     f"(a whole GPU is gpus: 1)")
    return share


def _memory_mib(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        amount, unit = float(value), "GiB"
    elif isinstance(value, str) and MEMORY_RE.fullmatch(value):
        number, unit = MEMORY_RE.fullmatch(value).groups()
        amount, unit = float(number), (unit or "GiB")
    else:
        raise SpecError("gpu_memory", f"must be GPU memory such as '35GiB', '35G' or 35 (GiB), "
                                      f"got {value!r}")
    mib = amount * (1 if unit.upper().startswith("M") else 1024)
    if mib < 1:
        raise SpecError("gpu_memory", f"must be at least 1 MiB, got {value!r}")
    if not math.isfinite(mib):  # 5.9e307 GiB is finite, its MiB are not
        raise SpecError("gpu_memory", f"is more memory than any GPU has, got {value!r}")
    return math.ceil(mib)


def resolve_share(request: ShareRequest, pool: str, sharing: Optional[PoolSharing]) -> float:
    """The share of one GPU (GPU units, k/N) a request gets in ``pool``:
    the fewest slots that hold both what it asked of compute and of memory.
    Raises ``SpecError`` when the pool does not share its GPUs, or the ask
    is a whole GPU or more."""
    field = "gpu_share" if request.fraction is not None else "gpu_memory"
    if sharing is None:
        raise SpecError(field, f"pool {pool!r} does not share its GPUs (its admin sets "
                               f"GpuHubService.gpu_sharing): ask for whole GPUs there")
    n = sharing.units
    slots = 0
    if request.fraction is not None:
        slots = math.ceil(request.fraction * n)
    if request.memory_mib is not None:
        if request.memory_mib > sharing.gpu_memory_mib:
            raise SpecError("gpu_memory", f"{request.memory_mib / 1024:.1f} GiB is more than a "
                                          f"whole {pool} GPU has ({sharing.gpu_memory_mib / 1024:.1f} GiB)")
        slots = max(slots, math.ceil(Fraction(request.memory_mib, sharing.gpu_memory_mib) * n))
    if slots >= n:
        raise SpecError(field, f"rounds up to a whole {pool} GPU (shares there are 1/{n} of a GPU, "
                               f"{sharing.gpu_memory_mib / n / 1024:.1f} GiB each): ask for gpus: 1")
    return slots / n


def share_label(share: float, gpu_memory_mib: int = 0, model: str = "") -> str:
    """How people see a share: "1/4 H200 · 35.2 GiB"."""
    frac = Fraction(share).limit_denominator(64)
    text = f"{frac.numerator}/{frac.denominator}{' ' + model if model else ''}"
    if gpu_memory_mib:
        text += f" · {share * gpu_memory_mib / 1024:.1f} GiB"
    return text


def share_env(share: float, sharing: Optional[PoolSharing]) -> dict[str, str]:
    """What a share's processes are told of it (the watcher holds them to
    the memory limit whatever they do with these)."""
    if not share:
        return {}
    env = {"GPUHUB_GPU_SHARE": f"{share:g}"}
    if sharing is not None and sharing.gpu_memory_mib:
        env["GPUHUB_GPU_MEMORY_LIMIT_MIB"] = str(int(share * sharing.gpu_memory_mib))
    return env
