"""MIG in the inventory: NVML's MIG calls (through the fake pynvml), declared MIG devices."""
from __future__ import annotations

import logging

import pytest
from nvml_fake import FakeGpu, FakeMig, FakeNvml, NVMLError_GpuIsLost, h200_7x1g, h200_mixed
from traitlets.config import Config

from gpuspawner.inventory import Inventory, InventoryError, declared_gpus, read_nvml
from gpuspawner.inventory.model import mig_profile
from gpuspawner.service.loop.launch import local_nodes

ON, OFF = 1, 0


def rows(gpus):
    return [(g.index, g.uuid[:4], g.pool, g.memory_mib, g.parent_index, g.gpu_instance,
             g.compute_instance) for g in gpus]


@pytest.mark.parametrize("gpu, expected", [
    pytest.param(FakeGpu(mig_mode=None), [(0, "GPU-", "h200", 143771, None, None, None)],
                 id="NotSupported: a GPU without MIG"),
    pytest.param(FakeGpu(mig_mode=(OFF, OFF)), [(0, "GPU-", "h200", 143771, None, None, None)],
                 id="MIG off"),
    pytest.param(FakeGpu(mig_mode=(ON, ON), migs=h200_7x1g()),
                 [(1 + n, "MIG-", "h200-mig-1g.18gb", 17920, 0, 7 + n, 0) for n in range(7)],
                 id="MIG on, 7x1g"),
    pytest.param(FakeGpu(mig_mode=(ON, ON), migs=h200_mixed()),
                 [(1, "MIG-", "h200-mig-3g.71gb", 72192, 0, 2, 0),
                  (2, "MIG-", "h200-mig-2g.35gb", 35840, 0, 3, 0),
                  (3, "MIG-", "h200-mig-1g.18gb", 17920, 0, 9, 0),
                  (4, "MIG-", "h200-mig-1g.18gb", 17920, 0, 10, 0)],
                 id="mixed 3g+2g+1g+1g"),
    pytest.param(FakeGpu(mig_mode=(ON, ON), migs=[FakeMig(4, gi=1, ci=2, gi_slices=3, ci_slices=1,
                                                          memory_mb=72192)]),
                 [(1, "MIG-", "h200-mig-1c.3g.71gb", 72192, 0, 1, 2)],
                 id="compute instance smaller than its GPU instance, slots 0-3 empty"),
    pytest.param(FakeGpu(mig_mode=(ON, ON), migs=[]), [], id="MIG on, no instances made"),
])
def test_mig_inventory(gpu, expected):
    """One GPU (NVML index 0) in each MIG state: the devices the hub schedules."""
    gpus = read_nvml(FakeNvml([gpu]))
    assert rows(gpus) == expected
    assert all(g.note == "" for g in gpus)


def test_mig_devices_are_numbered_after_the_gpus_and_keep_their_uuid():
    fake = FakeNvml([FakeGpu(mig_mode=(ON, ON), migs=h200_7x1g()[:2]), FakeGpu(mig_mode=None),
                     FakeGpu(mig_mode=(ON, ON), migs=h200_7x1g()[:1])])
    gpus = read_nvml(fake)
    assert [(g.index, g.parent_index, g.uuid) for g in gpus] == [
        (1, None, "GPU-fake-1"),                       # the whole GPU keeps its NVML index
        (3, 0, h200_7x1g()[0].uuid), (4, 0, h200_7x1g()[1].uuid), (5, 2, h200_7x1g()[0].uuid)]
    assert gpus[1].model == "NVIDIA H200 MIG 1g.18gb" and gpus[1].mig_profile == "1g.18gb"


@pytest.mark.parametrize("mode, uuid_prefix, note", [
    ((ON, OFF), "MIG-", "MIG mode of GPU 0 is enabled, pending disabled (after a GPU reset): "
                        "the current mode is used"),
    ((OFF, ON), "GPU-", "MIG mode of GPU 0 is disabled, pending enabled (after a GPU reset): "
                        "the current mode is used"),
])
def test_pending_mig_mode_uses_the_current_one_and_says_so(mode, uuid_prefix, note, caplog):
    with caplog.at_level(logging.WARNING):
        gpus = read_nvml(FakeNvml([FakeGpu(mig_mode=mode, migs=h200_7x1g()[:1])]))
    assert [g.uuid[:4] for g in gpus] == [uuid_prefix]
    assert gpus[0].note == note and gpus[0].healthy
    assert note in caplog.text


def test_mig_devices_share_their_gpus_health():
    gpus = read_nvml(FakeNvml([FakeGpu(mig_mode=(ON, ON), migs=h200_7x1g()[:2], ecc_uncorrected=1)]))
    assert [(g.healthy, g.health_reason) for g in gpus] == [(False, "uncorrected ECC errors")] * 2


def test_a_broken_mig_device_names_the_gpu_and_slot():
    gpu = FakeGpu(mig_mode=(ON, ON), migs=h200_7x1g(),
                  raises={"nvmlDeviceGetMigDeviceHandleByIndex": NVMLError_GpuIsLost()})
    with pytest.raises(InventoryError, match=r"MIG device 0 of GPU 0 failed: GPU is lost"):
        read_nvml(FakeNvml([gpu]))


