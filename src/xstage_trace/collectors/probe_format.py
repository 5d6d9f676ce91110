"""Probe dump reader, format version 1 (docs/probe-format.md; layout in ``base/probe_layout.py``,
writer in ``instrument/probe_writer.py``).

The decoder maps the file once and views it through structured dtypes; every per-record step is a
numpy array operation (no Python loop over records).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xstage_trace.base.config import ConfigError, RunConfig
from xstage_trace.base.errors import InputError
from xstage_trace.base.paths import display_name, require_file
from xstage_trace.base.probe_layout import (CLOCK_MASK, EVENT_NAME_BYTES, FORMAT_VERSION, HEADER_DTYPE, KINDS, MAGIC,
                                             MIN_ANCHOR_SPAN_NS, RECORD_BYTES, RECORD_DTYPE, SLICE_DTYPE)
from xstage_trace.base.schema import PROBE_SLICES, PROBES

MMAP_MIN_BYTES = 8 << 20
# Plausible SM clocks: a header rate outside them is corrupt; a measured anchor rate outside them is
# not used (the slice falls back to the header's nominal clock).
MIN_SM_CLOCK_KHZ, MAX_SM_CLOCK_KHZ = 100_000, 10_000_000
MIN_NS_PER_CYCLE, MAX_NS_PER_CYCLE = 1e6 / MAX_SM_CLOCK_KHZ, 1e6 / MIN_SM_CLOCK_KHZ
# Records one dump may hold before it is refused from its header (the run tables and analyses take
# about BYTES_PER_RECORD of memory each); the environment variable raises the limit.
MAX_RECORDS_ENV = "XSTAGE_MAX_DUMP_RECORDS"
DEFAULT_MAX_RECORDS = 4 << 20
BYTES_PER_RECORD = 210


@dataclass
class ProbeDump:
    """One decoded dump: header fields, per-slice table, per-record table, warnings."""

    path: Path
    header: dict
    config: RunConfig
    event_names: list[str]
    slices: pa.Table
    records: pa.Table
    warnings: list[str] = field(default_factory=list)

    @property
    def span_gt_ns(self) -> tuple[int, int]:
        """The dump's probe span in raw %globaltimer ns (``dump_span_gt_ns`` of its slices)."""
        return dump_span_gt_ns(self.slices)

    def dumps_row(self) -> dict:
        """This dump's row of the ``dumps`` table: where it ran and its typed configuration."""
        h = self.header
        return dict(self.config.columns(), rank=h["rank"], dump=display_name(self.path.name), device_index=h["device_index"],
                    gpu_name=h["gpu_name"], sm_count=h["sm_count"], label=h["label"], kernel_index=None)


def dump_span_gt_ns(slices: pa.Table) -> tuple[int, int]:
    """A dump's probe span in raw %globaltimer ns: first slice open to last slice close (used slices)."""
    used = pc.greater(slices["records_stored"], 0)
    s = slices.filter(used) if pc.any(used).as_py() else slices
    closed = s.filter(s["closed"]) if pc.any(s["closed"]).as_py() else s
    return int(pc.min(s["open_gt_ns"]).as_py()), int(pc.max(closed["close_gt_ns"]).as_py())


def _constant(n: int, value: int) -> np.ndarray:
    """An int32 column of one value (filled in place: some allocators make np.full(…, 0) pages lazy)."""
    out = np.empty(n, np.int32)
    out.fill(value)
    return out


def _fail(path: Path, problem: str, fix: str) -> None:
    raise InputError(path, problem, fix)


def max_dump_records() -> int:
    """The per-dump record limit: $XSTAGE_MAX_DUMP_RECORDS, else DEFAULT_MAX_RECORDS."""
    from xstage_trace.base.limits import positive_int_env

    return positive_int_env(MAX_RECORDS_ENV, DEFAULT_MAX_RECORDS, "integer", "a record count")


