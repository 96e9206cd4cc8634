"""Why a hub-managed service exited, for the hub to say.

A managed service's output goes to the hub's terminal among the hub's
own lines; when it cannot start (a config error: ``SystemExit`` with a
message) the hub stops and says why in its last line. The hub names a file
in the service's environment (``ENV``); the service writes its reason
there on the way out.
"""
from __future__ import annotations

import os
import traceback
from typing import Callable, Optional

ENV = "GPUHUB_EXIT_REASON_FILE"
MAX_CHARS = 2000


def recording(main: Callable[[], None]) -> None:
    """Run ``main``; if it ends with an error (a SystemExit with a message,
    or an exception), write why to the file ``ENV`` names, then let it go on."""
    try:
        main()
    except SystemExit as e:
        if e.code not in (None, 0):
            _write(str(e.code) if not isinstance(e.code, int) else f"exit status {e.code}")
        raise
    except BaseException as e:  # noqa: B902 - recorded, then raised as it was
        if not isinstance(e, KeyboardInterrupt):
            _write("".join(traceback.format_exception_only(type(e), e)).strip())
        raise


def _write(reason: str) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        with open(path, "w") as f:
            f.write(reason[-MAX_CHARS:])
    except OSError:
        pass  # the hub then says only the exit status


def read(path: str) -> Optional[str]:
    """The reason written at ``path``, or None."""
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None