def test_the_inventory_only_reads_mig_state():
    fake = FakeNvml([FakeGpu(mig_mode=(ON, OFF), migs=h200_mixed())])
    read_nvml(fake)
    assert not [c for c in fake.calls if "Set" in c or "Create" in c or "Destroy" in c]


@pytest.mark.parametrize("g, c, mb, name", [
    (1, 1, 17920, "1g.18gb"),      # H200
    (7, 7, 143616, "7g.141gb"),    # H200, the whole GPU
    (1, 1, 4864, "1g.5gb"),        # A100 40GB
    (3, 3, 19968, "3g.20gb"),      # A100 40GB
    (2, 2, 9984, "2g.10gb"),       # A100 40GB
    (1, 1, 9856, "1g.10gb"),       # H100 80GB
    (3, 1, 40192, "1c.3g.40gb"),   # one compute slice of a 3g A100 80GB instance
    (1, 0, 17920, "1g.18gb"),      # an old driver that leaves computeInstanceSliceCount 0
])
def test_mig_profile_names_as_nvidia_smi(g, c, mb, name):
    assert mig_profile(g, c, mb) == name


def test_pool_override_keeps_mig_profiles_apart():
    inv = Inventory(config=Config({"Inventory": {"pool": "training"}}))
    _, gpus = inv.discover(FakeNvml([FakeGpu(), FakeGpu(mig_mode=(ON, ON), migs=h200_mixed()[1:3])]))
    assert [g.pool for g in gpus] == ["training", "training-mig-2g.35gb", "training-mig-1g.18gb"]


# --- declared MIG devices -----------------------------------------------------------------------

MIG_UUIDS = ["MIG-6a2f1b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b", "MIG-7b3a2c4d-5e6f-5a71-8b8c-0d1e2f3a4b5c"]


def test_declared_mig_devices():
    gpus = declared_gpus([
        {"model": "NVIDIA L4", "count": 1, "memory_mib": 23034},
        {"model": "NVIDIA H200", "count": 2, "memory_mib": 17920, "mig_profile": "1g.18gb",
         "parent_index": 1, "gpu_instances": [[7, 0], [8, 0]], "uuids": MIG_UUIDS},
        {"model": "NVIDIA H200", "count": 1, "memory_mib": 72192, "mig_profile": "3g.71gb",
         "parent_index": 1, "pool": "big-slices"},
    ])
    assert rows(gpus) == [(0, "GPU-", "l4", 23034, None, None, None),
                          (1, "MIG-", "h200-mig-1g.18gb", 17920, 1, 7, 0),
                          (2, "MIG-", "h200-mig-1g.18gb", 17920, 1, 8, 0),
                          (3, "MIG-", "big-slices", 72192, 1, None, None)]
    assert [g.uuid for g in gpus[1:3]] == MIG_UUIDS and gpus[3].uuid == "MIG-declared-3"
    assert [g.is_mig for g in gpus] == [False, True, True, True]


MIG = {"model": "NVIDIA H200", "count": 1, "memory_mib": 17920, "mig_profile": "1g.18gb",
       "parent_index": 0}


@pytest.mark.parametrize("entry, fragments", [
    ({**MIG, "mig_profile": "1g"}, ["'mig_profile'", "like '1g.18gb'", "'1g'"]),
    ({**MIG, "mig_profile": 1}, ["'mig_profile'"]),
    ({k: v for k, v in MIG.items() if k != "parent_index"}, ["'parent_index'", "None"]),
    ({**MIG, "parent_index": -1}, ["'parent_index'", "-1"]),
    ({k: v for k, v in MIG.items() if k != "mig_profile"}, ["'mig_profile'"]),
    ({**MIG, "gpu_instances": [[7]]}, ["'gpu_instances'", "1 [GPU instance id"]),
    ({**MIG, "gpu_instances": [[7, 0], [8, 0]]}, ["'gpu_instances'"]),
    ({**MIG, "uuids": ["GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f"]}, ["MIG-... UUIDs"]),
])
def test_declared_mig_validation(entry, fragments):
    with pytest.raises(InventoryError) as info:
        declared_gpus([entry])
    for fragment in fragments:
        assert fragment in str(info.value)


def test_each_mig_profile_is_a_node_of_its_own_named_by_mig_uuids():
    """What the local backend schedules and launches on: one node per pool."""
    gpus = read_nvml(FakeNvml([FakeGpu(), FakeGpu(mig_mode=(ON, ON), migs=h200_mixed())]))
    nodes = {ln.node.pool: (ln.node.name, ln.node.gpus, ln.devices, [u[:4] for u in ln.uuids])
             for ln in local_nodes(gpus, "host")}
    assert nodes == {"h200": ("host/h200", 1, [0], ["GPU-"]),
                     "h200-mig-1g.18gb": ("host/h200-mig-1g.18gb", 2, [4, 5], ["MIG-", "MIG-"]),
                     "h200-mig-2g.35gb": ("host/h200-mig-2g.35gb", 1, [3], ["MIG-"]),
                     "h200-mig-3g.71gb": ("host/h200-mig-3g.71gb", 1, [2], ["MIG-"])}
