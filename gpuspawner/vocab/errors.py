"""The one error of the vocabulary: a request that cannot be taken, naming the field to blame.
The handlers answer it with its ``status`` (400 unless it says otherwise)."""
from __future__ import annotations


class SpecError(ValueError):
    """A request that cannot be taken, with the field to blame."""

    def __init__(self, field_name: str, message: str, status: int = 400):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message
        self.status = status
