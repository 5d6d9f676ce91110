"""Which nsys export holds which probe dumps, decided by the data, never by the order of the inputs.

Dumps are grouped by (rank, GPU) from their headers. An export holds a group when it traced kernels
on that GPU and every dump of the group lies inside one of those kernels under a single clock mapping
whose offset and drift a real capture allows (``AlignBounds``: CUPTI and %globaltimer differ by well
under a millisecond and drift by a few ppm; the limits leave an order of magnitude of room). A group
that no export holds is an error naming the dump and each report with the reason it was refused; so
is a group that two different exports both hold. An export's rank is the rank of the dumps it holds,
or what ``--rank REPORT=N`` says for an export that holds none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from xstage_trace.base.errors import InputError
from xstage_trace.collectors.align import Alignment, align_dumps


@dataclass(frozen=True)
class AlignBounds:
    """What a real capture allows between probe %globaltimer and the nsys clock."""

    max_offset_ns: float = 50e6
    max_drift_ppm: float = 200.0

    def __post_init__(self):
        if not (self.max_offset_ns > 0 and self.max_drift_ppm > 0):
            raise ValueError("alignment bounds must be positive")


@dataclass
class Pairing:
    """One (rank, GPU) group of dumps and the export that holds it."""

    rank: int
    device: int
    export_index: int
    dump_indices: list[int]
    alignment: Alignment
    epoch_ns: int


MAX_RESOLUTION_NS = 1000.0  # %globaltimer ticks at 1 µs at worst (32 ns on recent GPUs); nsys at 1 ns


def clock_resolution_ns(times_ns: np.ndarray) -> float:
    """A clock's tick as its readings show it: the largest power of two (≤ MAX_RESOLUTION_NS) that divides
    every reading (1 ns for a clock with ns resolution). The tolerance of a clock mapping is the sum of
    both clocks' ticks: a dump cannot be placed more precisely than that, however many dumps there are."""
    t = np.asarray(times_ns)
    t = t[np.isfinite(t)].astype(np.int64) if t.dtype.kind == "f" else t.astype(np.int64)
    if t.size == 0:
        return 1.0
    tick = 1
    while tick * 2 <= MAX_RESOLUTION_NS and not np.any(t % (tick * 2)):
        tick *= 2
    return float(tick)


def _try(export, device: int, spans_gt: np.ndarray, bounds: AlignBounds) -> tuple[Alignment | None, str]:
    """Align one group against one export: (alignment, "") when it holds the group, else (None, why)."""
    if export.utc_epoch_ns is None:
        return None, "has no session start time (UTC)"
    k = export.kernels
    on_dev = k.filter(pc.equal(k["device_id"], device)) if k.num_rows else k
    if on_dev.num_rows == 0:
        return None, f"traced no kernel on GPU {device}"
    # Relative to the session start in integers first: float64 cannot hold epoch ns exactly.
    rel = (spans_gt - np.int64(export.utc_epoch_ns)).astype(np.float64)
    ks = on_dev["start_ns"].to_numpy(zero_copy_only=False).astype(np.float64)
    ke = on_dev["end_ns"].to_numpy(zero_copy_only=False).astype(np.float64)
    a = align_dumps(rel[:, 0], rel[:, 1], ks, ke)
    if a.dumps_matched < a.dumps_total:
        return None, f"holds {a.dumps_matched} of {a.dumps_total} dumps inside its kernels on GPU {device}"
    if abs(a.offset_ns) > bounds.max_offset_ns:
        return None, f"fits them only {a.offset_ns / 1e6:.1f} ms off its clock (a capture allows {bounds.max_offset_ns / 1e6:g} ms)"
    if abs(a.drift) * 1e6 > bounds.max_drift_ppm:
        return None, f"fits them only with a drift of {a.drift * 1e6:.0f} ppm (a capture allows {bounds.max_drift_ppm:g})"
    tolerance = clock_resolution_ns(spans_gt.ravel()) + clock_resolution_ns(np.r_[ks, ke])
    if a.residual_ns > tolerance:
        return None, (f"fits each dump but no single clock line places them all (residual {a.residual_ns:.0f} ns, "
                      f"more than the clocks' resolution of {tolerance:.0f} ns)")
    # Index into this export's kernel table (not the device-filtered one).
    dev_rows = np.flatnonzero(k["device_id"].to_numpy(zero_copy_only=False) == device)
    a.kernel_of_dump = np.where(a.kernel_of_dump >= 0, dev_rows[np.maximum(a.kernel_of_dump, 0)], -1)
    return a, ""


def pair_dumps(exports: list, dumps: list, bounds: AlignBounds = AlignBounds()) -> list[Pairing]:
    """Pair every (rank, GPU) group of dumps with the one export that holds it (see the module text). A dump
    is anything with ``header`` (rank, device_index), ``path`` and ``span_gt_ns`` (a ProbeDump, a DumpHeader)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, d in enumerate(dumps):
        groups.setdefault((d.header["rank"], d.header["device_index"]), []).append(i)
    out = []
    for (rank, device), idx in sorted(groups.items()):
        spans = np.array([dumps[i].span_gt_ns for i in idx], dtype=np.int64)
        held, refused = [], []
        for e_i, e in enumerate(exports):
            a, why = _try(e, device, spans, bounds)
            if a is None:
                refused.append(f"{Path(e.path).name} {why}")
            else:
                held.append((e_i, a))
        first = dumps[idx[0]].path
        if not held:
            raise InputError(first, f"no nsys report holds the probe dumps of rank {rank} on GPU {device} ({'; '.join(refused)})",
                             "pass the report captured together with these dumps, or the dumps alone to analyze them on the probes' own clock")
        if len(held) > 1:
            names = ", ".join(Path(exports[e_i].path).name for e_i, _ in held)
            raise InputError(first, f"the probe dumps of rank {rank} on GPU {device} fit in several reports ({names})",
                             "pass only the report captured together with these dumps")
        e_i, a = held[0]
        out.append(Pairing(rank, device, e_i, idx, a, int(exports[e_i].utc_epoch_ns)))
    return out


def export_ranks(exports: list, pairings: list[Pairing], overrides: dict[str, int]) -> list[dict[int, int]]:
    """Per export, GPU → rank: from the dumps it holds, else from ``--rank REPORT=N``, else rank 0 when it
    is the only export. An override that contradicts the dumps, or an export whose rank cannot be told, is an error."""
    out: list[dict[int, int]] = []
    for e_i, e in enumerate(exports):
        mine = {p.device: p.rank for p in pairings if p.export_index == e_i}
        name = Path(e.path).name
        forced = overrides.get(name, overrides.get(str(e.path)))
        if forced is not None and any(r != forced for r in mine.values()):
            raise InputError(e.path, f"--rank says {forced} but its probe dumps say rank {sorted(set(mine.values()))}",
                             "drop the --rank for this report or fix it")
        if not mine:
            if forced is None and len(exports) > 1:
                raise InputError(e.path, "holds no probe dumps, so its rank cannot be told from the data",
                                 f"name it: --rank {name}=N")
            mine = {-1: forced if forced is not None else 0}  # -1: every GPU of this export
        out.append(mine)
    return out


def parse_rank_overrides(items: list[str]) -> dict[str, int]:
    """``REPORT=N`` options → {report name or path: rank}."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        if not sep or not name or not value.isdigit():
            raise InputError(None, f"--rank {item!r} is not REPORT=N", "write e.g. --rank run_rank1.nsys-rep=1")
        out[name] = int(value)
    return out