def read_header(path: Path, raw: np.ndarray) -> tuple[np.void, list[str], np.ndarray]:
    """Validate and view the header, event table and slice table of a dump held in ``raw`` (uint8)."""
    regen = "re-run the instrumented program to write a fresh dump"
    if raw.size < HEADER_DTYPE.itemsize:
        _fail(path, f"truncated probe dump ({raw.size} bytes, the header alone is 448)", regen)
    h = raw[: HEADER_DTYPE.itemsize].view(HEADER_DTYPE)[0]
    if bytes(h["magic"]) != MAGIC:
        _fail(path, "not an xstage probe dump (bad magic)", "pass a .xsp file written by xstage/host.hpp or ProbeBuffer.dump")
    if int(h["version"]) != FORMAT_VERSION:
        _fail(
            path,
            f"probe dump format version {int(h['version'])} is not supported (this xstage-trace reads {FORMAT_VERSION})",
            "use the xstage-trace release that matches the probe header that wrote it",
        )
    if int(h["record_bytes"]) != RECORD_BYTES:
        _fail(path, f"corrupt probe dump header (record size {int(h['record_bytes'])}, expected 16)", regen)
    for name in ("rank", "device_index", "sm_count"):
        if not 0 <= int(h[name]) < 1 << 31:
            _fail(path, f"corrupt probe dump header ({name} {int(h[name])})", regen)
    n_ev, n_sl = int(h["num_events"]), int(h["num_slices"])
    expect_hdr = HEADER_DTYPE.itemsize + EVENT_NAME_BYTES * n_ev + SLICE_DTYPE.itemsize * n_sl
    if int(h["header_bytes"]) != expect_hdr or n_ev > 256:
        _fail(path, "corrupt probe dump header (table sizes disagree)", regen)
    if raw.size < expect_hdr:
        _fail(path, f"truncated probe dump ({raw.size} of at least {expect_hdr} header bytes)", regen)
    off = HEADER_DTYPE.itemsize
    names_raw = raw[off : off + EVENT_NAME_BYTES * n_ev].view(f"S{EVENT_NAME_BYTES}")
    names = [n.decode("utf-8", "replace") for n in names_raw]
    off += EVENT_NAME_BYTES * n_ev
    slices = raw[off : off + SLICE_DTYPE.itemsize * n_sl].view(SLICE_DTYPE)
    return h, names, slices


@dataclass
class _RecordColumns:
    slice_of: np.ndarray
    event: np.ndarray
    clock: np.ndarray
    t_gt: np.ndarray
    tile: np.ndarray
    payload: np.ndarray
    smid: np.ndarray
    bad: int = 0


PARALLEL_MIN_RECORDS = 1 << 20


