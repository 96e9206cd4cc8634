"""The pure core of the GPU-aware idle culler: fixed datetimes, no clock, no sleeping."""
from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta, timezone

import pytest

from gpuspawner.culler.decide import (
    CULL, KEEP, WARN, Decision, GpuSample, Policy, PolicyRule, Server, decide, format_duration,
    gpu_activity, gpu_idle_since, required_history, resolve_policy, utcnow,
)

M, H = 60, 3600
T0 = datetime(2024, 3, 1, 8, 0, tzinfo=timezone.utc)      # a Friday morning
NOW = T0 + timedelta(hours=6)
POLICY = Policy(idle_timeout=2 * H, gpu_idle_timeout=1 * H, gpu_idle_threshold_pct=5)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def series(gpus=(0, 1), start=6 * H, end=0, util=0.3, mem=None, every=60):
    """Samples for ``gpus`` every ``every`` s from ``start`` s before NOW to ``end`` s before."""
    out, t = [], start
    while t >= end:
        out += [GpuSample(ago(t), g, util, mem) for g in gpus]
        t -= every
    return out


def server(**kw) -> Server:
    values = dict(user="alice", gpus=(0, 1), started=T0, last_activity=ago(1 * M))
    values.update(kw)
    return Server(**values)


IDLE_GPUS = series(util=0.3)                                           # idle all 6 h
BUSY_GPUS = series(util=92.0, mem=40.0)                                # training all 6 h
RECENTLY_BUSY = series(start=6 * H, end=31 * M, util=80) + series(start=30 * M, util=0.2)

# ----------------------------------------------------------------------------- decision table

