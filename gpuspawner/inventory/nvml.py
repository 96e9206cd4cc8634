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
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from .model import Gpu, InventoryError, pool_name

__all__ = ["NvmlUnavailable", "read_nvml", "sample_utilization"]

_MIB = 1024 * 1024
# pynvml's values, used when a (fake) module does not define the constants.
_LIBRARY_NOT_FOUND = 12
_FEATURE_ENABLED = 1
_UNCORRECTED = 1
_VOLATILE = 0


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


def read_nvml(nvml: Any = None) -> list[Gpu]:
    """The GPUs NVML sees, in index order, each in the pool named after its model.

    Raises ``NvmlUnavailable`` when NVML cannot start, ``InventoryError`` when a
    GPU's name, UUID or memory cannot be read.
    """
    def body(nvml: Any) -> list[Gpu]:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = _call(nvml, index, "handle", lambda: nvml.nvmlDeviceGetHandleByIndex(index))
            model = _text(_call(nvml, index, "name", lambda: nvml.nvmlDeviceGetName(handle)))
            uuid = _text(_call(nvml, index, "UUID", lambda: nvml.nvmlDeviceGetUUID(handle)))
            memory = _call(nvml, index, "memory info", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            reasons = _health(nvml, handle)
            gpus.append(Gpu(
                index=index, uuid=uuid, model=model, memory_mib=int(memory.total) // _MIB,
                pool=pool_name(model), healthy=not reasons, health_reason="; ".join(reasons),
                utilization_pct=_utilization(nvml, handle),
                memory_used_mib=int(memory.used) // _MIB))
        return gpus

    return _session(nvml, body)


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