def _record_columns(rec8: np.ndarray, sl: np.ndarray, stored: np.ndarray, npc: np.ndarray, num_events: int) -> _RecordColumns:
    """Per-record columns, computed in place in two halves on two threads for large dumps (numpy
    releases the GIL), split at a slice boundary.

    Records follow their slice's open anchor by less than 2^48 cycles (39 h at 2 GHz), so the cycles
    since the anchor are (low 48 bits − anchor) mod 2^48; times are int64 ns because float64 cannot
    hold epoch nanoseconds to better than 256 ns.
    """
    n = len(rec8)
    rec = rec8.reshape(-1).view(RECORD_DTYPE)
    out = _RecordColumns(np.empty(n, np.int32), np.empty(n, np.int16), np.empty(n, np.int64), np.empty(n, np.int64),
                         np.empty(n, np.uint32), np.empty(n, np.uint32), np.empty(n, np.int32))
    ends = np.cumsum(stored)
    anchor = sl["clk_open"].astype(np.int64)
    gt_open = sl["gt_open"].astype(np.int64)
    smid = sl["smid_open"].astype(np.int32)
    bad = [0, 0]

    def fill(part: int, s0: int, s1: int) -> None:
        lo, hi = (int(ends[s0 - 1]) if s0 else 0), (int(ends[s1 - 1]) if s1 else 0)
        if hi <= lo:
            return
        k = stored[s0:s1]
        out.slice_of[lo:hi] = np.repeat(np.arange(s0, s1, dtype=np.int32), k)
        ev = out.event[lo:hi]
        ev[:] = rec8[lo:hi, 6]
        bad[part] = int(np.count_nonzero((rec8[lo:hi, 7] > 2) | (ev >= num_events)))
        clock = out.clock[lo:hi]
        clock[:] = np.repeat(anchor[s0:s1], k)
        since = rec["ts_ev"][lo:hi].view(np.int64) - clock
        since &= CLOCK_MASK
        clock += since
        f = np.repeat(npc[s0:s1], k)
        f *= since
        t = out.t_gt[lo:hi]
        t[:] = f
        t += np.repeat(gt_open[s0:s1], k)
        out.tile[lo:hi] = rec["tile"][lo:hi]
        out.payload[lo:hi] = rec["payload"][lo:hi]
        out.smid[lo:hi] = np.repeat(smid[s0:s1], k)

    if n >= PARALLEL_MIN_RECORDS and len(stored) > 1:
        from concurrent.futures import ThreadPoolExecutor

        mid = int(np.clip(np.searchsorted(ends, n // 2), 1, len(stored) - 1))
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda a: fill(*a), [(0, 0, mid), (1, mid, len(stored))]))
    else:
        fill(0, 0, len(stored))
    out.bad = bad[0] + bad[1]
    return out


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PROBE_SUFFIXES = (".xsp", ".xsp.zst")


def is_probe_dump_name(name: str) -> bool:
    """True for a probe dump file name: ``*.xsp`` or its zstd-compressed form ``*.xsp.zst``."""
    return name.lower().endswith(PROBE_SUFFIXES)


def read_dump_bytes(path: Path, limit: int | None = None) -> np.ndarray:
    """A dump's bytes (its first ``limit`` bytes when given): memory-mapped when plain and large, read when
    small, decompressed when the file is a zstd frame (``.xsp.zst``, recognised by its magic whatever the name)."""
    path = require_file(path)  # a FIFO or device would block or never end
    try:
        with open(path, "rb") as fh:
            compressed = fh.read(4) == ZSTD_MAGIC
            if limit is not None and not compressed:
                fh.seek(0)
                return np.frombuffer(fh.read(limit), dtype=np.uint8)
        if compressed:
            try:
                return _read_zstd_dump(path, limit)
            except (OSError, pa.ArrowException) as exc:
                _fail(path, f"corrupt zstd-compressed probe dump ({exc})", "copy the whole file again or decompress it with zstd -d and pass the .xsp")
        # Large dumps are mapped (no copy; pages come in as the columns are computed), small ones read.
        size = path.stat().st_size
        return np.memmap(path, dtype=np.uint8, mode="r") if size >= MMAP_MIN_BYTES else np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise InputError(path, f"cannot read probe dump ({exc.strerror or exc})", "check the path and its permissions") from None


def _table_bytes(path: Path, h: np.void) -> int:
    """The size of a dump's header, event-name and slice tables from its header, decided before they are
    allocated (a slice count over the record limit is refused: no real dump has more slices than records)."""
    n_ev, n_sl = int(h["num_events"]), int(h["num_slices"])
    if n_ev > 256 or n_sl > max_dump_records():
        _fail(path, f"corrupt probe dump header ({n_ev} events, {n_sl} slices)", "re-run the instrumented program to write a fresh dump")
    return HEADER_DTYPE.itemsize + EVENT_NAME_BYTES * n_ev + SLICE_DTYPE.itemsize * n_sl


def _read_zstd_dump(path: Path, limit: int | None) -> np.ndarray:
    """A ``.xsp.zst`` dump decompressed as a stream, never past a cap decided before allocating: the
    header's tables, then the records its slices declare (at most $XSTAGE_MAX_DUMP_RECORDS); a frame
    that declares (or turns out to hold) more than that is refused, so a decompression bomb costs
    nothing. ``limit``: only that many leading bytes (header reads)."""
    from xstage_trace.collectors.compressed import zstd_content_size

    with pa.input_stream(str(path), compression="zstd") as fh:
        head = fh.read(HEADER_DTYPE.itemsize if limit is None else min(limit, HEADER_DTYPE.itemsize))
        if len(head) < HEADER_DTYPE.itemsize or bytes(head[:8]) != MAGIC:
            return np.frombuffer(head, dtype=np.uint8)  # read_header names what is wrong
        h = np.frombuffer(head, HEADER_DTYPE)[0]
        tables = _table_bytes(path, h)
        if limit is not None:
            return np.frombuffer(head + fh.read(max(0, min(limit, tables) - len(head))), dtype=np.uint8)
        raw = head + fh.read(tables - len(head))
        if len(raw) < tables:
            return np.frombuffer(raw, dtype=np.uint8)  # truncated: decode_probe_dump says so
        sl = np.frombuffer(raw[tables - SLICE_DTYPE.itemsize * int(h["num_slices"]):], SLICE_DTYPE)
        stored = int(np.minimum(sl["count"].astype(np.int64), int(h["capacity"])).sum())
        records = max_dump_records()
        if stored > records:
            _fail(path, f"dump holds {stored} records, more than the {records} one dump may hold (analysis needs about {stored * BYTES_PER_RECORD / 1e9:.1f} GB of memory)",
                  f"set {MAX_RECORDS_ENV}={stored} if this machine has the memory, or capture fewer records (smaller capacity or fewer slices)")
        need = tables + RECORD_BYTES * stored
        declared = zstd_content_size(path)
        if declared is not None and declared != need:
            _fail(path, f"corrupt probe dump (its zstd frame declares {declared} bytes, its header {need})", "re-run the instrumented program to write a fresh dump")
        out = np.empty(need, dtype=np.uint8)  # the one allocation, of the size the header allows
        out[:tables] = np.frombuffer(raw, dtype=np.uint8)
        got, view = tables, memoryview(out)
        while got < need and (n := fh.readinto(view[got:])):
            got += n
        if got == need and fh.read(1):
            _fail(path, "corrupt probe dump (bytes beyond the last record)", "re-run the instrumented program to write a fresh dump")
    return out[:got]


def _header_bytes(path: Path) -> np.ndarray:
    """The header, event-name and slice tables of a dump, without its records."""
    head = read_dump_bytes(path, HEADER_DTYPE.itemsize)
    if head.size < HEADER_DTYPE.itemsize:
        _fail(path, f"truncated probe dump ({head.size} bytes)", "copy the whole file again or re-run the instrumented program")
    need = int(head[: HEADER_DTYPE.itemsize].view(HEADER_DTYPE)[0]["header_bytes"])
    return read_dump_bytes(path, max(need, HEADER_DTYPE.itemsize))


def decode_probe_dump(path: str | Path, rank: int | None = None, allow_overflow: bool = False, records: bool = True) -> ProbeDump:
    """Decode one dump into Arrow tables (per-slice and per-record), clock64 converted to ns per SM.
    With ``records=False`` only the header and slice tables are read (the records table comes back empty):
    what pairing and the plan of a streaming analyze need."""
    path = Path(path)
    raw = read_dump_bytes(path) if records else _header_bytes(path)
    h, names, sl = read_header(path, raw)
    if len(sl) == 0:  # nothing places it in time: no kernel could be said to hold it
        _fail(path, "holds no probe slices (no CTA opened one)", "re-run the instrumented program with the probes compiled in (-DXSTAGE_TRACE), or leave this dump out")
    warnings: list[str] = []
    cap = int(h["capacity"])
    count = sl["count"].astype(np.int64)
    stored = np.minimum(count, cap)
    dropped = count - stored
    hdr_bytes = int(h["header_bytes"])
    need = hdr_bytes + RECORD_BYTES * int(stored.sum())
    rec_stored = stored if records else np.zeros_like(stored)  # header only: no record columns
    if not records:
        raw, need = raw[:hdr_bytes], hdr_bytes
    if records and raw.size < need:
        _fail(path, f"truncated probe dump ({raw.size} of {need} bytes)", "copy the whole file again or re-run the instrumented program")
    if records and raw.size > need:
        _fail(path, f"corrupt probe dump ({raw.size - need} bytes beyond the last record)", "re-run the instrumented program to write a fresh dump")
    limit = max_dump_records()
    if int(stored.sum()) > limit:
        n = int(stored.sum())
        _fail(path, f"dump holds {n} records, more than the {limit} one dump may hold (analysis needs about {n * BYTES_PER_RECORD / 1e9:.1f} GB of memory)",
              f"set {MAX_RECORDS_ENV}={n} if this machine has the memory, or capture fewer records (smaller capacity or fewer slices)")
    khz = int(h["sm_clock_khz"])
    if not MIN_SM_CLOCK_KHZ <= khz <= MAX_SM_CLOCK_KHZ:
        _fail(path, f"corrupt probe dump header (SM clock {khz} kHz is outside {MIN_SM_CLOCK_KHZ}-{MAX_SM_CLOCK_KHZ} kHz)", "re-run the instrumented program to write a fresh dump")
    if dropped.any():
        msg = (
            f"probe buffer overflowed: {int(dropped.sum())} records dropped in {int((dropped > 0).sum())} "
            f"of {len(count)} slices (capacity {cap} records per slice)"
        )
        if not allow_overflow:
            _fail(path, msg, "raise the capacity passed to HostBuffer/ProbeBuffer, or pass --allow-overflow to analyze what was kept")
        warnings.append(f"{path.name}: {msg}")

    rec8 = raw[hdr_bytes:need].reshape(-1, RECORD_BYTES)
    closed = sl["closed"].astype(bool)
    opened = sl["gt_open"] != 0
    # the difference in integers first: float64 holds epoch ns only to 256 ns (an anchor span of 100 µs would be 0.26 % off)
    span_ns = (sl["gt_close"].astype(np.int64) - sl["gt_open"].astype(np.int64)).astype(np.float64)
    span_cyc = sl["clk_close"].astype(np.float64) - sl["clk_open"].astype(np.float64)
    nominal = 1e6 / khz
    measured = span_ns / np.where(span_cyc > 0, span_cyc, 1.0)
    implausible = closed & opened & (span_ns >= MIN_ANCHOR_SPAN_NS) & (span_cyc > 0) & ~((measured >= MIN_NS_PER_CYCLE) & (measured <= MAX_NS_PER_CYCLE))
    good = closed & opened & (span_ns >= MIN_ANCHOR_SPAN_NS) & (span_cyc > 0) & ~implausible
    npc = np.where(good, measured, nominal)
    used = stored > 0
    if (used & ~closed).any():
        warnings.append(f"{path.name}: {int((used & ~closed).sum())} slices were never closed (kernel exited early?); their times use the nominal SM clock")
    elif (used & ~good & ~implausible).any():  # the implausible ones have their own warning
        warnings.append(f"{path.name}: {int((used & ~good & ~implausible).sum())} slices ran under {MIN_ANCHOR_SPAN_NS // 1000} µs "
                        "or have anchors that give no clock rate; their clock64→ns uses the nominal SM clock")
    if (used & implausible).any():
        warnings.append(f"{path.name}: {int((used & implausible).sum())} slices have anchors implying a clock outside "
                        f"{MIN_SM_CLOCK_KHZ // 1000}-{MAX_SM_CLOCK_KHZ // 1000} MHz; their times use the nominal SM clock")
    moved = used & closed & (sl["smid_open"] != sl["smid_close"])
    if moved.any():
        warnings.append(f"{path.name}: {int(moved.sum())} slices changed SM between open and close")

    cols = _record_columns(rec8, sl, rec_stored, npc, len(names))
    if cols.bad:
        _fail(path, f"corrupt probe dump ({cols.bad} records with unknown event or kind)", "re-run the instrumented program; check that it registers every event id it uses")
    slice_of, event, kind, clock, t_gt = cols.slice_of, cols.event, rec8[:, 7].view(np.int8), cols.clock, cols.t_gt
    roles = max(int(h["roles_per_cta"]), 1)
    rank_v = int(h["rank"]) if rank is None else rank
    n = len(rec8)
    dump_name = display_name(path.name)  # a name that is not UTF-8 still fits an Arrow string
    cta = slice_of // roles if roles > 1 else slice_of
    zeros = pa.array(_constant(n, 0))  # dictionary index of the one dump name; the rank too when 0
    records = pa.Table.from_arrays(
        [
            zeros if rank_v == 0 else pa.array(_constant(n, rank_v)),
            pa.DictionaryArray.from_arrays(zeros, pa.array([dump_name])),
            pa.array(slice_of),
            pa.array(cta),
            pa.array(slice_of - cta * roles),
            pa.array(cols.smid),
            pa.DictionaryArray.from_arrays(pa.array(event.astype(np.int32)), pa.array(names or [""])),
            pa.array(event),
            pa.DictionaryArray.from_arrays(pa.array(kind), pa.array(list(KINDS))),
            pa.array(cols.tile),
            pa.array(cols.payload),
            pa.array(clock),
            pa.array(t_gt),
            pa.nulls(n, pa.float64()),
        ],
        schema=PROBES,
    )
    label_text = bytes(h["label"]).split(b"\0", 1)[0].decode("utf-8", "replace")
    try:
        config = RunConfig.from_label(label_text)
    except ConfigError as exc:
        _fail(path, f"bad run configuration in the dump label: {exc}", "write key=value words into the label (docs/probe-format.md, section Label)")
    if config.rank is not None and config.rank != int(h["rank"]):
        _fail(path, f"label says rank={config.rank} but the header says rank {int(h['rank'])}", "pass the same rank to HostBuffer/ProbeBuffer and to the label")
    ids = np.arange(len(count), dtype=np.int32)
    slices = pa.Table.from_arrays(
        [
            pa.array(np.full(len(count), rank_v, np.int32)),
            pa.array([dump_name] * len(count)),
            pa.array([label_text] * len(count)),
            pa.array(ids),
            pa.array(ids // roles),
            pa.array(ids % roles),
            pa.array(sl["smid_open"].astype(np.int32)),
            pa.array(stored),
            pa.array(dropped),
            pa.array(closed),
            pa.array(sl["gt_open"].astype(np.int64)),
            pa.array(sl["gt_close"].astype(np.int64)),
            pa.array(npc),
        ],
        schema=PROBE_SLICES,
    )
    header = {
        "gpu_name": bytes(h["gpu_name"]).split(b"\0", 1)[0].decode("utf-8", "replace"),
        "sm_count": int(h["sm_count"]),
        "sm_clock_khz": khz,
        "device_index": int(h["device_index"]),
        "rank": rank_v,
        "num_slices": int(h["num_slices"]),
        "roles_per_cta": roles,
        "capacity": cap,
        "version": int(h["version"]),
        "label": label_text,
    }
    return ProbeDump(
        path=path,
        header=header,
        config=config,
        event_names=names,
        slices=slices,
        records=records,
        warnings=warnings,
    )
