"""Inputs (nsys reports and exports, probe dumps, run folders) → one set of run-dataset tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from xstage_trace import __version__
from xstage_trace.collectors.dataset import is_run_dir, read_run
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.collectors.nsys_rep import export_report
from xstage_trace.collectors.pairing import AlignBounds, Pairing, export_ranks, pair_dumps
from xstage_trace.base.hashing import sha256_of
from xstage_trace.collectors.probe_format import decode_probe_dump, is_probe_dump_name
from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import TABLES, conform, empty_table



@dataclass
class Collected:
    """Tables of one run, the manifest's facts about them, and what went wrong on the way."""

    tables: dict[str, pa.Table]
    manifest: dict
    warnings: list[str] = field(default_factory=list)


def classify(path: Path) -> str:
    """Kind of one input path: nsys-rep, sqlite, parquetdir, run, probe-dir, probe."""
    if not path.exists():
        raise InputError(path, "no such file or folder", "check the path")
    if path.is_dir():
        if is_run_dir(path):
            return "run"
        if any(is_probe_dump_name(p.name) for p in path.iterdir()):
            return "probe-dir"
        if any(path.glob("*.parquet")):
            return "parquetdir"
        raise InputError(path, "folder holds no probe dumps (*.xsp), nsys parquet tables or run dataset", "pass a .nsys-rep, .sqlite, parquetdir, .xsp dumps or a run folder")
    suffix = path.suffix.lower()
    if suffix == ".zst":  # a compressed export or dump: classify by the name inside
        suffix = Path(path.stem).suffix.lower()
    if suffix == ".nsys-rep":
        return "nsys-rep"
    if suffix in (".sqlite", ".db", ".sqlite3"):
        return "sqlite"
    if suffix == ".xsp":
        return "probe"
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"XSTPROBE"):
        return "probe"
    if head.startswith(b"SQLite format 3"):
        return "sqlite"
    if head.startswith(b"NVIDIA Tegra"):
        return "nsys-rep"
    raise InputError(path, "unrecognized input", "pass a .nsys-rep, .sqlite, parquetdir, .xsp dumps or a run folder")


def _concat(name: str, parts: list[pa.Table]) -> pa.Table:
    if not parts:
        return empty_table(name)
    return pa.concat_tables([conform(name, p) for p in parts]).unify_dictionaries().combine_chunks()


