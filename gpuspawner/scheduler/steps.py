"""Work done in steps: a generator that yields now and then (so that its
caller can let other work run) and returns its result."""
from __future__ import annotations

from typing import Any, Generator


def drain(steps: Generator[None, None, Any]) -> Any:
    """Run ``steps`` to its end, at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
