"""FlashAttention-4 per-tile rows (recipe ``fa4``) to probe dumps (docs/probe-format.md).

The fa4 probes (instrument/targets/fa4/files/flash_attn/cute/xstage_probe.py) write one int64 row per
output tile into a tensor of shape ``(batch, heads, m_blocks, 8)``: the linear CTA id, ``%clock64``
at tile start / after the Q-tile loop / after the epilogue, ``%globaltimer`` at tile start / after
the epilogue, ``%smid``, and 1 where the row was written. FA4's sm_90 forward launches one CTA per
tile (not persistent), so a dump slice is an SM, not a CTA: the tiles each SM ran, in clock order
(``clock64`` is per SM and runs on across the CTAs it hosts), with the SM's first tile start and
last tile end as the slice's (globaltimer, clock64) anchors. Per tile four records: ``mainloop``
begin / end and ``epilogue`` begin / end (the epilogue begins at the mainloop's end clock), the tile
id packed as FA3's recipe packs it (:func:`xstage_trace.analysis.piggyback.decode_tile_id`: m block
in bits 0..11, head 12..23, batch 24..31), so ``analyze`` and ``piggyback`` read FA4 dumps as they
read FA3's. The header's SM clock is the median of the slices' measured rates (cycles per
globaltimer ns); slices shorter than the decoder's anchor span fall back to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xstage_trace.base.errors import InputError
from xstage_trace.base.probe_layout import CLOCK_MASK, MIN_ANCHOR_SPAN_NS, RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.instrument.probe_writer import write_probe_dump

RECORD_FIELDS = 8
CTA, CLK_BEGIN, CLK_MAINLOOP, CLK_END, GT_BEGIN, GT_END, SMID, WRITTEN = range(RECORD_FIELDS)
EVENT_NAMES = ["mainloop", "epilogue"]
RECORDS_PER_TILE = 4
_KIND_BEGIN, _KIND_END = 1, 2
# FA3's tile-id packing (fields' widths), which the piggyback audit decodes
M_BITS, HEAD_BITS, BATCH_BITS = 12, 12, 8


def pack_tile_ids(batch: np.ndarray, head: np.ndarray, m_block: np.ndarray) -> np.ndarray:
    """uint32 tile ids ``m | head << 12 | batch << 24``; None where a field does not fit."""
    b, h, m = (np.asarray(x, dtype=np.int64) for x in (batch, head, m_block))
    fits = (m >= 0) & (m < 1 << M_BITS) & (h >= 0) & (h < 1 << HEAD_BITS) & (b >= 0) & (b < 1 << BATCH_BITS)
    if not fits.all():
        return None
    return (m | (h << M_BITS) | (b << (M_BITS + HEAD_BITS))).astype(np.uint32)


def _check(path: Path | None, rows: np.ndarray) -> np.ndarray:
    """The mask of written rows (batch, heads, m_blocks), or InputError for rows of another shape or none written."""
    fix = "pass the (batch, heads, m_blocks, 8) int64 tensor the fa4 probes filled (sample_traces/h200_fa4/run/bench.py saves it)"
    if rows.ndim != 4 or rows.shape[-1] != RECORD_FIELDS or rows.dtype != np.int64:
        raise InputError(path, f"FA4 rows have shape {rows.shape} and dtype {rows.dtype}, expected (batch, heads, m_blocks, 8) int64", fix)
    written = rows[..., WRITTEN] == 1
    if not written.any():
        raise InputError(path, "no FA4 row is marked written (field 7 == 1): the kernel ran untraced or without the record tensor",
                         "import flash_attn.cute with XSTAGE_TRACE=1 and pass the zeroed tensor as the last aux tensor")
    return written


def rows_to_slices(rows: np.ndarray, path: Path | None = None) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Slice meta (SLICE_DTYPE, one per SM, ascending %smid), capacity-strided records (RECORD_DTYPE,
    shape (slices, capacity)), the capacity, and the header's SM clock (kHz) from FA4 rows."""
    written = _check(path, rows)
    b, h, m = np.nonzero(written)
    r = rows[written]
    ids = pack_tile_ids(b, h, m)
    if ids is None:
        raise InputError(path, f"FA4 tile indices up to batch {b.max()}, head {h.max()}, m block {m.max()} do not fit the 8/12/12-bit tile id",
                         "trace fewer than 256 sequences, 4096 heads and 4096 m blocks per launch")
    order = np.lexsort((r[:, CLK_BEGIN], r[:, SMID]))
    r, ids = r[order], ids[order]
    sm, first, per_sm = np.unique(r[:, SMID], return_index=True, return_counts=True)
    last = first + per_sm - 1
    capacity = int(per_sm.max()) * RECORDS_PER_TILE
    meta = np.zeros(len(sm), SLICE_DTYPE)
    meta["count"] = per_sm * RECORDS_PER_TILE
    meta["closed"] = 1
    meta["smid_open"] = meta["smid_close"] = sm
    meta["gt_open"], meta["clk_open"] = r[first, GT_BEGIN], r[first, CLK_BEGIN]
    meta["gt_close"], meta["clk_close"] = r[last, GT_END], r[last, CLK_END]
    # per tile: mainloop begin, mainloop end, epilogue begin (= mainloop end), epilogue end
    clocks = r[:, [CLK_BEGIN, CLK_MAINLOOP, CLK_MAINLOOP, CLK_END]].astype(np.uint64) & np.uint64(CLOCK_MASK)
    events = np.array([0, 0, 1, 1], np.uint64) << np.uint64(48)
    kinds = np.array([_KIND_BEGIN, _KIND_END, _KIND_BEGIN, _KIND_END], np.uint64) << np.uint64(56)
    recs = np.zeros((len(r), RECORDS_PER_TILE), RECORD_DTYPE)
    recs["ts_ev"] = clocks | events | kinds
    recs["tile"] = ids[:, None]
    slot = np.arange(len(r)) - np.repeat(first, per_sm)  # the tile's position on its SM
    out = np.zeros((len(sm), capacity), RECORD_DTYPE)
    out.reshape(len(sm), -1, RECORDS_PER_TILE)[np.repeat(np.arange(len(sm)), per_sm), slot] = recs
    span_ns = (meta["gt_close"] - meta["gt_open"]).astype(np.float64)
    span_cyc = (meta["clk_close"] - meta["clk_open"]).astype(np.float64)
    good = (span_ns >= MIN_ANCHOR_SPAN_NS) & (span_cyc > 0)
    rate = span_cyc[good] / span_ns[good] if good.any() else (span_cyc / np.maximum(span_ns, 1.0))[span_cyc > 0]
    if not len(rate):
        raise InputError(path, "no SM's FA4 rows span any clock cycles: the clock fields are not clock64 reads", "re-run the traced kernel")
    return meta, out, capacity, int(round(float(np.median(rate)) * 1e6))


def write_fa4_dump(path: str | Path, rows: np.ndarray, *, gpu_name: str, sm_count: int, label: str,
                   source: Path | None = None) -> dict:
    """Write one probe dump from FA4 rows (atomically); returns slices, tiles and the SM clock written."""
    meta, records, capacity, khz = rows_to_slices(np.asarray(rows), source)
    write_probe_dump(path, slice_meta=meta, records=records, capacity=capacity, event_names=EVENT_NAMES,
                     gpu_name=gpu_name, sm_count=sm_count, sm_clock_khz=khz, label=label)
    return {"slices": len(meta), "tiles": int(meta["count"].sum()) // RECORDS_PER_TILE, "sm_clock_khz": khz}
