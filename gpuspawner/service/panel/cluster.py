"""The cluster page's model: pools and nodes whose GPUs carry their state,
utilisation, memory and holder, with a heat-map colour. Pure, and free of
JupyterHub, so a GPU host can render the heat map without a hub
(scripts/gpu_panel_check.py)."""
from __future__ import annotations

from gpuspawner.service.panel import charts

# What a sharing pool's heat map says when the service gives no labels of its
# own: what the local backend does without an MPS daemon.
DEFAULT_ENFORCEMENT = {"memory": "watched: a share above its memory is warned, then stopped",
                       "compute": "time-sliced (not enforced)"}


# The palette's first colours, dark enough for white text on a share's segment.
SHARE_COLOURS = 6


def gpu_state(device: dict) -> str:
    if device.get("admin_mark"):
        return "out of service"
    if not device.get("healthy", True):
        return "unhealthy"
    return "in use" if device.get("workload") or device.get("shares") else "free"


def gib(mib: float) -> str:
    return f"{mib / 1024:.1f}"


def share_slots(shares: list[dict], units: int) -> list[dict]:
    """A shared GPU's ``units`` slots as the heat map draws them: a segment
    per share (its slots, owner, memory used of its limit), then the free
    slots, one empty segment each."""
    segments = []
    for sh in shares:
        w = sh.get("workload") or {}
        used, limit = sh.get("memory_used_mib"), sh.get("memory_limit_mib") or 0
        segments.append({
            "slots": max(1, round(sh["share"] * units)), "label": sh["label"],
            "workload": w, "owner": f"{w.get('user', '?')} · "
                     f"{w.get('name') or (w.get('kind', '') + ' ' + w.get('id', '')).strip()}",
            "memory": f"{'–' if used is None else gib(used)} / {gib(limit)} GiB",
            "utilization_pct": sh.get("utilization_pct"),
            "over": used is not None and used > limit,
            "colour": charts.colour(len(segments) % SHARE_COLOURS)})
    free = units - sum(seg["slots"] for seg in segments)
    segments += [{"slots": 1, "free": True} for _ in range(max(0, free))]
    return segments


def sharing_note(sharing: dict) -> str:
    """"in 4 slots of 35.2 GiB; memory watched: …; compute time-sliced (not enforced)"."""
    labels = {**DEFAULT_ENFORCEMENT, **(sharing.get("enforcement") or {})}
    return (f"GPUs shared in {sharing['share_units']} slots of "
            f"{gib(sharing['share_memory_mib'])} GiB; memory {labels['memory']}; "
            f"compute {labels['compute']}")


def cluster_model(pools: list[dict], samples: list[dict]) -> list[dict]:
    """Pools with nodes whose GPUs carry utilisation, memory and holder; a
    shared GPU its slots (``share_slots``), a sharing pool its free slots
    and what its shares' enforcement is (``sharing_note``)."""
    by_gpu = {(g["node"], g["gpu"]): g for g in samples}
    out = []
    for pool in pools:
        counts = {"in use": 0, "free": 0, "unhealthy": 0, "out of service": 0}
        free_slots = 0
        nodes = []
        for node in pool["nodes"]:
            cells = []
            for d in node["devices"]:
                sample = by_gpu.get((node["name"], d["index"]), {})
                cell = {**d, "utilization_pct": sample.get("utilization_pct"),
                        "memory_used_mib": sample.get("memory_used_mib"),
                        "workload": sample.get("workload"), "shares": sample.get("shares") or []}
                cell["state"] = gpu_state(cell)
                cell["colour"] = charts.heat(cell["utilization_pct"])
                cell["text_colour"] = charts.text_colour(cell["utilization_pct"])
                if sample.get("share_units") and cell["shares"]:
                    cell["slots"] = share_slots(cell["shares"], sample["share_units"])
                    # Compute is decided per GPU (MPS only where every share is a client).
                    cell["share_compute"] = (sample.get("enforcement") or {}).get("compute", "")
                    if cell["state"] == "in use":
                        free_slots += sum(1 for seg in cell["slots"] if seg.get("free"))
                counts[cell["state"]] += 1
                cells.append(cell)
            nodes.append({**node, "cells": cells})
        sharing = pool.get("sharing")
        out.append({**pool, "nodes": nodes, "counts": counts,
                    "free_slots": free_slots, "sharing_note": sharing_note(sharing)
                    if sharing else ""})
    return out
