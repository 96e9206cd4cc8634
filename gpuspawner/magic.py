"""``%gpuhub``: the ``gpuhub`` client commands as an IPython line magic, for
people who prefer code to the lab extension's forms.

    %load_ext gpuspawner.magic
    %gpuhub submit --gpus 2 --notebook train.ipynb -p epochs 3
    %gpuhub submit --gpus 1 -f -- python train.py --lr 0.1
    %gpuhub submit --sweep grid.yaml --max-running 2 --metric acc:max --notebook train.ipynb
    %gpuhub submit --after s1234abcd:ok --notebook evaluate.ipynb
    %gpuhub sweep show s1234abcd
    %gpuhub ls --all
    %gpuhub logs -f w1234abcd
    %gpuhub cancel w1234abcd
    %gpuhub quota
    %gpuhub schedule create nightly --cron '0 2 * * *' --notebook train.ipynb -p epochs 3
    %gpuhub schedule ls
    %gpuhub deploy best models/best --after w1234abcd:ok
    %gpuhub deployments best --wait

Inside a notebook server the service and the token come from the
environment the hub sets ($GPUHUB_URL, $JUPYTERHUB_API_TOKEN). ``submit``
runs in the kernel's working directory (the notebook's folder) unless
``--workdir`` says otherwise; ``deploy``'s MODEL_DIR, when relative, is
in that folder too. Errors are printed, never raised, so a cell
shows the service's message. Code can use ``gpuspawner.client.GpuHubClient``.
"""
from __future__ import annotations

import argparse
import os
import shlex
from typing import Optional

COMMANDS = ("submit", "ls", "logs", "cancel", "quota", "pools", "sweep", "schedule", "deploy",
            "deployments")


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting the kernel."""

    def error(self, message: str):
        raise MagicUsage(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: Optional[str] = None):
        if message:
            print(message, end="")
        raise MagicExit(status)


class MagicUsage(Exception):
    pass


class MagicExit(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    from .cli.jobs import add_parsers
    from .cli.deploy import add_parsers as add_deploy
    from .cli.schedule import add_parsers as add_schedule

    parser = _Parser(prog="%gpuhub", description="GPU Hub jobs from a notebook: "
                                                 + ", ".join(COMMANDS))
    sub = parser.add_subparsers(dest="command_name", required=True, parser_class=_Parser)
    add_parsers(sub)
    add_schedule(sub)
    add_deploy(sub)
    return parser


def run(line: str, cwd: Optional[str] = None) -> int:
    """Run one ``%gpuhub`` line; the exit status of the gpuhub command
    (0 ok, 1 refused by the service, 2 usage)."""
    try:
        argv = shlex.split(line)
    except ValueError as e:
        print(f"%gpuhub: {e}")
        return 2
    parser = build_parser()
    if not argv or argv[0] in ("help", "-h", "--help"):
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv)
    except MagicUsage as e:
        print(e)
        return 2
    except MagicExit as e:  # --help of a command
        return e.status
    if args.command_name == "submit" and getattr(args, "workdir", None) is None:
        # The notebook's folder, as the jobs see it (the local backend shares it).
        args.workdir = cwd or os.getcwd()
    if args.command_name == "deploy" and not os.path.isabs(args.model_dir):
        # As the notebook sees it: its folder (the service checks it is in the workspace).
        args.model_dir = os.path.normpath(os.path.join(cwd or os.getcwd(), args.model_dir))
    return args.func(args)


def gpuhub(line: str) -> None:
    """%gpuhub submit|ls|logs|cancel|quota|pools|sweep|schedule|deploy|deployments …
    (``%gpuhub help``)"""
    run(line)


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(gpuhub, magic_kind="line", magic_name="gpuhub")
