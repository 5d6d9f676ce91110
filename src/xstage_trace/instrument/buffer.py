"""Python host side of the probes through CuPy: allocate the trace buffer, pass it to a RawKernel,
write the dump (the same file as ``xstage::HostBuffer::write_dump``).

    buf = ProbeBuffer(num_ctas=132, roles_per_cta=2, capacity=1024)
    kernel((132,), (256,), (..., buf.kernel_arg()))      # kernel takes xstage::DeviceBuffer by value
    buf.dump("run.xsp", ["mainloop", "rs"], label="shape=S1 schedule=wave")

Compile the kernel with ``options=(f"-I{include_dir()}", "-DXSTAGE_TRACE")``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from xstage_trace.base.probe_layout import RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.instrument.probe_writer import write_probe_dump

NVTX_DOMAIN = "xstage"  # nsys profile --nvtx-domain-include=xstage keeps only these ranges


def phase(name: str):
    """An NVTX range ``name`` in the ``xstage`` domain around a host-side phase (a no-op context
    when the ``nvtx`` package is not installed, and inside nvtx when no profiler is attached)."""
    try:
        import nvtx
    except ImportError:
        return contextlib.nullcontext()
    return nvtx.annotate(name, domain=NVTX_DOMAIN, category="probe buffer")


# Layout of xstage::DeviceBuffer (probe.cuh): two pointers, four u32.
DEVICE_BUFFER_DTYPE = np.dtype(
    [("meta", "<u8"), ("records", "<u8"), ("capacity", "<u4"), ("roles_per_cta", "<u4"), ("num_slices", "<u4"), ("pad", "<u4")]
)


class ProbeBuffer:
    """Device trace buffer for ``num_ctas × roles_per_cta`` slices of ``capacity`` records each."""

    def __init__(self, num_ctas: int, roles_per_cta: int, capacity: int, device: int | None = None):
        import cupy as cp

        self._cp = cp
        self.device = cp.cuda.Device(device if device is not None else cp.cuda.runtime.getDevice())
        self.roles_per_cta = roles_per_cta
        self.capacity = capacity
        self.num_slices = num_ctas * roles_per_cta
        with phase("xstage: allocate probe buffer"), self.device:
            self.meta = cp.zeros(self.num_slices * SLICE_DTYPE.itemsize, dtype=cp.uint8)
            self.records = cp.zeros(self.num_slices * capacity * RECORD_DTYPE.itemsize, dtype=cp.uint8)

    def reset(self) -> None:
        """Zero the slice table before a launch (counts, anchors)."""
        with phase("xstage: reset probe buffer"):
            self.meta.fill(0)

    def kernel_arg(self) -> np.void:
        """The ``xstage::DeviceBuffer`` struct, passed by value to a CuPy RawKernel."""
        v = np.zeros((), DEVICE_BUFFER_DTYPE)
        v["meta"] = self.meta.data.ptr
        v["records"] = self.records.data.ptr
        v["capacity"] = self.capacity
        v["roles_per_cta"] = self.roles_per_cta
        v["num_slices"] = self.num_slices
        return v[()]

    def device_fields(self) -> tuple[int, int, int, int, int]:
        """(meta address, records address, capacity, roles_per_cta, num_slices): the arguments of the
        trace-buffer setters that ``instrument apply`` adds to upstream builds (docs/recipes.md)."""
        return (int(self.meta.data.ptr), int(self.records.data.ptr), self.capacity, self.roles_per_cta, self.num_slices)

    def dump(self, path: str | Path, event_names: list[str], label: str = "", rank: int = 0) -> Path:
        """Copy the buffer back and write the dump (atomically)."""
        cp = self._cp
        with phase("xstage: copy probe buffer back"), self.device:
            cp.cuda.runtime.deviceSynchronize()
            meta = cp.asnumpy(self.meta).view(SLICE_DTYPE)
            records = cp.asnumpy(self.records).view(RECORD_DTYPE)
            props = cp.cuda.runtime.getDeviceProperties(self.device.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        with phase("xstage: write probe dump"):
            write_probe_dump(path, slice_meta=meta, records=records, capacity=self.capacity, event_names=event_names,
                             gpu_name=name, sm_count=int(props["multiProcessorCount"]), sm_clock_khz=int(props.get("clockRate", 0)),
                             roles_per_cta=self.roles_per_cta, device_index=self.device.id, rank=rank, label=label)
        return Path(path)
