"""A sweep task's metric, read from what it left: the scraps of its output
notebook (scrapbook's ``glue``: outputs of type
``application/scrapbook.scrap.json+json``, ``{"name", "data", "encoder",
"version"}``; papermill's older ``record``: ``application/papermill.record+json``,
``{name: value}``), else a ``metrics.json`` (``{"<name>": number}``). As
scrapbook reads them, a later scrap of the same name replaces an earlier one.
"""
from __future__ import annotations

import json
import math
import os
import stat
from typing import Any, Iterable, Optional

GLUE_PREFIX = "application/scrapbook.scrap."
RECORD_PREFIX = "application/papermill.record"
# An output notebook larger than this is not read for its metric.
MAX_READ = 64 * 1024 * 1024


def notebook_scraps(nb: Any) -> dict[str, Any]:
    """name -> data of a notebook's scraps (a parsed .ipynb)."""
    out: dict[str, Any] = {}
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    for cell in cells:
        for output in cell.get("outputs", []) if isinstance(cell, dict) else []:
            data = output.get("data", {}) if isinstance(output, dict) else {}
            for mime, payload in data.items() if isinstance(data, dict) else ():
                if mime.startswith(GLUE_PREFIX) and isinstance(payload, dict) \
                        and isinstance(payload.get("name"), str):
                    out[payload["name"]] = payload.get("data")
                elif mime.startswith(RECORD_PREFIX) and isinstance(payload, dict):
                    out.update(payload)
    return out


def number(value: Any) -> Optional[float]:
    """A finite number, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _json_file(path: str) -> Any:
    """A JSON file the job wrote (so its account's, not the service's):
    opened never through a link, never blocking, only a regular file with
    one name and at most MAX_READ bytes; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_READ:
            return None
        try:
            return json.loads(f.read(MAX_READ))
        except (ValueError, RecursionError):
            return None


def read_metric(name: str, notebook: Optional[str], directories: Iterable[str]
                ) -> Optional[float]:
    """The metric ``name``: from the output notebook's scraps, else from the
    first ``metrics.json`` of ``directories`` that has it."""
    if notebook:
        nb = _json_file(notebook)
        if nb is not None:
            value = number(notebook_scraps(nb).get(name))
            if value is not None:
                return value
    for d in directories:
        metrics = _json_file(os.path.join(d, "metrics.json"))
        if isinstance(metrics, dict) and number(metrics.get(name)) is not None:
            return number(metrics[name])
    return None
