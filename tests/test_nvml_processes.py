"""Per-process GPU memory and SM utilisation read through NVML (the fake of tests/nvml_fake.py)."""
import pytest

from gpuspawner.inventory.processes import read_processes
from tests.nvml_fake import (MIB, FakeGpu, FakeMig, FakeNvml, NVMLError, NVMLError_DriverNotLoaded,
                             NVMLError_GpuIsLost, NVMLError_LibraryNotFound,
                             NVMLError_NoPermission, NVMLError_NotSupported)


def test_memory_and_utilisation_per_process():
    g = FakeGpu(used_mib=50000, processes=[(101, 30000 * MIB), (102, 20000 * MIB), (103, None),
                                           (104, 2 ** 64 - 1)],
                process_util=[(101, 1_000, 80, 10), (101, 2_000, 40, 5), (102, 1_500, 0, 0)])
    r = read_processes(["GPU-fake-0"], nvml=FakeNvml([g]))["GPU-fake-0"]
    assert (r.total_mib, r.used_mib) == (143771, 50000)
    # None: NVML has no figure for it (pynvml's None, or an older pynvml's raw NOT_AVAILABLE)
    assert r.memory_mib == {101: 30000, 102: 20000, 103: None, 104: None}
    assert r.sm_pct == {101: 80, 102: 0}        # a process's busiest sample in the window
    assert (r.last_seen_us, r.errors) == (2_000, [])


def test_only_samples_since_the_last_reading_count():
    g = FakeGpu(processes=[(101, MIB)], process_util=[(101, 1_000, 90, 0), (101, 5_000, 3, 0)])
    nvml = FakeNvml([g])
    r = read_processes(["GPU-fake-0"], {"GPU-fake-0": 1_000}, nvml=nvml)["GPU-fake-0"]
    assert (r.sm_pct, r.last_seen_us) == ({101: 3}, 5_000)
    # Nothing newer: NVML says NotFound, which is "no process was busy", not unknown.
    r = read_processes(["GPU-fake-0"], {"GPU-fake-0": 5_000}, nvml=nvml)["GPU-fake-0"]
    assert (r.sm_pct, r.last_seen_us, r.errors) == ({}, 5_000, [])


def test_pynvmls_success_error_is_no_samples_too():
    # pynvml raises NVMLError(NVML_SUCCESS) where the sizing call finds nothing to size.
    g = FakeGpu(raises={"nvmlDeviceGetProcessUtilization": NVMLError(0)})
    r = read_processes(["GPU-fake-0"], {"GPU-fake-0": 9}, nvml=FakeNvml([g]))["GPU-fake-0"]
    assert (r.sm_pct, r.last_seen_us, r.errors) == ({}, 9, [])


def test_a_sample_without_a_figure_is_skipped():
    g = FakeGpu(process_util=[(101, 1_000, 0xFFFFFFFF, 0), (102, 1_000, 7, 0)])
    r = read_processes(["GPU-fake-0"], nvml=FakeNvml([g]))["GPU-fake-0"]
    assert r.sm_pct == {102: 7}


def test_a_mig_device_by_its_uuid():
    mig = FakeMig(slot=0, gi=7, processes=[(201, 5000 * MIB)])
    nvml = FakeNvml([FakeGpu(mig_mode=(1, 1), migs=[mig])])
    r = read_processes([mig.uuid], nvml=nvml)[mig.uuid]
    assert r.memory_mib == {201: 5000}
    # NVML gives no per-process utilisation on MIG devices: unknown, not idle.
    assert r.sm_pct is None and r.errors == ["process utilisation: Not Supported"]


@pytest.mark.parametrize("where, exc, memory, sm, error", [
    ("nvmlDeviceGetComputeRunningProcesses", NVMLError_NoPermission(), None, {},
     "processes: Insufficient Permissions"),
    ("nvmlDeviceGetProcessUtilization", NVMLError_NotSupported(), {101: 1}, None,
     "process utilisation: Not Supported"),
    ("nvmlDeviceGetHandleByUUID", NVMLError_GpuIsLost(), None, None, "handle: GPU is lost"),
])
def test_a_refused_call_leaves_that_figure_unknown(where, exc, memory, sm, error):
    g = FakeGpu(processes=[(101, MIB)], raises={where: exc})
    r = read_processes(["GPU-fake-0"], nvml=FakeNvml([g]))["GPU-fake-0"]
    assert (r.memory_mib, r.sm_pct, r.errors) == (memory, sm, [error])


def test_an_unknown_gpu_is_unknown_and_the_others_are_read():
    nvml = FakeNvml([FakeGpu(processes=[(1, MIB)])])
    out = read_processes(["GPU-gone", "GPU-fake-0"], nvml=nvml)
    assert out["GPU-gone"].memory_mib is None and out["GPU-gone"].errors == ["handle: Not Found"]
    assert out["GPU-fake-0"].memory_mib == {1: 1}
    assert nvml.calls[-1] == "nvmlShutdown"


@pytest.mark.parametrize("exc", [NVMLError_LibraryNotFound(), NVMLError_DriverNotLoaded()])
def test_no_nvml_means_every_gpu_unknown(exc):
    out = read_processes(["GPU-a", "GPU-b"], {"GPU-a": 7}, nvml=FakeNvml(raises={"nvmlInit": exc}))
    assert {u: (r.memory_mib, r.sm_pct, r.last_seen_us) for u, r in out.items()} == {
        "GPU-a": (None, None, 7), "GPU-b": (None, None, 0)}
    assert "NVML is not available" in out["GPU-a"].errors[0]
