"""gpuspawner.inventory: NVML (through a small fake pynvml), declared GPUs, the Inventory config."""
from __future__ import annotations

import logging
import sys

import pytest
from nvml_fake import (FakeGpu, FakeNvml, NVMLError, NVMLError_DriverNotLoaded, NVMLError_GpuIsLost,
                       NVMLError_LibraryNotFound, NVMLError_NoPermission, NVMLError_NotSupported)
from traitlets.config import Config

from gpuspawner.inventory import (Gpu, Inventory, InventoryError, NvmlUnavailable, declared_gpus,
                                  pool_name, read_nvml, sample_utilization)

HEALTH_CALLS = ("nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
                "nvmlDeviceGetTotalEccErrors")


def missing_library():
    return FakeNvml(raises={"nvmlInit": NVMLError_LibraryNotFound()})


# --- pool_name ----------------------------------------------------------------------------------

@pytest.mark.parametrize("model, pool", [
    ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("Quadro RTX 8000", "rtx-8000"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
    ("  nvidia  L4 ", "l4"),
    ("Fake GPU", "fake-gpu"),
    ("NVIDIA", "nvidia"),        # nothing but a brand word: keep it rather than return ""
    ("", "gpu"),
])
def test_pool_name(model, pool):
    assert pool_name(model) == pool


# --- read_nvml ----------------------------------------------------------------------------------

def test_read_nvml_lists_gpus_with_bytes_and_str_names():
    fake = FakeNvml([
        FakeGpu(name=b"NVIDIA H200", total_mib=143771, used_mib=1024, util=37),
        FakeGpu(name="NVIDIA A100-SXM4-80GB", total_mib=81920, used_mib=0, util=0),
    ])
    gpus = read_nvml(fake)
    assert gpus == [
        Gpu(index=0, uuid="GPU-fake-0", model="NVIDIA H200", memory_mib=143771, pool="h200",
            utilization_pct=37.0, memory_used_mib=1024),
        Gpu(index=1, uuid="GPU-fake-1", model="NVIDIA A100-SXM4-80GB", memory_mib=81920,
            pool="a100-sxm4-80gb", utilization_pct=0.0, memory_used_mib=0),
    ]
    assert all(g.healthy and g.health_reason == "" for g in gpus)
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown"
    assert set(fake.ecc_args) == {(1, 0)}     # uncorrected, volatile


def test_read_nvml_no_gpus():
    assert read_nvml(FakeNvml([])) == []


@pytest.mark.parametrize("sick, reason", [
    (dict(retired_pending=1), "retired pages pending, reset needed"),
    (dict(remapped=(0, 2, 0, 1)), "row remapping failed"),
    (dict(remapped=(0, 1, 1, 0)), "row remap pending"),
    (dict(ecc_uncorrected=3), "uncorrected ECC errors"),
    (dict(retired_pending=1, ecc_uncorrected=1),
     "retired pages pending, reset needed; uncorrected ECC errors"),
])
def test_health_condition_marks_that_gpu(sick, reason):
    fake = FakeNvml([FakeGpu(), FakeGpu(**sick), FakeGpu()])
    gpus = read_nvml(fake)
    assert [(g.healthy, g.health_reason) for g in gpus] == [(True, ""), (False, reason), (True, "")]


@pytest.mark.parametrize("fine", [
    dict(retired_pending=0),                  # NVML_FEATURE_DISABLED
    dict(remapped=(12, 0, 0, 0)),             # corrected rows were remapped: still fine
])
def test_harmless_health_values_stay_healthy(fine):
    assert read_nvml(FakeNvml([FakeGpu(**fine)]))[0].healthy


@pytest.mark.parametrize("error", [NVMLError_NotSupported, NVMLError_NoPermission, NVMLError_GpuIsLost])
@pytest.mark.parametrize("call", HEALTH_CALLS)
def test_unavailable_health_call_leaves_gpu_healthy(call, error):
    # The data says "sick", but the call cannot be made: the check is "not available".
    gpu = FakeGpu(retired_pending=1, remapped=(0, 1, 1, 1), ecc_uncorrected=5,
                  raises={c: error() for c in HEALTH_CALLS})
    g = read_nvml(FakeNvml([gpu]))[0]
    assert (g.healthy, g.health_reason) == (True, "")


def test_only_the_unsupported_check_is_skipped():
    gpu = FakeGpu(retired_pending=1, ecc_uncorrected=5,
                  raises={"nvmlDeviceGetRetiredPagesPendingStatus": NVMLError_NotSupported()})
    g = read_nvml(FakeNvml([gpu]))[0]
    assert (g.healthy, g.health_reason) == (False, "uncorrected ECC errors")


def test_unsupported_utilization_is_none():
    gpu = FakeGpu(raises={"nvmlDeviceGetUtilizationRates": NVMLError_NotSupported()})
    g = read_nvml(FakeNvml([gpu]))[0]
    assert g.utilization_pct is None and g.memory_used_mib == 0 and g.healthy


@pytest.mark.parametrize("where, exc, raised", [
    (None, None, None),
    ("nvmlDeviceGetCount", NVMLError(999), InventoryError),
    ("nvmlDeviceGetHandleByIndex", NVMLError_GpuIsLost(), InventoryError),
    ("nvmlDeviceGetName", NVMLError_GpuIsLost(), InventoryError),
    ("nvmlDeviceGetMemoryInfo", NVMLError_NoPermission(), InventoryError),
    ("nvmlDeviceGetUUID", RuntimeError("bug"), RuntimeError),       # not an NVML error: as is
])
def test_shutdown_always_called(where, exc, raised):
    fake = FakeNvml([FakeGpu(), FakeGpu()], raises={where: exc} if where else None)
    if raised is None:
        read_nvml(fake)
    else:
        with pytest.raises(raised):
            read_nvml(fake)
    assert fake.calls.count("nvmlInit") == 1 and fake.calls.count("nvmlShutdown") == 1
    assert fake.calls[-1] == "nvmlShutdown"


def test_error_names_gpu_and_call():
    fake = FakeNvml([FakeGpu(), FakeGpu(raises={"nvmlDeviceGetName": NVMLError_GpuIsLost()})])
    with pytest.raises(InventoryError, match=r"name of GPU 1 failed: GPU is lost") as info:
        read_nvml(fake)
    assert not isinstance(info.value, NvmlUnavailable)


def test_failing_shutdown_does_not_hide_the_result():
    fake = FakeNvml([FakeGpu()], raises={"nvmlShutdown": NVMLError(1)})
    assert len(read_nvml(fake)) == 1


def test_failed_init_is_not_shut_down():
    fake = missing_library()
    with pytest.raises(NvmlUnavailable):
        read_nvml(fake)
    assert fake.calls == ["nvmlInit"]


def _real_pynvml_errors():
    """A fake that raises pynvml's own error classes, as the real module does."""
    import pynvml  # nvidia-ml-py, a dependency
    fake = FakeNvml()
    fake.NVMLError = pynvml.NVMLError
    fake.NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    fake.raises = {"nvmlInit": pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)}
    return fake


