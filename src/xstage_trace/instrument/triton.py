"""xstage probes inside ``@triton.jit`` kernels: the same records and dump as ``<xstage/probe.cuh>``.

Device side (call from a ``@triton.jit`` kernel; every call takes the ``XSTAGE`` constexpr switch
and, when it is False, emits no instruction at all)::

    from xstage_trace.instrument import triton as xp

    @triton.jit
    def kernel(..., trace_meta, trace_records, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
        probe = xp.probe_open(trace_meta, trace_records, TRACE_CAP, XSTAGE)
        probe = xp.begin(probe, EV_MAINLOOP, tile, TRACE_CAP, XSTAGE)        # counted form
        ...
        probe = xp.end(probe, EV_MAINLOOP, tile, payload, TRACE_CAP, XSTAGE)
        xp.probe_close(probe, XSTAGE)

A persistent kernel (program p handles tiles p, p + P, …) can use the persistent-loop form instead,
which carries no record count through its tile loop: ``xp.begin_tile(probe, EV, tile, K, PER_TILE,
P, TRACE_CAP, XSTAGE)`` / ``end_tile`` put record K of the tile's PER_TILE records in a slot derived
from the tile id, and ``xp.probe_close_tiles(probe, num_tiles, PER_TILE, P, XSTAGE)`` closes.
``t = xp.stamp(XSTAGE)`` reads the clock alone at a probe point; ``xp.put_stamped_tile`` (one
record) or ``xp.put_spans_tile`` (the four records of two spans) store records from such stamps
later, e.g. after the tile's output store.

One slice per program (``roles_per_cta = 1``, slice = linear program id). Thread 0 of the program
(lane 0 of warp 0) is the elected writer: every thread runs the inline PTX (clock64 read, tag),
only thread 0 stores. A record is one ``st.global.cs.v4.u32`` of 16 bytes in the layout of
docs/probe-format.md, at a slot address computed in Triton code around the PTX (the slice's first
slot once at open, from the program ids; the record's slot, clamped, per record), where the
compiler strength-reduces and schedules it; the slice's open/close anchors pair ``%globaltimer``
with ``clock64`` so the decoder converts cycles to ns per SM. Records past the capacity are
counted and written to the slice's spare slots (a slice has ``capacity + SPARE_SLOTS`` slots on
the device; the dump leaves the spare out): overflow is reported, never silent. The store's
predicate is "thread 0" alone, never a test of the slot: a per-thread predicate that changes from
tile to tile makes ptxas move a persistent GEMM's HGMMA descriptor arithmetic off the uniform
datapath (docs/triton-probes.md).

Host side: :class:`TraceBuffer` allocates the two arrays with torch, gives the kernel arguments
(``buf.kernel_args()``, or :func:`off_args` for the probe-free build: the trace pointers become
``None`` constexprs, so the kernel's parameter list is that of the uninstrumented kernel) and
writes the ``.xsp`` dump (:func:`write_dump`, through
:func:`xstage_trace.instrument.probe_writer.write_probe_dump`).

Cost per probe and where to put probes: docs/triton-probes.md.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import triton
import triton.language as tl

from xstage_trace.base.probe_layout import CLOCK_BITS, RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.instrument.probe_writer import write_probe_dump

KIND_MARK = 0
KIND_BEGIN = 1
KIND_END = 2
META_WORDS = SLICE_DTYPE.itemsize // 8  # SliceMeta in int64 words (6)
RECORD_WORDS = RECORD_DTYPE.itemsize // 8  # one record in int64 words (2)
SPARE_SLOTS = 4  # device slots per slice past the capacity, where the records past it land (a span-pair block writes 4)

# Slice-meta byte offsets (docs/probe-format.md, SliceMeta).
_OFF_COUNT, _OFF_SMID_OPEN, _OFF_SMID_CLOSE, _OFF_OPEN, _OFF_CLOSE = 0, 8, 12, 16, 32


_SLICE_PTX = (  # xp_s = linear program id, the slice (roles_per_cta = 1)
    "mov.u32 xp_a, %ctaid.z;\nmov.u32 xp_b, %nctaid.y;\nmov.u32 xp_s, %ctaid.y;\nmad.lo.u32 xp_s, xp_a, xp_b, xp_s;\n"
    "mov.u32 xp_b, %nctaid.x;\nmov.u32 xp_a, %ctaid.x;\nmad.lo.u32 xp_s, xp_s, xp_b, xp_a;\n"
)


def _anchor_asm(smid_off: int, pair_off: int, count: bool, per_tile: int = 0, num_programs: int = 0) -> str:
    """PTX for an anchor: thread 0 stores %smid and the (%globaltimer, clock64) pair into its slice's
    meta ($1 = slice table base); at close also the record count with closed = 1: $2 itself, or in
    the persistent-loop form (``per_tile`` > 0, $2 = number of tiles) this program's tiles × per_tile."""
    if not count:
        tail = ""
    elif per_tile:
        tail = ("mov.u32 xp_a, %ctaid.x;\nsub.u32 xp_b, $2, xp_a;\n"
                f"add.u32 xp_b, xp_b, {num_programs - 1};\ndiv.u32 xp_b, xp_b, {num_programs};\n"
                f"setp.le.u32 xp_q, $2, xp_a;\nselp.u32 xp_b, 0, xp_b, xp_q;\nmul.lo.u32 xp_b, xp_b, {per_tile};\n"
                f"@xp_p st.global.v2.u32 [xp_m+{_OFF_COUNT}], {{xp_b, 1}};\n")
    else:
        tail = f"@xp_p st.global.v2.u32 [xp_m+{_OFF_COUNT}], {{$2, 1}};\n"
    return (
        "{\n.reg .pred xp_p, xp_q;\n.reg .u32 xp_t, xp_a, xp_b, xp_s;\n.reg .u64 xp_g, xp_c, xp_m;\n"
        "mov.u32 xp_t, %tid.x;\nsetp.eq.u32 xp_p, xp_t, 0;\n" + _SLICE_PTX +
        f"mul.wide.u32 xp_m, xp_s, {SLICE_DTYPE.itemsize};\nadd.s64 xp_m, $1, xp_m;\n"
        "mov.u64 xp_g, %globaltimer;\nmov.u64 xp_c, %clock64;\nmov.u32 xp_s, %smid;\n"
        f"@xp_p st.global.u32 [xp_m+{smid_off}], xp_s;\n"
        f"@xp_p st.global.v2.u64 [xp_m+{pair_off}], {{xp_g, xp_c}};\n"
        f"{tail}mov.u32 $0, 0;\n}}"
    )


