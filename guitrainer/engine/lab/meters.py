"""What the precision lab reads from the machine: peak memory and energy, each saying where it comes from.

* Memory: ``torch.cuda.max_memory_allocated`` on CUDA (ROCm too), ``torch.xpu.max_memory_allocated`` on Intel
  XPU, MPS's allocated memory sampled after each step, and on a CPU the process's peak resident set
  (``VmHWM``, reset through ``/proc/self/clear_refs``) during the steps minus its size before loading.
* Energy: NVML's total-energy counter (nvidia-ml-py / pynvml, Volta and newer) or NVML power samples
  integrated over time; Linux RAPL package counters (``/sys/class/powercap/intel-rapl*/energy_uj``) where
  readable. Nothing else: without a source the lab says "not available here".
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from guitrainer.core.precision.lab import NOT_AVAILABLE

log = logging.getLogger(__name__)

RAPL_ROOT = Path("/sys/class/powercap")
PROC_STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


# --------------------------------------------------------------------------- memory


def _status_kib(field: str) -> int | None:
    try:
        for line in PROC_STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def collect_garbage() -> None:
    """``gc.collect()``, in the main thread only. In the app the lab and the trainer run on worker threads, and a
    collection there also destroys the GUI's Python-backed Qt objects that are garbage in cycles; such a destructor
    needs the GIL while it holds Qt's signal-slot mutex, which the GUI thread (holding the GIL) waits for: both hang
    (seen in the real-window suite, the training and the lab threads each in a futex wait). On a worker thread the
    garbage is left to the collections the main thread makes."""
    if threading.current_thread() is threading.main_thread():
        gc.collect()


def free_memory(device: torch.device | None = None) -> None:
    """Return what the last candidate left: Python garbage (:func:`collect_garbage`), the GPU caches, glibc's free
    lists."""
    collect_garbage()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        torch.xpu.empty_cache()
    if torch.backends.mps.is_available():
        torch.mps.empty_cache()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


class MemoryMeter:
    """Peak memory of one candidate on ``device_type`` ("cuda", "xpu", "mps", "cpu").

    Call :meth:`start` before the candidate loads, :meth:`steps_begin` when its steps are about to start
    (the CPU meter resets the peak there, so loading's transient copies are not counted), :meth:`sample`
    after each step, and :meth:`peak` at the end.
    """

    def __init__(self, device_type: str):
        self.device_type = device_type
        self._baseline = 0
        self._samples: list[int] = []
        self._hwm_ok = False
        self.source = self._source()

    def _source(self) -> str:
        if self.device_type == "cuda":
            return "torch.cuda.max_memory_allocated (during the steps)"
        if self.device_type == "xpu":
            return "torch.xpu.max_memory_allocated (during the steps)"
        if self.device_type == "mps":
            return "MPS allocated memory sampled after each step (misses peaks inside a step)"
        return "process peak RSS during the steps minus RSS before loading (CPU)"

    def start(self) -> None:
        self._samples = []
        if self.device_type == "cpu":
            self._baseline = (_status_kib("VmRSS") or 0) * 1024

    def steps_begin(self) -> None:
        if self.device_type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        elif self.device_type == "xpu":
            torch.xpu.reset_peak_memory_stats()
        elif self.device_type == "cpu":
            try:
                CLEAR_REFS.write_text("5")  # resets VmHWM to the current RSS (Linux 4.0+)
                self._hwm_ok = True
            except OSError:
                self._hwm_ok = False
                self.source = "process RSS sampled after each step minus RSS before loading (CPU; misses peaks inside a step)"

    def sample(self) -> None:
        if self.device_type == "mps":
            self._samples.append(int(torch.mps.current_allocated_memory()))
        elif self.device_type == "cpu" and not self._hwm_ok:
            self._samples.append((_status_kib("VmRSS") or 0) * 1024)

    def peak(self) -> int | None:
        if self.device_type == "cuda":
            return int(torch.cuda.max_memory_allocated())
        if self.device_type == "xpu":
            return int(torch.xpu.max_memory_allocated())
        if self.device_type == "mps":
            return max(self._samples) if self._samples else None
        if self._hwm_ok:
            hwm = _status_kib("VmHWM")
            return max(0, hwm * 1024 - self._baseline) if hwm is not None else None
        return max(0, max(self._samples) - self._baseline) if self._samples else None


# --------------------------------------------------------------------------- energy


class EnergyMeter:
    """A cumulative energy reading in joules, or None when this machine has no source."""

    source = NOT_AVAILABLE

    def read(self) -> float | None:
        return None

    def close(self) -> None:
        pass


class NvmlEnergy(EnergyMeter):
    """NVML's total-energy counter (millijoules since the driver loaded; Volta and newer)."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml, self.handle = nvml, handle
        self.source = "NVML total energy counter of the GPU (GPU board only)"

    def read(self) -> float | None:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1000.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


class NvmlPowerSamples(NvmlEnergy):
    """NVML board power sampled every 20 ms and integrated (GPUs without the energy counter)."""

    def __init__(self, nvml: Any, handle: Any, interval: float = 0.02):
        super().__init__(nvml, handle)
        self.source = "NVML power samples every 20 ms, integrated (GPU board only)"
        self._joules = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, args=(interval,), name="nvml-power", daemon=True)
        self._thread.start()

    def _loop(self, interval: float) -> None:
        last = time.perf_counter()
        while not self._stop.wait(interval):
            try:
                watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
            except Exception:  # noqa: BLE001 - the sampler stops; read() then says nothing new
                return
            now = time.perf_counter()
            with self._lock:
                self._joules += watts * (now - last)
            last = now

    def read(self) -> float | None:
        with self._lock:
            return self._joules

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        super().close()


