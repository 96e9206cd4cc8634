"""What every ``gpuhub`` command of the REST API shares: the connection
options, the client they make, how errors end a command (one line on stderr,
exit 1 for a refused request, 2 for a usage error), JSON and table output.
Pure but for ``connect`` and the printing."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any, Callable, Iterable, Optional, Sequence

from ..client import GpuHubClient, GpuHubError, TokenMissing, resolve_token, resolve_url
from ..times import from_iso


class UsageError(Exception):
    """A command line that cannot be run (exit 2)."""


def connect(args) -> GpuHubClient:
    return GpuHubClient(resolve_url(args.url), resolve_token(args.token))


def guard(name: str, fn: Callable[[Any], int]) -> Callable[[Any], int]:
    """Errors as one line on stderr: 1 for refused requests, 2 for usage."""
    def run(args) -> int:
        try:
            return fn(args)
        except (UsageError, TokenMissing) as e:
            print(f"gpuhub {name}: {e}", file=sys.stderr)
            return 2
        except GpuHubError as e:
            print(f"gpuhub {name}: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return run


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("connection")
    g.add_argument("--url", help="the service URL (default $GPUHUB_URL, else "
                                 "http://127.0.0.1:8000/services/gpuhub)")
    g.add_argument("--token", help="a JupyterHub API token (default $GPUHUB_TOKEN, else "
                                   "$JUPYTERHUB_API_TOKEN)")
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    return common


def note(text: str) -> None:
    print(f"gpuhub: {text}", file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def parse_time(value: Optional[str]) -> Optional[float]:
    """UNIX seconds from the API's ISO 8601 times (``…Z``)."""
    t = from_iso(value)
    return None if t is None else t.timestamp()


def fmt_age(seconds: Optional[float]) -> str:
    """A short duration: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
                 width: Optional[int] = None) -> str:
    """Columns left-aligned, two spaces apart, no trailing spaces. With
    ``width`` (a terminal's), the last column is wrapped onto lines of their
    own, indented under it, so that no line is longer (when the other columns
    leave it at least 20 characters); without, it is left whole."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    indent = sum(widths[:-1]) + 2 * (len(headers) - 1)
    room = None if width is None else max(width - indent, 20)
    lines = []
    for row in [list(headers)] + rows:
        head = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        last = textwrap.wrap(row[-1], room, break_on_hyphens=False) if room else [row[-1]]
        lines.append((head + "  " + (last[0] if last else "")).rstrip())
        lines.extend(" " * indent + more for more in last[1:])
    return "\n".join(lines)
