"""The cluster page's model: pools and nodes whose GPUs carry their state,
utilisation, memory and holder, with a heat-map colour. Pure, and free of
JupyterHub, so a GPU host can render the heat map without a hub
(scripts/gpu_panel_check.py)."""
from __future__ import annotations

from . import charts


def gpu_state(device: dict) -> str:
    if device.get("admin_mark"):
        return "out of service"
    if not device.get("healthy", True):
        return "unhealthy"
    return "in use" if device.get("workload") else "free"


def cluster_model(pools: list[dict], samples: list[dict]) -> list[dict]:
    """Pools with nodes whose GPUs carry utilisation, memory and holder."""
    by_gpu = {(g["node"], g["gpu"]): g for g in samples}
    out = []
    for pool in pools:
        counts = {"in use": 0, "free": 0, "unhealthy": 0, "out of service": 0}
        nodes = []
        for node in pool["nodes"]:
            cells = []
            for d in node["devices"]:
                sample = by_gpu.get((node["name"], d["index"]), {})
                cell = {**d, "utilization_pct": sample.get("utilization_pct"),
                        "memory_used_mib": sample.get("memory_used_mib"),
                        "workload": sample.get("workload")}
                cell["state"] = gpu_state(cell)
                cell["colour"] = charts.heat(cell["utilization_pct"])
                cell["text_colour"] = charts.text_colour(cell["utilization_pct"])
                counts[cell["state"]] += 1
                cells.append(cell)
            nodes.append({**node, "cells": cells})
        out.append({**pool, "nodes": nodes, "counts": counts})
    return out
