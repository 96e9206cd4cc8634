"""Start estimates: the forecast's plan, learned run times and the
calibrated range, as tables. Every case drives the public ``Scheduler``
(submit, step, finished) to build the state a real cycle leaves, then asks
``forecast`` when each waiting workload starts."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuspawner.scheduler import JOB, NOTEBOOK, POLICIES, Node, Quota, Scheduler, Team, Workload
from gpuspawner.scheduler.forecast.calibration import PRIOR, Calibration, say
from gpuspawner.scheduler.forecast import Profile, forecast, limit_runtime
from gpuspawner.scheduler.forecast.rollout import rollout
from gpuspawner.scheduler.forecast.runtimes import MIN_SAMPLES, RuntimeModel, workload_keys

GPUHUB = POLICIES["gpuhub"]
BACKFILL = POLICIES["backfill"]
H = 3600.0


def node(name, gpus=4, rack="r1"):
    return Node(name, "a100", gpus, topology={"rack": rack}, labels={"host": name})


def team(name, nominal=8, borrowing=None):
    return Team(name, {"a100": Quota(nominal, borrowing)})


def job(wid, team_name="a", gpus=1, t=0.0, limit=H, nodes=1, on=None, **kw):
    """A job; ``on`` pins it to one node."""
    if on is not None:
        kw["node_selector"] = {"host": on}
    return Workload(wid, team_name, "a100", gpus, t, num_nodes=nodes, time_limit=limit, **kw)


def run(nodes, teams, running, pending, now, policy=BACKFILL):
    """A scheduler where ``running`` started at t=0 and ``pending`` waits."""
    s = Scheduler(nodes, teams, policy)
    for w in running:
        s.submit(w, 0.0)
    s.step(0.0)
    assert set(s.state.running) == {w.id for w in running}
    for w in pending:
        s.submit(w, w.submit_time)
    s.step(now)
    return s


# ---- the profile -------------------------------------------------------------
@pytest.mark.parametrize("changes,need,duration,t0,expected", [
    ([], 4, H, 0, 0),                              # free all along
    ([(0, 100, -4)], 4, 10, 0, 100),               # busy until 100
    ([(0, 100, -4)], 4, 10, 150, 150),             # asked after it frees
    ([(50, 100, -4)], 4, 60, 0, 100),              # a 60 s run does not fit before 50
    ([(50, 100, -4)], 4, 50, 0, 0),                # a 50 s run ends as the gap closes
    ([(0, math.inf, -4)], 1, 1, 0, math.inf),      # never frees
    ([(0, 100, -2), (100, 200, -3)], 1, 150, 0, 0),  # 1 of 4 free all along
    ([(0, 100, -2), (100, 200, -3)], 2, 150, 0, 200),  # 2 free before 100, not after
    ([(0, 100, -2), (100, 200, -3)], 2, 100, 0, 0),
])
def test_profile_earliest_start(changes, need, duration, t0, expected):
    p = Profile(0.0, 4)
    for start, end, delta in changes:
        p.add(start, end, delta)
    assert p.earliest(need, duration, t0) == expected


# ---- the plan ----------------------------------------------------------------
def starts(s, now, **kw):
    """The plan's starts (the policy run forward is tested on its own below)."""
    kw.setdefault("rollout_pending", 0)
    return {wid: (e.start, e.basis) for wid, e in forecast(s.state, s.policy, now, **kw).items()}


def test_a_waiting_job_starts_when_the_running_one_reaches_its_limit():
    s = run([node("n1")], [team("a")], [job("r", gpus=4)], [job("w", gpus=2, t=600)], 600)
    assert starts(s, 600) == {"w": (H, "plan")}


def test_jobs_are_booked_in_turn_and_short_ones_backfill_gaps():
    # n1 is full for 1 h, n2 has 1 GPU free for 2 h. The gang w1 (2 × 4) can
    # start at 2 h only. w2 (1 GPU, 30 min) backfilled at once (the cycle ran
    # it); w3 (4 GPUs for 1 h) fits n1's gap before the gang; w4 follows it.
    s = run([node("n1"), node("n2")], [team("a")],
            [job("r1", gpus=4, on="n1"), job("r2", gpus=3, limit=2 * H, on="n2")],
            [job("w1", gpus=4, nodes=2, t=1, limit=2 * H),
             job("w2", gpus=1, t=2, limit=0.5 * H), job("w3", gpus=4, t=3),
             job("w4", gpus=4, t=4, limit=2 * H)], 10)
    assert "w2" in s.state.running
    assert starts(s, 10) == {"w1": (2 * H, "plan"), "w3": (H, "plan"), "w4": (4 * H, "plan")}


