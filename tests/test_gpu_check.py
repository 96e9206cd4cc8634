"""scripts/gpu_check.py's reading of MIG state and per-process memory, against the NVML fake;
the script itself runs on a real GPU host (docs/gpus.md)."""
from __future__ import annotations

import importlib.util
import os

import pytest
from nvml_fake import FakeGpu, FakeMig, FakeNvml, h200_7x1g, h200_mixed

from gpuspawner.inventory.probe import DeviceMemory, mig_lines, process_memory

MIB = 1024 * 1024
_spec = importlib.util.spec_from_file_location(
    "gpu_check", os.path.join(os.path.dirname(__file__), "..", "scripts", "gpu_check.py"))
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


@pytest.mark.parametrize("gpus, lines", [
    pytest.param([FakeGpu()], ["GPU 0: MIG not supported"], id="NotSupported"),
    pytest.param([FakeGpu(mig_mode=(0, 0))], ["GPU 0: MIG disabled"], id="off"),
    pytest.param([FakeGpu(mig_mode=(0, 1))],
                 ["GPU 0: MIG disabled, pending enabled (after a GPU reset)"], id="pending enable"),
    pytest.param([FakeGpu(mig_mode=(1, 1), migs=h200_mixed()[1:3])], [
        "GPU 0: MIG enabled",
        f"  MIG device 0: {h200_mixed()[1].uuid} gi=3 ci=0 slices=2g/2c memory=35840 MiB "
        f"(35840 MB in attributes)",
        f"  MIG device 1: {h200_mixed()[2].uuid} gi=9 ci=0 slices=1g/1c memory=17920 MiB "
        f"(17920 MB in attributes)"], id="mixed"),
    pytest.param([FakeGpu(mig_mode=(1, 1)), FakeGpu()],
                 ["GPU 0: MIG enabled", "  no MIG devices (none created)",
                  "GPU 1: MIG not supported"], id="enabled, none created"),
])
def test_mig_lines(gpus, lines):
    fake = FakeNvml(gpus)
    assert mig_lines(fake) == lines
    assert fake.calls[-1] == "nvmlShutdown"
    assert not [c for c in fake.calls if "Set" in c]      # reads only


def test_process_memory_on_a_whole_gpu_and_on_a_mig_device():
    migs = h200_7x1g()
    migs[3].processes = [(4242, 700 * MIB), (99, 1 * MIB)]
    fake = FakeNvml([FakeGpu(processes=[(4242, 600 * MIB)]), FakeGpu(mig_mode=(1, 1), migs=migs)])
    assert process_memory(fake, 4242) == [
        DeviceMemory("GPU 0", "GPU-fake-0", 600 * MIB),
        DeviceMemory("GPU 1 MIG gi=10 ci=0", migs[3].uuid, 700 * MIB)]
    assert process_memory(fake, 7) == []


@pytest.mark.parametrize("found, ok, words", [
    ([DeviceMemory("GPU 0", "GPU-x", 1024 * MIB)], True, ["1024 MiB ok", "GPU 0 GPU-x: 1024 MiB"]),
    ([DeviceMemory("GPU 0", "GPU-x", 100 * MIB)], False, ["100 MiB TOO LITTLE"]),
    ([DeviceMemory("GPU 0", "GPU-x", None)], None, ["does not say"]),
    ([], None, ["lists no process 12", "not checked"]),
])
def test_memory_verdict(found, ok, words):
    got, text = gpu_check.memory_verdict(found, 12, 512)
    assert got is ok
    for w in words:
        assert w in text


@pytest.mark.parametrize("nvml, cuda, same", [
    ("MIG-6a2f1b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b", "GPU-6a2f1b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b", True),
    ("GPU-58581805-1d95-ff45-0dae-2fbbf97f84e6", "GPU-58581805-1d95-ff45-0dae-2fbbf97f84e6", True),
    ("MIG-6a2f1b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b", "GPU-58581805-1d95-ff45-0dae-2fbbf97f84e6", False),
])
def test_same_device(nvml, cuda, same):
    assert gpu_check.same_device(nvml, cuda) is same


def test_mig_fake_raises_not_supported_like_pynvml():
    import pynvml
    fake = FakeNvml([FakeGpu()])
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(0)
    # the fake's names are the real module's
    for name in ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                 "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetGpuInstanceId",
                 "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
                 "nvmlDeviceGetAttributes", "nvmlDeviceGetComputeRunningProcesses",
                 "NVML_DEVICE_MIG_ENABLE", "NVML_ERROR_NOT_FOUND"):
        assert hasattr(pynvml, name) and hasattr(fake, name), name
    assert (fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_ERROR_NOT_FOUND) == (
        pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_ERROR_NOT_FOUND)
    assert FakeNvml([FakeGpu(mig_mode=(1, 1), migs=[FakeMig(2, gi=5)])]
                    ).nvmlDeviceGetDeviceHandleFromMigDeviceHandle(("mig", 0, 2)) == 0
