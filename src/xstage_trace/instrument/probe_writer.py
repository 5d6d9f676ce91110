"""Probe dump writer, format version 1 (docs/probe-format.md): what the Python probe buffers
(``buffer.py``, ``triton.py``) and the record mappings of the recipe targets write."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from xstage_trace.base.atomic import atomic_file
from xstage_trace.base.probe_layout import EVENT_NAME_BYTES, FORMAT_VERSION, HEADER_DTYPE, MAGIC, RECORD_BYTES, RECORD_DTYPE, SLICE_DTYPE


def write_probe_dump(
    path: str | Path,
    *,
    slice_meta: np.ndarray,
    records: np.ndarray,
    capacity: int,
    event_names: list[str],
    gpu_name: str,
    sm_count: int,
    sm_clock_khz: int,
    roles_per_cta: int = 1,
    device_index: int = 0,
    rank: int = 0,
    label: str = "",
) -> None:
    """Write a dump from the device buffer's two arrays (slice meta, capacity-strided records), atomically."""
    slice_meta = np.ascontiguousarray(slice_meta, dtype=SLICE_DTYPE)
    records = np.ascontiguousarray(records, dtype=RECORD_DTYPE).reshape(len(slice_meta), capacity)
    h = np.zeros((), HEADER_DTYPE)
    h["magic"] = MAGIC
    h["version"] = FORMAT_VERSION
    h["record_bytes"] = RECORD_BYTES
    h["num_slices"] = len(slice_meta)
    h["roles_per_cta"] = roles_per_cta
    h["capacity"] = capacity
    h["num_events"] = len(event_names)
    h["header_bytes"] = HEADER_DTYPE.itemsize + EVENT_NAME_BYTES * len(event_names) + SLICE_DTYPE.itemsize * len(slice_meta)
    h["sm_count"] = sm_count
    h["sm_clock_khz"] = sm_clock_khz
    h["device_index"] = device_index
    h["rank"] = rank
    h["gpu_name"] = gpu_name.encode()[:127]
    h["label"] = label.encode()[:255]
    stored = np.minimum(slice_meta["count"].astype(np.int64), capacity)
    keep = np.arange(capacity)[None, :] < stored[:, None]
    names = np.array([n.encode()[: EVENT_NAME_BYTES - 1] for n in event_names], dtype=f"S{EVENT_NAME_BYTES}")
    with atomic_file(Path(path), "wb") as fh:
        fh.write(h.tobytes())
        fh.write(names.tobytes())
        fh.write(slice_meta.tobytes())
        fh.write(records[keep].tobytes())
        fh.flush()
        os.fsync(fh.fileno())