CASES = [
    # id, server, samples, policy, action, rule, reason fragments
    ("busy kernel + idle GPUs -> cull", server(last_activity=ago(1 * M)), IDLE_GPUS, POLICY,
     CULL, "gpu_idle", ["GPUs idle for 6h", "GPUs 0,1 below 5%", "Jupyter last active 1m ago"]),
    ("idle kernel + busy GPUs -> keep (terminal training)", server(last_activity=ago(5 * H)),
     BUSY_GPUS, POLICY, KEEP, "gpu_busy", ["GPUs 0,1 busy", "92.0% SM", "Jupyter last active 5h"]),
    ("one of two GPUs busy -> keep",
     server(last_activity=ago(5 * H)), series(gpus=(0,)) + series(gpus=(1,), util=60), POLICY,
     KEEP, "gpu_busy", ["GPU 1 busy"]),
    ("GPU work 30m ago counts as activity -> keep", server(last_activity=ago(5 * H)),
     RECENTLY_BUSY, POLICY, KEEP, "active", ["below 5% for 30m", "limits: idle 2h, GPU idle 1h"]),
    ("Jupyter and GPUs both idle -> cull, GPU rule named first",
     server(last_activity=ago(3 * H)), IDLE_GPUS, POLICY, CULL, "gpu_idle", ["GPUs idle for"]),
    ("exempt user -> keep", server(user="root"), IDLE_GPUS,
     dataclasses.replace(POLICY, exempt_users=frozenset({"root"})), KEEP, "exempt",
     ["user root is exempt"]),
    ("exempt group -> keep", server(groups={"staff", "ops"}), IDLE_GPUS,
     dataclasses.replace(POLICY, exempt_groups=frozenset({"ops"})), KEEP, "exempt",
     ["group ops"]),
    ("exempt named server -> keep", server(name="long-training"), IDLE_GPUS,
     dataclasses.replace(POLICY, exempt_servers=frozenset({"long-training"})), KEEP, "exempt",
     ["'long-training' is exempt"]),
    ("other named server of the same user -> cull", server(name="scratch"), IDLE_GPUS,
     dataclasses.replace(POLICY, exempt_servers=frozenset({"long-training"})), CULL, "gpu_idle",
     []),
    ("exempt beats max age", server(user="root", started=ago(30 * H)), BUSY_GPUS,
     dataclasses.replace(POLICY, max_age=8 * H, exempt_users=frozenset({"root"})), KEEP,
     "exempt", []),
    ("named servers off (idle-culler compat) -> keep", server(name="scratch"), IDLE_GPUS,
     dataclasses.replace(POLICY, cull_named_servers=False), KEEP, "exempt", ["named servers"]),
    ("default servers off (idle-culler compat) -> keep", server(), IDLE_GPUS,
     dataclasses.replace(POLICY, cull_default_servers=False), KEEP, "exempt", ["default servers"]),
    ("max age exceeded -> cull even with busy GPUs", server(started=ago(9 * H)),
     series(start=9 * H, util=95), dataclasses.replace(POLICY, max_age=8 * H), CULL, "max_age",
     ["server age 9h exceeds max age 8h"]),
    ("max age not reached -> keep", server(started=ago(7 * H)), BUSY_GPUS,
     dataclasses.replace(POLICY, max_age=8 * H), KEEP, "gpu_busy", []),
    ("pending spawn -> keep", server(pending="spawn"), IDLE_GPUS, POLICY, KEEP, "pending",
     ["spawn pending"]),
    ("pending stop -> keep even past max age", server(pending="stop", started=ago(30 * H)),
     IDLE_GPUS, dataclasses.replace(POLICY, max_age=H), KEEP, "pending", []),
    ("no GPU samples at all -> unknown, keep", server(last_activity=ago(5 * H)), [], POLICY,
     KEEP, "gpu_unknown", ["GPU activity unknown", "not culling on missing data"]),
    ("stale samples (20m old) -> unknown, keep", server(last_activity=ago(5 * H)),
     series(end=20 * M), POLICY, KEEP, "gpu_unknown", ["GPUs 0,1"]),
    ("one GPU never sampled -> unknown, keep", server(last_activity=ago(5 * H)),
     series(gpus=(0,)), POLICY, KEEP, "gpu_unknown", ["GPU 1 (no samples within 5m)"]),
    ("gap in samples restarts the idle period -> keep", server(),
     series(start=6 * H, end=61 * M) + series(start=40 * M), POLICY, KEEP, "active",
     ["below 5% for 40m"]),
    ("memory busy, SM idle -> not idle, keep", server(last_activity=ago(5 * H)),
     series(util=0.5, mem=40.0), POLICY, KEEP, "gpu_busy", ["0.5% SM, 40.0% memory"]),
    ("utilization exactly at threshold is not idle", server(last_activity=ago(5 * H)),
     series(util=5.0), POLICY, KEEP, "gpu_busy", []),
    ("samples before the server started belong to someone else",
     server(started=ago(30 * M), last_activity=None), IDLE_GPUS, POLICY, KEEP, "active",
     ["below 5% for 30m"]),
    ("other GPUs' samples are ignored", server(gpus=(2, 3)), IDLE_GPUS, POLICY, KEEP,
     "gpu_unknown", ["GPUs 2,3"]),
    ("CPU-only, Jupyter active, GPU policy -> keep", server(gpus=()), IDLE_GPUS, POLICY, KEEP,
     "active", ["Jupyter last active 1m ago", "limits: idle 2h"]),
    ("CPU-only, Jupyter idle 3h -> cull on idle_timeout", server(gpus=(), last_activity=ago(3 * H)),
     [], POLICY, CULL, "idle", ["Jupyter inactive for 3h; idle limit 2h"]),
    ("CPU-only, Jupyter idle 1h -> keep", server(gpus=(), last_activity=ago(1 * H)), [], POLICY,
     KEEP, "active", []),
    ("CPU-only, no last_activity: idle since started",
     server(gpus=(), started=ago(3 * H), last_activity=None), [], POLICY, CULL, "idle", []),
    ("last_activity older than started: idle since started",
     server(gpus=(), started=ago(1 * H), last_activity=ago(5 * H)), [], POLICY, KEEP, "active",
     ["Jupyter last active 1h ago"]),
    ("GPU culling off + no samples: Jupyter alone (stock culler)",
     server(last_activity=ago(3 * H)), [], dataclasses.replace(POLICY, gpu_idle_timeout=0), CULL,
     "idle", ["GPU activity unknown; GPU culling is off"]),
    ("GPU culling off + busy GPUs: still keep", server(last_activity=ago(3 * H)), BUSY_GPUS,
     dataclasses.replace(POLICY, gpu_idle_timeout=0), KEEP, "gpu_busy", []),
    ("GPU culling off + idle GPUs + Jupyter idle -> idle cull",
     server(last_activity=ago(3 * H)), IDLE_GPUS, dataclasses.replace(POLICY, gpu_idle_timeout=0),
     CULL, "idle", ["Jupyter inactive for 3h and GPUs 0,1 below 5% for 6h"]),
    ("all limits off -> keep", server(last_activity=ago(20 * H)), IDLE_GPUS, Policy(), KEEP,
     "active", ["no culling limit applies"]),
]


