"""The memory watch of shared GPUs: warned, then stopped, with the figures in the reason."""
import pytest

from gpuspawner.inventory.processes import read_processes
from gpuspawner.isolation.share_memory import (RECOVERED, STOP, WARN, GpuMemory, MemoryWatch,
                                               Share, Unaccounted, judge_gpu, share_key,
                                               share_label)
from tests.nvml_fake import MIB, FakeGpu, FakeNvml

H200_MIB = 143771
QUARTER = H200_MIB // 4          # 35942 MiB = 35.1 GiB
LIMIT = 36096                    # 35.25 GiB, a quarter of the 141 GiB users are told of
GIB = 1024


def share(wid="nb-a", pids=(101,), limit=LIMIT, attempt=1, label="1/4 of an H200"):
    return Share(wid, attempt, limit, None if pids is None else frozenset(pids), label)


def gpu(processes, used=None, total=H200_MIB):
    if used is None and processes is not None:
        used = sum(m or 0 for m in processes.values())
    return GpuMemory("GPU-0", total, used, processes)


def kinds(j):
    return [(a.kind, a.workload_id) for a in j.actions]


@pytest.mark.parametrize("mib, prior, now, expect, stopping", [
    # at the limit is within it
    (LIMIT, None, 0, [], None),
    # first time above: warned, the time kept
    (LIMIT + 1, None, 100, [WARN], False),
    # still above inside the grace: nothing new
    (LIMIT + 1, {"over_since": 100, "stopping": False}, 129, [], False),
    # still above at the end of the grace: stopped
    (LIMIT + 1, {"over_since": 100, "stopping": False}, 130, [STOP], True),
    # back under after a warning: told, the warning forgotten
    (LIMIT - 1, {"over_since": 100, "stopping": False}, 110, [RECOVERED], None),
    # above the 1.1 x ceiling: stopped at once, no warning first
    (int(LIMIT * 1.1) + 1, None, 0, [STOP], True),
    # a stop is given once
    (LIMIT * 2, {"over_since": 0, "stopping": True}, 500, [], True),
])
def test_a_share_above_its_memory_is_warned_then_stopped(mib, prior, now, expect, stopping):
    state = {} if prior is None else {"nb-a/1": prior}
    j = judge_gpu([share()], gpu({101: mib}), state, now)
    assert [a.kind for a in j.actions] == expect
    assert j.state.get("nb-a/1", {}).get("stopping") == stopping
    assert j.used_mib == {"nb-a/1": mib}


def test_the_reasons_name_the_figures():
    over = 41.2 * GIB
    warned = judge_gpu([share()], gpu({101: int(over)}), {}, 0)
    assert warned.actions[0].reason == (
        "GPU memory 41.2 GiB above this share's 35.2 GiB (1/4 of an H200), past its ceiling "
        "of 38.8 GiB; stopping")
    a = judge_gpu([share()], gpu({101: LIMIT + 512}), {}, 0).actions[0]
    assert a.reason == ("GPU memory 35.8 GiB above this share's 35.2 GiB (1/4 of an H200); it "
                        "is stopped if still above in 30 s (free GPU memory to keep it)")
    j = judge_gpu([share()], gpu({101: LIMIT + 512}), {"nb-a/1": {"over_since": 0}}, 31)
    assert j.actions[0].reason == (
        "GPU memory 35.8 GiB above this share's 35.2 GiB (1/4 of an H200) for 31 s, past the "
        "30 s grace after the warning; stopping")
    assert j.actions[0].numbers["over_s"] == 31


def test_a_share_above_its_limit_on_a_full_gpu_is_stopped_at_once():
    # Three shares use their quarter, the fourth a little more: the next allocation of
    # any of them would fail, so there is no grace.
    shares = [share(f"nb-{n}", pids=(n,)) for n in (1, 2, 3, 4)]
    procs = {1: 34000, 2: 34000, 3: 36500, 4: 36000}
    j = judge_gpu(shares, gpu(procs), {}, 0, MemoryWatch(gpu_full_fraction=0.97))
    assert kinds(j) == [(STOP, "nb-3")]
    assert "while the GPU is full (137.2 GiB of 140.4 GiB used)" in j.actions[0].reason
    # The same use with room left on the GPU: a warning.
    j = judge_gpu(shares, gpu(procs), {}, 0, MemoryWatch(gpu_full_fraction=0.99))
    assert kinds(j) == [(WARN, "nb-3")]


