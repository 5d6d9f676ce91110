"""xstage probes inside ``@triton.jit`` kernels: the same records and dump as ``<xstage/probe.cuh>``.

Device side (call from a ``@triton.jit`` kernel; every call takes the ``XSTAGE`` constexpr switch
and, when it is False, emits no instruction at all)::

    from xstage_trace.instrument import triton as xp

    @triton.jit
    def kernel(..., trace_meta, trace_records, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
        probe = xp.probe_open(trace_meta, trace_records, TRACE_CAP, XSTAGE)
        for tile in range(...):
            probe = xp.begin(probe, EV_MAINLOOP, tile, XSTAGE)
            ...
            probe = xp.end(probe, EV_MAINLOOP, tile, 0, XSTAGE)
        xp.probe_close(probe, XSTAGE)

One slice per program (``roles_per_cta = 1``, slice = linear program id). Thread 0 of the program
(lane 0 of warp 0) is the elected writer: every thread reads the clock (the inline PTX is
per-thread), only thread 0 stores. A record is one ``st.global.cs.v4.u32`` of 16 bytes in the layout
of docs/probe-format.md; the slice's open/close anchors pair ``%globaltimer`` with ``clock64`` so
the decoder converts cycles to ns per SM. The record count travels in the probe handle (a tuple
carried through loops) and is written at close; records past the capacity are counted, not
stored, so overflow is reported, never silent.

Host side: :class:`TraceBuffer` allocates the two arrays with torch, gives the kernel arguments
(``buf.kernel_args()``, or :func:`off_args` for the probe-free build: the trace pointers become
``None`` constexprs, so the kernel's parameter list is that of the uninstrumented kernel) and
writes the ``.xsp`` dump with :func:`xstage_trace.collectors.probe_format.write_probe_dump`.

Cost per probe: docs/triton-probes.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton
import triton.language as tl

from xstage_trace.collectors.probe_format import CLOCK_BITS, RECORD_DTYPE, SLICE_DTYPE, write_probe_dump

KIND_MARK = 0
KIND_BEGIN = 1
KIND_END = 2
META_WORDS = tl.constexpr(SLICE_DTYPE.itemsize // 8)  # SliceMeta in int64 words (6)
RECORD_WORDS = tl.constexpr(RECORD_DTYPE.itemsize // 8)  # one record in int64 words (2)

# Slice-meta byte offsets (docs/probe-format.md, SliceMeta).
_OFF_COUNT, _OFF_SMID_OPEN, _OFF_SMID_CLOSE, _OFF_OPEN, _OFF_CLOSE = 0, 8, 12, 16, 32


def _anchor_asm(smid_off: int, pair_off: int, count: bool) -> str:
    """PTX for an anchor: thread 0 stores %smid and the (%globaltimer, clock64) pair; at close also
    the record count ($2) with closed = 1."""
    tail = f"@xp_p st.global.v2.u32 [$1+{_OFF_COUNT}], {{$2, 1}};\n" if count else ""
    return (
        "{\n.reg .pred xp_p;\n.reg .u32 xp_t, xp_s;\n.reg .u64 xp_g, xp_c;\n"
        "mov.u32 xp_t, %tid.x;\nsetp.eq.u32 xp_p, xp_t, 0;\n"
        "mov.u64 xp_g, %globaltimer;\nmov.u64 xp_c, %clock64;\nmov.u32 xp_s, %smid;\n"
        f"@xp_p st.global.u32 [$1+{smid_off}], xp_s;\n"
        f"@xp_p st.global.v2.u64 [$1+{pair_off}], {{xp_g, xp_c}};\n"
        f"{tail}mov.u32 $0, 0;\n}}"
    )


def _record_asm(event: int, kind: int) -> str:
    """PTX for one record: clock64's low 48 bits with the event id (bits 48..55) and kind (56..57)
    or-ed into the high word; thread 0 stores it when $2 (slot < capacity) holds."""
    if not 0 <= event < 256 or kind not in (KIND_MARK, KIND_BEGIN, KIND_END):
        raise ValueError(f"xstage probe: event id {event} must be 0..255 and kind 0, 1 or 2")
    tag = ((kind << 8) | event) << (CLOCK_BITS - 32)
    return (
        "{\n.reg .pred xp_p, xp_q;\n.reg .u32 xp_t, xp_lo, xp_hi;\n.reg .u64 xp_c;\n"
        "mov.u32 xp_t, %tid.x;\nsetp.eq.u32 xp_p, xp_t, 0;\nsetp.ne.u32 xp_q, $2, 0;\nand.pred xp_p, xp_p, xp_q;\n"
        "mov.u64 xp_c, %clock64;\nmov.b64 {xp_lo, xp_hi}, xp_c;\n"
        f"and.b32 xp_hi, xp_hi, 65535;\nor.b32 xp_hi, xp_hi, {tag};\n"
        "@xp_p st.global.cs.v4.u32 [$1], {xp_lo, xp_hi, $3, $4};\nmov.u32 $0, 0;\n}"
    )


@tl.core.builtin
def _anchor(meta, is_close: tl.constexpr, count, _semantic=None):
    close = tl.core._unwrap_if_constexpr(is_close)
    asm = _anchor_asm(_OFF_SMID_CLOSE if close else _OFF_SMID_OPEN, _OFF_CLOSE if close else _OFF_OPEN, close)
    return tl.inline_asm_elementwise(asm, "=r,l,r", [meta, count], dtype=tl.int32, is_pure=False, pack=1,
                                     _semantic=_semantic)


@tl.core.builtin
def _record(slot_ptr, ok, tile, payload, event: tl.constexpr, kind: tl.constexpr, _semantic=None):
    asm = _record_asm(int(tl.core._unwrap_if_constexpr(event)), int(tl.core._unwrap_if_constexpr(kind)))
    return tl.inline_asm_elementwise(asm, "=r,l,r,r,r", [slot_ptr, ok, tile, payload], dtype=tl.int32,
                                     is_pure=False, pack=1, _semantic=_semantic)


@triton.jit
def _slice_id():
    return (tl.program_id(2) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(0) + tl.program_id(0)


@triton.jit
def probe_open(trace_meta, trace_records, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Open this program's slice (anchor at open) and return the probe handle (records, meta, count)."""
    if XSTAGE:
        sid = _slice_id().to(tl.int64)
        meta = trace_meta + sid * META_WORDS
        _anchor(meta, False, 0)
        probe = (trace_records + sid * (TRACE_CAP * RECORD_WORDS), meta, tl.cast(0, tl.int32))
    else:
        probe = (0, 0, 0)
    return probe