@pytest.mark.parametrize("srv, samples, policy, action, rule, fragments",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_table(srv, samples, policy, action, rule, fragments):
    d = decide(srv, samples, policy, NOW)
    assert (d.action, d.rule) == (action, rule), d.reason
    for fragment in fragments:
        assert fragment in d.reason
    assert d.warned_at is None and not d.notify


def test_reason_text_and_numbers_for_the_audit_log():
    samples = series(start=2 * H + 10 * M, util=0.4) + series(start=3 * H, end=2 * H + 11 * M,
                                                             util=70)
    d = decide(server(last_activity=ago(3 * M)), samples, POLICY, NOW)
    assert d.action == CULL
    assert d.reason == ("GPUs idle for 2h10m (limit 1h): GPUs 0,1 below 5% (mean 0.4%); "
                        "Jupyter last active 3m ago")
    n = d.numbers
    assert n["gpu_idle_s"] == 2 * H + 10 * M and n["idle_s"] == 3 * M and n["age_s"] == 6 * H
    assert n["gpu_mean_util_pct"] == 0.4 and n["gpu_latest_util_pct"] == 0.4
    assert n["gpu_idle_timeout_s"] == H and n["idle_timeout_s"] == 2 * H
    assert n["gpu_state"] == "idle" and n["gpu_count"] == 2 and n["due_rules"] == "gpu_idle"


def test_cpu_only_numbers_have_no_gpu_keys():
    d = decide(server(gpus=(), last_activity=ago(3 * H)), IDLE_GPUS, POLICY, NOW)
    assert d.numbers["idle_s"] == 3 * H
    assert not any(k.startswith("gpu_") for k in d.numbers)


def test_multiple_due_rules_are_all_recorded():
    policy = dataclasses.replace(POLICY, max_age=5 * H)
    d = decide(server(last_activity=ago(3 * H)), IDLE_GPUS, policy, NOW)
    assert (d.action, d.rule) == (CULL, "max_age")
    assert d.numbers["due_rules"] == "max_age,gpu_idle,idle"


# --------------------------------------------------------------------------- per-pool / per-team

BASE = Policy(idle_timeout=2 * H, gpu_idle_timeout=2 * H)
SCARCE = [PolicyRule(pool="h100", idle_timeout=30 * M, gpu_idle_timeout=30 * M)]


@pytest.mark.parametrize("pool, idle, action", [
    ("h100", 29 * M, KEEP),
    ("h100", 31 * M, CULL),      # scarce pool: 30 min
    ("a100", 31 * M, KEEP),      # default: 2 h
    ("a100", 2 * H - 60, KEEP),
    ("a100", 2 * H + 60, CULL),
    (None, 2 * H + 60, CULL),
])
def test_scarce_pool_culls_sooner(pool, idle, action):
    srv = server(pool=pool, last_activity=ago(idle))
    samples = series(start=idle)                     # GPUs idle exactly as long as Jupyter
    policy = resolve_policy(BASE, SCARCE, srv)
    assert decide(srv, samples, policy, NOW).action == action


@pytest.mark.parametrize("team, idle, action", [
    ("research", 3 * H, KEEP),     # research gets 4 h
    ("research", 4 * H + 60, CULL),
    ("teaching", 3 * H, CULL),     # everyone else 2 h
    (None, 3 * H, CULL),
])
def test_team_override(team, idle, action):
    rules = [PolicyRule(team="research", idle_timeout=4 * H)]
    srv = server(gpus=(), team=team, last_activity=ago(idle))
    assert decide(srv, [], resolve_policy(BASE, rules, srv), NOW).action == action


RULES = [
    PolicyRule(team="research", pool="h100", idle_timeout=45 * M),   # most specific, listed first
    PolicyRule(pool="h100", idle_timeout=30 * M),
    PolicyRule(team="research", idle_timeout=1 * H),
    PolicyRule(idle_timeout=90 * M, warn_before=5 * M),              # match-all, least specific
    PolicyRule(team="research", idle_timeout=50 * M),                # same specificity: later wins
]


@pytest.mark.parametrize("team, pool, expected", [
    ("research", "h100", 45 * M),
    ("research", "a100", 50 * M),
    ("teaching", "h100", 30 * M),
    ("teaching", "a100", 90 * M),
    (None, None, 90 * M),
])
def test_resolve_policy_specificity(team, pool, expected):
    policy = resolve_policy(BASE, RULES, server(team=team, pool=pool))
    assert policy.idle_timeout == expected
    assert policy.warn_before == 5 * M                   # untouched by the more specific rules
    assert policy.gpu_idle_timeout == BASE.gpu_idle_timeout
    assert resolve_policy(BASE, list(reversed(RULES[:4])), server(team=team, pool=pool)) \
        .idle_timeout == (expected if expected != 50 * M else 1 * H)


def test_resolve_policy_without_rules_is_the_base():
    assert resolve_policy(BASE, [], server()) is BASE


def test_rule_exemptions_add_to_the_base():
    base = dataclasses.replace(BASE, exempt_users=frozenset({"root"}))
    rules = [PolicyRule(team="research", exempt_users=frozenset({"bob"}))]
    policy = resolve_policy(base, rules, server(team="research"))
    assert policy.exempt_users == {"root", "bob"}
    assert resolve_policy(base, rules, server(team="other")).exempt_users == {"root"}


def test_policy_rule_covers_every_policy_field():
    rule_fields = {f.name for f in dataclasses.fields(PolicyRule)}
    assert {f.name for f in dataclasses.fields(Policy)} <= rule_fields


# ------------------------------------------------------------------------------------- warnings

WARN_POLICY = Policy(idle_timeout=2 * H, warn_before=15 * M)
DUE_AT = T0 + timedelta(hours=2)          # CPU server, last active at T0


def at(minutes_after_due: float) -> datetime:
    return DUE_AT + timedelta(minutes=minutes_after_due)


# now, last_activity, warned_at -> action, notify, stored warned_at, reason fragment
WARN_STEPS = [
    ("due for the first time -> warn", at(1), T0, None, WARN, True, at(1),
     "culled at 2024-03-01 10:16 UTC (in 15m); to keep it: use it"),
    ("warned 5m ago, still due -> warn again silently", at(6), T0, at(1), WARN, False, at(1),
     "warned 5m ago, culling at 2024-03-01 10:16 UTC (in 10m)"),
    ("warn period not over by a second -> warn", at(16) - timedelta(seconds=1), T0, at(1), WARN,
     False, at(1), "warned 14m ago"),
    ("warn period over, still due -> cull", at(16), T0, at(1), CULL, False, None,
     "Jupyter inactive for 2h16m; idle limit 2h; warned 15m ago"),
    ("activity resumed -> keep (warning void)", at(10), at(8), at(1), KEEP, False, None,
     "Jupyter last active 2m ago"),
    ("due again later, warning cleared -> warn again", at(8) + timedelta(hours=2, minutes=1),
     at(8), None, WARN, True, at(8) + timedelta(hours=2, minutes=1), "in 15m"),
    ("due again later, stale warning not cleared -> warn again, no cull",
     at(8) + timedelta(hours=2, minutes=20), at(8), at(1), WARN, True,
     at(8) + timedelta(hours=2, minutes=20), "in 15m"),
]


@pytest.mark.parametrize("now, last, warned_at, action, notify, stored, fragment",
                         [s[1:] for s in WARN_STEPS], ids=[s[0] for s in WARN_STEPS])
def test_warning_flow(now, last, warned_at, action, notify, stored, fragment):
    srv = Server(user="alice", started=T0 - timedelta(hours=1), last_activity=last)
    d = decide(srv, [], WARN_POLICY, now, warned_at=warned_at)
    assert (d.action, d.notify, d.warned_at) == (action, notify, stored), d.reason
    assert fragment in d.reason
    if action == WARN:
        assert d.cull_at == stored + timedelta(minutes=15)
        assert d.numbers["cull_in_s"] == (d.cull_at - now).total_seconds()


def test_warning_flow_end_to_end_as_a_caller_would_run_it():
    srv = Server(user="alice", started=T0, last_activity=T0)
    warned_at, actions = None, []
    for minute in range(0, 40, 5):           # a cull pass every 5 minutes, from DUE_AT on
        d = decide(srv, [], WARN_POLICY, at(minute), warned_at=warned_at)
        actions.append((minute, d.action, d.notify))
        warned_at = d.warned_at
        if d.action == CULL:
            break
    assert actions == [(0, WARN, True), (5, WARN, False), (10, WARN, False), (15, CULL, False)]


def test_gpu_server_warning_says_how_to_keep_it():
    policy = dataclasses.replace(POLICY, warn_before=10 * M)
    d = decide(server(), IDLE_GPUS, policy, NOW)
    assert d.action == WARN and d.notify
    assert "GPUs idle for 6h" in d.reason and "use it, or start GPU work" in d.reason
    # GPU work starts during the warning: keep, and the caller clears the warning
    samples = IDLE_GPUS + series(start=0, util=85)
    kept = decide(server(), samples, policy, NOW + timedelta(seconds=1), warned_at=NOW)
    assert kept.action == KEEP and kept.warned_at is None


def test_max_age_warning_advises_saving_work():
    policy = Policy(max_age=8 * H, warn_before=30 * M)
    d = decide(server(started=ago(8 * H)), BUSY_GPUS, policy, NOW)
    assert d.action == WARN and "maximum server age" in d.reason
    later = decide(server(started=ago(8 * H)), BUSY_GPUS, policy, NOW + timedelta(minutes=30),
                   warned_at=NOW)
    assert later.action == CULL


# ------------------------------------------------------------------------------- gpu_idle_since

def _s(minutes_ago, gpu=0, util=0.0, mem=None):
    return GpuSample(ago(minutes_ago * M), gpu, util, mem)


IDLE_SINCE = [
    ("all idle: the first sample", [_s(m) for m in range(60, -1, -1)], {}, ago(60 * M)),
    ("busy at the latest sample", [_s(m) for m in range(60, 0, -1)] + [_s(0, util=50)], {}, None),
    ("busy 30m ago, idle since", [_s(30, util=50)] + [_s(m) for m in range(29, -1, -1)], {},
     ago(29 * M)),
    ("unordered input", [_s(m) for m in (0, 2, 1, 4, 3)], {}, ago(4 * M)),
    ("gap longer than max_gap ends the run",
     [_s(m) for m in (60, 59, 58)] + [_s(m) for m in range(50, -1, -1)], {}, ago(50 * M)),
    ("gap of exactly max_gap does not", [_s(m) for m in (10, 5, 0)], {"max_gap": 5 * M},
     ago(10 * M)),
    ("gap longer than max_gap (custom)", [_s(m) for m in (10, 4, 0)], {"max_gap": 5 * M},
     ago(4 * M)),
    ("latest sample exactly max_gap old is fresh", [_s(m) for m in (10, 5)], {"max_gap": 5 * M},
     ago(10 * M)),
    ("latest sample stale", [_s(m) for m in range(60, 5, -1)], {}, None),
    ("no samples", [], {}, None),
    ("two GPUs: the later idle start",
     [_s(m, 0) for m in range(60, -1, -1)] + [_s(m, 1) for m in range(20, -1, -1)], {},
     ago(20 * M)),
    ("listed GPU without samples", [_s(m, 0) for m in range(10, -1, -1)], {"gpus": (0, 1)}, None),
    ("samples of other GPUs ignored",
     [_s(m, 0) for m in range(10, -1, -1)] + [_s(0, 7, util=99)], {"gpus": (0,)}, ago(10 * M)),
    ("memory busy", [_s(m, mem=30) for m in range(10, -1, -1)], {}, None),
    ("memory busy earlier, both idle since",
     [_s(10, util=1, mem=30)] + [_s(m, util=1, mem=1) for m in range(9, -1, -1)], {}, ago(9 * M)),
    ("busy and idle at the same time: busy wins", [_s(1), _s(0), _s(0, util=70)], {}, None),
    ("NaN reading is not idle", [_s(1), _s(0, util=math.nan)], {}, None),
]


@pytest.mark.parametrize("samples, kwargs, expected", [c[1:] for c in IDLE_SINCE],
                         ids=[c[0] for c in IDLE_SINCE])
def test_gpu_idle_since(samples, kwargs, expected):
    assert gpu_idle_since(samples, 5.0, NOW, **kwargs) == expected


def test_gpu_activity_reports_busy_and_unknown_gpus():
    samples = [_s(0, 0, util=50), _s(0, 1)]
    act = gpu_activity(samples, 5.0, NOW, gpus=(0, 1, 2))
    assert act.state == "busy" and act.busy_gpus == (0,) and act.unknown_gpus == (2,)
    assert act.latest_util_pct == 50


# ----------------------------------------------------------------------------- small functions

@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (45.9, "45s"), (60, "1m"), (3 * M + 59, "3m"), (H, "1h"), (2 * H + 10 * M, "2h10m"),
    (24 * H, "1d"), (26 * H + 5 * M, "1d2h"), (-5, "0s"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_required_history_covers_timeouts_warning_and_gap():
    policy = Policy(idle_timeout=2 * H, gpu_idle_timeout=1 * H, warn_before=15 * M, gpu_max_gap=M)
    assert required_history(policy) == 2 * H + 15 * M + M


def test_utcnow_is_aware_utc():
    assert utcnow().utcoffset() == timedelta(0)


@pytest.mark.parametrize("build, error", [
    (lambda: Server(user="a", started=datetime(2024, 1, 1)), ValueError),
    (lambda: server(last_activity=datetime(2024, 1, 1)), ValueError),
    (lambda: server(groups="staff"), TypeError),
    (lambda: server(gpus="0,1"), TypeError),
    (lambda: GpuSample(datetime(2024, 1, 1), 0, 1.0), ValueError),
    (lambda: Policy(idle_timeout=-1), ValueError),
    (lambda: Policy(idle_timeout=math.nan), ValueError),
    (lambda: Policy(gpu_idle_threshold_pct=101), ValueError),
    (lambda: Policy(gpu_max_gap=0), ValueError),
    (lambda: Policy(exempt_users="root"), TypeError),
    (lambda: Policy(cull_users="yes"), TypeError),
    (lambda: Policy(idle_timeout=True), TypeError),
    (lambda: PolicyRule(pool="h100", idle_timeout=-5), ValueError),
    (lambda: Decision("delete", "x"), ValueError),
    (lambda: decide(server(), [], POLICY, datetime(2024, 3, 1)), ValueError),
])
def test_invalid_inputs_are_rejected(build, error):
    with pytest.raises(error):
        build()


def test_value_types_are_normalised():
    srv = server(groups=["a", "b"], gpus=[0, 1])
    assert srv.groups == frozenset({"a", "b"}) and srv.gpus == (0, 1)
    assert Policy(exempt_users=["x"]).exempt_users == frozenset({"x"})
    assert server(name="nb").label == "alice/nb" and server().label == "alice"
