"""The device cgroup rules of MIG devices: their GPU's node and their own capability nodes."""
from __future__ import annotations

import pytest

from gpuspawner.inventory import declared_gpus
from gpuspawner.isolation import gpu_rules as rules
from gpuspawner.isolation.cgroups import GpuEnforcement

# As the driver writes /proc/driver/nvidia-caps/mig-minors (an excerpt, two GPUs).
MIG_MINORS = """config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi1/ci1/access 14
gpu0/gi7/access 66
gpu0/gi7/ci0/access 67
gpu0/gi8/access 75
gpu0/gi8/ci0/access 76
gpu1/gi7/access 201
gpu1/gi7/ci0/access 202
"""
PROC_DEVICES = """Character devices:
  1 mem
195 nvidia
234 nvidia-uvm
237 nvidia-caps

Block devices:
237 nvidia-caps-imaginary
"""
TABLE = rules.parse_mig_minors(MIG_MINORS)
EVERY = [(0, 1, 0), (0, 1, 1), (0, 7, 0), (0, 8, 0), (1, 7, 0)]


def test_tables_are_read():
    assert TABLE["config"] == 1 and TABLE["gpu0/gi7/ci0/access"] == 67 and len(TABLE) == 11
    assert rules.char_major(PROC_DEVICES, "nvidia-caps") == 237
    assert rules.char_major(PROC_DEVICES, "nvidia-frontend") is None
    assert rules.parse_mig_minors("") == {} and rules.char_major("", "nvidia-caps") is None


@pytest.mark.parametrize("given, allowed", [
    pytest.param([(0, 7, 0)], {66, 67}, id="one 1g slice"),
    pytest.param([(0, 1, 1)], {12, 14}, id="a compute instance: its GPU instance too"),
    pytest.param([(0, 1, 0), (0, 1, 1)], {12, 13, 14}, id="both compute instances of one GI"),
    pytest.param([(0, 8, 0), (1, 7, 0)], {75, 76, 201, 202}, id="slices of two GPUs"),
    pytest.param([], set(), id="a whole GPU or none: no slice"),
])
def test_mig_cap_rules_deny_config_and_every_other_slice(given, allowed):
    lines = rules.mig_cap_deny_rules(237, TABLE, EVERY, given)
    denied = {int(line.split(":")[1].split()[0]) for line in lines}
    everything = {1, 12, 13, 14, 66, 67, 75, 76, 201, 202}
    assert denied == everything - allowed
    assert all(line.startswith("c 237:") and line.endswith(" rwm") for line in lines)
    assert 2 not in denied    # monitor (what nvidia-smi reads) stays as it was


def test_a_slice_the_table_does_not_list_is_an_error():
    with pytest.raises(ValueError, match="gpu0/gi9/access"):
        rules.mig_cap_deny_rules(237, TABLE, EVERY + [(0, 9, 0)], [])


def enforcement(gpu_mode, caps_major=237, table=TABLE):
    e = GpuEnforcement()
    e.gpu_mode, e.caps_major, e.mig_minors = gpu_mode, caps_major, dict(table)
    return e


UUIDS = [f"MIG-00000000-0000-4000-8000-00000000000{n}" for n in range(3)]
HOST = [  # GPU 0: three slices; GPU 1: a whole GPU
    {"model": "NVIDIA H200", "count": 2, "memory_mib": 17920, "mig_profile": "1g.18gb",
     "parent_index": 0, "gpu_instances": [[7, 0], [8, 0]], "uuids": UUIDS[:2]},
    {"model": "NVIDIA H200", "count": 1, "memory_mib": 72192, "mig_profile": "1c.3g.71gb",
     "parent_index": 0, "gpu_instances": [[1, 1]], "uuids": UUIDS[2:]},
    {"model": "NVIDIA H200", "count": 1, "memory_mib": 143771},
]


def denied(lines):
    return {(int(a), int(b)) for a, b in (line.split()[1].split(":") for line in lines)}


@pytest.mark.parametrize("placed, nvidia, caps", [
    pytest.param([0], {0}, {1, 75, 76, 12, 14}, id="slice gi7 of GPU 0"),
    pytest.param([2], {0}, {1, 66, 67, 75, 76}, id="the 1c.3g slice"),
    pytest.param([0, 1], {0}, {1, 12, 14}, id="two slices of GPU 0"),
    pytest.param([3], {3}, {1, 66, 67, 75, 76, 12, 14}, id="the whole GPU (index 3)"),
    pytest.param([], set(), {1, 66, 67, 75, 76, 12, 14}, id="no GPU"),
])
def test_placement_rules(placed, nvidia, caps):
    gpus = declared_gpus(HOST)
    e = enforcement(rules.CGROUP_V1)
    e.know_devices(gpus)
    lines = e.device_rules(placed, [gpus[i].uuid for i in placed])
    assert {m for major, m in denied(lines) if major == 195} == set(range(254)) - nvidia
    assert {m for major, m in denied(lines) if major == 237} == caps
    assert e.notes == []


def test_without_capability_nodes_the_rules_are_per_gpu_and_it_says_so():
    gpus = declared_gpus(HOST)
    e = enforcement(rules.CGROUP_V1, caps_major=None)
    e.know_devices(gpus)
    lines = e.device_rules([0], [gpus[0].uuid])
    assert {major for major, _ in denied(lines)} == {195}
    assert len(lines) == 253                         # GPU 0's node stays allowed
    assert "capability nodes are not known" in e.notes[0] and UUIDS[0] in e.notes[0]


def test_device_groups_give_a_gpus_group_once_and_say_slices_are_not_separated():
    gpus = declared_gpus(HOST)
    e = enforcement(rules.DEVICE_GROUPS)
    e.know_devices(gpus)
    assert e.device_minor(0, UUIDS[0]) == e.device_minor(1, UUIDS[1]) == 0
    assert "device groups guard whole GPUs only" in e.notes[0]
