"""Leaving a process whose work is all stopped and written: the atexit
handlers run and the logs are flushed, but the interpreter's teardown of
every object (more than a second for the hub on a loaded machine, a stop's
largest part when nothing runs) is skipped."""
from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int = 0) -> NoReturn:
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a pipe nobody reads
            pass
    os._exit(code)