def _record_asm(event: int, kind: int, stamped: bool = False) -> str:
    """PTX for one record: clock64's low 48 bits with the event id (bits 48..55) and kind (56..57)
    or-ed into the high word, then tile and payload, stored by thread 0 as one 16-byte store at $1,
    the record's slot address. The clock is read here, or (``stamped``) is $2, a clock64 value an
    earlier :func:`stamp` read; tile and payload follow. The slot address is computed in Triton
    around the call (:func:`_slot_ptr`), where the compiler strength-reduces, hoists and schedules
    it: the block itself is the clock read, two logic ops and the store. The store's predicate is
    thread 0 alone (see the module docstring)."""
    if not 0 <= event < 256 or kind not in (KIND_MARK, KIND_BEGIN, KIND_END):
        raise ValueError(f"xstage probe: event id {event} must be 0..255 and kind 0, 1 or 2")
    tag = ((kind << 8) | event) << (CLOCK_BITS - 32)
    clock, tile, payload = ("$2", "$3", "$4") if stamped else ("%clock64", "$2", "$3")
    return (
        "{\n.reg .pred xp_p;\n.reg .u32 xp_t, xp_lo, xp_hi;\n.reg .u64 xp_c;\n"
        "mov.u32 xp_t, %tid.x;\nsetp.eq.u32 xp_p, xp_t, 0;\n"
        f"mov.u64 xp_c, {clock};\nmov.b64 {{xp_lo, xp_hi}}, xp_c;\n"
        f"and.b32 xp_hi, xp_hi, 65535;\nor.b32 xp_hi, xp_hi, {tag};\n"
        f"@xp_p st.global.cs.v4.u32 [$1], {{xp_lo, xp_hi, {tile}, {payload}}};\nmov.u32 $0, 0;\n}}"
    )


