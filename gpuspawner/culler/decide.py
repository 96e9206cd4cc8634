"""The pure decision core of the GPU-aware idle culler.

Everything here is a function of plain data: no I/O, no clock (``now`` is always an argument;
callers use :func:`utcnow`).  All datetimes must be timezone-aware; naive ones are rejected, because
comparing a naive hub timestamp with an aware sample time is exactly the bug a culler must not have.

Vocabulary
----------
*Jupyter idle*: time since the server's ``last_activity`` (hub API), or since ``started`` when the
hub reports none or an older one (``jupyterhub-idle-culler`` also falls back to the age).

*GPU idle*: every GPU of the server below ``gpu_idle_threshold_pct`` (strictly) on SM activity
**and** on memory-controller activity (when sampled) at every sample since some time, with no gap
longer than ``gpu_max_gap`` between samples and the latest sample no older than ``gpu_max_gap``.
Missing or stale data is *unknown*, never idle: a culler must not cull on missing data.  Samples
taken before the server started belong to a previous tenant of the GPU and are ignored.

Rule order in :func:`decide` (the first keep rule wins; the first due rule names the reason)
--------------------------------------------------------------------------------------------
1. ``pending`` spawn/stop → keep.
2. Exempt (user, any group, named-server name; default/named servers when the compatibility
   switches ``cull_default_servers``/``cull_named_servers`` are off) → keep, whatever else holds.
3. ``max_age`` exceeded → due, even when busy (a hard cap, as in ``jupyterhub-idle-culler``).
4. GPUs busy at their latest sample → keep (training in a terminal counts as work).
5. GPUs idle for ``gpu_idle_timeout`` → due, even with recent Jupyter activity or a busy kernel.
6. No activity for ``idle_timeout`` → due.  On a GPU server GPU work is activity too: it is due
   when Jupyter has been idle *and* the GPUs have been idle that long.  When the GPU state is
   unknown and the policy is GPU-aware (``gpu_idle_timeout`` > 0) it is never due (missing data);
   with GPU culling off, an unknown GPU state falls back to Jupyter activity alone, as the stock
   culler does.  CPU-only servers: only rules 3 and 6 (Jupyter activity) apply.
7. Otherwise keep.

Warnings: with ``warn_before`` > 0 a server that becomes due gets ``warn`` first; it is culled only
once ``warned_at + warn_before`` has passed and it is still due.  A warning given before the
server's current due period began (it was active in between) is void and a fresh one is given, so
a stale ``warned_at`` never causes a cull without notice.  Callers store
:attr:`Decision.warned_at` (``None`` on keep and cull) and notify the user when
:attr:`Decision.notify` is true.

Callers must pass samples covering at least :func:`required_history` seconds before ``now``, or GPU
idle periods look shorter than they are (which only delays culls).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Hashable, Iterable, Optional, Sequence

KEEP, WARN, CULL = "keep", "warn", "cull"
ACTIONS = (KEEP, WARN, CULL)

#: Default longest tolerated silence between GPU samples (and age of the latest one), in seconds.
DEFAULT_MAX_GAP = 300.0

_DURATION_FIELDS = ("idle_timeout", "gpu_idle_timeout", "max_age", "warn_before", "gpu_max_gap")
_EXEMPT_FIELDS = ("exempt_users", "exempt_groups", "exempt_servers")
_BOOL_FIELDS = ("cull_users", "remove_named_servers", "cull_admin_users", "cull_default_servers",
                "cull_named_servers")


def utcnow() -> datetime:
    """The current time as an aware UTC datetime (the only clock; :func:`decide` never reads it)."""
    return datetime.now(timezone.utc)


def _require_aware(value: Optional[datetime], what: str) -> None:
    if value is None:
        return
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value.isoformat()}")


def _name_set(value: Iterable[str], what: str) -> frozenset:
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{what} must be a collection of names, not the string {value!r}")
    names = frozenset(value)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{what} must contain names (strings), got {bad[0]!r}")
    return names


# --------------------------------------------------------------------------------------------- data

@dataclass(frozen=True, kw_only=True)
class Server:
    """One running (or starting/stopping) notebook server as the hub API and scheduler see it."""

    user: str
    name: str = ""                       # "" is the default server
    groups: frozenset = frozenset()      # JupyterHub group names
    team: Optional[str] = None
    pool: Optional[str] = None
    gpus: tuple = ()                     # GPU ids; empty for CPU-only servers
    started: datetime
    last_activity: Optional[datetime] = None
    pending: Optional[str] = None        # "spawn"/"stop" in progress: never act
    gpu_share: float = 0.0               # its share of its one GPU (0.25); 0: whole GPUs

    def __post_init__(self):
        object.__setattr__(self, "groups", _name_set(self.groups, "Server.groups"))
        if isinstance(self.gpus, (str, bytes)):
            raise TypeError(f"Server.gpus must be a collection of GPU ids, not {self.gpus!r}")
        object.__setattr__(self, "gpus", tuple(self.gpus))
        _require_aware(self.started, "Server.started")
        _require_aware(self.last_activity, "Server.last_activity")

    @property
    def label(self) -> str:
        """``user`` or ``user/name``, as the hub spells servers."""
        return f"{self.user}/{self.name}" if self.name else self.user


@dataclass(frozen=True)
class GpuSample:
    """One utilization reading of one GPU (percentages, 0-100)."""

    time: datetime
    gpu: Hashable
    util_pct: float                         # SM activity
    mem_util_pct: Optional[float] = None    # memory-controller activity, when sampled

    def __post_init__(self):
        _require_aware(self.time, "GpuSample.time")


def _check_values(obj, names: Iterable[str]) -> None:
    """Validate the (non-None) policy values of a Policy or PolicyRule; normalise exempt sets."""
    cls = type(obj).__name__
    for name in names:
        value = getattr(obj, name)
        if value is None:
            continue
        if name in _EXEMPT_FIELDS:
            object.__setattr__(obj, name, _name_set(value, f"{cls}.{name}"))
        elif name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise TypeError(f"{cls}.{name} must be a bool, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{cls}.{name} must be a number, got {value!r}")
        elif not value >= 0:   # also rejects NaN
            raise ValueError(f"{cls}.{name} must be >= 0, got {value!r}")
        elif name == "gpu_idle_threshold_pct" and value > 100:
            raise ValueError(f"{cls}.{name} is a percentage (0-100), got {value!r}")
        elif name == "gpu_max_gap" and value == 0:
            raise ValueError(f"{cls}.{name} must be > 0 seconds")


@dataclass(frozen=True)
class Policy:
    """What to cull.  Durations are in seconds; 0 switches a limit off."""

    idle_timeout: float = 0              # Jupyter (and GPU) inactivity
    gpu_idle_timeout: float = 0          # all of the server's GPUs below the threshold this long
    gpu_idle_threshold_pct: float = 5.0  # "below" is strict: 5.0% is not idle at threshold 5
    max_age: float = 0                   # hard cap on server age, active or not
    warn_before: float = 0               # warning period before a cull; 0 culls without warning
    exempt_users: frozenset = frozenset()
    exempt_groups: frozenset = frozenset()
    exempt_servers: frozenset = frozenset()   # named-server names, e.g. "long-training"
    # Compatibility with jupyterhub-idle-culler; decide() uses cull_default/named_servers, the rest
    # tell the service what to do around a cull (delete users, remove named servers).
    cull_users: bool = False
    remove_named_servers: bool = False
    cull_admin_users: bool = True
    cull_default_servers: bool = True
    cull_named_servers: bool = True
    gpu_max_gap: float = DEFAULT_MAX_GAP   # longer silence between GPU samples = unknown

    def __post_init__(self):
        for name in _DURATION_FIELDS + ("gpu_idle_threshold_pct",) + _EXEMPT_FIELDS + _BOOL_FIELDS:
            if getattr(self, name) is None:
                raise TypeError(f"Policy.{name} must not be None")
        _check_values(self, POLICY_FIELDS)


POLICY_FIELDS = tuple(f.name for f in fields(Policy))


@dataclass(frozen=True)
class PolicyRule:
    """Overrides of :class:`Policy` fields for servers of a team and/or pool (``None`` = any).

    Scalar fields replace the base value; ``exempt_*`` sets are *added* to the base ones (a rule can
    exempt more, never un-exempt what the base exempts).
    """

    team: Optional[str] = None
    pool: Optional[str] = None
    idle_timeout: Optional[float] = None
    gpu_idle_timeout: Optional[float] = None
    gpu_idle_threshold_pct: Optional[float] = None
    max_age: Optional[float] = None
    warn_before: Optional[float] = None
    exempt_users: Optional[frozenset] = None
    exempt_groups: Optional[frozenset] = None
    exempt_servers: Optional[frozenset] = None
    cull_users: Optional[bool] = None
    remove_named_servers: Optional[bool] = None
    cull_admin_users: Optional[bool] = None
    cull_default_servers: Optional[bool] = None
    cull_named_servers: Optional[bool] = None
    gpu_max_gap: Optional[float] = None

    def __post_init__(self):
        _check_values(self, POLICY_FIELDS)

    @property
    def specificity(self) -> int:
        """pool+team (3) > pool (2) > team (1) > match-all (0)."""
        return (2 if self.pool is not None else 0) + (1 if self.team is not None else 0)

    def matches(self, server: Server) -> bool:
        return ((self.team is None or self.team == server.team)
                and (self.pool is None or self.pool == server.pool))

    def overrides(self) -> dict:
        """The Policy fields this rule sets."""
        return {n: getattr(self, n) for n in POLICY_FIELDS if getattr(self, n) is not None}

    def apply(self, policy: Policy) -> Policy:
        changes = self.overrides()
        for name in _EXEMPT_FIELDS:
            if name in changes:
                changes[name] = getattr(policy, name) | changes[name]
        return replace(policy, **changes)


def resolve_policy(base: Policy, rules: Sequence[PolicyRule], server: Server) -> Policy:
    """The policy for ``server``: ``base`` with every matching rule applied.

    Rules apply from least to most specific (match-all, team, pool, pool+team), and in list order
    within the same specificity, so the more specific rule wins and, among equals, the later one.
    """
    matching = [(rule.specificity, i, rule) for i, rule in enumerate(rules) if rule.matches(server)]
    policy = base
    for _, _, rule in sorted(matching, key=lambda t: (t[0], t[1])):
        policy = rule.apply(policy)
    return policy


def required_history(policy: Policy) -> float:
    """Seconds of GPU samples before ``now`` a caller should pass to :func:`decide`."""
    longest = max(policy.idle_timeout, policy.gpu_idle_timeout)
    return longest + policy.warn_before + policy.gpu_max_gap


@dataclass(frozen=True)
class Decision:
    """What to do with a server, why (for people) and the numbers behind it (for the audit log)."""

    action: str                  # "keep" | "warn" | "cull"
    reason: str
    numbers: dict = field(default_factory=dict)
    rule: str = ""               # pending|exempt|max_age|gpu_busy|gpu_unknown|gpu_idle|idle|active
    warned_at: Optional[datetime] = None   # what the caller stores (None on keep and cull)
    cull_at: Optional[datetime] = None     # on warn: when the cull is due
    notify: bool = False                   # on warn: a new warning the user should be sent

    def __post_init__(self):
        if self.action not in ACTIONS:
            raise ValueError(f"Decision.action must be one of {ACTIONS}, got {self.action!r}")


# ------------------------------------------------------------------------------------- formatting

def format_duration(seconds: float) -> str:
    """``45s``, ``3m``, ``2h10m``, ``1d2h`` (floored; negative shows as 0s)."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    m = s // 60
    if m < 60:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m}m" if m else f"{h}h"
    d, h = divmod(h, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def _gpu_names(gpus: Sequence) -> str:
    ids = ",".join(str(g) for g in gpus)
    return f"GPU {ids}" if len(gpus) == 1 else f"GPUs {ids}"


def _clock(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# ------------------------------------------------------------------------------------ GPU activity

def sample_is_idle(sample: GpuSample, threshold: float) -> bool:
    """Below ``threshold`` on SM and (when sampled) memory activity; NaN readings are not idle."""
    if not sample.util_pct < threshold:
        return False
    return sample.mem_util_pct is None or sample.mem_util_pct < threshold


@dataclass(frozen=True)
class GpuActivity:
    """The GPU picture of one server at ``now``."""

    state: str                                  # "idle" | "busy" | "unknown"
    gpus: tuple = ()
    idle_since: Optional[datetime] = None       # when state == "idle"
    busy_gpus: tuple = ()
    unknown_gpus: tuple = ()                    # no fresh samples, or never sampled
    latest_util_pct: Optional[float] = None     # max over the GPUs' latest samples
    latest_mem_util_pct: Optional[float] = None
    mean_util_pct: Optional[float] = None       # over the idle period (else all samples given)


def _idle_run(series: list, threshold: float, now: datetime, max_gap: float):
    """(state, idle_since) of one GPU from its time-sorted samples."""
    if not series or (now - series[-1].time).total_seconds() > max_gap:
        return "unknown", None
    if not sample_is_idle(series[-1], threshold):
        return "busy", None
    since = series[-1].time
    for prev in reversed(series[:-1]):
        if (since - prev.time).total_seconds() > max_gap or not sample_is_idle(prev, threshold):
            break
        since = prev.time
    return "idle", since


def _latest_max(series_by_gpu: dict, attr: str) -> Optional[float]:
    values = [getattr(s[-1], attr) for s in series_by_gpu.values() if s]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def gpu_activity(samples: Iterable[GpuSample], threshold: float, now: datetime, *,
                 gpus: Optional[Sequence] = None, max_gap: float = DEFAULT_MAX_GAP) -> GpuActivity:
    """Idle/busy/unknown state of ``gpus`` (default: every GPU in ``samples``) at ``now``.

    Any GPU busy at its latest sample → busy; else any GPU without fresh, gap-free data → unknown;
    else idle since the latest of the GPUs' idle-run starts.
    """
    _require_aware(now, "now")
    samples = list(samples)
    if gpus is None:
        gpus = sorted({s.gpu for s in samples}, key=str)
    gpus = tuple(gpus)
    series = {g: [] for g in gpus}
    for s in samples:
        if s.gpu in series:
            series[s.gpu].append(s)
    for ss in series.values():   # at equal times a busy reading sorts last, so it wins
        ss.sort(key=lambda s: (s.time, not sample_is_idle(s, threshold)))
    runs = {g: _idle_run(ss, threshold, now, max_gap) for g, ss in series.items()}
    busy = tuple(g for g in gpus if runs[g][0] == "busy")
    unknown = tuple(g for g in gpus if runs[g][0] == "unknown")
    state = "busy" if busy else "unknown" if (unknown or not gpus) else "idle"
    since = max(runs[g][1] for g in gpus) if state == "idle" else None
    window = [s for ss in series.values() for s in ss if since is None or s.time >= since]
    mean = sum(s.util_pct for s in window) / len(window) if window else None
    return GpuActivity(state=state, gpus=gpus, idle_since=since, busy_gpus=busy,
                       unknown_gpus=unknown, latest_util_pct=_latest_max(series, "util_pct"),
                       latest_mem_util_pct=_latest_max(series, "mem_util_pct"), mean_util_pct=mean)


def gpu_idle_since(samples: Iterable[GpuSample], threshold: float, now: datetime, *,
                   gpus: Optional[Sequence] = None,
                   max_gap: float = DEFAULT_MAX_GAP) -> Optional[datetime]:
    """Since when all ``gpus`` have been below ``threshold`` (SM and memory) at every sample.

    ``None`` when any GPU is busy at its latest sample, or has no sample within ``max_gap`` of
    ``now``.  A silence longer than ``max_gap`` between samples ends the idle run (the gap is
    unknown), so the result is never earlier than the first sample after the last gap.
    """
    return gpu_activity(samples, threshold, now, gpus=gpus, max_gap=max_gap).idle_since


# ---------------------------------------------------------------------------------------- decide

@dataclass(frozen=True)
class _Facts:
    age_s: float
    jupyter_last: datetime
    idle_s: float                        # Jupyter inactivity
    gpu: Optional[GpuActivity]           # None for CPU-only servers
    gpu_idle_s: Optional[float]          # when gpu.state == "idle"


@dataclass(frozen=True)
class _Due:
    rule: str
    since: datetime                      # when the server became due under this rule
    text: str


def _gather(server: Server, samples: Iterable[GpuSample], policy: Policy, now: datetime) -> _Facts:
    last = max(server.last_activity or server.started, server.started)
    gpu = gpu_idle_s = None
    if server.gpus:
        own = [s for s in samples if s.time >= server.started]   # earlier: a previous tenant's
        gpu = gpu_activity(own, policy.gpu_idle_threshold_pct, now, gpus=server.gpus,
                           max_gap=policy.gpu_max_gap)
        if gpu.state == "idle":
            gpu_idle_s = (now - gpu.idle_since).total_seconds()
    return _Facts(age_s=(now - server.started).total_seconds(), jupyter_last=last,
                  idle_s=(now - last).total_seconds(), gpu=gpu, gpu_idle_s=gpu_idle_s)


def _numbers(facts: _Facts, policy: Policy, share: float = 0.0) -> dict:
    numbers = {"age_s": facts.age_s, "idle_s": facts.idle_s, "idle_timeout_s": policy.idle_timeout,
               "max_age_s": policy.max_age}
    gpu = facts.gpu
    if gpu is not None:
        # gpu_units: what it held in GPU units (a quarter share: 0.25 of its one GPU).
        numbers.update(gpu_count=len(gpu.gpus), gpu_units=share or len(gpu.gpus),
                       gpu_state=gpu.state, gpu_idle_s=facts.gpu_idle_s,
                       gpu_idle_timeout_s=policy.gpu_idle_timeout,
                       gpu_threshold_pct=policy.gpu_idle_threshold_pct,
                       gpu_mean_util_pct=gpu.mean_util_pct,
                       gpu_latest_util_pct=gpu.latest_util_pct,
                       gpu_latest_mem_util_pct=gpu.latest_mem_util_pct)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in numbers.items()}


def exemption(server: Server, policy: Policy) -> Optional[str]:
    """Why ``server`` is exempt from culling under ``policy``, or ``None``."""
    if server.user in policy.exempt_users:
        return f"user {server.user} is exempt"
    groups = sorted(server.groups & policy.exempt_groups)
    if groups:
        return f"group {groups[0]} of user {server.user} is exempt"
    if server.name and server.name in policy.exempt_servers:
        return f"named server {server.name!r} is exempt"
    if server.name and not policy.cull_named_servers:
        return "named servers are not culled (cull_named_servers off)"
    if not server.name and not policy.cull_default_servers:
        return "default servers are not culled (cull_default_servers off)"
    return None


def _gpu_idle_phrase(facts: _Facts, policy: Policy, with_duration: bool = True) -> str:
    gpu = facts.gpu
    span = f" for {format_duration(facts.gpu_idle_s)}" if with_duration else ""
    return (f"{_gpu_names(gpu.gpus)} below {policy.gpu_idle_threshold_pct:g}%{span} "
            f"(mean {_pct(gpu.mean_util_pct)})")


def _jupyter_phrase(facts: _Facts) -> str:
    return f"Jupyter last active {format_duration(facts.idle_s)} ago"


def _idle_due(facts: _Facts, policy: Policy) -> Optional[_Due]:
    """Rule 6: no Jupyter activity (and, on GPU servers, no GPU activity) for idle_timeout."""
    if policy.idle_timeout <= 0:
        return None
    last, inactive, gpu = facts.jupyter_last, facts.idle_s, facts.gpu
    text = f"Jupyter inactive for {format_duration(facts.idle_s)}"
    if gpu is not None and gpu.state == "idle":    # GPU work is activity too
        last, inactive = max(last, gpu.idle_since), min(inactive, facts.gpu_idle_s)
        text += f" and {_gpu_idle_phrase(facts, policy)}"
    elif gpu is not None and gpu.state == "unknown":
        if policy.gpu_idle_timeout > 0:
            return None    # GPU-aware policy: never cull on missing data
        text += " (GPU activity unknown; GPU culling is off)"
    elif gpu is not None:
        return None        # busy: handled by the caller, never due for inactivity
    if inactive < policy.idle_timeout:
        return None
    return _Due("idle", last + timedelta(seconds=policy.idle_timeout),
                f"{text}; idle limit {format_duration(policy.idle_timeout)}")


def _due_rules(server: Server, facts: _Facts, policy: Policy) -> list:
    """The rules under which ``server`` is due for culling, in rule order (3, 5, 6)."""
    due = []
    if policy.max_age > 0 and facts.age_s >= policy.max_age:
        due.append(_Due("max_age", server.started + timedelta(seconds=policy.max_age),
                        f"server age {format_duration(facts.age_s)} exceeds max age "
                        f"{format_duration(policy.max_age)}"))
    gpu = facts.gpu
    if gpu is not None and gpu.state == "busy":
        return due
    if (gpu is not None and gpu.state == "idle" and policy.gpu_idle_timeout > 0
            and facts.gpu_idle_s >= policy.gpu_idle_timeout):
        due.append(_Due("gpu_idle", gpu.idle_since + timedelta(seconds=policy.gpu_idle_timeout),
                        f"GPUs idle for {format_duration(facts.gpu_idle_s)} (limit "
                        f"{format_duration(policy.gpu_idle_timeout)}): "
                        f"{_gpu_idle_phrase(facts, policy, False)}; {_jupyter_phrase(facts)}"))
    idle = _idle_due(facts, policy)
    if idle is not None:
        due.append(idle)
    return due


def _keep(facts: _Facts, policy: Policy, numbers: dict) -> Decision:
    """Rule 4 and 7: why a server that is not due is kept."""
    gpu, thr = facts.gpu, f"{policy.gpu_idle_threshold_pct:g}%"
    if gpu is not None and gpu.state == "busy":
        return Decision(KEEP, f"{_gpu_names(gpu.busy_gpus)} busy ({_pct(gpu.latest_util_pct)} SM, "
                              f"{_pct(gpu.latest_mem_util_pct)} memory at the latest sample; "
                              f"threshold {thr}); {_jupyter_phrase(facts)}", numbers,
                        rule="gpu_busy")
    if gpu is not None and gpu.state == "unknown" and policy.gpu_idle_timeout > 0:
        return Decision(KEEP, f"GPU activity unknown for {_gpu_names(gpu.unknown_gpus or gpu.gpus)}"
                              f" (no samples within {format_duration(policy.gpu_max_gap)}); not "
                              f"culling on missing data; {_jupyter_phrase(facts)}", numbers,
                        rule="gpu_unknown")
    parts, limits = [_jupyter_phrase(facts)], []
    if gpu is not None and gpu.state == "idle":
        parts.append(_gpu_idle_phrase(facts, policy))
    if policy.max_age > 0:
        parts.append(f"age {format_duration(facts.age_s)}")
    for label, value in (("idle", policy.idle_timeout), ("GPU idle", policy.gpu_idle_timeout),
                         ("max age", policy.max_age)):
        if value > 0 and (label != "GPU idle" or gpu is not None):
            limits.append(f"{label} {format_duration(value)}")
    parts.append("limits: " + ", ".join(limits) if limits else "no culling limit applies")
    return Decision(KEEP, "; ".join(parts), numbers, rule="active")


def _advice(server: Server, due: _Due) -> str:
    if due.rule == "max_age":
        return "it has reached the maximum server age: save your work (it can be started again)"
    return "to keep it: use it, or start GPU work" if server.gpus else "to keep it: use it"


def _escalate(server: Server, due: list, policy: Policy, now: datetime,
              warned_at: Optional[datetime], numbers: dict) -> Decision:
    """Due: cull, or warn first when ``warn_before`` is set (see the module docstring)."""
    first = due[0]
    numbers = dict(numbers, due_rules=",".join(d.rule for d in due))
    if policy.warn_before <= 0:
        return Decision(CULL, first.text, numbers, rule=first.rule)
    window = timedelta(seconds=policy.warn_before)
    due_since = min(d.since for d in due)
    numbers["warn_before_s"] = policy.warn_before
    if warned_at is None or warned_at < due_since:    # none yet, or from an earlier due period
        cull_at = now + window
        numbers.update(warned_s_ago=0.0, cull_in_s=policy.warn_before)
        reason = (f"{first.text}. It will be culled at {_clock(cull_at)} (in "
                  f"{format_duration(policy.warn_before)}); {_advice(server, first)}")
        return Decision(WARN, reason, numbers, rule=first.rule, warned_at=now, cull_at=cull_at,
                        notify=True)
    cull_at = warned_at + window
    numbers.update(warned_s_ago=(now - warned_at).total_seconds(),
                   cull_in_s=max(0.0, (cull_at - now).total_seconds()))
    ago = format_duration((now - warned_at).total_seconds())
    if now >= cull_at:
        return Decision(CULL, f"{first.text}; warned {ago} ago", numbers, rule=first.rule)
    return Decision(WARN, f"{first.text}; warned {ago} ago, culling at {_clock(cull_at)} (in "
                          f"{format_duration((cull_at - now).total_seconds())}) if still due",
                    numbers, rule=first.rule, warned_at=warned_at, cull_at=cull_at)


def decide(server: Server, samples: Iterable[GpuSample], policy: Policy, now: datetime,
           warned_at: Optional[datetime] = None) -> Decision:
    """Keep, warn or cull ``server`` at ``now`` (see the module docstring for the rule order).

    ``samples``: GPU samples of at least the server's GPUs (others are ignored), covering
    :func:`required_history`.  ``policy``: already resolved for this server
    (:func:`resolve_policy`).  ``warned_at``: when the server was last warned, as stored from the
    previous :attr:`Decision.warned_at`.
    """
    _require_aware(now, "now")
    _require_aware(warned_at, "warned_at")
    if server.pending:
        return Decision(KEEP, f"{server.pending} pending; not acting", {}, rule="pending")
    exempt = exemption(server, policy)
    if exempt:
        return Decision(KEEP, exempt, {}, rule="exempt")
    facts = _gather(server, samples, policy, now)
    numbers = _numbers(facts, policy, server.gpu_share)
    due = _due_rules(server, facts, policy)
    if not due:
        return _keep(facts, policy, numbers)
    return _escalate(server, due, policy, now, warned_at, numbers)
