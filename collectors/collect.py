"""Inputs (nsys reports and exports, probe dumps, run folders) → one set of run-dataset tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xstage_trace import __version__
from xstage_trace.collectors.align import align_dumps
from xstage_trace.collectors.dataset import MANIFEST, is_run_dir, read_manifest, read_run
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.collectors.nsys_rep import export_report
from xstage_trace.base.hashing import sha256_of
from xstage_trace.collectors.probe_format import decode_probe_dump
from xstage_trace.base.errors import InputError
from xstage_trace.base.paths import input_kind
from xstage_trace.base.schema import TABLES, conform, empty_table

PROBE_SUFFIX = ".xsp"


@dataclass
class Collected:
    """Tables of one run, the manifest's facts about them, and what went wrong on the way."""

    tables: dict[str, pa.Table]
    manifest: dict
    warnings: list[str] = field(default_factory=list)


def classify(path: Path) -> str:
    """Kind of one input path: nsys-rep, sqlite, parquetdir, run, probe-dir, probe. FIFOs, devices
    and sockets are refused before anything opens them (an open would block or never end)."""
    if input_kind(path) == "dir":
        if is_run_dir(path) or ((path / MANIFEST).is_file() and not any(path.glob(f"*{PROBE_SUFFIX}"))):
            return "run"  # a damaged run folder too: read_run names what is wrong with it
        if any(path.glob(f"*{PROBE_SUFFIX}")):
            return "probe-dir"
        if any(path.glob("*.parquet")):
            return "parquetdir"
        raise InputError(path, "folder holds no probe dumps (*.xsp), nsys parquet tables or run dataset", "pass a .nsys-rep, .sqlite, parquetdir, .xsp dumps or a run folder")
    suffix = path.suffix.lower()
    if suffix == ".nsys-rep":
        return "nsys-rep"
    if suffix in (".sqlite", ".db", ".sqlite3"):
        return "sqlite"
    if suffix == PROBE_SUFFIX:
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


def _content_key(path: Path, kind: str) -> str:
    """What makes two inputs the same: the bytes of a file, the manifest of a run folder, the
    tables of a parquetdir."""
    if kind == "run":
        return "run:" + sha256_of(path / MANIFEST)
    if kind == "parquetdir":
        return "parquetdir:" + ",".join(sha256_of(p) for p in sorted(path.glob("*.parquet")))
    return sha256_of(path)


def unique_inputs(inputs: list[str | Path], warnings: list[str]) -> list[Path]:
    """The inputs with probe-dump folders expanded to their dumps and every duplicate dropped, with a
    warning: the same file twice (under any name), a folder and a dump inside it, a dump or report
    that a run folder given beside it was already made from, the same run folder twice. A file is
    hashed only when it could be a duplicate (another input has its size, or a run folder is given)."""
    expanded: list[tuple[Path, str]] = []
    for raw in inputs:
        path = Path(raw)
        kind = classify(path)
        if kind == "probe-dir":
            expanded += [(p, classify(p)) for p in sorted(path.glob(f"*{PROBE_SUFFIX}"))]  # refuses a FIFO named *.xsp
        else:
            expanded.append((path, kind))
    seen: dict[str, str] = {}
    for path, kind in expanded:  # run folders first: what they were made from counts as seen
        if kind == "run":
            for src in read_manifest(path).get("inputs") or []:
                if isinstance(src, dict) and isinstance(src.get("sha256"), str):
                    seen.setdefault(src["sha256"], f"run folder {path}")
    sizes = [path.stat().st_size if path.is_file() else -1 for path, _ in expanded]
    seeded = bool(seen)
    keep: list[Path] = []
    for (path, kind), size in zip(expanded, sizes):
        if size >= 0 and not seeded and sizes.count(size) == 1:
            keep.append(path)  # a file of a size no other input has, and no run folder: unique
            continue
        key = _content_key(path, kind)
        if key in seen:
            warnings.append(f"{path}: same content as {seen[key]}; read once")
            continue
        seen[key] = str(path)
        keep.append(path)
    return keep


def refuse_same_capture(exports) -> None:
    """InputError when two nsys inputs hold one capture (a .nsys-rep and its own .sqlite export, or
    two exports of one report): the same session start and the same kernels."""
    first: dict[tuple, Path] = {}
    for e in exports:
        k = e.kernels
        starts = k["start_ns"].to_numpy(zero_copy_only=False)
        key = (e.utc_epoch_ns, k.num_rows, int(starts.min()), int(starts.max()), int(pc.sum(k["duration_ns"]).as_py() or 0))
        if key in first:
            raise InputError(e.path, f"holds the same capture as {first[key]} (same session start and kernels)",
                             "pass the .nsys-rep or its export, not both")
        first[key] = e.path


