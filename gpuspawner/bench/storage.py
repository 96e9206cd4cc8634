"""``gpuhub bench storage``: what measuring a team space costs (docs/storage.md).

A scratch space of N files (default 100,000: 100 folders of small files, as
a dataset of images or shards looks) is measured by the service's own walk
(isolation/space_usage.py) and, as the baseline in the same run, by
``du -s --block-size=1`` (coreutils). Both walks run twice; the second, on a
warm cache, is what the service pays every ``team_space_measure_interval``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from ..isolation.space_usage import measure

PER_FOLDER = 1000


def make_space(root: str, files: int) -> None:
    for n in range(files):
        folder = os.path.join(root, f"d{n // PER_FOLDER:04d}")
        if n % PER_FOLDER == 0:
            os.mkdir(folder)
        with open(os.path.join(folder, f"f{n:07d}.bin"), "wb") as f:
            f.write(b"x" * (n % 7 * 512 + 1))


def _du(root: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    out = subprocess.run(["du", "-s", "--block-size=1", root], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[0]), time.perf_counter() - t0


def run_bench(files: int = 100_000) -> list[dict]:
    root = tempfile.mkdtemp(prefix="gpuhub-bench-storage-")
    try:
        t0 = time.perf_counter()
        make_space(root, files)
        made = time.perf_counter() - t0
        rows = []
        for run in ("cold", "warm"):
            usage = measure(root)
            du_bytes, du_s = _du(root)
            own_dir = os.stat(root).st_blocks * 512  # du counts the top folder, the walk does not
            rows.append({"run": run, "files": usage.files, "bytes": usage.bytes,
                         "walk_s": round(usage.seconds, 3), "du_s": round(du_s, 3),
                         "x_du": round(usage.seconds / du_s, 2) if du_s else None,
                         "agrees_with_du": usage.bytes + own_dir == du_bytes,
                         "made_s": round(made, 1)})
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'run':5} {'files':>8} {'MiB':>8} {'walk s':>7} {'du s':>6} {'× du':>5}  same bytes"]
    lines += [f"{r['run']:5} {r['files']:8,} {r['bytes'] / 2**20:8.1f} {r['walk_s']:7.2f} "
              f"{r['du_s']:6.2f} {r['x_du']:5.2f}  {r['agrees_with_du']}" for r in rows]
    return "\n".join(lines)
