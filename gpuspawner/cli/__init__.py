"""The ``gpuhub`` command: ``main.py`` (the parser and the simulator, trace,
audit, kube and bench commands), ``common.py`` (what the REST commands share),
``jobs.py`` (submit, ls, logs, cancel, quota, pools), ``sweep.py``,
``schedule.py``, ``deploy.py``, ``whatif.py`` (previews, trace export),
``upgrade.py`` and ``workdir.py`` (where a submitted job runs)."""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