@pytest.mark.parametrize("topology,start", [
    ("required", 3 * H),  # n1 is free now but alone in its rack: r2's two nodes, at 3 h
    ("none", H),          # n1 with n3, free at 1 h
])
def test_a_gang_needs_its_nodes_in_one_rack_when_required(topology, start):
    nodes = [node("n1", rack="r1"), node("n2", rack="r2"), node("n3", rack="r2")]
    s = run(nodes, [team("a")],
            [job("r1", gpus=2, limit=H / 2, on="n1"), job("r2", gpus=4, limit=3 * H, on="n2"),
             job("r3", gpus=4, limit=H, on="n3")],
            [job("g", gpus=4, nodes=2, t=1, topology=topology)], 10)
    assert starts(s, 10)["g"] == (start, "plan")


def test_work_without_a_limit_or_history_makes_the_start_unknown():
    s = run([node("n1")], [team("a")], [job("nb", gpus=4, limit=None, kind=NOTEBOOK)],
            [job("w", gpus=1, t=5)], 10)
    e = forecast(s.state, s.policy, 10, rollout_pending=0)["w"]
    assert e.start is None and e.basis == "unknown"
    assert "no time limit and no run-time history" in e.reason


def test_learned_run_times_bring_the_estimate_forward():
    model = RuntimeModel()
    for _ in range(MIN_SAMPLES):  # alice's jobs use a quarter of their limit
        model.record(workload_keys(job("x", user="alice")), H / 4, H)
    s = run([node("n1")], [team("a")], [job("r", gpus=4, user="alice")],
            [job("w", gpus=4, t=5, user="bob")], 10)

    def runtime(w, elapsed):
        return model.predict(workload_keys(w), w.time_limit, elapsed)

    assert starts(s, 10, runtime=runtime)["w"] == (H / 4, "plan")
    # Past the quarter hour, alice's job is expected to end halfway to its limit.
    assert starts(s, H / 2, runtime=runtime)["w"][0] == pytest.approx(H / 2 + H / 4)


def test_the_estimate_moves_earlier_when_running_work_ends_early():
    s = run([node("n1")], [team("a")], [job("r1", gpus=2, limit=2 * H), job("r2", gpus=2)],
            [job("w", gpus=4, t=5)], 10)
    assert starts(s, 10)["w"] == (2 * H, "plan")
    s.finished("r1", 600)
    s.step(600)
    assert starts(s, 600)["w"] == (H, "plan")


def test_the_team_ceiling_holds_a_job_back_though_gpus_are_free():
    s = run([node("n1", gpus=8)], [team("a", nominal=2, borrowing=0), team("b")],
            [job("r", gpus=2, limit=1000)], [job("w", gpus=1, t=5)], 10, policy=GPUHUB)
    assert starts(s, 10)["w"] == (1000, "plan")


def test_a_team_within_its_nominal_quota_takes_it_back_from_borrowers():
    # b borrows all 4 GPUs for 10 h; a's job (nominal 4) reclaims them after
    # the preemption delay and the victims' grace period.
    s = run([node("n1")], [team("a", nominal=4), team("b", nominal=0)],
            [job("r", "b", gpus=4, limit=10 * H)], [job("w", "a", gpus=2, t=5)], 10,
            policy=GPUHUB)
    expected = 5 + GPUHUB.preemption_delay + GPUHUB.default_grace_period
    assert starts(s, 10)["w"] == (expected, "reclaim")


@pytest.mark.parametrize("gpus,expected", [  # GPUs of c's running job and of a1
    # a1 waits for c's GPUs: a booking in the future does not count against
    # a's quota, so a2 (within a's nominal quota when asked) keeps its place
    # before b1, submitted after it.
    (4, {"a1": H, "a2": 2 * H, "b1": 3 * H}),
    # a1 fits beside c's job now: the next cycle starts it, so a2 then needs
    # to borrow and goes after b1, within b's nominal quota.
    (2, {"a1": 10, "b1": 10 + H, "a2": 10 + 2 * H}),
])
def test_only_what_starts_now_moves_its_team_back_in_the_order(gpus, expected):
    s = run([node("n1")], [team("a", nominal=4), team("b", nominal=4), team("c", nominal=0)],
            [job("r", "c", gpus=gpus)], [], 5,
            policy=replace(GPUHUB, preemption=False))  # no reclaim: the order alone decides
    for w in (job("a1", "a", gpus=gpus, t=6), job("a2", "a", gpus=4, t=7),
              job("b1", "b", gpus=4, t=8)):
        s.submit(w, w.submit_time)
    assert {wid: e.start for wid, e in forecast(s.state, s.policy, 10, rollout_pending=0).items()} \
        == expected


