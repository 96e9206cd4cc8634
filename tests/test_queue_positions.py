"""A workload's place in its team's queue, as the Jobs panel, the CLI and the
queue page show it ("position 3 in the team's queue"), whatever came and
went before it, and without walking a long queue to find it."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuspawner.scheduler import POLICIES, Node, Quota, Scheduler, Team, Workload
from gpuspawner.service.workloads.queries import queue_position, queue_positions

PRIORITIES = ("batch", "interactive", "best-effort")


def scheduler():
    teams = [Team(name, {"a100": Quota(4)}) for name in ("a", "b")]
    return Scheduler([Node("n1", "a100", 8)], teams, POLICIES["gpuhub"])


def walked(state, wid):
    """The place counted the slow way: the live entries of the queue up to it."""
    w = state.pending[wid]
    live = [q for q in state.queues[state.group_of(w)] if state.pending.get(q.id) is q]
    return [q.id for q in live].index(wid) + 1


# Operations on the queue: ("add", team, priority, time), ("remove", k),
# ("requeue", k, priority) (a priority changed: out and in again, the same
# id), ("compact", team) (the cycle's lazy compaction).
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sampled_from("ab"), st.sampled_from(PRIORITIES),
              st.integers(0, 20)),
    st.tuples(st.just("remove"), st.integers(0, 1000)),
    st.tuples(st.just("requeue"), st.integers(0, 1000), st.sampled_from(PRIORITIES)),
    st.tuples(st.just("compact"), st.sampled_from("ab"))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_a_place_in_the_queue_counts_only_the_work_still_waiting_before_it(operations):
    state = scheduler().state
    n = 0
    for op in operations:
        pending = sorted(state.pending)
        if op[0] == "add":
            _, team, priority, t = op
            state.add_pending(Workload(f"w{n}", team, "a100", 1, float(t), priority=priority))
            n += 1
        elif op[0] == "remove" and pending:
            state.remove_pending(pending[op[1] % len(pending)])
        elif op[0] == "requeue" and pending:
            w = state.remove_pending(pending[op[1] % len(pending)])
            state.add_pending(replace(w, priority=op[2]))
        elif op[0] == "compact":
            state.queue(op[1])
        expected = {wid: walked(state, wid) for wid in state.pending}
        assert queue_positions(state, set(state.pending) | {"gone"}) == expected
        assert all(queue_position(state, wid) == place for wid, place in expected.items())
        # what is kept per workload goes with it (a service runs for months)
        assert state.queue_keys.keys() == state.pending.keys()
    assert queue_position(state, "gone") is None


class CountingQueue(list):
    """A queue that counts the entries looked at, by index or by a walk."""
    looked_at = 0

    def __getitem__(self, i):
        self.looked_at += 1
        return super().__getitem__(i)

    def __iter__(self):
        for w in super().__iter__():
            self.looked_at += 1
            yield w


def test_the_newest_of_a_long_queue_are_placed_without_walking_the_queue():
    """The Jobs panel asks for the places of a user's newest 50, at the end
    of the queue: each is a bisection, not a look at each of the 20,000
    entries before it."""
    state = scheduler().state
    for i in range(20_000):
        state.add_pending(Workload(f"w{i}", "a", "a100", 1, float(i), priority="batch"))
    for i in range(0, 20_000, 3):
        state.remove_pending(f"w{i}")
    queue = state.queues["a"] = CountingQueue(state.queues["a"])
    newest = {f"w{i}" for i in range(19_950, 20_000)} & set(state.pending)
    places = queue_positions(state, newest)
    assert places["w19999"] == len(state.pending)
    assert queue.looked_at < 20 * len(newest), queue.looked_at


def test_a_place_read_while_the_cycle_compacts_the_queue_is_read_again():
    """The cycle's worker may compact a queue (drop its stale entries) while
    the event loop reads a place in it: here the compaction comes between
    two steps of the read's bisection, as a switch of threads would."""
    state = scheduler().state
    for i in range(1_000):
        state.add_pending(Workload(f"w{i}", "a", "a100", 1, float(i), priority="batch"))
    for i in range(600):  # stale entries, enough to make the next look compact
        state.remove_pending(f"w{i}")
    key, calls = state.waiting.queue_key, []

    def key_with_a_compaction_inside(w):
        calls.append(w.id)
        if len(calls) == 2:  # the first look into the queue
            state.queue("a")
        return key(w)
    state.waiting.queue_key = key_with_a_compaction_inside
    assert queue_position(state, "w999") == 400
    assert len(state.queues["a"]) == 400  # it did compact, under the read


def test_a_queued_row_the_core_has_yet_to_requeue_has_no_position_rather_than_null(tmp_path):
    """Between an attempt's end being written (the row queued again) and the
    core hearing of it (its change waits for the cycle being planned), the
    API shows the workload queued without a place, as its schema allows,
    never ``"queue_position": null`` (schemathesis found one on a replica)."""
    import sys
    from gpuspawner.service.access.identity import Identity
    from gpuspawner.service.api.handlers import detailed
    from gpuspawner.store import WorkloadRow
    from gpuspawner.vocab.specs import parse_job
    from test_engine_restart import NeverStarts, make_engine
    alice = Identity("alice", teams=frozenset({"a"}), can_submit=True)
    engine = make_engine(f"sqlite:///{tmp_path}/q.sqlite", tmp_path, backend=NeverStarts())

    def submit(gpus):
        return engine.submit(alice, parse_job({"command": [sys.executable, "-c", "pass"],
                                               "gpus": gpus, "pool": "default"})).id
    submit(4)
    engine.tick()
    waiting = submit(1)
    engine.tick()

    def view():
        with engine.store.session() as s:
            return detailed(engine, s.get(WorkloadRow, waiting), [], True)
    assert view()["state"] == "queued" and view()["queue_position"] == 1
    engine.scheduler.state.remove_pending(waiting)  # the core's side, not heard of yet
    shown = view()
    assert shown["state"] == "queued" and "queue_position" not in shown
