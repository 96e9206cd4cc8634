"""GPUs as NVML (the NVIDIA driver's management library) reports them.

``read_nvml`` lists the GPUs with their model, memory, a utilization sample and
a health verdict; ``sample_utilization`` is the cheap call for periodic metrics.
Both take the ``pynvml`` module (package ``nvidia-ml-py``) as an optional
argument so tests can hand in a fake with the same function names.

Health checks (a failing check marks the GPU ``healthy=False`` with a reason):

* ``nvmlDeviceGetRetiredPagesPendingStatus`` == ``NVML_FEATURE_ENABLED``:
  "retired pages pending, reset needed" (older GPUs, page retirement).
* ``nvmlDeviceGetRemappedRows`` -> ``(corrRows, uncRows, isPending, failureOccurred)``:
  failureOccurred -> "row remapping failed"; isPending -> "row remap pending"
  (Ampere and later, row remapping replaces page retirement).
* ``nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)`` > 0: "uncorrected ECC errors".

XID errors are not pollable: NVML only reports them through an event set
(``nvmlEventSetWait``), which needs a long-lived listener. The uncorrected
volatile ECC counter (reset by a driver reload or GPU reset) stands in for the
memory XIDs (48, 63, 64, 94, 95) that matter for scheduling.

A health call that raises any ``NVMLError`` (typically ``NotSupported`` on
consumer cards, ``NoPermission`` in containers, or ``FunctionNotFound`` with an
old driver) means "this check is not available": it does not mark the GPU
unhealthy. A failure of a basic call (name, UUID, memory) raises
``InventoryError``; a failure to start NVML at all raises ``NvmlUnavailable``.

MIG (docs/gpus.md): a GPU whose ``nvmlDeviceGetMigMode`` reports the current
mode ``NVML_DEVICE_MIG_ENABLE`` is replaced by its MIG devices
(``nvmlDeviceGetMaxMigDeviceCount`` slots, ``nvmlDeviceGetMigDeviceHandleByIndex``;
an empty slot raises ``NotFound``), each with its own ``MIG-...`` UUID, memory
(``nvmlDeviceGetMemoryInfo`` on the MIG handle), profile (from
``nvmlDeviceGetAttributes``: slice counts and memory, see ``mig_profile``), GPU
and compute instance ids, and its GPU's health. They are numbered after the
GPUs NVML counts (a host with 2 GPUs: its MIG devices are 2, 3, ...), so a
whole GPU keeps its NVML index. ``NotSupported`` from ``nvmlDeviceGetMigMode``
means a GPU without MIG. Where the pending mode differs from the current one
(a change waiting for a GPU reset) the current one is used, and the devices'
``note`` says so. Nothing here changes a GPU's MIG mode.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable, Optional

from .model import Gpu, InventoryError, mig_pool, mig_profile, pool_name

__all__ = ["NvmlUnavailable", "read_nvml", "sample_utilization"]

_MIB = 1024 * 1024
# pynvml's values, used when a (fake) module does not define the constants.
_LIBRARY_NOT_FOUND = 12
_FEATURE_ENABLED = 1
_UNCORRECTED = 1
_VOLATILE = 0
_MIG_ENABLE = 1
_NOT_FOUND = 6

log = logging.getLogger(__name__)


class NvmlUnavailable(InventoryError):
    """NVML cannot be used on this host (no library, no driver, no pynvml)."""


def _load(nvml: Any) -> Any:
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable(
            f"NVML is not available: the pynvml module (package nvidia-ml-py) "
            f"cannot be imported ({e})") from e
    return pynvml


def _nvml_error(nvml: Any) -> type:
    return getattr(nvml, "NVMLError", Exception)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may itself call into the library
        text = ""
    return text or type(exc).__name__


def _library_missing(nvml: Any, exc: BaseException) -> bool:
    cls = getattr(nvml, "NVMLError_LibraryNotFound", None)
    if isinstance(cls, type) and isinstance(exc, cls):
        return True
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND",
                                                  _LIBRARY_NOT_FOUND)


def _unavailable(nvml: Any, exc: BaseException) -> NvmlUnavailable:
    if _library_missing(nvml, exc):
        why = (f"the NVML shared library (libnvidia-ml.so.1) was not found "
               f"({_describe(exc)}); is the NVIDIA driver installed on this host?")
    else:
        why = f"nvmlInit failed: {_describe(exc)}"
    return NvmlUnavailable(f"NVML is not available: {why}")


def _session(nvml: Any, body: Callable[[Any], Any]) -> Any:
    """nvmlInit, run ``body(nvml)``, and always nvmlShutdown once init worked."""
    nvml = _load(nvml)
    err = _nvml_error(nvml)
    try:
        nvml.nvmlInit()
    except err as e:
        raise _unavailable(nvml, e) from e
    try:
        return body(nvml)
    except err as e:
        if _library_missing(nvml, e):
            raise _unavailable(nvml, e) from e
        raise InventoryError(f"NVML failed while listing GPUs: {_describe(e)}") from e
    finally:
        try:
            nvml.nvmlShutdown()
        except err:
            pass  # nothing to do about it, and it must not hide the real result


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _call(nvml: Any, index: int, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except _nvml_error(nvml) as e:
        if _library_missing(nvml, e):
            raise
        raise InventoryError(f"NVML: {what} of GPU {index} failed: {_describe(e)}") from e


def _optional(nvml: Any, fn: Callable[[], Any]) -> Any:
    """``fn()``, or None where NVML says the call is not available."""
    try:
        return fn()
    except _nvml_error(nvml):
        return None


def _health(nvml: Any, handle: Any) -> list[str]:
    reasons = []
    pending = _optional(nvml, lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    if pending is not None and pending == getattr(nvml, "NVML_FEATURE_ENABLED", _FEATURE_ENABLED):
        reasons.append("retired pages pending, reset needed")
    rows = _optional(nvml, lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    if rows is not None:
        _corr, _unc, is_pending, failure = rows
        if failure:
            reasons.append("row remapping failed")
        if is_pending:
            reasons.append("row remap pending")
    ecc = _optional(nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(
        handle,
        getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", _UNCORRECTED),
        getattr(nvml, "NVML_VOLATILE_ECC", _VOLATILE)))
    if ecc is not None and ecc > 0:
        reasons.append("uncorrected ECC errors")
    return reasons


def _utilization(nvml: Any, handle: Any) -> Optional[float]:
    rates = _optional(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    return None if rates is None else float(rates.gpu)


def mig_mode(nvml: Any, handle: Any) -> Optional[tuple[int, int]]:
    """``(current, pending)`` MIG mode of a GPU, None where it has no MIG
    (``NotSupported``) or the call is not there."""
    mode = _optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle))
    return None if mode is None else (int(mode[0]), int(mode[1]))


def _enabled(nvml: Any, value: int) -> bool:
    return value == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE)


def _not_found(nvml: Any, exc: BaseException) -> bool:
    cls = getattr(nvml, "NVMLError_NotFound", None)
    if isinstance(cls, type) and isinstance(exc, cls):
        return True
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_FOUND", _NOT_FOUND)


def mig_handles(nvml: Any, index: int, handle: Any) -> list[Any]:
    """The handles of the MIG devices that exist on GPU ``index``, by slot."""
    out = []
    slots = _call(nvml, index, "MIG device count",
                  lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    for slot in range(slots):
        try:
            out.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except _nvml_error(nvml) as e:
            if not _not_found(nvml, e):  # NotFound: an empty slot
                raise InventoryError(f"NVML: MIG device {slot} of GPU {index} failed: "
                                     f"{_describe(e)}") from e
    return out


def _mig_devices(nvml: Any, parent: Gpu, handle: Any, first: int, note: str) -> list[Gpu]:
    devices = []
    for n, mig in enumerate(mig_handles(nvml, parent.index, handle)):
        what = f"MIG device {n}"
        uuid = _text(_call(nvml, parent.index, f"UUID of {what}", lambda: nvml.nvmlDeviceGetUUID(mig)))
        memory = _call(nvml, parent.index, f"memory of {what}",
                       lambda: nvml.nvmlDeviceGetMemoryInfo(mig))
        attrs = _call(nvml, parent.index, f"attributes of {what}",
                      lambda: nvml.nvmlDeviceGetAttributes(mig))
        profile = mig_profile(attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount,
                              attrs.memorySizeMB)
        devices.append(Gpu(
            index=first + n, uuid=uuid, model=f"{parent.model} MIG {profile}",
            memory_mib=int(memory.total) // _MIB, pool=mig_pool(parent.pool, profile),
            healthy=parent.healthy, health_reason=parent.health_reason,
            memory_used_mib=int(memory.used) // _MIB, mig_profile=profile,
            parent_index=parent.index,
            gpu_instance=_call(nvml, parent.index, f"GPU instance of {what}",
                               lambda: nvml.nvmlDeviceGetGpuInstanceId(mig)),
            compute_instance=_call(nvml, parent.index, f"compute instance of {what}",
                                   lambda: nvml.nvmlDeviceGetComputeInstanceId(mig)),
            note=note))
    return devices


def read_nvml(nvml: Any = None) -> list[Gpu]:
    """The GPUs NVML sees, in index order, each in the pool named after its
    model; a GPU in MIG mode is replaced by its MIG devices, numbered after
    the GPUs (module docstring).

    Raises ``NvmlUnavailable`` when NVML cannot start, ``InventoryError`` when a
    GPU's (or MIG device's) name, UUID or memory cannot be read.
    """
    def body(nvml: Any) -> list[Gpu]:
        gpus, migs = [], []
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            handle = _call(nvml, index, "handle", lambda: nvml.nvmlDeviceGetHandleByIndex(index))
            model = _text(_call(nvml, index, "name", lambda: nvml.nvmlDeviceGetName(handle)))
            uuid = _text(_call(nvml, index, "UUID", lambda: nvml.nvmlDeviceGetUUID(handle)))
            memory = _call(nvml, index, "memory info", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            reasons = _health(nvml, handle)
            gpu = Gpu(
                index=index, uuid=uuid, model=model, memory_mib=int(memory.total) // _MIB,
                pool=pool_name(model), healthy=not reasons, health_reason="; ".join(reasons),
                utilization_pct=_utilization(nvml, handle),
                memory_used_mib=int(memory.used) // _MIB)
            mode = mig_mode(nvml, handle)
            note = ""
            if mode is not None and mode[0] != mode[1]:
                note = (f"MIG mode of GPU {index} is {_mode_word(nvml, mode[0])}, pending "
                        f"{_mode_word(nvml, mode[1])} (after a GPU reset): the current mode is used")
                log.warning("%s", note)
            if mode is None or not _enabled(nvml, mode[0]):
                gpus.append(replace(gpu, note=note))
                continue
            devices = _mig_devices(nvml, gpu, handle, count + len(migs), note)
            if not devices:
                log.warning("GPU %d is in MIG mode but has no MIG devices (none created): "
                            "it offers nothing to schedule", index)
            migs.extend(devices)
        return gpus + migs

    return _session(nvml, body)


def _mode_word(nvml: Any, value: int) -> str:
    return "enabled" if _enabled(nvml, value) else "disabled"


def sample_utilization(nvml: Any = None) -> dict[int, tuple[float, int]]:
    """``{index: (GPU utilization %, memory used MiB)}`` for metrics.

    A GPU whose utilization or memory cannot be read is left out of the result.
    Raises ``NvmlUnavailable`` when NVML cannot start.
    """
    def body(nvml: Any) -> dict[int, tuple[float, int]]:
        sample = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = _call(nvml, index, "handle", lambda: nvml.nvmlDeviceGetHandleByIndex(index))
            util = _utilization(nvml, handle)
            memory = _optional(nvml, lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            if util is not None and memory is not None:
                sample[index] = (util, int(memory.used) // _MIB)
        return sample

    return _session(nvml, body)
