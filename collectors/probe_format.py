"""Probe dump format, version 1 (docs/probe-format.md): numpy dtypes, decoder and writer.

The decoder maps the file once and views it through structured dtypes; every per-record step is a
numpy array operation (no Python loop over records).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from xstage_trace.atomic import atomic_file
from xstage_trace.errors import InputError
from xstage_trace.schema import conform

MAGIC = b"XSTPROBE"
FORMAT_VERSION = 1
RECORD_BYTES = 16
EVENT_NAME_BYTES = 32
KINDS = ("mark", "begin", "end")
CLOCK_BITS = 48
CLOCK_MASK = (1 << CLOCK_BITS) - 1
# Below this anchor span the 32 ns %globaltimer tick makes a poor clock-rate estimate.
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


@dataclass
class ProbeDump:
    """One decoded dump: header fields, per-slice table, per-record table, warnings."""

    path: Path
    header: dict
    label: dict
    event_names: list[str]
    slices: pa.Table
    records: pa.Table
    warnings: list[str] = field(default_factory=list)


def parse_label(text: str) -> dict:
    """'k=v k=v' → {k: v}; values that look numeric become numbers."""
    out: dict = {}
    for token in text.split():
        if "=" not in token:
            continue
        key, value = token.split("=", 1)
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def _fail(path: Path, problem: str, fix: str) -> None:
    raise InputError(path, problem, fix)


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


def decode_probe_dump(path: str | Path, rank: int | None = None, allow_overflow: bool = False) -> ProbeDump:
    """Decode one dump into Arrow tables (per-slice and per-record), clock64 converted to ns per SM."""
    path = Path(path)
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise InputError(path, f"cannot read probe dump ({exc.strerror or exc})", "check the path and its permissions") from None
    h, names, sl = read_header(path, raw)
    warnings: list[str] = []
    cap = int(h["capacity"])
    count = sl["count"].astype(np.int64)
    stored = np.minimum(count, cap)
    dropped = count - stored
    hdr_bytes = int(h["header_bytes"])
    need = hdr_bytes + RECORD_BYTES * int(stored.sum())
    if raw.size < need:
        _fail(path, f"truncated probe dump ({raw.size} of {need} bytes)", "copy the whole file again or re-run the instrumented program")
    if raw.size > need:
        _fail(path, f"corrupt probe dump ({raw.size - need} bytes beyond the last record)", "re-run the instrumented program to write a fresh dump")
    if dropped.any():
        msg = (
            f"probe buffer overflowed: {int(dropped.sum())} records dropped in {int((dropped > 0).sum())} "
            f"of {len(count)} slices (capacity {cap} records per slice)"
        )
        if not allow_overflow:
            _fail(path, msg, "raise the capacity passed to HostBuffer/ProbeBuffer, or pass --allow-overflow to analyze what was kept")
        warnings.append(f"{path.name}: {msg}")

    rec = raw[hdr_bytes:need].view(RECORD_DTYPE)
    slice_of = np.repeat(np.arange(len(count), dtype=np.int32), stored)
    ts_ev = rec["ts_ev"]
    kind = ((ts_ev >> np.uint64(56)) & np.uint64(0x3)).astype(np.int8)
    event = ((ts_ev >> np.uint64(48)) & np.uint64(0xFF)).astype(np.int16)
    bad = (kind > 2) | (event >= len(names)) | ((ts_ev >> np.uint64(58)) != 0)
    if bad.any():
        _fail(path, f"corrupt probe dump ({int(bad.sum())} records with unknown event or kind)", "re-run the instrumented program; check that it registers every event id it uses")

    clk_open = sl["clk_open"].astype(np.int64)
    low = (ts_ev & np.uint64(CLOCK_MASK)).astype(np.int64)
    anchor = clk_open[slice_of]
    clock = (anchor & ~np.int64(CLOCK_MASK)) | low
    clock = np.where(clock < anchor - (1 << (CLOCK_BITS - 1)), clock + (1 << CLOCK_BITS), clock)

    closed = sl["closed"].astype(bool)
    opened = sl["gt_open"] != 0
    span_ns = sl["gt_close"].astype(np.float64) - sl["gt_open"].astype(np.float64)
    span_cyc = sl["clk_close"].astype(np.float64) - sl["clk_open"].astype(np.float64)
    khz = int(h["sm_clock_khz"])
    nominal = 1e6 / khz if khz else np.nan
    good = closed & opened & (span_ns >= MIN_ANCHOR_SPAN_NS) & (span_cyc > 0)
    npc = np.where(good, span_ns / np.where(span_cyc > 0, span_cyc, 1.0), nominal)
    used = stored > 0
    if (used & ~closed).any():
        warnings.append(f"{path.name}: {int((used & ~closed).sum())} slices were never closed (kernel exited early?); their times use the nominal SM clock")
    elif (used & ~good).any():
        warnings.append(f"{path.name}: {int((used & ~good).sum())} slices ran under {MIN_ANCHOR_SPAN_NS // 1000} µs; their clock64→ns uses the nominal SM clock")
    moved = used & closed & (sl["smid_open"] != sl["smid_close"])
    if moved.any():
        warnings.append(f"{path.name}: {int(moved.sum())} slices changed SM between open and close")

    # int64 ns: float64 cannot hold epoch nanoseconds to better than 256 ns.
    t_gt = sl["gt_open"].astype(np.int64)[slice_of] + np.rint((clock - anchor) * npc[slice_of]).astype(np.int64)
    roles = max(int(h["roles_per_cta"]), 1)
    rank_v = int(h["rank"]) if rank is None else rank
    n = len(rec)
    dump_name = path.name
    records = pa.table(
        {
            "rank": pa.array(np.full(n, rank_v, np.int32)),
            "dump": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([dump_name])),
            "slice": pa.array(slice_of),
            "cta": pa.array(slice_of // roles),
            "role": pa.array(slice_of % roles),
            "sm_id": pa.array(sl["smid_open"].astype(np.int32)[slice_of]),
            "event": pa.DictionaryArray.from_arrays(pa.array(event.astype(np.int32)), pa.array(names or [""])),
            "event_id": pa.array(event),
            "kind": pa.DictionaryArray.from_arrays(pa.array(kind), pa.array(list(KINDS))),
            "tile": pa.array(rec["tile"].astype(np.int64)),
            "payload": pa.array(rec["payload"].astype(np.int64)),
            "clock": pa.array(clock),
            "t_gt_ns": pa.array(t_gt),
            "t_ns": pa.nulls(n, pa.float64()),
        }
    )
    label_text = bytes(h["label"]).split(b"\0", 1)[0].decode("utf-8", "replace")
    slices = pa.table(
        {
            "rank": np.full(len(count), rank_v, np.int32),
            "dump": [dump_name] * len(count),
            "label": [label_text] * len(count),
            "slice": np.arange(len(count), dtype=np.int32),
            "cta": np.arange(len(count), dtype=np.int32) // roles,
            "role": np.arange(len(count), dtype=np.int32) % roles,
            "sm_id": sl["smid_open"].astype(np.int32),
            "records_stored": stored,
            "records_dropped": dropped,
            "closed": closed,
            "open_gt_ns": sl["gt_open"].astype(np.int64),
            "close_gt_ns": sl["gt_close"].astype(np.int64),
            "ns_per_cycle": npc,
        }
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
        label=parse_label(label_text),
        event_names=names,
        slices=conform("probe_slices", slices),
        records=conform("probes", records),
        warnings=warnings,
    )


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
