"""A small fake of the pynvml (nvidia-ml-py) calls the inventory and scripts/gpu_check.py
use, with the real functions' names, arguments and error classes."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

MIB = 1024 * 1024


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {3: "Not Supported", 4: "Insufficient Permissions", 6: "Not Found",
                9: "Driver Not Loaded",
                12: "NVML Shared Library Not Found", 15: "GPU is lost"}.get(self.value, "Unknown Error")


def _error_class(name, value):
    return type(name, (NVMLError,), {"__init__": lambda self: NVMLError.__init__(self, value)})


NVMLError_NotSupported = _error_class("NVMLError_NotSupported", 3)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", 4)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", 12)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", 15)
NVMLError_NotFound = _error_class("NVMLError_NotFound", 6)


@dataclass
class FakeMig:
    """One MIG device: its slot (nvmlDeviceGetMigDeviceHandleByIndex), instance ids,
    and the slice counts and memory nvmlDeviceGetAttributes reports for it."""
    slot: int
    gi: int
    ci: int = 0
    gi_slices: int = 1
    ci_slices: int = 0                    # 0: the whole GPU instance (= gi_slices)
    memory_mb: int = 17920                # attributes' memorySizeMB
    used_mib: int = 0
    processes: list = field(default_factory=list)   # [(pid, used bytes)]

    @property
    def uuid(self):
        return f"MIG-{self.gi:08x}-{self.ci:04x}-4000-8000-{self.slot:012x}"


def h200_7x1g():
    return [FakeMig(slot=n, gi=7 + n) for n in range(7)]


def h200_mixed():
    """3g + 2g + 1g + 1g on one H200, as nvidia-smi mig -cgi 9,14,19,19 -C makes them."""
    return [FakeMig(0, gi=2, gi_slices=3, memory_mb=72192), FakeMig(1, gi=3, gi_slices=2, memory_mb=35840),
            FakeMig(2, gi=9), FakeMig(3, gi=10)]


@dataclass
class FakeGpu:
    name: object = "NVIDIA H200"          # str or bytes, as pynvml versions differ
    total_mib: int = 143771
    used_mib: int = 0
    util: int = 0
    retired_pending: int = 0              # NVML_FEATURE_ENABLED (1) = pages pending retirement
    remapped: tuple = (0, 0, 0, 0)        # (corrRows, uncRows, isPending, failureOccurred)
    ecc_uncorrected: int = 0
    raises: dict = field(default_factory=dict)   # function name -> exception to raise
    mig_mode: object = None               # (current, pending); None: NotSupported (no MIG)
    migs: list = field(default_factory=list)
    minor: object = None                  # /dev/nvidia minor (default: the index)
    processes: list = field(default_factory=list)   # [(pid, used bytes or None)], whole GPU
    # nvmlDeviceGetProcessUtilization's samples: [(pid, timeStamp us, smUtil %, memUtil %)]
    process_util: list = field(default_factory=list)


class FakeNvml:
    """The pynvml functions and constants read_nvml uses, over a list of FakeGpu."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_NOT_FOUND = 6
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_ENABLED = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, gpus=(), raises=None):
        self.gpus = list(gpus)
        self.raises = dict(raises or {})   # host-wide: function name -> exception
        self.calls = []
        self.ecc_args = []

    def _enter(self, fn, index=None):
        self.calls.append(fn)
        if isinstance(index, tuple):        # a MIG handle: ("mig", gpu index, slot)
            index = index[1]
        exc = self.raises.get(fn)
        if exc is None and index is not None:
            exc = self.gpus[index].raises.get(fn)
        if exc is not None:
            raise exc

    def _mig(self, h):
        if not isinstance(h, tuple):
            raise NVMLError_NotSupported()  # not a MIG device handle
        return next(m for m in self.gpus[h[1]].migs if m.slot == h[2])

    def nvmlInit(self):
        self._enter("nvmlInit")

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._enter("nvmlDeviceGetHandleByIndex", i)
        return i                            # the handle is the index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        """A GPU's or a MIG device's handle; NotFound for a UUID no device has."""
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        handles = {f"GPU-fake-{i}": i for i in range(len(self.gpus))}
        handles.update({m.uuid: ("mig", i, m.slot)
                        for i, g in enumerate(self.gpus) for m in g.migs})
        handle = handles.get(uuid)
        self._enter("nvmlDeviceGetHandleByUUID", handle)
        if handle is None:
            raise NVMLError_NotFound()
        return handle

    def nvmlDeviceGetName(self, h):
        self._enter("nvmlDeviceGetName", h)
        return self.gpus[h].name

    def nvmlDeviceGetUUID(self, h):
        self._enter("nvmlDeviceGetUUID", h)
        return self._mig(h).uuid if isinstance(h, tuple) else f"GPU-fake-{h}"

    def nvmlDeviceGetMemoryInfo(self, h):
        self._enter("nvmlDeviceGetMemoryInfo", h)
        if isinstance(h, tuple):            # a MIG device: its own memory (MiB ~ MB here)
            m = self._mig(h)
            total, used = m.memory_mb, m.used_mib
        else:
            total, used = self.gpus[h].total_mib, self.gpus[h].used_mib
        return SimpleNamespace(total=total * MIB, used=used * MIB, free=(total - used) * MIB)

    def nvmlDeviceGetMinorNumber(self, h):
        self._enter("nvmlDeviceGetMinorNumber", h)
        g = self.gpus[h]
        return h if g.minor is None else g.minor

    # --- MIG: the real functions' names and arguments ---
    def nvmlDeviceGetMigMode(self, h):
        self._enter("nvmlDeviceGetMigMode", h)
        if self.gpus[h].mig_mode is None:
            raise NVMLError_NotSupported()
        return list(self.gpus[h].mig_mode)   # [current, pending], as pynvml returns it

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        if self.gpus[h].mig_mode is None:
            raise NVMLError_NotSupported()
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        g = self.gpus[h]
        if g.mig_mode is None or g.mig_mode[0] != 1:
            raise NVMLError_NotSupported()
        if not any(m.slot == index for m in g.migs):
            raise NVMLError_NotFound()     # an empty slot
        return ("mig", h, index)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig):
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
        self._mig(mig)
        return mig[1]

    def nvmlDeviceGetGpuInstanceId(self, h):
        self._enter("nvmlDeviceGetGpuInstanceId", h)
        return self._mig(h).gi

    def nvmlDeviceGetComputeInstanceId(self, h):
        self._enter("nvmlDeviceGetComputeInstanceId", h)
        return self._mig(h).ci

    def nvmlDeviceGetAttributes(self, h):
        self._enter("nvmlDeviceGetAttributes", h)
        if isinstance(h, tuple):
            m = self._mig(h)
            return SimpleNamespace(gpuInstanceSliceCount=m.gi_slices,
                                   computeInstanceSliceCount=m.ci_slices or m.gi_slices,
                                   memorySizeMB=m.memory_mb, multiprocessorCount=16 * m.gi_slices)
        g = self.gpus[h]
        return SimpleNamespace(gpuInstanceSliceCount=7, computeInstanceSliceCount=7,
                               memorySizeMB=g.total_mib, multiprocessorCount=132)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        if isinstance(h, tuple):
            m = self._mig(h)
            return [SimpleNamespace(pid=p, usedGpuMemory=b, gpuInstanceId=m.gi,
                                    computeInstanceId=m.ci) for p, b in m.processes]
        return [SimpleNamespace(pid=p, usedGpuMemory=b, gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for p, b in self.gpus[h].processes]

    def nvmlDeviceGetProcessUtilization(self, h, timeStamp):
        """The samples newer than timeStamp (us); NotFound when there are none,
        NotSupported on a MIG device, as NVML answers."""
        self._enter("nvmlDeviceGetProcessUtilization", h)
        if isinstance(h, tuple):
            raise NVMLError_NotSupported()
        samples = [SimpleNamespace(pid=p, timeStamp=t, smUtil=sm, memUtil=mem, encUtil=0, decUtil=0)
                   for p, t, sm, mem in self.gpus[h].process_util if t > timeStamp]
        if not samples:
            raise NVMLError_NotFound()
        return samples

    def nvmlDeviceGetUtilizationRates(self, h):
        self._enter("nvmlDeviceGetUtilizationRates", h)
        if (self.gpus[h].mig_mode or (0,))[0] == 1:
            raise NVMLError_NotSupported()  # as NVML answers for a GPU in MIG mode
        return SimpleNamespace(gpu=self.gpus[h].util, memory=0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return self.gpus[h].retired_pending

    def nvmlDeviceGetRemappedRows(self, h):
        self._enter("nvmlDeviceGetRemappedRows", h)
        return self.gpus[h].remapped

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        self._enter("nvmlDeviceGetTotalEccErrors", h)
        self.ecc_args.append((error_type, counter_type))
        return self.gpus[h].ecc_uncorrected if (error_type, counter_type) == (1, 0) else 0


