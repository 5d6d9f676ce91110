"""Probe dump layout, version 1 (docs/probe-format.md): the header, slice and record dtypes and the
constants that the writers (``instrument/``) and the reader (``collectors/probe_format.py``) share."""

from __future__ import annotations

import numpy as np

MAGIC = b"XSTPROBE"
FORMAT_VERSION = 1
RECORD_BYTES = 16
EVENT_NAME_BYTES = 32
KINDS = ("mark", "begin", "end")
CLOCK_BITS = 48
CLOCK_MASK = (1 << CLOCK_BITS) - 1
# Below this anchor span the 32 ns %globaltimer tick makes a poor clock-rate estimate (the reader then
# uses the header's nominal clock; writers that compute their own clock rate apply the same rule).
MIN_ANCHOR_SPAN_NS = 20_000

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u2"),
        ("record_bytes", "<u2"),
        ("header_bytes", "<u4"),
        ("num_slices", "<u4"),
        ("roles_per_cta", "<u4"),
        ("capacity", "<u4"),
        ("num_events", "<u4"),
        ("sm_count", "<u4"),
        ("sm_clock_khz", "<u4"),
        ("device_index", "<u4"),
        ("rank", "<u4"),
        ("reserved", "<u8", (2,)),
        ("gpu_name", "S128"),
        ("label", "S256"),
    ]
)
SLICE_DTYPE = np.dtype(
    [
        ("count", "<u4"),
        ("closed", "<u4"),
        ("smid_open", "<u4"),
        ("smid_close", "<u4"),
        ("gt_open", "<u8"),
        ("clk_open", "<u8"),
        ("gt_close", "<u8"),
        ("clk_close", "<u8"),
    ]
)
RECORD_DTYPE = np.dtype([("ts_ev", "<u8"), ("tile", "<u4"), ("payload", "<u4")])
assert HEADER_DTYPE.itemsize == 448 and SLICE_DTYPE.itemsize == 48 and RECORD_DTYPE.itemsize == 16