def _span_pair_asm(events: tuple[int, int]) -> str:
    """PTX for the four records of two spans of one tile, written together by thread 0 from clock64
    values read earlier (:func:`stamp`): begin and end of ``events[0]`` ($2, $3), begin and end of
    ``events[1]`` ($4, $5), tile $6, payloads $7 (end of the first span) and $8 (end of the second),
    begin records with payload 0; four 16-byte stores at $1, $1 + 16, $1 + 32, $1 + 48 (four
    consecutive slots), one thread-0 predicate for all four."""
    out = "{\n.reg .pred xp_p;\n.reg .u32 xp_t, xp_lo, xp_hi;\nmov.u32 xp_t, %tid.x;\nsetp.eq.u32 xp_p, xp_t, 0;\n"
    for j, (event, kind, payload) in enumerate([(events[0], KIND_BEGIN, "0"), (events[0], KIND_END, "$7"),
                                                (events[1], KIND_BEGIN, "0"), (events[1], KIND_END, "$8")]):
        if not 0 <= event < 256:
            raise ValueError(f"xstage probe: event id {event} must be 0..255")
        tag = ((kind << 8) | event) << (CLOCK_BITS - 32)
        out += (f"mov.b64 {{xp_lo, xp_hi}}, ${2 + j};\nand.b32 xp_hi, xp_hi, 65535;\nor.b32 xp_hi, xp_hi, {tag};\n"
                f"@xp_p st.global.cs.v4.u32 [$1+{16 * j}], {{xp_lo, xp_hi, $6, {payload}}};\n")
    return out + "mov.u32 $0, 0;\n}"


_STAMP_ASM = "mov.u64 $0, %clock64;"


# Triton's cache key covers the source of @triton.jit functions and the constexpr globals they
# read, not the builtins below that emit the PTX. Every probe passes this digest of the PTX the
# templates give into its asm block (as a PTX comment), so changed templates recompile the kernel.
PTX_KEY = tl.constexpr(hashlib.sha256("".join(
    [_record_asm(1, 2), _record_asm(1, 2, True), _span_pair_asm((1, 2)), _STAMP_ASM]
    + [_anchor_asm(_OFF_SMID_CLOSE, _OFF_CLOSE, True, t, 3) for t in (0, 4)]).encode()).hexdigest()[:16])


@tl.core.builtin
def _anchor(meta, count, is_close: tl.constexpr, per_tile: tl.constexpr = 0, num_programs: tl.constexpr = 0,
            key: tl.constexpr = "", _semantic=None):
    u = tl.core._unwrap_if_constexpr
    close = u(is_close)
    asm = f"// xstage probe {u(key)}\n" + _anchor_asm(_OFF_SMID_CLOSE if close else _OFF_SMID_OPEN,
                                                       _OFF_CLOSE if close else _OFF_OPEN, close,
                                                       int(u(per_tile)), int(u(num_programs)))
    return tl.inline_asm_elementwise(asm, "=r,l,r", [meta, count], dtype=tl.int32, is_pure=False, pack=1,
                                     _semantic=_semantic)


@tl.core.builtin
def _record(slot_ptr, tile, payload, event: tl.constexpr, kind: tl.constexpr, key: tl.constexpr = "", _semantic=None):
    u = tl.core._unwrap_if_constexpr
    asm = f"// xstage probe {u(key)}\n" + _record_asm(int(u(event)), int(u(kind)))
    return tl.inline_asm_elementwise(asm, "=r,l,r,r", [slot_ptr, tile, payload], dtype=tl.int32, is_pure=False, pack=1,
                                     _semantic=_semantic)