def test_more_than_the_limit_ahead_is_said_unknown():
    s = run([node("n1")], [team("a")], [job("r", gpus=4)],
            [job(f"w{i}", gpus=4, t=i + 1) for i in range(3)], 10)
    got = forecast(s.state, s.policy, 10, limit=2, rollout_pending=0)
    assert [got[f"w{i}"].start for i in range(3)] == [H, 2 * H, None]
    assert got["w2"].reason == "more than 2 workloads are ahead of it"


def _queue_of_three_teams():
    """Two nodes held for an hour; 30 jobs of three teams, of 1 to 8 GPUs,
    submitted over a quarter of an hour."""
    pending = [job(f"{t}{i}", t, gpus=(1, 2, 4, 4)[i % 4], t=60.0 * i + k,
                   nodes=2 if i % 4 == 3 else 1, limit=H * (1 + i % 3))
               for i in range(10) for k, t in enumerate("abc")]
    return run([node("n1"), node("n2")], [team(t, nominal=4) for t in "abc"],
               [job("r1", "a", gpus=4), job("r2", "b", gpus=4)], pending, 900,
               policy=replace(GPUHUB, aging_after=None))


@pytest.mark.parametrize("limit", [1, 7, 29, 30, 100])
@pytest.mark.parametrize("only", [None, {"a9", "b0", "c5"}])
def test_a_limit_books_the_first_in_the_plans_order_and_says_the_rest_unknown(limit, only):
    s = _queue_of_three_teams()
    everything = forecast(s.state, s.policy, 900, rollout_pending=0)
    booked_first = list(everything)[:limit]  # in the order they were booked
    got = forecast(s.state, s.policy, 900, limit=limit, only=only, rollout_pending=0)
    asked = set(s.state.pending) if only is None else only
    assert set(got) == asked, "every workload asked about gets an estimate"
    for wid, e in got.items():
        if wid in booked_first or limit >= len(s.state.pending):
            assert e == everything[wid], wid
        else:
            assert (e.start, e.basis, e.reason) == \
                (None, "unknown", f"more than {limit} workloads are ahead of it"), wid


@pytest.mark.parametrize("limit, expected", [
    (None, {"a1": H, "w0": 2 * H, "w1": 12 * H, "w2": 22 * H, "w3": 32 * H}),
    (3, {"a1": H, "w0": 2 * H, "w1": 12 * H, "w2": None, "w3": None}),
])
def test_what_starts_before_any_job_ages_keeps_its_place_ahead_of_them(limit, expected):
    """One node held for an hour; aging after 2 h. a1 starts when it frees,
    w0 when a1 ends, just before it would age; w1.. (10 h each) wait past
    their aging, and move up when they age, which is after w0 started. The
    plan's second pass books the aging work first: w0, booked after it, was
    planned at 42 h (and a1 and w0 said unknown behind a limit of 3), where
    the policy run forward starts it at 2 h."""
    s = run([node("n1")], [team("a", nominal=4)], [job("r", gpus=4)],
            [job("a1", gpus=4, t=1)] + [job(f"w{i}", gpus=4, t=2 + i, limit=10 * H)
                                        for i in range(4)], 10,
            policy=replace(GPUHUB, aging_after=2 * H, preemption=False))
    got = forecast(s.state, s.policy, 10, limit=limit, rollout_pending=0)
    assert {wid: None if e.start is None else round(e.start / H) * H
            for wid, e in got.items()} == expected
    if limit is None:  # what the policy itself does, run forward with nothing more coming
        ran = rollout(s.state, s.policy, 10, limit_runtime)
        assert {wid: round(t / H) * H for wid, t in ran.items()} == expected


def test_only_asks_for_some_but_books_everything_ahead():
    s = run([node("n1")], [team("a")], [job("r", gpus=4)],
            [job(f"w{i}", gpus=4, t=i + 1) for i in range(3)], 10)
    assert {k: v.start for k, v in forecast(s.state, s.policy, 10, only={"w2"},
                                            rollout_pending=0).items()} == {"w2": 3 * H}