@triton.jit
def put(probe, EVENT: tl.constexpr, KIND: tl.constexpr, tile, payload, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Write one record (event id, kind, tile, payload) at clock64 now; returns the advanced handle."""
    if XSTAGE:
        records, meta, n = probe
        _record(records + n * RECORD_WORDS, tl.cast(n < TRACE_CAP, tl.int32), tl.cast(tile, tl.int32),
                tl.cast(payload, tl.int32), EVENT, KIND)
        probe = (records, meta, n + 1)
    return probe


@triton.jit
def begin(probe, EVENT: tl.constexpr, tile, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Begin record of ``EVENT`` for ``tile`` (XSTAGE_BEGIN)."""
    return put(probe, EVENT, 1, tile, 0, TRACE_CAP, XSTAGE)


@triton.jit
def end(probe, EVENT: tl.constexpr, tile, payload, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """End record of ``EVENT`` for ``tile`` carrying ``payload`` (XSTAGE_END_P; 0 for none)."""
    return put(probe, EVENT, 2, tile, payload, TRACE_CAP, XSTAGE)


@triton.jit
def mark(probe, EVENT: tl.constexpr, tile, payload, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Mark record (XSTAGE_MARK)."""
    return put(probe, EVENT, 0, tile, payload, TRACE_CAP, XSTAGE)


@triton.jit
def probe_close(probe, XSTAGE: tl.constexpr):
    """Close the slice: anchor at close, record count, closed = 1 (XSTAGE_PROBE_CLOSE)."""
    if XSTAGE:
        records, meta, n = probe
        _anchor(meta, True, n)


def off_args() -> dict:
    """Kernel arguments of the probe-free build: no trace pointers (None constexprs), XSTAGE=False."""
    return {"trace_meta": None, "trace_records": None, "TRACE_CAP": 0, "XSTAGE": False}


class TraceBuffer:
    """Device trace buffer (torch) for ``num_programs`` slices of ``capacity`` records each."""

    def __init__(self, num_programs: int, capacity: int, device=None):
        import torch

        self._torch = torch
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self.capacity = int(capacity)
        self.num_slices = int(num_programs)
        self.meta = torch.zeros(self.num_slices * META_WORDS.value, dtype=torch.int64, device=self.device)
        self.records = torch.zeros(self.num_slices * self.capacity * RECORD_WORDS.value, dtype=torch.int64, device=self.device)

    @property
    def nbytes(self) -> int:
        """Device bytes held by the buffer (slice table + records)."""
        return (self.meta.numel() + self.records.numel()) * 8

    def reset(self) -> None:
        """Zero the slice table before a launch (counts and anchors)."""
        self.meta.zero_()

    def kernel_args(self) -> dict:
        """Keyword arguments for the instrumented kernel: the two pointers, TRACE_CAP, XSTAGE=True."""
        return {"trace_meta": self.meta, "trace_records": self.records, "TRACE_CAP": self.capacity, "XSTAGE": True}

    def host_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(slice meta, records) copied back as structured numpy arrays (SLICE_DTYPE, RECORD_DTYPE)."""
        self._torch.cuda.synchronize(self.device)
        meta = self.meta.cpu().numpy().view(SLICE_DTYPE)
        records = self.records.cpu().numpy().view(RECORD_DTYPE)
        return meta, records

    def dump(self, path: str | Path, event_names: list[str], label: str = "", rank: int = 0) -> Path:
        """Copy the buffer back and write the ``.xsp`` dump (atomically)."""
        torch = self._torch
        meta, records = self.host_arrays()
        props = torch.cuda.get_device_properties(self.device)
        clock_khz = _sm_clock_khz(self.device.index or 0)
        write_probe_dump(path, slice_meta=meta, records=records, capacity=self.capacity, event_names=event_names,
                         gpu_name=props.name, sm_count=props.multi_processor_count, sm_clock_khz=clock_khz,
                         roles_per_cta=1, device_index=self.device.index or 0, rank=rank, label=label)
        return Path(path)


def _sm_clock_khz(device_index: int) -> int:
    """Nominal SM clock (kHz) of the device, the decoder's fallback for slices too short to anchor."""
    driver = triton.runtime.driver.active
    return int(driver.utils.get_device_properties(device_index).get("sm_clock_rate", 0))