def _concat(name: str, parts: list[pa.Table]) -> pa.Table:
    if not parts:
        return empty_table(name)
    return pa.concat_tables([conform(name, p) for p in parts]).unify_dictionaries().combine_chunks()


def collect(inputs: list[str | Path], nsys: str | None = None, allow_overflow: bool = False,
            progress: Callable[[str, int], Callable[[], None]] | None = None) -> Collected:
    """Read every input, align probe clocks to the nsys time base, return the run's tables."""
    warnings: list[str] = []
    inputs = unique_inputs(inputs, warnings)
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
            exp = read_nsys_export(target, rank=len(exports))
            exports.append(exp)
            warnings += exp.warnings
            sources.append({"path": str(path), "kind": kind, "sha256": info.get("report_sha256") or (sha256_of(path) if path.is_file() else None),
                            "nsys_version": exp.nsys_version, "schema_version": exp.schema_version, **{k: v for k, v in info.items() if k != "report_sha256"}})
        elif kind == "probe-dir":
            probe_paths += sorted(path.glob(f"*{PROBE_SUFFIX}"))
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
    refuse_same_capture(exports)

    tables: dict[str, list[pa.Table]] = {n: [] for n in TABLES}
    for tabs, _ in prior:
        for n, t in tabs.items():
            tables[n].append(t)
    for e in exports:
        tables["kernels"].append(e.kernels)
        tables["nvtx"].append(e.nvtx)
        tables["gpu_metrics"].append(e.gpu_metrics)

    alignments = _align(exports, dumps, warnings)
    if dumps:  # only the newly decoded records get a time base; a prior run's probes keep theirs
        tables["probes"].append(_apply_time_base(_concat("probes", [d.records for d in dumps]), alignments))
    tables["probe_slices"] += [d.slices for d in dumps]

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
        "alignment": {f"rank{r}": a.as_dict() for r, (a, _) in alignments.items()},
        "time_base": "nsys session start" if alignments else ("first probe record" if dumps else "nsys session start"),
    }
    return Collected({n: _concat(n, parts) for n, parts in tables.items()}, manifest, warnings)


def _align(exports, dumps, warnings: list[str]) -> dict:
    """One alignment per rank that has both an nsys export and probe dumps."""
    result = {}
    by_rank = {e.kernels["rank"][0].as_py() if e.kernels.num_rows else i: e for i, e in enumerate(exports)}
    ranks = sorted({d.header["rank"] for d in dumps})
    for r in ranks:
        e = by_rank.get(r)
        mine = [d for d in dumps if d.header["rank"] == r]
        if e is None or e.utc_epoch_ns is None:
            if exports:
                warnings.append(f"rank {r}: no nsys export with a session start time; probe times are relative to the first probe")
            continue
        # Work relative to the session start in integers first: float64 cannot hold epoch ns exactly.
        spans = (np.array([_dump_span(d) for d in mine], dtype=np.int64) - np.int64(e.utc_epoch_ns)).astype(np.float64)
        dev = {d.header["device_index"] for d in mine}
        k = e.kernels
        if len(dev) == 1:
            k = k.filter(pc.equal(k["device_id"], dev.pop()))
        ks = k["start_ns"].to_numpy(zero_copy_only=False).astype(np.float64)
        ke = k["end_ns"].to_numpy(zero_copy_only=False).astype(np.float64)
        a = align_dumps(spans[:, 0], spans[:, 1], ks, ke)
        if a.dumps_matched < a.dumps_total:
            warnings.append(f"rank {r}: {a.dumps_total - a.dumps_matched} of {a.dumps_total} probe dumps fall inside no nsys kernel (were they captured in the same run?)")
        result[r] = (a, int(e.utc_epoch_ns))
    return result


def _dump_span(d) -> tuple[int, int]:
    s = d.slices
    used = pc.greater(s["records_stored"], 0)
    s = s.filter(used) if pc.any(used).as_py() else s
    closed = s.filter(s["closed"]) if pc.any(s["closed"]).as_py() else s
    return int(pc.min(s["open_gt_ns"]).as_py()), int(pc.max(closed["close_gt_ns"]).as_py())


def _apply_time_base(probes: pa.Table, alignments: dict) -> pa.Table:
    """Fill t_ns: session-relative ns where aligned, else ns since the first probe record."""
    if probes.num_rows == 0:
        return probes
    t_gt = probes["t_gt_ns"].to_numpy().astype(np.int64)
    rank = probes["rank"].to_numpy()
    t = (t_gt - t_gt.min()).astype(np.float64)
    for r, (a, epoch_ns) in alignments.items():
        sel = rank == r
        t[sel] = a.to_kernel_clock((t_gt[sel] - np.int64(epoch_ns)).astype(np.float64))
    idx = probes.schema.get_field_index("t_ns")
    return probes.set_column(idx, "t_ns", pa.array(t))