# ---- the policy run forward ----------------------------------------------------
class RolloutAt:
    """Rides a replay (the simulator's estimates hook): at the first cycle at
    or after ``at``, what the rollout says of every waiting job, told each
    job's true run left (``runs``: its whole run, less what its attempts
    before a preemption ran: the replay's jobs resume from a checkpoint)."""

    def __init__(self, at, policy, runs):
        self.at, self.policy, self.runs, self.said = at, policy, runs, None
        self.done: dict[str, float] = {}
        self.counted: set[tuple[str, float]] = set()

    def runtime(self, w, elapsed):
        return self.runs[w.id] - self.done.get(w.id, 0.0)

    def after_cycle(self, sched, now, submitted):
        for wid, r in sched.state.running.items():
            if r.kill_at is not None and (wid, r.start_time) not in self.counted:
                self.counted.add((wid, r.start_time))  # preempted now: what it ran is kept
                self.done[wid] = self.done.get(wid, 0.0) + now - r.start_time
        if self.said is None and now >= self.at:
            self.said = rollout(sched.state, self.policy, now, self.runtime)
            self.waiting = {wid for wid in sched.state.pending if wid not in self.done}

    def started(self, wid, now):
        pass

    def finished(self, w, run_s):
        pass


@pytest.mark.parametrize("policy", [BACKFILL, replace(GPUHUB, aging_after=None), GPUHUB])
def test_the_rollout_says_when_the_policy_starts_each_waiting_job_if_nothing_more_comes(policy):
    """A replay of a trace up to a busy moment, with every job's run known:
    at its last submission, the rollout gives every job still waiting for
    its first start the start the replay then gives it, with the reclaims,
    the order moving with what each team runs and the preempted jobs
    resuming that come after. With aging, the rollout wakes when a job ages,
    as the service's timer does, and the replay only at its next event, so
    there most starts agree."""
    from gpuspawner.sim.cluster import parse_cluster
    from gpuspawner.sim.simulate import simulate
    from gpuspawner.sim.trace import generate_philly_trace

    trace = generate_philly_trace(120, teams=["vision", "nlp", "speech"], capacity_gpus=32,
                                  load=6.0, seed=4, time_limit_factor=(1.0, 1.0))
    cluster = parse_cluster({
        "pools": [{"name": "a100", "nodes": 4, "gpus_per_node": 8}],
        "teams": [{"name": "vision", "quota": {"a100": {"nominal": 16}}},
                  {"name": "nlp", "quota": {"a100": {"nominal": 8}}},
                  {"name": "speech", "quota": {"a100": {"nominal": 8}}}]})
    hook = RolloutAt(trace[-1].submit_time_s, policy, {j.job_id: j.duration_s for j in trace})
    result = simulate(trace, cluster, policy, restart_cost_s=0.0, estimates=hook)
    first = {r.job_id: r.first_start for r in result.records}
    said = {wid: t for wid, t in hook.said.items() if wid in hook.waiting}
    assert len(hook.waiting) >= 30 and said.keys() == hook.waiting
    agree = sum(1 for wid, t in said.items() if t == pytest.approx(first[wid]))
    if policy.aging_after is None:
        assert agree == len(said), {w: (t, first[w]) for w, t in said.items()}
    else:
        assert agree >= 0.8 * len(said)
    assert (result.metrics["preemptions"] > 0) == (policy is not BACKFILL)


def test_the_forecast_gives_the_rollouts_start_where_it_finds_one():
    # b borrows all 4 GPUs for 10 h; a (nominal 4) waits with two jobs of
    # 2 h. The plan reclaims for a1 only; the policy reclaims, a1 and a2
    # start on the freed GPUs together.
    s = run([node("n1")], [team("a", nominal=4), team("b", nominal=0)],
            [job("r", "b", gpus=4, limit=10 * H)],
            [job("a1", "a", gpus=2, t=5, limit=2 * H), job("a2", "a", gpus=2, t=6, limit=2 * H)],
            10, policy=GPUHUB)
    reclaimed = 5 + GPUHUB.preemption_delay + GPUHUB.default_grace_period
    got = forecast(s.state, s.policy, 10)
    assert {w: (e.start, e.basis) for w, e in got.items()} == {
        "a1": (reclaimed, "rollout"), "a2": (reclaimed, "rollout")}
    assert not s.state.running["r"].kill_at  # the state itself was not touched