@tl.core.builtin
def _stamped_record(slot_ptr, stamp, tile, payload, event: tl.constexpr, kind: tl.constexpr, key: tl.constexpr = "",
                    _semantic=None):
    u = tl.core._unwrap_if_constexpr
    asm = f"// xstage probe {u(key)}\n" + _record_asm(int(u(event)), int(u(kind)), stamped=True)
    return tl.inline_asm_elementwise(asm, "=r,l,l,r,r", [slot_ptr, stamp, tile, payload], dtype=tl.int32,
                                     is_pure=False, pack=1, _semantic=_semantic)


@tl.core.builtin
def _span_pair(slot_ptr, t0, t1, t2, t3, tile, payload0, payload1, event0: tl.constexpr, event1: tl.constexpr,
               key: tl.constexpr = "", _semantic=None):
    u = tl.core._unwrap_if_constexpr
    asm = f"// xstage probe {u(key)}\n" + _span_pair_asm((int(u(event0)), int(u(event1))))
    return tl.inline_asm_elementwise(asm, "=r,l,l,l,l,l,r,r,r", [slot_ptr, t0, t1, t2, t3, tile, payload0, payload1],
                                     dtype=tl.int32, is_pure=False, pack=1, _semantic=_semantic)


@tl.core.builtin
def _clock(anchor, key: tl.constexpr = "", _semantic=None):
    u = tl.core._unwrap_if_constexpr
    return tl.inline_asm_elementwise(f"// xstage probe {u(key)}\n" + _STAMP_ASM, "=l,r", [anchor], dtype=tl.int64,
                                     is_pure=False, pack=1, _semantic=_semantic)


_SLICE_WORDS = tl.constexpr(RECORD_WORDS)
_SPARE = tl.constexpr(SPARE_SLOTS)


@triton.jit
def _slice_records(trace_records, TRACE_CAP: tl.constexpr):
    """This program's first record slot: slice = linear program id (as the anchors' %ctaid
    arithmetic), TRACE_CAP + SPARE_SLOTS slots per slice."""
    s = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    return trace_records + s.to(tl.int64) * ((TRACE_CAP + _SPARE) * _SLICE_WORDS)


@triton.jit
def _slot_ptr(slice_records, slot, TRACE_CAP: tl.constexpr):
    """Address of record slot ``slot`` of the slice, clamped to the first spare slot (index TRACE_CAP)."""
    return slice_records + tl.minimum(slot, TRACE_CAP) * _SLICE_WORDS