class RaplEnergy(EnergyMeter):
    """Linux RAPL package counters (microjoules, wrapping at ``max_energy_range_uj``), summed over packages."""

    def __init__(self, zones: list[Path]):
        self.zones = zones
        self.ranges = [int((z / "max_energy_range_uj").read_text()) for z in zones]
        self._last = [self._raw(z) for z in zones]
        self._total = 0.0
        self.source = f"Linux RAPL package energy ({len(zones)} package(s); the whole CPU, other programs included)"

    @staticmethod
    def _raw(zone: Path) -> int:
        return int((zone / "energy_uj").read_text())

    def read(self) -> float | None:
        for k, zone in enumerate(self.zones):
            now = self._raw(zone)
            delta = now - self._last[k]
            if delta < 0:  # the counter wrapped
                delta += self.ranges[k]
            self._total += delta / 1e6
            self._last[k] = now
        return self._total


def _rapl_zones(root: Path = RAPL_ROOT) -> list[Path]:
    zones = []
    for z in sorted(root.glob("intel-rapl:*")):
        if z.name.count(":") != 1:  # sub-zones (core, uncore, dram) are inside their package
            continue
        try:
            int((z / "energy_uj").read_text())
            zones.append(z)
        except (OSError, ValueError):
            continue
    return zones


def _nvml_handle(nvml: Any, index: int) -> Any:
    bus = getattr(torch.cuda.get_device_properties(index), "pci_bus_id", None)
    if bus:
        with contextlib.suppress(Exception):
            return nvml.nvmlDeviceGetHandleByPciBusId(bus)
    return nvml.nvmlDeviceGetHandleByIndex(index)


def energy_meter(device: torch.device, rapl_root: Path = RAPL_ROOT) -> EnergyMeter:
    """The best energy source for ``device`` on this machine, or an :class:`EnergyMeter` that reads None."""
    if device.type == "cuda" and torch.version.hip is None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            log.info("energy: nvidia-ml-py is not installed")
        else:
            try:
                pynvml.nvmlInit()
                handle = _nvml_handle(pynvml, device.index or 0)
                try:
                    pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
                    return NvmlEnergy(pynvml, handle)
                except Exception:  # noqa: BLE001 - no energy counter (pre-Volta): sample power instead
                    pynvml.nvmlDeviceGetPowerUsage(handle)
                    return NvmlPowerSamples(pynvml, handle)
            except Exception as e:  # noqa: BLE001 - NVML present but unusable: say so, never guess
                log.info("energy: NVML unusable: %s", e)
    if device.type == "cpu":
        try:
            zones = _rapl_zones(rapl_root)
            if zones:
                return RaplEnergy(zones)
        except (OSError, ValueError) as e:
            log.info("energy: RAPL unreadable: %s", e)
    return EnergyMeter()
