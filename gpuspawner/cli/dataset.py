"""``gpuhub dataset create|ls|show|share|unshare|rm``: datasets from a
terminal, through the REST API (docs/storage.md, "Datasets").

    gpuhub dataset create imagenet ~/data/imagenet --share nlp --pool eu
    gpuhub dataset create census /srv/datasets/census --node-label region=eu
    gpuhub dataset ls
    gpuhub dataset share imagenet nlp
    gpuhub submit --dataset imagenet -- python train.py   # sees /datasets/imagenet

The formatting is pure, tested without a hub."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from ..isolation.resources import human_memory
from .common import UsageError, common_options, connect, format_table, guard, print_json


def format_datasets(datasets: Sequence[dict]) -> str:
    if not datasets:
        return "no datasets you may read"
    return format_table(
        ("NAME", "TEAM", "SIZE", "SHARED WITH", "POOLS", "NODES", "PATH"),
        [(d["name"], d["team"],
          human_memory(d["size_bytes"]) if d.get("size_bytes") is not None else "-",
          ",".join(d["shared_with"]) or "-", ",".join(d["pools"]) or "any",
          ",".join(f"{k}={v}" for k, v in sorted((d.get("node_labels") or {}).items()))
          or "any", d["path"])
         for d in datasets])


def create_body(args) -> dict:
    """POST /datasets from ``gpuhub dataset create``'s arguments; a relative
    path is made absolute here (it means this directory, as in a shell)."""
    body: dict = {"name": args.name, "path": os.path.abspath(args.path)}
    for key, value in (("team", args.team), ("pools", args.pool), ("shared_with", args.share),
                       ("node_labels", node_labels(args.node_label or ()))):
        if value:
            body[key] = value
    return body


def node_labels(values) -> dict[str, str]:
    """``--node-label KEY=VALUE`` arguments as labels (the service checks
    their spelling and answers 400 naming a bad one)."""
    out: dict[str, str] = {}
    for v in values:
        key, eq, label = v.partition("=")
        if not eq or not key:
            raise UsageError(f"--node-label {v!r}: say KEY=VALUE, e.g. region=eu")
        if out.get(key, label) != label:
            raise UsageError(f"--node-label {key} given twice ({out[key]} and {label}): a "
                             f"node has one value per label")
        out[key] = label
    return out


def _show(args, d: Optional[dict]) -> int:
    if d is not None:
        print_json(d) if args.json else print(format_datasets([d]))
    return 0


def cmd_create(args) -> int:
    body = create_body(args)  # its arguments' mistakes first, before a connection
    return _show(args, connect(args).create_dataset(body))


def cmd_ls(args) -> int:
    datasets = connect(args).list_datasets()["datasets"]
    print_json({"datasets": datasets}) if args.json else print(format_datasets(datasets))
    return 0


def cmd_show(args) -> int:
    return _show(args, connect(args).get_dataset(args.name))


def cmd_share(args) -> int:
    return _show(args, connect(args).share_dataset(args.name, args.team))


def cmd_unshare(args) -> int:
    connect(args).unshare_dataset(args.name, args.team)
    print(f"dataset {args.name}: no longer shared with team {args.team}")
    return 0


def cmd_rm(args) -> int:
    connect(args).delete_dataset(args.name)
    print(f"dataset {args.name} deleted (its files are left as they are)")
    return 0


def add_parsers(sub) -> None:
    common = common_options()
    top = sub.add_parser("dataset", help="datasets: register, share, list, delete")
    actions = top.add_subparsers(dest="action", required=True)
    p = actions.add_parser("create", parents=[common], help="register a folder as a dataset "
                                                            "(a team's lead, or an admin)")
    p.add_argument("name", help="a slug: lower-case letters, digits, '-'")
    p.add_argument("path", help="the folder: in your workspace, your team's space or a "
                                "dataset root the admin allows")
    p.add_argument("--team", help="the team it is for (default: the one you lead)")
    p.add_argument("--pool", action="append", metavar="POOL",
                   help="residency: a pool its readers may run in (repeat; default any)")
    p.add_argument("--node-label", action="append", metavar="KEY=VALUE",
                   help="residency: a label every node its readers run on must carry, e.g. "
                        "region=eu (repeat; default any node)")
    p.add_argument("--share", action="append", metavar="TEAM",
                   help="another team that may read it (repeat)")
    p.set_defaults(func=guard("dataset create", cmd_create))
    p = actions.add_parser("ls", parents=[common], help="the datasets you may read")
    p.set_defaults(func=guard("dataset ls", cmd_ls))
    for action, fn, text in (("show", cmd_show, "one dataset"),
                             ("rm", cmd_rm, "unregister a dataset (its files stay)")):
        p = actions.add_parser(action, parents=[common], help=text)
        p.add_argument("name")
        p.set_defaults(func=guard(f"dataset {action}", fn))
    for action, fn, text in (("share", cmd_share, "let a team read it"),
                             ("unshare", cmd_unshare, "take a team's access away")):
        p = actions.add_parser(action, parents=[common], help=text)
        p.add_argument("name")
        p.add_argument("team")
        p.set_defaults(func=guard(f"dataset {action}", fn))
