"""Command line of the GPU-aware idle culler, compatible with ``jupyterhub-idle-culler`` 2.x.

The flags the two share keep their names, defaults and syntax, so a hub's ``services`` entry can
switch commands without edits.  ``jupyterhub-idle-culler`` 1.x parsed with ``tornado.options``, 2.x
with ``traitlets`` aliases; both spellings are accepted:

- ``--timeout=600`` and ``--timeout 600``;
- booleans bare (``--cull-users``, tornado style, meaning true) or with a value
  (``--cull-users=False``, ``--cull-users false``; true/false, 1/0, yes/no, on/off, any case;
  anything else is an error, not silently true as tornado had it);
- ``--cull_users`` (tornado's underscore spelling) and ``--IdleCuller.cull_users=True`` (traitlets).

Not supported: ``--config``/``--generate-config`` (a traitlets Python config file, and with it
``cull_arbiter_hook``); use ``--policy-file``.

Our own flags: ``--gpu-timeout``, ``--gpu-threshold``, ``--gpu-max-gap``, ``--warn-before``,
``--dry-run`` and ``--policy-file``.  Durations accept seconds (``600``) or ``30s``/``15m``/``2h``/
``1d``/``1h30m``.

Precedence for the base policy: built-in defaults (those of ``jupyterhub-idle-culler``: 600 s idle
timeout, nothing else) < the policy file's ``policy:`` section < flags given on the command line.

Policy file (YAML; every section optional)::

    version: 1
    policy:                        # the base policy: any Policy field except the exempt_* sets
      idle_timeout: 2h
      gpu_idle_timeout: 1h
      gpu_idle_threshold_pct: 5
      warn_before: 15m
    exempt:                        # never culled
      users: [admin]
      groups: [platform]
      servers: [long-training]     # named-server names
    rules:                         # per team and/or pool; pool+team > pool > team > policy
      - pool: h100                 # scarce pool: cull sooner
        idle_timeout: 30m
        gpu_idle_timeout: 30m
      - team: research
        pool: h100
        gpu_idle_timeout: 45m
        exempt: {servers: [sweep]} # added to the base exemptions

Mistakes are reported naming the key (``policy.yaml: rules[1].gpu_idle_timout: unknown key ...
(did you mean 'gpu_idle_timeout'?)``).
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import yaml

from ..durations import seconds_of
from .decide import POLICY_FIELDS, Policy, PolicyRule

#: jupyterhub-idle-culler 2.x defaults of the flags we share (``url`` defaults to
#: ``$JUPYTERHUB_API_URL``; ``cull_every`` 0 means ``timeout // 2``).
IDLE_CULLER_DEFAULTS = {
    "url": None, "timeout": 600, "cull_every": 0, "concurrency": 10, "max_age": 0,
    "cull_users": False, "remove_named_servers": False, "cull_admin_users": True,
    "cull_default_servers": True, "cull_named_servers": True, "api_page_size": 0,
    "internal_certs_location": "internal-ssl", "ssl_enabled": False,
}

#: command-line dest → Policy field, for the flags that set the base policy.
FLAG_TO_POLICY = {
    "timeout": "idle_timeout", "max_age": "max_age", "cull_users": "cull_users",
    "remove_named_servers": "remove_named_servers", "cull_admin_users": "cull_admin_users",
    "cull_default_servers": "cull_default_servers", "cull_named_servers": "cull_named_servers",
    "gpu_timeout": "gpu_idle_timeout", "gpu_threshold": "gpu_idle_threshold_pct",
    "gpu_max_gap": "gpu_max_gap", "warn_before": "warn_before",
}

_EXEMPT_KEYS = {"users": "exempt_users", "groups": "exempt_groups", "servers": "exempt_servers"}
_SCALAR_FIELDS = tuple(f for f in POLICY_FIELDS if f not in _EXEMPT_KEYS.values())
_DURATION_FIELDS = ("idle_timeout", "gpu_idle_timeout", "max_age", "warn_before", "gpu_max_gap")
_TOP_KEYS = ("version", "policy", "exempt", "rules")
_RULE_KEYS = ("team", "pool", "exempt") + _SCALAR_FIELDS

_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


class PolicyFileError(ValueError):
    """An invalid policy file; the message names the file and the key."""


@dataclass(frozen=True)
class CullerOptions:
    """How the culler service runs (everything that is not policy)."""

    url: Optional[str]
    cull_every: int                      # seconds between passes (resolved; never 0)
    concurrency: int
    api_page_size: int
    internal_certs_location: str
    ssl_enabled: bool
    dry_run: bool
    policy_file: Optional[str]


# ------------------------------------------------------------------------------------ value types

def parse_duration(value: Any) -> float:
    """Seconds from ``600``, ``"30s"``, ``"15m"``, ``"2h"``, ``"1d"``, ``"1h30m"``
    (``durations.seconds_of``); ValueError otherwise."""
    return seconds_of(value)


def parse_bool(value: Any) -> bool:
    """true/false, 1/0, yes/no, on/off, t/f, y/n (any case); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_percent(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a percentage 0-100, got {value!r}")
    try:
        pct = float(str(value).strip().rstrip("%")) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a percentage 0-100, got {value!r}") from None
    if not 0 <= pct <= 100:
        raise ValueError(f"expected a percentage 0-100, got {value!r}")
    return pct


def _arg(convert, what: str = ""):
    """An argparse ``type`` from a converter raising ValueError."""
    def convert_arg(text):
        try:
            return convert(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert_arg.__name__ = what or convert.__name__
    return convert_arg


def _int_at_least(minimum: int):
    def parse(text):
        try:
            number = int(str(text).strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if number < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {number}")
        return number
    return _arg(parse, "integer")


# ---------------------------------------------------------------------------------------- parser

def _add_bool(group, flag: str, help: str) -> None:
    group.add_argument(flag, nargs="?", const=True, default=None, type=_arg(parse_bool, "bool"),
                       metavar="BOOL", help=help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuhub-idle-culler", allow_abbrev=False,
        description="GPU-aware idle culler for JupyterHub (jupyterhub-idle-culler compatible).",
        epilog="Booleans: --flag, --flag=false, --flag false. Durations: 600, 30m, 2h, 1h30m. "
               "Command-line flags override the policy file's 'policy:' section.")
    compat = parser.add_argument_group("jupyterhub-idle-culler flags")
    duration = _arg(parse_duration, "duration")
    compat.add_argument("--url", default=None, help="JupyterHub API URL "
                        "(default: $JUPYTERHUB_API_URL)")
    compat.add_argument("--timeout", type=duration, default=None, metavar="SECONDS",
                        help="Jupyter idle timeout; 0 = off (default 600)")
    compat.add_argument("--cull-every", type=duration, default=None, metavar="SECONDS",
                        help="seconds between passes (default 0 = half the shortest timeout)")
    compat.add_argument("--concurrency", type=_int_at_least(1), default=None,
                        help="concurrent hub API requests (default 10)")
    compat.add_argument("--max-age", type=duration, default=None, metavar="SECONDS",
                        help="cull servers older than this even when active; 0 = off (default)")
    _add_bool(compat, "--cull-users", "delete users too, for temporary users (default false)")
    _add_bool(compat, "--remove-named-servers", "remove culled named servers (default false)")
    _add_bool(compat, "--cull-admin-users", "also delete admin users with --cull-users "
                                            "(default true)")
    _add_bool(compat, "--cull-default-servers", "cull default servers (default true)")
    _add_bool(compat, "--cull-named-servers", "cull named servers (default true)")
    compat.add_argument("--api-page-size", type=_int_at_least(0), default=None,
                        help="users per page of the hub API; 0 = the hub's default (default 0)")
    compat.add_argument("--internal-certs-location", default=None, metavar="PATH",
                        help="internal-ssl certificates (with --ssl-enabled; default internal-ssl)")
    _add_bool(compat, "--ssl-enabled", "the hub API uses TLS (default false)")
    compat.add_argument("--config", default=None, help=argparse.SUPPRESS)
    _add_bool(compat, "--generate-config", argparse.SUPPRESS)
    gpu = parser.add_argument_group("GPU culling")
    gpu.add_argument("--gpu-timeout", type=duration, default=None, metavar="SECONDS",
                     help="cull when all of a server's GPUs are idle this long; 0 = off (default)")
    gpu.add_argument("--gpu-threshold", type=_arg(parse_percent, "percent"), default=None,
                     metavar="PCT", help="GPU utilization below this is idle (default 5)")
    gpu.add_argument("--gpu-max-gap", type=duration, default=None, metavar="SECONDS",
                     help="longer silence between GPU samples = unknown, never idle (default 300)")
    gpu.add_argument("--warn-before", type=duration, default=None, metavar="SECONDS",
                     help="warn this long before culling; 0 = no warning (default)")
    _add_bool(gpu, "--dry-run", "decide and log, but stop nothing (default false)")
    gpu.add_argument("--policy-file", default=None, metavar="YAML",
                     help="base policy, per-team/pool rules and exemptions")
    return parser


def normalize_argv(argv: Sequence[str]) -> list:
    """Accept tornado's ``--cull_users`` and traitlets' ``--IdleCuller.cull_users`` spellings."""
    out = []
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            name, eq, value = token[2:].partition("=")
            name = name.removeprefix("IdleCuller.").replace("_", "-")
            token = f"--{name}{eq}{value}"
        out.append(token)
    return out


# ----------------------------------------------------------------------------------- policy file

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_mapping)


def _fail(source: str, path: str, message: str):
    raise PolicyFileError(f"{source}: {path}: {message}" if path else f"{source}: {message}")


def _check_keys(source: str, path: str, data: Any, allowed: Sequence[str]) -> dict:
    if not isinstance(data, dict):
        _fail(source, path, f"expected a mapping, got {type(data).__name__} {data!r}")
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            _fail(source, f"{path}.{key}" if path else str(key),
                  f"unknown key{hint}; allowed: {', '.join(allowed)}")
    return data


def _field_value(source: str, path: str, name: str, value: Any):
    """One Policy scalar from the file, validated."""
    try:
        if name in _DURATION_FIELDS:
            value = parse_duration(value)
            if name == "gpu_max_gap" and value == 0:
                raise ValueError("expected a duration > 0")
            return value
        if name == "gpu_idle_threshold_pct":
            return parse_percent(value)
    except ValueError as e:
        _fail(source, path, str(e))
    if not isinstance(value, bool):
        _fail(source, path, f"expected true or false, got {value!r}")
    return value


def _exempt(source: str, path: str, data: Any) -> dict:
    """``exempt: {users, groups, servers}`` → Policy exempt_* fields."""
    _check_keys(source, path, data, tuple(_EXEMPT_KEYS))
    out = {}
    for key, names in data.items():
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            _fail(source, f"{path}.{key}", f"expected a list of names, e.g. [alice], got {names!r}")
        out[_EXEMPT_KEYS[key]] = frozenset(names)
    return out


def _scalars(source: str, path: str, data: dict) -> dict:
    return {name: _field_value(source, f"{path}.{name}", name, value)
            for name, value in data.items() if name in _SCALAR_FIELDS}


def _rule(source: str, path: str, data: Any) -> PolicyRule:
    _check_keys(source, path, data, _RULE_KEYS)
    match = {}
    for key in ("team", "pool"):
        if key in data:
            if not isinstance(data[key], str) or not data[key]:
                _fail(source, f"{path}.{key}",
                      f"expected a name (quote it if it looks like a number), got {data[key]!r}")
            match[key] = data[key]
    if not match:
        _fail(source, path, "a rule needs 'team' and/or 'pool' (settings for every server "
                            "belong under 'policy')")
    values = _scalars(source, path, data)
    if "exempt" in data:
        values.update(_exempt(source, f"{path}.exempt", data["exempt"]))
    if not values:
        _fail(source, path, "the rule overrides nothing")
    return PolicyRule(**match, **values)


def parse_policy_document(data: Any, source: str = "<policy>") -> tuple:
    """A loaded policy document → (base Policy field values, [PolicyRule]); PolicyFileError."""
    if data is None:
        return {}, []
    _check_keys(source, "", data, _TOP_KEYS)
    if "version" in data and data["version"] != 1:
        _fail(source, "version", f"only version 1 is known, got {data['version']!r}")
    base = {}
    for key in data.get("policy") or {} if isinstance(data.get("policy"), dict) else {}:
        if str(key).startswith("exempt"):
            _fail(source, f"policy.{key}", "exemptions go in the top-level 'exempt:' section "
                                           "(users, groups, servers)")
    if data.get("policy") is not None:
        base.update(_scalars(source, "policy",
                             _check_keys(source, "policy", data["policy"], _SCALAR_FIELDS)))
    if data.get("exempt") is not None:
        base.update(_exempt(source, "exempt", data["exempt"]))
    rules = data.get("rules") or []
    if not isinstance(rules, list):
        _fail(source, "rules", f"expected a list of rules, got {type(rules).__name__}")
    return base, [_rule(source, f"rules[{i}]", r) for i, r in enumerate(rules)]


def load_policy_file(path: str) -> tuple:
    """Read and validate a policy file; see :func:`parse_policy_document`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except OSError as e:
        raise PolicyFileError(f"{path}: cannot read the policy file: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise PolicyFileError(f"{path}: invalid YAML: {e}") from None
    return parse_policy_document(data, source=path)


# ------------------------------------------------------------------------------------ parse_args

def default_cull_every(base: Policy, rules: Sequence[PolicyRule]) -> int:
    """Half the shortest idle or GPU-idle timeout of the base policy and the rules (as
    ``jupyterhub-idle-culler``'s ``timeout // 2`` when only ``--timeout`` is set), at least 1;
    failing those, half ``max_age``; failing that, 300."""
    timeouts = [t for p in (base, *rules) for t in (p.idle_timeout, p.gpu_idle_timeout)
                if t is not None and t > 0]
    if not timeouts and base.max_age > 0:
        timeouts = [base.max_age]
    return max(1, int(min(timeouts)) // 2) if timeouts else 300


def _base_policy(ns: argparse.Namespace, from_file: Mapping) -> Policy:
    values = {"idle_timeout": float(IDLE_CULLER_DEFAULTS["timeout"])}
    values.update(from_file)
    for dest, name in FLAG_TO_POLICY.items():
        if getattr(ns, dest) is not None:
            values[name] = getattr(ns, dest)
    return Policy(**values)


def _given(ns: argparse.Namespace, dest: str):
    value = getattr(ns, dest)
    return IDLE_CULLER_DEFAULTS[dest] if value is None else value


def parse_args(argv: Optional[Sequence[str]] = None,
               env: Optional[Mapping[str, str]] = None) -> tuple:
    """``argv`` (default ``sys.argv[1:]``) → ``(Policy, [PolicyRule], CullerOptions)``.

    Usage errors (bad values, an invalid policy file) exit with status 2 and a message naming the
    flag or key, as argparse does.  ``env`` (default ``os.environ``) supplies JUPYTERHUB_API_URL.
    """
    env = os.environ if env is None else env
    parser = build_parser()
    ns = parser.parse_args(normalize_argv(sys.argv[1:] if argv is None else list(argv)))
    if ns.config is not None or ns.generate_config:
        parser.error("--config/--generate-config (jupyterhub-idle-culler's traitlets Python "
                     "config) are not supported; put settings in --policy-file (YAML)")
    from_file, rules = {}, []
    if ns.policy_file:
        try:
            from_file, rules = load_policy_file(ns.policy_file)
        except PolicyFileError as e:
            parser.error(str(e))
    try:
        policy = _base_policy(ns, from_file)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    cull_every = _given(ns, "cull_every")
    options = CullerOptions(
        url=ns.url if ns.url is not None else env.get("JUPYTERHUB_API_URL"),
        cull_every=int(cull_every) if cull_every > 0 else default_cull_every(policy, rules),
        concurrency=_given(ns, "concurrency"), api_page_size=_given(ns, "api_page_size"),
        internal_certs_location=_given(ns, "internal_certs_location"),
        ssl_enabled=_given(ns, "ssl_enabled"), dry_run=bool(ns.dry_run),
        policy_file=ns.policy_file)
    return policy, rules, options
