"""One call of the service's API as data: what the generated ``Api`` and
``AsyncApi`` build and a transport sends (requests in ``GpuHubClient``,
tornado in the Lab's server extension and the spawner, the culler's fetch).
Pure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

API_PATH = "/api/v1"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # under the API's root (``/workloads/w1``), path parameters quoted
    params: tuple = ()  # query (name, value) pairs, in order; a name may repeat
    body: Any = None  # JSON, or None for no body

    @property
    def target(self) -> str:
        """The path with its query string."""
        return self.path + (f"?{urlencode(self.params)}" if self.params else "")


def segment(value: Any) -> str:
    """A path parameter, quoted whole (a ``/`` in it stays in its segment)."""
    return quote(str(value), safe="")


def query(*pairs: tuple) -> tuple:
    """The query of (name, value) pairs: None left out, a list or tuple as
    the name repeated, booleans as ``true``/``false``."""
    out = []
    for name, value in pairs:
        for one in (value if isinstance(value, (list, tuple)) else (value,)):
            if one is None:
                continue
            out.append((name, str(one).lower() if isinstance(one, bool) else one))
    return tuple(out)
