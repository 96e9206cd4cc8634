"""`gpuhub deploy --wait` and `gpuhub deployments [TEAM/]NAME --wait`: what
the wait says and when it ends, over scripted deployment views (pure); the
commands against a real hub are in tests/test_cli_client.py."""
from __future__ import annotations

import pytest

from gpuspawner.cli.common import UsageError
from gpuspawner.cli.deploy import (FAILED_RC, TIMEOUT_RC, find_deployment, rollout,
                                   waiting_revision, wait_rollout)


def rev(number=1, state="ready", reason="", replicas=1, ready=0):
    return {"number": number, "state": state, "reason": reason,
            "replicas": [f"w{i}" for i in range(replicas)], "ready_replicas": ready}


def dep(*revisions, traffic=None, min_replicas=1):
    return {"team": "a", "name": "best", "min_replicas": min_replicas,
            "traffic": traffic if traffic is not None else {1: 100}, "revisions": list(revisions)}


@pytest.mark.parametrize("view, done, line", [
    (dep(rev(state="waiting", reason="waiting for w1 (ok)", replicas=0)), None,
     "a/best revision 1 is waiting for w1 (ok)"),
    (dep(rev(replicas=1, ready=0)), None, "a/best revision 1 is rolling out: 0/1 replicas ready"),
    (dep(rev(replicas=2, ready=1)), True,
     "a/best revision 1 is ready: 1/2 replicas ready, 100% of the traffic"),
    (dep(rev(replicas=0), min_replicas=0, traffic={"1": 100}), True,
     "a/best revision 1 is ready: 0/0 replicas ready, 100% of the traffic"),
    (dep(rev(state="failed", reason="dependency w1 failed", replicas=0)), False,
     "a/best revision 1 failed: dependency w1 failed"),
    # The newest revision counts, whatever the order, not the stable one.
    (dep(rev(2, state="waiting", reason="waiting for w2 (ok)", replicas=0), rev(1, ready=1)), None,
     "a/best revision 2 is waiting for w2 (ok)"),
    (dep(rev(1, ready=1), rev(2, ready=1), traffic={1: 80, 2: 20}), True,
     "a/best revision 2 is ready: 1/1 replicas ready, 20% of the traffic"),
    (dep(), None, "a/best: no revision yet"),
    (dep(rev(2, state="cancelled", reason="cancelled by alice", replicas=0), rev(1, ready=1)), False,
     "a/best revision 2 was cancelled by alice"),
])
def test_rollout_says_where_the_newest_revision_stands(view, done, line):
    assert rollout(view) == (done, line)


class Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds):
        self.now += seconds


WAITING = dep(rev(state="waiting", reason="waiting for w1 (ok)", replicas=0))
STARTING = dep(rev(replicas=1, ready=0))
READY = dep(rev(replicas=1, ready=1))
FAILED = dep(rev(state="failed", reason="dependency w1 failed", replicas=0))


@pytest.mark.parametrize("views, timeout, rc, said", [
    # Each change is said once; the wait ends when the revision serves.
    ([WAITING, WAITING, STARTING, STARTING, READY], 60, 0,
     ["a/best revision 1 is waiting for w1 (ok)", "a/best revision 1 is rolling out: "
      "0/1 replicas ready", "a/best revision 1 is ready: 1/1 replicas ready, 100% of the traffic"]),
    ([WAITING, FAILED], 60, FAILED_RC,
     ["a/best revision 1 is waiting for w1 (ok)", "a/best revision 1 failed: dependency w1 failed"]),
    # Still waiting at the deadline (three 2 s polls in 5 s): gives up, saying where it stood.
    ([WAITING] * 10, 5, TIMEOUT_RC,
     ["a/best revision 1 is waiting for w1 (ok)",
      "gave up waiting after 5 s: a/best revision 1 is waiting for w1 (ok)"]),
    ([READY], 0, 0, ["a/best revision 1 is ready: 1/1 replicas ready, 100% of the traffic"]),
])
def test_wait_ends_when_ready_failed_or_out_of_time(views, timeout, rc, said):
    clock, lines, polls = Clock(), [], iter(views)
    got, last = wait_rollout(lambda: next(polls), timeout, clock=lambda: clock.now,
                             sleep=clock.sleep, say=lines.append)
    assert (got, lines) == (rc, said)
    assert rollout(last)[1] in said[-1]


class Listing:
    def __init__(self, *pairs):
        self.pairs = pairs

    def list_deployments(self):
        return {"deployments": [{"team": t, "name": n} for t, n in self.pairs]}


@pytest.mark.parametrize("text, pairs, found, error", [
    ("a/best", (), ("a", "best"), None),
    ("best", (("a", "best"), ("a", "iris")), ("a", "best"), None),
    ("best", (("a", "best"), ("b", "best")), None, "deployments of 'best' in teams a, b: say TEAM/best"),
    ("best", (("a", "iris"),), None, "no deployment named 'best'"),
    ("a/", (), None, "a deployment is TEAM/NAME"),
])
def test_a_deployment_is_team_slash_name_or_a_name_one_team_has(text, pairs, found, error):
    if error:
        with pytest.raises(UsageError, match=error):
            find_deployment(Listing(*pairs), text)
    else:
        assert find_deployment(Listing(*pairs), text) == found


@pytest.mark.parametrize("revisions, given, found, error", [
    ([rev(1, ready=1), rev(2, state="waiting", replicas=0)], [], 2, None),
    ([rev(1, ready=1), rev(2, state="waiting", replicas=0)], ["1"], 1, None),  # the service says no
    ([rev(1, ready=1)], [], None, "a/best has no waiting revision to cancel"),
    ([rev(2, state="waiting", replicas=0), rev(3, state="waiting", replicas=0)], [], None,
     "a/best has waiting revisions 2, 3: say which, e.g. gpuhub deployments best cancel 3"),
    ([rev(2, state="waiting", replicas=0)], ["two"], None, "cancel takes one revision number"),
])
def test_cancel_takes_the_revision_given_or_the_one_waiting(revisions, given, found, error):
    if error:
        with pytest.raises(UsageError, match=error):
            waiting_revision(dep(*revisions), given)
    else:
        assert waiting_revision(dep(*revisions), given) == found
