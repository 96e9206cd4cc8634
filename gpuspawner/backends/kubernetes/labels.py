"""Kubernetes label values, shared by the spawner and the Jobs backend. Kept
apart from both so that the scheduler service does not import kubespawner
(and the Kubernetes client under it) unless it runs on Kubernetes: those
imports took most of the service's start, hence of every restart."""
from __future__ import annotations

import hashlib
import re
from typing import Any

_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(value: Any) -> str:
    """``value`` as a valid Kubernetes label value (at most 63 characters of
    ``[A-Za-z0-9._-]``, alphanumeric at both ends, or empty).

    A valid value is kept as it is. Any other is cleaned (runs of other
    characters become ``-``, cut to length) and given an 8 hex digit hash of
    the original, so that two different values never get the same label.
    The annotations carry the original.
    """
    text = "" if value is None else str(value)
    if _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    cleaned = _LABEL_BAD.sub("-", text).strip("._-")[:63 - 1 - len(digest)].rstrip("._-")
    return f"{cleaned}-{digest}" if cleaned else digest