def test_each_share_is_judged_by_its_own_processes():
    # nb-a's two processes together are above its share; nb-b's one is within.
    shares = [share("nb-a", pids=(1, 2)), share("nb-b", pids=(3,))]
    j = judge_gpu(shares, gpu({1: 18500, 2: 18500, 3: 30000}), {}, 0)
    assert kinds(j) == [(WARN, "nb-a")]
    assert j.used_mib == {"nb-a/1": 37000, "nb-b/1": 30000}
    assert j.unaccounted == []


def test_a_process_of_no_share_is_reported_not_blamed():
    shares = [share("nb-a", pids=(1,))]
    j = judge_gpu(shares, gpu({1: 1000, 7: 90000, 8: 5000}), {}, 0, owners={8: "job-x/2"})
    assert j.actions == []
    assert j.unaccounted == [Unaccounted("GPU-0", 7, 90000, None),
                             Unaccounted("GPU-0", 8, 5000, "job-x/2")]


@pytest.mark.parametrize("reading, pids, why", [
    (None, (1,), "NVML cannot list this GPU's processes"),
    ({1: None}, (1,), "NVML does not report these processes' memory"),
    ({1: 90000}, None, "the attempt's processes cannot be found"),
])
def test_missing_figures_are_unknown_and_change_nothing(reading, pids, why):
    prior = {"nb-a/1": {"over_since": 0, "stopping": False}}
    j = judge_gpu([share(pids=pids)], gpu(reading, used=0), prior, 1000)
    assert j.actions == []
    assert j.unknown == {"nb-a/1": why}
    assert j.state == prior          # neither forgotten nor escalated on missing data


def test_a_known_part_is_enough_to_act_on():
    # One process's figure is missing; the other's alone is above the share.
    j = judge_gpu([share(pids=(1, 2))], gpu({1: None, 2: LIMIT + 10}), {}, 0)
    assert kinds(j) == [(WARN, "nb-a")]


def test_a_new_attempt_starts_afresh_and_gone_shares_are_dropped():
    state = {"nb-a/1": {"over_since": 0, "stopping": True}, "nb-b/1": {"over_since": 0}}
    j = judge_gpu([share(attempt=2)], gpu({101: LIMIT + 10}), state, 100)
    assert kinds(j) == [(WARN, "nb-a")]
    assert set(j.state) == {share_key("nb-a", 2)}


def test_a_process_that_ended_uses_nothing():
    # NVML no longer lists the share's process: it uses no GPU memory.
    j = judge_gpu([share(pids=(101,))], gpu({}), {"nb-a/1": {"over_since": 0}}, 5)
    assert kinds(j) == [(RECOVERED, "nb-a")]
    assert j.used_mib == {"nb-a/1": 0}


def test_passes_over_nvml_readings_warn_then_stop():
    # Read through the NVML seam every 5 s: nb-a goes above its quarter, and a process of
    # nb-b (another GPU's share) strays onto this GPU.
    nvml = FakeNvml([FakeGpu(processes=[(101, (LIMIT + 1024) * MIB), (202, 2048 * MIB)])])
    state, log = {}, []
    for now in range(0, 40, 5):
        reading = read_processes(["GPU-fake-0"], nvml=nvml)["GPU-fake-0"]
        j = judge_gpu([share("nb-a", pids=(101,))], reading, state, now, owners={202: "nb-b/1"})
        state = j.state
        log += [(now, a.kind, a.workload_id) for a in j.actions]
    assert log == [(0, WARN, "nb-a"), (30, STOP, "nb-a")]
    assert j.unaccounted == [Unaccounted("GPU-fake-0", 202, 2048, "nb-b/1")]
    assert j.used_mib == {"nb-a/1": LIMIT + 1024}


@pytest.mark.parametrize("limit, total, model, label", [
    (LIMIT, 144384, "NVIDIA H200", "1/4 of an H200"),
    (QUARTER, H200_MIB, "NVIDIA H200", "1/4 of an H200"),
    (40960, 81920, "NVIDIA A100-SXM4-80GB", "1/2 of an A100-SXM4-80GB"),
    (15000, 81920, "NVIDIA B200", "18% of a B200"),
])
def test_share_labels(limit, total, model, label):
    assert share_label(limit, total, model) == label


@pytest.mark.parametrize("kwargs", [{"grace_s": -1}, {"hard_factor": 0.9},
                                    {"gpu_full_fraction": 0}, {"gpu_full_fraction": 1.5}])
def test_bad_watch_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        MemoryWatch(**kwargs)