class _BareLibraryError(FakeNvml):
    """An NVMLError carrying the value, with no NVMLError_LibraryNotFound class to match."""
    NVMLError_LibraryNotFound = None

    def __init__(self):
        super().__init__(raises={"nvmlInit": NVMLError(12)})


@pytest.mark.parametrize("make_fake", [
    missing_library,
    _BareLibraryError,
    _real_pynvml_errors,
    lambda: FakeNvml(raises={"nvmlDeviceGetCount": NVMLError_LibraryNotFound()}),
], ids=["LibraryNotFound class", "NVMLError(12)", "real pynvml classes", "after init"])
@pytest.mark.parametrize("reader", [read_nvml, sample_utilization])
def test_library_missing_is_nvml_unavailable(make_fake, reader):
    with pytest.raises(NvmlUnavailable, match=r"^NVML is not available: .*libnvidia-ml\.so\.1.*not found"):
        reader(make_fake())


@pytest.mark.parametrize("reader", [read_nvml, sample_utilization])
def test_driver_not_loaded_is_nvml_unavailable(reader):
    with pytest.raises(NvmlUnavailable, match=r"^NVML is not available: nvmlInit failed: Driver Not Loaded"):
        reader(FakeNvml(raises={"nvmlInit": NVMLError_DriverNotLoaded()}))


