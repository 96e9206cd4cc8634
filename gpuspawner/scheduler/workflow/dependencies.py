"""Dependencies between workloads: the rules, pure (the service's
waiting.py and the simulator's replay apply them).

A workload may wait for others (``after``): each entry names a workload or
a sweep and a condition. ``ok``: it succeeded (a sweep: every task did);
``failed``: it failed or was cancelled (a sweep: it ended with any task not
succeeded); ``any``: it ended, however. While an entry's target has not
ended the workload waits; once a target ended in a state its condition does
not take, the dependency can never be met and the workload is cancelled.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Optional

OK, ANY, FAILED_CONDITION = "ok", "any", "failed"
CONDITIONS = (OK, ANY, FAILED_CONDITION)
MAX_AFTER = 64
# Workload ids are "w" + 12 hex, sweep ids "s" + 12 hex.
TARGET_RE = re.compile(r"[ws][0-9a-f]{12}")
# The end states, as the service's database names them (vocab/states.py).
SUCCEEDED, FAILED, CANCELLED, STOPPED = "succeeded", "failed", "cancelled", "stopped"
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED, STOPPED)

MET, NEVER, WAIT = "met", "never", "wait"
# Which end state of a target meets which condition.
MEETS = {OK: frozenset({SUCCEEDED}),
         FAILED_CONDITION: frozenset({FAILED, CANCELLED, STOPPED}),
         ANY: frozenset(FINAL_STATES)}


def verdict(condition: str, state: Optional[str]) -> str:
    """MET, NEVER or WAIT: a target in ``state`` (None: not ended) under ``condition``."""
    if state not in FINAL_STATES:
        return WAIT
    return MET if state in MEETS[condition] else NEVER


def resolve(after: Iterable[Mapping[str, str]], states: Mapping[str, Optional[str]]
            ) -> tuple[str, str]:
    """The verdict over all of ``after`` and what to tell the user: NEVER with
    the first target that can no longer meet it ("dependency w1 failed"),
    else WAIT with what it still waits for, else MET."""
    waiting = []
    for dep in after:
        state = states.get(dep["id"])
        v = verdict(dep["condition"], state)
        if v == NEVER:
            if dep["condition"] == OK:
                return NEVER, f"dependency {dep['id']} {state}"
            return NEVER, f"dependency {dep['id']} {state}, not {dep['condition']}"
        if v == WAIT:
            waiting.append(f"{dep['id']} ({dep['condition']})")
    if waiting:
        return WAIT, "waiting for " + ", ".join(waiting)
    return MET, ""


def sweep_outcome(counts: Mapping[str, int], cancel_requested: bool) -> Optional[str]:
    """A sweep's end state from how many of its tasks are in each state;
    None while any has not ended."""
    if any(n for state, n in counts.items() if state not in FINAL_STATES):
        return None
    if all(state == SUCCEEDED for state, n in counts.items() if n):
        return SUCCEEDED
    return CANCELLED if cancel_requested else FAILED


def find_cycle(start: str, edges: Mapping[str, Iterable[str]]) -> Optional[list[str]]:
    """A path start -> ... -> start through ``edges`` (node -> what it waits
    for), or None. Iterative, so a long chain cannot exhaust the stack."""
    parents: dict[str, Optional[str]] = {start: None}
    stack = [start]
    while stack:
        node = stack.pop()
        for nxt in edges.get(node, ()):
            if nxt == start:
                path = [node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return path[::-1] + [start]
            if nxt not in parents:
                parents[nxt] = node
                stack.append(nxt)
    return None


def describe_cycle(path: list[str]) -> str:
    return "dependency cycle: " + " -> ".join(path)