@triton.jit
def probe_open(trace_meta, trace_records, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Open this program's slice (anchor at open); returns the probe handle (the slice table
    pointer, this slice's first record slot, and the record count)."""
    if XSTAGE:
        _anchor(trace_meta, 0, False, key=PTX_KEY)
        probe = (trace_meta, _slice_records(trace_records, TRACE_CAP), tl.cast(0, tl.int32))
    else:
        probe = (0, 0, 0)
    return probe


@triton.jit
def put(probe, EVENT: tl.constexpr, KIND: tl.constexpr, tile, payload, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Write one record (event id, kind, tile, payload) at clock64 now; returns the advanced handle."""
    if XSTAGE:
        meta, records, n = probe
        _record(_slot_ptr(records, n, TRACE_CAP), tl.cast(tile, tl.int32), tl.cast(payload, tl.int32), EVENT, KIND,
                key=PTX_KEY)
        probe = (meta, records, n + 1)
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
        meta, records, n = probe
        _anchor(meta, n, True, key=PTX_KEY)


@triton.jit
def put_tile(probe, EVENT: tl.constexpr, KIND: tl.constexpr, tile, payload, K: tl.constexpr, PER_TILE: tl.constexpr,
             NUM_PROGRAMS: tl.constexpr, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Persistent-loop form of :func:`put` for a program that handles tiles p, p + NUM_PROGRAMS, …:
    record K of the PER_TILE records of ``tile`` goes to slot ((tile − p) / NUM_PROGRAMS)·PER_TILE + K,
    computed inside the probe, so no count is carried through the loop (docs/triton-probes.md)."""
    if XSTAGE:
        meta, records, n = probe
        tl.static_assert(K < PER_TILE, "xstage probe: record K of a tile needs 0 <= K < PER_TILE")
        slot = (tl.cast(tile, tl.uint32) // NUM_PROGRAMS).to(tl.int32) * PER_TILE + K
        _record(_slot_ptr(records, slot, TRACE_CAP), tl.cast(tile, tl.int32), tl.cast(payload, tl.int32), EVENT, KIND,
                key=PTX_KEY)


@triton.jit
def begin_tile(probe, EVENT: tl.constexpr, tile, K: tl.constexpr, PER_TILE: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
               TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """Begin record, persistent-loop form (see :func:`put_tile`)."""
    put_tile(probe, EVENT, 1, tile, 0, K, PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)


@triton.jit
def end_tile(probe, EVENT: tl.constexpr, tile, payload, K: tl.constexpr, PER_TILE: tl.constexpr,
             NUM_PROGRAMS: tl.constexpr, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """End record with payload, persistent-loop form (see :func:`put_tile`)."""
    put_tile(probe, EVENT, 2, tile, payload, K, PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)


@triton.jit
def stamp(XSTAGE: tl.constexpr):
    """clock64 now (0 when XSTAGE is off), for a record written later with :func:`put_stamped_tile`:
    the probe point costs the clock read alone, the record's store moves to where the kernel
    writes its stamps out (e.g. after the tile's output store)."""
    if XSTAGE:
        t = _clock(0, key=PTX_KEY)
    else:
        t = tl.cast(0, tl.int64)
    return t


@triton.jit
def put_stamped_tile(probe, EVENT: tl.constexpr, KIND: tl.constexpr, tile, payload, t, K: tl.constexpr,
                     PER_TILE: tl.constexpr, NUM_PROGRAMS: tl.constexpr, TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """:func:`put_tile` with the clock64 value ``t`` that :func:`stamp` read at the probe point."""
    if XSTAGE:
        meta, records, n = probe
        tl.static_assert(K < PER_TILE, "xstage probe: record K of a tile needs 0 <= K < PER_TILE")
        slot = (tl.cast(tile, tl.uint32) // NUM_PROGRAMS).to(tl.int32) * PER_TILE + K
        _stamped_record(_slot_ptr(records, slot, TRACE_CAP), t, tl.cast(tile, tl.int32), tl.cast(payload, tl.int32),
                        EVENT, KIND, key=PTX_KEY)


@triton.jit
def put_spans_tile(probe, tile, EVENT0: tl.constexpr, t0, t1, payload0, EVENT1: tl.constexpr, t2, t3, payload1,
                   K: tl.constexpr, PER_TILE: tl.constexpr, NUM_PROGRAMS: tl.constexpr, TRACE_CAP: tl.constexpr,
                   XSTAGE: tl.constexpr):
    """Records K..K+3 of ``tile`` (persistent-loop form) for two spans at once: ``EVENT0`` from
    stamp ``t0`` to ``t1`` (end payload ``payload0``), ``EVENT1`` from ``t2`` to ``t3`` (``payload1``),
    from :func:`stamp` values read at the probe points. One address and one thread-0 predicate for
    the four stores; a tile past the capacity writes its four records to the slice's spare slots."""
    if XSTAGE:
        meta, records, n = probe
        tl.static_assert(K + 4 <= PER_TILE, "xstage probe: records K..K+3 of a tile need K + 4 <= PER_TILE")
        slot = (tl.cast(tile, tl.uint32) // NUM_PROGRAMS).to(tl.int32) * PER_TILE + K
        _span_pair(_slot_ptr(records, slot, TRACE_CAP), t0, t1, t2, t3, tl.cast(tile, tl.int32),
                   tl.cast(payload0, tl.int32), tl.cast(payload1, tl.int32), EVENT0, EVENT1, key=PTX_KEY)


@triton.jit
def probe_close_tiles(probe, num_tiles, PER_TILE: tl.constexpr, NUM_PROGRAMS: tl.constexpr, XSTAGE: tl.constexpr):
    """Close a slice written in the persistent-loop form: count = this program's tiles × PER_TILE."""
    if XSTAGE:
        meta, records, n = probe
        _anchor(meta, tl.cast(num_tiles, tl.int32), True, PER_TILE, NUM_PROGRAMS, key=PTX_KEY)


def off_args() -> dict:
    """Kernel arguments of the probe-free build: no trace pointers (None constexprs), XSTAGE=False."""
    return {"trace_meta": None, "trace_records": None, "TRACE_CAP": 0, "XSTAGE": False}


class TraceBuffer:
    """Device trace buffer (torch) for ``num_programs`` slices of ``capacity`` records each (plus
    SPARE_SLOTS slots per slice on the device, see :func:`stored_records`)."""

    def __init__(self, num_programs: int, capacity: int, device=None):
        import torch

        self._torch = torch
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self.capacity = int(capacity)
        self.num_slices = int(num_programs)
        self.meta = torch.zeros(self.num_slices * META_WORDS, dtype=torch.int64, device=self.device)
        self.records = torch.zeros(self.num_slices * (self.capacity + SPARE_SLOTS) * RECORD_WORDS, dtype=torch.int64,
                                   device=self.device)

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

    def dump(self, path: str | Path, event_names: list[str], label: str = "", rank: int = 0) -> Path:
        """Copy the buffer back and write the ``.xsp`` dump (atomically)."""
        torch = self._torch
        torch.cuda.synchronize(self.device)
        props = torch.cuda.get_device_properties(self.device)
        index = self.device.index or 0
        records = stored_records(self.records.cpu().numpy(), self.num_slices, self.capacity)
        return write_dump(path, self.meta.cpu().numpy(), records, self.capacity, event_names,
                          gpu_name=props.name, sm_count=props.multi_processor_count, sm_clock_khz=_sm_clock_khz(index),
                          device_index=index, rank=rank, label=label)


def stored_records(device_words: np.ndarray, num_slices: int, capacity: int) -> np.ndarray:
    """The dump's record words from the device array the probes fill: each slice's first
    ``capacity`` slots, without its spare slots (which hold the last records past the capacity)."""
    slots = np.asarray(device_words, dtype=np.int64).reshape(num_slices, capacity + SPARE_SLOTS, RECORD_WORDS)
    return np.ascontiguousarray(slots[:, :capacity]).reshape(-1)


def write_dump(path: str | Path, meta_words: np.ndarray, record_words: np.ndarray, capacity: int, event_names: list[str],
               *, gpu_name: str, sm_count: int, sm_clock_khz: int, device_index: int = 0, rank: int = 0,
               label: str = "") -> Path:
    """Write the ``.xsp`` dump from the slice table and the stored records (int64 words; the records
    as :func:`stored_records` gives them, ``capacity`` per slice)."""
    meta = np.ascontiguousarray(meta_words, dtype=np.int64).view(SLICE_DTYPE)
    records = np.ascontiguousarray(record_words, dtype=np.int64).view(RECORD_DTYPE)
    write_probe_dump(path, slice_meta=meta, records=records, capacity=capacity, event_names=event_names,
                     gpu_name=gpu_name, sm_count=sm_count, sm_clock_khz=sm_clock_khz, roles_per_cta=1,
                     device_index=device_index, rank=rank, label=label)
    return Path(path)


def _sm_clock_khz(device_index: int) -> int:
    """Nominal SM clock (kHz) of the device, the decoder's fallback for slices too short to anchor."""
    driver = triton.runtime.driver.active
    return int(driver.utils.get_device_properties(device_index).get("sm_clock_rate", 0))
