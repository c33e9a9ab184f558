"""Memory readings for measure_gpu.py: the CUDA caching allocator's counters, NVML, and a CPU
stand-in for the dry run.

Every reading that exists only on a GPU returns None when it cannot be taken (no CUDA, no NVML,
no nvidia-smi), so a dry run on the CPU records the same fields as null.

Sources of what each counter means:
  * torch.cuda.memory_allocated / max_memory_allocated / memory_reserved / max_memory_reserved /
    memory_stats / reset_peak_memory_stats: torch/cuda/memory.py (CUDACachingAllocator's
    DeviceStats; every block rounded to a multiple of 512 B, c10/cuda/CUDACachingAllocator.cpp
    round_size);
  * NVML per-process used memory: nvmlDeviceGetComputeRunningProcesses (usedGpuMemory), the
    figure nvidia-smi prints per process; nvidia-smi --query-compute-apps=pid,used_memory as
    the fallback;
  * torch.cuda.mem_get_info: cudaMemGetInfo (free, total) of the whole device.
"""

import os
import shutil
import subprocess
import weakref

MIB = 1 << 20


def r512(n):
    """Bytes the CUDA caching allocator counts for a request of n bytes (a multiple of 512, at
    least 512; c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize)."""
    n = int(n)
    return 0 if n <= 0 else 512 * ((n + 511) // 512)


# ---------------------------------------------------------------- NVML (or nvidia-smi)

class Nvml:
    """Process and device memory as the driver reports it. Never creates a CUDA context."""

    def __init__(self, index=0):
        self.source = None
        self.error = None
        self._h = None
        self._nv = None
        try:
            import pynvml  # nvidia-ml-py
            pynvml.nvmlInit()
            self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nv = pynvml
            self.source = "pynvml"
        except Exception as e:  # noqa: BLE001 - any failure means: try the next source
            self.error = f"pynvml: {type(e).__name__}: {e}"
            if shutil.which("nvidia-smi"):
                self.source = "nvidia-smi"
        self.index = index

    def _smi(self, args):
        out = subprocess.run(["nvidia-smi", f"--id={self.index}"] + args, capture_output=True,
                             text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip()[:200])
        return out.stdout

    def process_used(self, pid=None):
        """Bytes the driver charges to process pid (default: this one), or None."""
        pid = os.getpid() if pid is None else pid
        try:
            if self.source == "pynvml":
                procs = self._nv.nvmlDeviceGetComputeRunningProcesses(self._h)
                for p in procs:
                    if p.pid == pid:
                        return None if p.usedGpuMemory is None else int(p.usedGpuMemory)
                return 0
            if self.source == "nvidia-smi":
                text = self._smi(["--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"])
                for line in text.splitlines():
                    parts = [x.strip() for x in line.split(",")]
                    if len(parts) == 2 and parts[0] == str(pid):
                        return int(parts[1]) * MIB  # nvidia-smi prints MiB
                return 0
        except Exception as e:  # noqa: BLE001
            self.error = f"process_used: {type(e).__name__}: {e}"
        return None

    def device_used(self):
        """(used, total) bytes of the whole device as the driver reports them, or (None, None)."""
        try:
            if self.source == "pynvml":
                m = self._nv.nvmlDeviceGetMemoryInfo(self._h)
                return int(m.used), int(m.total)
            if self.source == "nvidia-smi":
                text = self._smi(["--query-gpu=memory.used,memory.total",
                                  "--format=csv,noheader,nounits"])
                used, total = [int(x.strip()) * MIB for x in text.strip().split(",")[:2]]
                return used, total
        except Exception as e:  # noqa: BLE001
            self.error = f"device_used: {type(e).__name__}: {e}"
        return None, None

    def device_info(self):
        """GPU name, driver version, the driver's CUDA version, memory total (str/int/None)."""
        info = {"nvml_source": self.source, "gpu_name": None, "driver": None,
                "driver_cuda": None, "memory_total": None, "nvml_error": None}
        try:
            if self.source == "pynvml":
                nv = self._nv
                name = nv.nvmlDeviceGetName(self._h)
                info["gpu_name"] = name.decode() if isinstance(name, bytes) else name
                drv = nv.nvmlSystemGetDriverVersion()
                info["driver"] = drv.decode() if isinstance(drv, bytes) else drv
                v = nv.nvmlSystemGetCudaDriverVersion()
                info["driver_cuda"] = f"{v // 1000}.{(v % 1000) // 10}"
                info["memory_total"] = int(nv.nvmlDeviceGetMemoryInfo(self._h).total)
            elif self.source == "nvidia-smi":
                text = self._smi(["--query-gpu=name,driver_version,memory.total",
                                  "--format=csv,noheader,nounits"])
                name, drv, total = [x.strip() for x in text.strip().split(",")[:3]]
                info.update(gpu_name=name, driver=drv, memory_total=int(total) * MIB)
        except Exception as e:  # noqa: BLE001
            info["nvml_error"] = f"{type(e).__name__}: {e}"
        if self.error and not info["nvml_error"]:
            info["nvml_error"] = self.error
        return info


# ---------------------------------------------------------------- the allocator's counters

class CudaMeter:
    """torch.cuda's caching-allocator counters for one device."""

    dry = False

    def __init__(self, torch):
        self.torch = torch

    def sync(self):
        self.torch.cuda.synchronize()

    def allocated(self):
        return int(self.torch.cuda.memory_allocated())

    def reserved(self):
        return int(self.torch.cuda.memory_reserved())

    def peak_allocated(self):
        return int(self.torch.cuda.max_memory_allocated())

    def peak_reserved(self):
        return int(self.torch.cuda.max_memory_reserved())

    def reset_peak(self):
        self.torch.cuda.reset_peak_memory_stats()

    def stats(self):
        """memory_stats() as a flat dict of ints (segments, num_alloc_retries, inactive_split)."""
        return {k: int(v) for k, v in self.torch.cuda.memory_stats().items()
                if isinstance(v, (int, float))}

    def mem_get_info(self):
        free, total = self.torch.cuda.mem_get_info()
        return {"free": int(free), "total": int(total), "used": int(total - free)}

    def empty_cache(self):
        self.torch.cuda.empty_cache()


class CpuMeter:
    """The dry run's stand-in for the allocator counters: bytes of live tensor storages created
    by aten ops while it is active (a TorchDispatchMode), plus the storages registered as
    existing before (parameters, buffers, inputs), each rounded up to 512 B as CUDA counts them.

    It exists so that the dry run goes through the same phase bookkeeping with real, consistent
    numbers; it is not a measurement of a GPU and its figures are never used as cases. Reserved
    bytes, memory_stats, mem_get_info and NVML have no CPU meaning: they read None."""

    dry = True

    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten
        self.torch = torch
        self.live = {}
        self.cur = 0
        self.peak = 0
        meter = self

        class _Track(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        meter.track(t)
                return out

        self.mode = _Track()

    def track(self, t):
        """Counts t's storage once, until Python's last reference to the storage goes."""
        try:
            st = t.untyped_storage()
        except Exception:  # noqa: BLE001 - tensors without storage (meta, sparse)
            return
        n = r512(st.nbytes())
        key = st.data_ptr()
        if n == 0 or key in self.live:
            return
        self.live[key] = n
        self.cur += n
        self.peak = max(self.peak, self.cur)
        weakref.finalize(st, self._free, key)

    def _free(self, key):
        self.cur -= self.live.pop(key, 0)

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)

    def sync(self):
        pass

    def allocated(self):
        return self.cur

    def reserved(self):
        return None

    def peak_allocated(self):
        return self.peak

    def peak_reserved(self):
        return None

    def reset_peak(self):
        self.peak = self.cur

    def stats(self):
        return None

    def mem_get_info(self):
        return None

    def empty_cache(self):
        pass
