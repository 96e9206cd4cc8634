"""Domain errors the handlers map to status codes (``SpecError`` in
specs.py is the fourth: a bad field, 400 unless it says otherwise)."""
from __future__ import annotations


class NotFound(LookupError):
    """No such workload, or one the caller may not see (same answer): 404."""


class Conflict(ValueError):
    """The request does not fit the workload's state: 409."""


class Forbidden(PermissionError):
    """The caller may not do this: 403."""