@pytest.mark.parametrize("reader", [read_nvml, sample_utilization])
def test_pynvml_not_importable_is_nvml_unavailable(monkeypatch, reader):
    monkeypatch.setitem(sys.modules, "pynvml", None)     # makes `import pynvml` fail
    with pytest.raises(NvmlUnavailable, match=r"^NVML is not available: the pynvml module"):
        reader()


# --- sample_utilization -------------------------------------------------------------------------

def test_sample_utilization():
    fake = FakeNvml([
        FakeGpu(util=90, used_mib=70000),
        FakeGpu(util=5, used_mib=10, raises={"nvmlDeviceGetUtilizationRates": NVMLError_NotSupported()}),
        FakeGpu(util=0, used_mib=0),
    ])
    assert sample_utilization(fake) == {0: (90.0, 70000), 2: (0.0, 0)}
    assert fake.calls[-1] == "nvmlShutdown"


# --- declared GPUs ------------------------------------------------------------------------------

def test_declared_gpus_numbered_across_entries():
    gpus = declared_gpus([
        {"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920, "pool": "a100"},
        {"model": "NVIDIA L4", "count": 1, "memory_mib": 23034},
    ])
    assert [(g.index, g.uuid, g.model, g.memory_mib, g.pool, g.healthy) for g in gpus] == [
        (0, "GPU-declared-0", "NVIDIA A100-SXM4-80GB", 81920, "a100", True),
        (1, "GPU-declared-1", "NVIDIA A100-SXM4-80GB", 81920, "a100", True),
        (2, "GPU-declared-2", "NVIDIA L4", 23034, "l4", True),
    ]
    assert declared_gpus([]) == []


def test_declared_gpus_may_name_their_cuda_uuids():
    uuids = ["GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f", "GPU-d9e8f7a6-b5c4-4d3e-a2f1-e0d9c8b7a6f5"]
    gpus = declared_gpus([{"model": "NVIDIA L4", "count": 2, "memory_mib": 23034,
                           "uuids": uuids}])
    assert [g.uuid for g in gpus] == uuids


OK = {"model": "NVIDIA L4", "count": 1, "memory_mib": 23034}


@pytest.mark.parametrize("spec, fragments", [
    ({"model": "x"}, ["must be a list"]),
    ([OK, "L4"], ["entry 1", "must be a dict"]),
    ([{**OK, "cout": 2}], ["entry 0", "unknown key", "'cout'"]),
    ([{**OK, "model": ""}], ["entry 0", "'model'", "non-empty string"]),
    ([{"count": 1, "memory_mib": 1}], ["entry 0", "'model'", "non-empty string"]),
    ([OK, {**OK, "model": 4090}], ["entry 1", "'model'", "4090"]),
    ([{**OK, "count": 0}], ["entry 0", "'NVIDIA L4'", "'count'", "positive integer", "got 0"]),
    ([{**OK, "count": "4"}], ["entry 0", "'count'", "got '4'"]),
    ([{**OK, "count": 2.0}], ["'count'", "positive integer"]),
    ([{**OK, "count": True}], ["'count'", "positive integer"]),
    ([{"model": "L4", "count": 1}], ["entry 0", "'memory_mib'", "required"]),
    ([{**OK, "memory_mib": -1}], ["'memory_mib'", "positive integer"]),
    ([{**OK, "pool": ""}], ["entry 0", "'pool'", "non-empty string"]),
    ([{**OK, "uuids": []}], ["entry 0", "'uuids'", "list of 1 CUDA UUIDs", "nvidia-smi -L"]),
    ([{**OK, "uuids": ["GPU-0"]}], ["'uuids'", "got ['GPU-0']"]),
    ([{**OK, "uuids": "GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f"}], ["'uuids'", "a list"]),
])
def test_declared_validation_names_entry_and_field(spec, fragments):
    with pytest.raises(InventoryError) as info:
        declared_gpus(spec)
    for fragment in fragments:
        assert fragment in str(info.value)


# --- Inventory ----------------------------------------------------------------------------------

def inventory(**traits):
    return Inventory(config=Config({"Inventory": traits}), log=logging.getLogger("test.inventory"))


def test_auto_uses_nvml_when_it_answers():
    source, gpus = inventory().discover(FakeNvml([FakeGpu(), FakeGpu(name="NVIDIA L4")]))
    assert source == "nvml"
    assert [(g.index, g.pool) for g in gpus] == [(0, "h200"), (1, "l4")]


def test_auto_falls_back_to_declared_and_logs_why(caplog):
    with caplog.at_level(logging.WARNING, logger="test.inventory"):
        source, gpus = inventory().discover(missing_library())
    assert source == "declared"
    assert [(g.model, g.memory_mib, g.pool) for g in gpus] == [("Fake GPU", 16384, "default")] * 4
    assert "NVML is not available" in caplog.text and "declared" in caplog.text


def test_source_nvml_raises_when_nvml_missing():
    with pytest.raises(NvmlUnavailable, match="NVML is not available"):
        inventory(source="nvml").discover(missing_library())


def test_source_declared_never_touches_nvml():
    fake = FakeNvml([FakeGpu()])
    spec = [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]
    source, gpus = inventory(source="declared", declared=spec).discover(fake)
    assert source == "declared" and [g.pool for g in gpus] == ["a100-sxm4-80gb"] * 2
    assert fake.calls == []


def test_bad_declared_list_raises_on_fallback():
    with pytest.raises(InventoryError, match="'count'"):
        inventory(declared=[{"model": "L4", "count": 0, "memory_mib": 1}]).discover(missing_library())


def test_pool_overrides_model_slug_for_nvml_gpus():
    _, gpus = inventory(pool="training").discover(FakeNvml([FakeGpu(), FakeGpu(name="NVIDIA L4")]))
    assert [g.pool for g in gpus] == ["training", "training"]


@pytest.mark.parametrize("source, fake", [
    ("nvml", lambda: FakeNvml([FakeGpu()] * 4)),
    ("declared", lambda: None),
])
def test_unhealthy_indices_marked_out_of_service(source, fake, caplog):
    with caplog.at_level(logging.WARNING, logger="test.inventory"):
        _, gpus = inventory(source=source, unhealthy=[1, 3, 9]).discover(fake())
    assert [(g.index, g.healthy, g.health_reason) for g in gpus] == [
        (0, True, ""),
        (1, False, "marked out of service by an admin"),
        (2, True, ""),
        (3, False, "marked out of service by an admin"),
    ]
    assert "[9]" in caplog.text     # an index this host does not have is reported


def test_admin_mark_keeps_the_nvml_reason():
    _, gpus = inventory(unhealthy=[0]).discover(FakeNvml([FakeGpu(ecc_uncorrected=1)]))
    assert gpus[0].health_reason == "marked out of service by an admin; uncorrected ECC errors"


def test_every_config_trait_has_help_with_an_example():
    for name, trait in Inventory.class_traits(config=True).items():
        assert "Example" in trait.help and f"c.Inventory.{name}" in trait.help, name


# --- the real pynvml on this machine ------------------------------------------------------------

def test_real_pynvml():
    """No GPU here: NvmlUnavailable with a readable message. On a GPU host: real GPUs."""
    try:
        gpus = read_nvml()
    except NvmlUnavailable as e:
        message = str(e)
        assert message.startswith("NVML is not available: ") and len(message) > len("NVML is not available: ") + 10
        return
    assert gpus, "NVML answered but listed no GPUs"
    assert len({g.index for g in gpus}) == len(gpus)
    for g in gpus:
        assert g.uuid.startswith("MIG-" if g.is_mig else "GPU-") and g.model and g.memory_mib > 0
        assert g.pool == pool_name(g.model) or (g.is_mig and g.pool.endswith("-mig-" + g.mig_profile))
        assert isinstance(g.healthy, bool) and (g.healthy or g.health_reason)
        assert g.memory_used_mib is None or 0 <= g.memory_used_mib <= g.memory_mib
    sample = sample_utilization()
    assert set(sample) <= {g.index for g in gpus}
    assert all(0 <= util <= 100 and used >= 0 for util, used in sample.values())
