"""The pure part of GPU enforcement and limits: which device nodes a
placement may open, which mode a host gets, and how limits resolve."""
from __future__ import annotations

import pytest

from gpuspawner.isolation import gpu_rules as r


@pytest.mark.parametrize("name, kind", [
    ("nvidia0", ("gpu", 0)),
    ("nvidia7", ("gpu", 7)),
    ("nvidia253", ("gpu", 253)),
    ("nvidiactl", ("control", None)),
    ("nvidia-uvm", ("control", None)),
    ("nvidia-uvm-tools", ("control", None)),
    ("nvidia-modeset", ("control", None)),
    ("nvidia-caps", ("control", None)),
    ("nvidia-caps/nvidia-cap1", ("control", None)),
    ("nvidia254", None),   # no per-GPU node has the modeset/ctl minors
    ("nvidia", None),
    ("null", None),
    ("nvme0", None),
])
def test_device_nodes_are_control_or_per_gpu(name, kind):
    assert r.classify_node(name) == kind


U0 = "GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f"
U3 = "GPU-d9e8f7a6-b5c4-4d3e-a2f1-e0d9c8b7a6f5"


@pytest.mark.parametrize("indices, uuids, cuda, indices_var", [
    ((3,), (U3,), U3, "3"),                    # by UUID: CUDA's device 0 under the cgroup
    ((0, 3), (U0, U3), f"{U0},{U3}", "0,3"),
    ((3,), (), "3", "3"),                      # unknown (declared, Slurm): by index
    ((0, 3), (U0, "GPU-declared-3"), "0,3", "0,3"),  # one not a CUDA UUID: all by index
    ((0, 3), (U0,), "0,3", "0,3"),
    ((), (), "", ""),                           # no GPUs: none visible, not all
])
def test_a_process_is_shown_its_gpus_by_uuid_where_known(indices, uuids, cuda, indices_var):
    env = r.visible_devices(indices, uuids)
    assert env == {"CUDA_VISIBLE_DEVICES": cuda, "NVIDIA_VISIBLE_DEVICES": cuda or "none",
                   "GPUHUB_GPU_INDICES": indices_var}


@pytest.mark.parametrize("placed, allowed", [
    ((), set()),
    ((1,), {1}),
    ((0, 3), {0, 3}),
])
def test_a_placement_denies_every_per_gpu_minor_but_its_own(placed, allowed):
    rules = r.device_deny_rules(placed)
    denied = {int(rule.split(":")[1].split()[0]) for rule in rules}
    assert denied == set(range(254)) - allowed
    assert all(rule.startswith("c 195:") and rule.endswith(" rwm") for rule in rules)
    # The control nodes (nvidiactl 195:255, nvidia-modeset 195:254) stay open.
    assert "c 195:255 rwm" not in rules and "c 195:254 rwm" not in rules


def test_a_minor_that_is_no_gpu_is_refused():
    with pytest.raises(ValueError, match="255"):
        r.device_deny_rules([255])


@pytest.mark.parametrize("wanted, devices_v1, groups, mode", [
    ("auto", True, True, r.CGROUP_V1),
    ("auto", True, False, r.CGROUP_V1),
    ("auto", False, True, r.DEVICE_GROUPS),
    ("auto", False, False, r.ADVISORY),
    ("cgroup", True, False, r.CGROUP_V1),
    ("groups", True, True, r.DEVICE_GROUPS),
    ("off", True, True, r.ADVISORY),
])
def test_the_mode_a_host_gets(wanted, devices_v1, groups, mode):
    assert r.choose_gpu_mode(wanted, devices_v1, groups) == mode


@pytest.mark.parametrize("wanted, devices_v1, groups, words", [
    ("cgroup", False, True, "cgroup v1 devices"),
    ("groups", True, False, "root, the GPU device nodes and users' accounts"),
])
def test_an_insisted_mode_the_host_lacks_is_an_error(wanted, devices_v1, groups, words):
    with pytest.raises(r.LimitError, match=words):
        r.choose_gpu_mode(wanted, devices_v1, groups)


@pytest.mark.parametrize("value, size", [
    ("512M", 512 << 20), ("16G", 16 << 30), ("1.5GiB", 3 << 29), ("64k", 64 << 10),
    (4096, 4096), ("1T", 1 << 40),
])
def test_memory_sizes(value, size):
    assert r.parse_memory(value, "f") == size


@pytest.mark.parametrize("table, words", [
    ({"ml": {"memory": "16Q"}}, "GpuEnforcement.team_limits['ml'].memory: '16Q' is not a memory"),
    ({"ml": {"memory": 0}}, "team_limits['ml'].memory"),
    ({"ml": {"cpus": -1}}, "team_limits['ml'].cpus: -1 is not a positive number"),
    ({"ml": {"cpus": True}}, "team_limits['ml'].cpus"),
    ({"ml": {"ram": "1G"}}, "unknown key(s) ram"),
    ({"ml": "16G"}, "team_limits['ml'] must be a dict"),
])
def test_bad_limits_name_the_field(table, words):
    with pytest.raises(r.LimitError) as e:
        r.check_limits(table, "GpuEnforcement.team_limits")
    assert words in str(e.value)


def test_team_wins_over_pool_wins_over_default_key_by_key():
    by_team = r.check_limits({"ml": {"memory": "8G"}}, "t")
    by_pool = r.check_limits({"h100": {"memory": "64G", "cpus": 16}}, "p")
    default = r.Limits(1 << 30, 2.0)
    assert r.resolve_limits("ml", "h100", by_team, by_pool, default) == r.Limits(8 << 30, 16.0)
    assert r.resolve_limits("cv", "h100", by_team, by_pool, default) == r.Limits(64 << 30, 16.0)
    assert r.resolve_limits("ml", "a100", by_team, by_pool, default) == r.Limits(8 << 30, 2.0)
    assert r.resolve_limits("cv", "a100", by_team, by_pool) == r.Limits()


@pytest.mark.parametrize("cpus, quota", [(1, 100_000), (0.5, 50_000), (16, 1_600_000),
                                          (0.001, 1000)])
def test_cpu_quota_per_100ms_period(cpus, quota):
    assert r.cpu_quota_us(cpus) == quota


def test_default_limits_errors_name_the_option():
    with pytest.raises(r.LimitError, match=r"GpuEnforcement.default_limits.cpus: 'four'"):
        r.check_entry({"cpus": "four"}, "GpuEnforcement.default_limits")
    assert r.check_entry({}, "d") == r.Limits() and not r.Limits()