def test_a_long_queue_and_an_unknown_end_keep_the_plans_answer():
    s = run([node("n1")], [team("a")], [job("nb", gpus=4, limit=None, kind=NOTEBOOK)],
            [job("w", gpus=1, t=5)], 10)
    e = forecast(s.state, s.policy, 10)["w"]   # nothing ever frees: the rollout starts nothing
    assert e.start is None and e.basis == "unknown"
    s = run([node("n1")], [team("a")], [job("r", gpus=4)],
            [job(f"w{i}", gpus=4, t=i + 1) for i in range(3)], 10)
    assert {w: e.basis for w, e in forecast(s.state, s.policy, 10).items()} == \
        {"w0": "rollout", "w1": "rollout", "w2": "rollout"}
    assert {w: e.basis for w, e in forecast(s.state, s.policy, 10, rollout_pending=2).items()} \
        == {"w0": "plan", "w1": "plan", "w2": "plan"}  # more pending than the rollout takes


# ---- learned run times -------------------------------------------------------
@pytest.mark.parametrize("samples,limit,elapsed,expected", [
    ([], H, 0, H),                                 # no history: the limit
    ([0.5] * MIN_SAMPLES, H, 0, H / 2),            # half of the limit, as before
    ([0.5] * (MIN_SAMPLES - 1), H, 0, H),          # too few samples yet
    ([0.2, 0.4, 0.6, 0.8, 1.0], H, 0.5 * H, 0.8 * H),  # conditioned on having run half
    ([0.2] * MIN_SAMPLES, H, 0.5 * H, 0.75 * H),   # ran longer than any: halfway to the limit
    ([], None, 0, None),                           # no limit, no history: unknown
])
def test_runtime_prediction(samples, limit, elapsed, expected):
    model = RuntimeModel()
    keys = workload_keys(job("x", user="u"))
    for fraction in samples:
        model.record(keys, fraction * H, H)
    assert model.predict(keys, limit, elapsed) == (pytest.approx(expected) if expected else None)


def test_runtime_history_without_a_limit_is_in_seconds_and_per_user_first():
    model = RuntimeModel()
    mine, theirs = workload_keys(job("x", user="me")), workload_keys(job("y", user="them"))
    for _ in range(MIN_SAMPLES):
        model.record(mine, 600, None)
        model.record(theirs, 6000, None)
    assert model.predict(mine, None) == 600
    # a new user: everyone's history (5 × 600 s, 5 × 6000 s), its median
    assert model.predict(workload_keys(job("z", user="new")), None) == 6000
    # longer than any of mine: everyone's runs that went past 700 s say 6000
    assert model.predict(mine, None, elapsed=700) == 6000
    # longer than anyone's: no honest figure
    assert model.predict(mine, None, elapsed=7000) is None


# ---- the range -----------------------------------------------------------------
def test_without_history_the_range_is_the_prior():
    r = Calibration().range(1, 0.0, 1140.0)  # planned 19 min (+1 min smoothing = 20)
    low, mid, high = PRIOR
    assert (r.earliest, r.expected, r.latest, r.samples) == \
        (1200 * low - 60, 1200 * mid - 60, 1200 * high - 60, 0)


def test_the_range_follows_how_earlier_estimates_turned_out():
    c = Calibration(coverage=0.8)
    # Planned an hour, real waits spread 1.5x-2.5x around 2x: the plan is optimistic.
    for i in range(100):
        c.record(1, H, (H + 60) * (1.5 + i / 100) - 60)
    r = c.range(1, 0.0, H)
    assert r.samples == 100
    assert r.expected == pytest.approx((H + 60) * 2.0 - 60, rel=0.01)
    assert r.earliest == pytest.approx((H + 60) * 1.6 - 60, rel=0.01)
    assert r.latest == pytest.approx((H + 60) * 2.4 - 60, rel=0.01)
    # Other magnitudes of wait are not judged by the hour-long ones' errors
    # unless nothing else is known: everything known is of that class.
    assert c.range(1, 0.0, 30.0).samples == 100


@pytest.mark.parametrize("earliest,expected,latest,text", [
    (0, 30, 50, "expected to start within a minute"),
    (300, 720, 1800, "expected to start in ~12 min (between 5 min and 30 min)"),
    (0, 5400, 3 * H, "expected to start in ~1.5 h (between now and 3 h)"),
    (86400, 2 * 86400, 4 * 86400, "expected to start in ~2 days (between 24 h and 4 days)"),
])
def test_the_estimate_in_words(earliest, expected, latest, text):
    from gpuspawner.scheduler.forecast.calibration import StartRange
    assert say(0.0, StartRange(expected, earliest, latest, 10)) == text
    assert say(0.0, None) == "start time unknown"