def collect(inputs: list[str | Path], nsys: str | None = None, allow_overflow: bool = False,
            progress: Callable[[str, int], Callable[[], None]] | None = None,
            rank_overrides: dict[str, int] | None = None, bounds: AlignBounds = AlignBounds()) -> Collected:
    """Read every input, pair dumps with the export that holds them (by data), align probe clocks to
    the nsys time base, return the run's tables."""
    warnings: list[str] = []
    sources: list[dict] = []
    exports = []
    dumps = []
    prior: list[tuple[dict, dict]] = []
    probe_paths: list[Path] = []
    for raw in inputs:
        path = Path(raw)
        kind = classify(path)
        if kind == "run":
            prior.append(read_run(path))
            sources.append({"path": str(path), "kind": kind})
        elif kind in ("nsys-rep", "sqlite", "parquetdir"):
            info: dict = {}
            target = path
            if kind == "nsys-rep":
                target, info = export_report(path, nsys)
            exp = read_nsys_export(target)
            exp.path = path
            exports.append(exp)
            warnings += exp.warnings
            sources.append({"path": str(path), "kind": kind, "sha256": info.get("report_sha256") or (sha256_of(path) if path.is_file() else None),
                            "nsys_version": exp.nsys_version, "schema_version": exp.schema_version, **{k: v for k, v in info.items() if k != "report_sha256"}})
        elif kind == "probe-dir":
            probe_paths += sorted(p for p in path.iterdir() if is_probe_dump_name(p.name))
        else:
            probe_paths.append(path)
    tick = progress("decoding probe dumps", len(probe_paths)) if (progress and probe_paths) else None
    for p in probe_paths:
        d = decode_probe_dump(p, allow_overflow=allow_overflow)
        dumps.append(d)
        warnings += d.warnings
        sources.append({"path": str(p), "kind": "probe", "sha256": sha256_of(p), "gpu": d.header["gpu_name"], "label": d.header["label"]})
        if tick:
            tick()
    if not exports and not dumps and not prior:
        raise InputError(None, "no inputs", "pass at least one .nsys-rep, .sqlite, parquetdir, probe dump or run folder")

    pairings = pair_dumps(exports, dumps, bounds) if exports and dumps else []
    ranks = export_ranks(exports, pairings, rank_overrides or {})
    tables: dict[str, list[pa.Table]] = {n: [] for n in TABLES}
    for tabs, _ in prior:
        for n, t in tabs.items():
            tables[n].append(t)
    kernel_base = {}
    base = sum(t.num_rows for t in tables["kernels"])
    for e_i, (e, dev_rank) in enumerate(zip(exports, ranks)):
        kernel_base[e_i] = base
        base += e.kernels.num_rows
        tables["kernels"].append(_with_ranks(e.kernels, dev_rank))
        tables["nvtx"].append(_with_ranks(e.nvtx, dev_rank))
        tables["gpu_metrics"].append(_with_ranks(e.gpu_metrics, dev_rank))

    if dumps:  # only the newly decoded records get a time base; a prior run's probes keep theirs
        probes = _apply_time_base(_concat("probes", [d.records for d in dumps]), [d.records.num_rows for d in dumps], pairings)
        tables["probes"].append(probes)
        rows = [d.dumps_row() for d in dumps]
        for pr in pairings:
            for j, i in enumerate(pr.dump_indices):
                rows[i]["kernel_index"] = kernel_base[pr.export_index] + int(pr.alignment.kernel_of_dump[j])
        tables["dumps"].append(pa.Table.from_pylist(rows, schema=TABLES["dumps"]))
    tables["probe_slices"] += [d.slices for d in dumps]
    if dumps and exports:
        aligned = "nsys session start"
    elif dumps:
        aligned = "first probe record (no nsys report given: probe times are not on the nsys clock)"
    else:
        aligned = "nsys session start"

    gpus = []
    for e in exports:
        gpus += [g["name"] for g in e.gpus]
    for d in dumps:
        gpus.append(d.header["gpu_name"])
    for _, man in prior:
        gpus += man.get("gpus", [])
    manifest = {
        "tool": "xstage-trace",
        "tool_version": __version__,
        "inputs": sources,
        "gpus": sorted(set(gpus)),
        "nsys_versions": sorted({e.nsys_version for e in exports if e.nsys_version}),
        "alignment": {f"rank{p.rank}" + (f"_gpu{p.device}" if sum(q.rank == p.rank for q in pairings) > 1 else ""):
                      dict(p.alignment.as_dict(), report=Path(exports[p.export_index].path).name, gpu=p.device) for p in pairings},
        "time_base": aligned,
    }
    return Collected({n: _concat(n, parts) for n, parts in tables.items()}, manifest, warnings)


def _with_ranks(table: pa.Table, dev_rank: dict[int, int]) -> pa.Table:
    """Set a table's rank column from its export's GPU → rank map (-1: every GPU)."""
    if table.num_rows == 0 or "rank" not in table.column_names:
        return table
    if -1 in dev_rank or "device_id" not in table.column_names:
        r = np.full(table.num_rows, dev_rank.get(-1, min(dev_rank.values())), np.int32)
    else:
        dev = table["device_id"].to_numpy(zero_copy_only=False)
        r = np.full(table.num_rows, min(dev_rank.values()), np.int32)
        for d, rank in dev_rank.items():
            r[dev == d] = rank
    return table.set_column(table.schema.get_field_index("rank"), "rank", pa.array(r, pa.int32()))


def _apply_time_base(probes: pa.Table, records_per_dump: list[int], pairings: list[Pairing]) -> pa.Table:
    """Fill t_ns: session-relative ns where a report holds the dump, else ns since the first probe record.
    ``probes`` holds the dumps' records one dump after the other (``records_per_dump``)."""
    if probes.num_rows == 0:
        return probes
    t_gt = probes["t_gt_ns"].to_numpy().astype(np.int64)
    dump_of = np.repeat(np.arange(len(records_per_dump)), records_per_dump)
    t = (t_gt - t_gt.min()).astype(np.float64)
    for p in pairings:
        sel = np.isin(dump_of, p.dump_indices)
        t[sel] = p.alignment.to_kernel_clock((t_gt[sel] - np.int64(p.epoch_ns)).astype(np.float64))
    if not np.isfinite(t).all():
        raise AssertionError("probe times must be finite")  # an internal invariant, never bad input
    idx = probes.schema.get_field_index("t_ns")
    return probes.set_column(idx, "t_ns", pa.array(t))
