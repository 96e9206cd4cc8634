"""Datasets' rules, pure: what a dataset's name may be, who may read it and
who may manage it, where its readers' workloads may run (residency), and
which folders may be registered. The service (service/datasets/) applies
them to its rows; nothing here touches a file or the database."""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Optional, Sequence

from .errors import SpecError

NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
MAX_PER_WORKLOAD = 16
MOUNT_ROOT = "/datasets"   # where a workload sees each dataset it asked for


def parse_name(value: Any, field: str = "name") -> str:
    """A dataset's name: a slug (lower-case letters, digits, '-'), at most 64."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise SpecError(field, f"{value!r} is not a dataset name: lower-case letters, digits "
                               f"and '-' (not first or last), at most 64")
    return value


def parse_names(value: Any, field: str = "datasets") -> tuple[str, ...]:
    """A workload's ``datasets``: a list of distinct names, at most 16."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SpecError(field, "must be a list of dataset names")
    if len(value) > MAX_PER_WORKLOAD:
        raise SpecError(field, f"at most {MAX_PER_WORKLOAD} datasets per workload")
    names = tuple(parse_name(v, field) for v in value)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(field, f"names {', '.join(twice)} more than once")
    return names


def parse_pools(value: Any, known: Iterable[str], field: str = "pools") -> list[str]:
    """Residency: the pools a dataset's readers may run in, each one that exists ([]: any)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise SpecError(field, "must be a list of pool names ([] or none: any pool)")
    known = set(known)
    unknown = sorted(set(value) - known)
    if unknown:
        raise SpecError(field, f"unknown pool {unknown[0]!r}; known pools: "
                               f"{', '.join(sorted(known)) or 'none'}")
    return sorted(set(value))


# A node label as Kubernetes spells one (and Slurm partitions and local nodes
# are labelled alike): an optional DNS-subdomain prefix and '/', then a name.
_LABEL_PART = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY_RE = re.compile(rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_PART}")
LABEL_VALUE_RE = re.compile(rf"(?:{_LABEL_PART})?")
MAX_NODE_LABELS = 16


def parse_node_labels(value: Any, field: str = "node_labels") -> dict[str, str]:
    """Residency: node labels every node its readers run on must carry
    ({"region": "eu"}; {} or none: any node), as Kubernetes spells labels."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(field, 'must be an object of node labels, e.g. {"region": "eu"}')
    if len(value) > MAX_NODE_LABELS:
        raise SpecError(field, f"at most {MAX_NODE_LABELS} node labels")
    for key, label in value.items():
        if not isinstance(key, str) or len(key) > 317 or not LABEL_KEY_RE.fullmatch(key):
            raise SpecError(field, f"{key!r} is not a node label name: letters, digits, '-', "
                                   f"'_' and '.' (at most 63, a letter or digit first and "
                                   f"last), optionally after a prefix and '/'")
        if not isinstance(label, str) or not LABEL_VALUE_RE.fullmatch(label):
            raise SpecError(field, f"{label!r} (label {key}) is not a node label value: "
                                   f"letters, digits, '-', '_' and '.', at most 63")
    return dict(sorted(value.items()))


def readers(owner: str, shared_with: Iterable[str]) -> frozenset[str]:
    """The teams whose workloads may read a dataset: its own and those it is shared with."""
    return frozenset({owner, *shared_with})


def may_read(team: str, owner: str, shared_with: Iterable[str]) -> bool:
    """May a workload run for ``team`` read the dataset?"""
    return team in readers(owner, shared_with)


def sees(admin: bool, teams: Iterable[str], owner: str, shared_with: Iterable[str]) -> bool:
    """Does a user (an admin, or a member of ``teams``) see the dataset listed?"""
    return admin or bool(set(teams) & readers(owner, shared_with))


def may_manage(admin: bool, leads: Iterable[str], owner: str) -> bool:
    """Register, share, unshare or delete a dataset of ``owner``: its leads and admins."""
    return admin or owner in set(leads)


def residency_refusal(name: str, allowed: Sequence[str], pool: str) -> Optional[str]:
    """Why a workload in ``pool`` may not read dataset ``name`` (None: it may)."""
    if not allowed or pool in allowed:
        return None
    return (f"dataset {name} may only be read in pool{'s' if len(allowed) > 1 else ''} "
            f"{', '.join(allowed)} (its residency rule); this workload asks for pool {pool}: "
            f"submit it to {'one of those' if len(allowed) > 1 else 'that pool'}")


def within(path: str, roots: Iterable[str]) -> Optional[str]:
    """The first of ``roots`` that holds ``path`` (both resolved already), or None."""
    for root in roots:
        if root and os.path.commonpath([root, path]) == root:
            return root
    return None


def mount_point(name: str) -> str:
    return f"{MOUNT_ROOT}/{name}"
