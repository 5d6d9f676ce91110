"""Inputs (nsys reports and exports, probe dumps, run folders) → one set of run-dataset tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xstage_trace import __version__
from xstage_trace.collectors.dataset import MANIFEST, is_run_dir, read_manifest, read_run
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.collectors.nsys_rep import export_report
from xstage_trace.collectors.align import Alignment
from xstage_trace.collectors.pairing import AlignBounds, dump_span_gt_ns, export_ranks, pair_dumps
from xstage_trace.base.hashing import hash_all, sha256_of
from xstage_trace.collectors.probe_format import decode_probe_dump, is_probe_dump_name
from xstage_trace.base.errors import InputError
from xstage_trace.base.paths import display_name, input_kind
from xstage_trace.base.schema import TABLES, conform, empty_table



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
        has_dumps = any(is_probe_dump_name(p.name) for p in path.iterdir())
        if is_run_dir(path) or ((path / MANIFEST).is_file() and not has_dumps):
            return "run"  # a damaged run folder too: read_run names what is wrong with it
        if has_dumps:
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


def _content_key(path: Path, kind: str) -> str:
    """What makes two inputs the same: the bytes of a file, the manifest of a run folder, the
    tables of a parquetdir."""
    if kind == "run":
        return "run:" + sha256_of(path / MANIFEST)
    if kind == "parquetdir":
        return "parquetdir:" + ",".join(sha256_of(p) for p in sorted(path.glob("*.parquet")))
    return sha256_of(path)


def unique_inputs(inputs: list[str | Path], warnings: list[str], digests: dict[Path, str] | None = None) -> list[Path]:
    """The inputs with probe-dump folders expanded to their dumps and every duplicate dropped, with a
    warning: the same file twice (under any name), a folder and a dump inside it, a dump or report
    that a run folder given beside it was already made from, the same run folder twice. A file is
    hashed only when it could be a duplicate (another input has its size, or a run folder is given);
    the sha256 of each file hashed here goes into ``digests`` (path → hex), so that it is read once."""
    expanded: list[tuple[Path, str]] = []
    for raw in inputs:
        path = Path(raw)
        kind = classify(path)
        if kind == "probe-dir":
            expanded += [(p, classify(p)) for p in sorted(path.iterdir()) if is_probe_dump_name(p.name)]  # refuses a FIFO named *.xsp
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
    counts = Counter(sizes)
    hashed = [(path, kind) for (path, kind), size in zip(expanded, sizes) if not (size >= 0 and not seeded and counts[size] == 1)]
    keys = dict(zip((path for path, _ in hashed), hash_all(lambda pk: _content_key(*pk), hashed)))
    keep: list[Path] = []
    for path, kind in expanded:
        if path not in keys:
            keep.append(path)  # a file of a size no other input has, and no run folder: unique
            continue
        key = keys[path]
        if digests is not None and path.is_file():
            digests[path] = key
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
    schema = TABLES[name]
    return pa.concat_tables([p if p.schema.equals(schema) else conform(name, p) for p in parts]).unify_dictionaries().combine_chunks()


PRIOR_TABLES = ("kernels", "nvtx", "gpu_metrics", "probe_slices", "dumps")


@dataclass
class DumpTask:
    """What one worker needs to produce one dump's records on the run's time base (picklable)."""

    index: int
    rank: int
    dump: str
    path: Path  # the dump file, or the earlier run folder that holds its records
    from_run: bool = False
    allow_overflow: bool = False
    alignment: Alignment | None = None  # None: ns since t0_gt_ns (the probes' own clock)
    epoch_ns: int = 0
    t0_gt_ns: int = 0
    records: int = 0


@dataclass
class Plan:
    """Everything about a run but its probe records: small tables, one task per dump, the manifest."""

    tables: dict[str, pa.Table]
    tasks: list[DumpTask]
    manifest: dict
    warnings: list[str] = field(default_factory=list)


def plan_run(inputs: list[str | Path], nsys: str | None = None, allow_overflow: bool = False,
             rank_overrides: dict[str, int] | None = None, bounds: AlignBounds = AlignBounds()) -> Plan:
    """Read every input but the probe records: exports, dump headers and slice tables; pair dumps with the
    export that holds them (by data) and fix each dump's clock mapping. Records are read per task later."""
    warnings: list[str] = []
    digests: dict[Path, str] = {}
    inputs = unique_inputs(inputs, warnings, digests)

    def digest(path: Path) -> str:
        return digests.get(path) or sha256_of(path)

    sources: list[dict] = []
    exports = []
    dumps = []
    prior: list[tuple[Path, dict, dict]] = []
    probe_paths: list[Path] = []
    for raw in inputs:
        path = Path(raw)
        kind = classify(path)
        if kind == "run":
            tabs, man = read_run(path, tables=list(PRIOR_TABLES))  # bursts and tiles are recomputed from its probes
            prior.append((path, tabs, man))
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
            sources.append({"path": str(path), "kind": kind, "sha256": info.get("report_sha256") or (digest(path) if path.is_file() else None),
                            "nsys_version": exp.nsys_version, "schema_version": exp.schema_version, **{k: v for k, v in info.items() if k != "report_sha256"}})
        elif kind == "probe-dir":
            probe_paths += sorted(p for p in path.iterdir() if is_probe_dump_name(p.name))
        else:
            probe_paths.append(path)
    for p in probe_paths:
        d = decode_probe_dump(p, allow_overflow=allow_overflow, records=False)
        dumps.append(d)
        sources.append({"path": str(p), "kind": "probe", "sha256": digest(p), "gpu": d.header["gpu_name"], "label": d.header["label"]})
    if not exports and not dumps and not prior:
        raise InputError(None, "no inputs", "pass at least one .nsys-rep, .sqlite, parquetdir, probe dump or run folder")
    refuse_same_capture(exports)

    pairings = pair_dumps(exports, dumps, bounds) if exports and dumps else []
    ranks = export_ranks(exports, pairings, rank_overrides or {})
    tables: dict[str, list[pa.Table]] = {n: [] for n in TABLES if n != "probes"}
    tasks: list[DumpTask] = []
    for run_dir, tabs, _ in prior:
        for n, t in tabs.items():
            tables[n].append(t)
        counts = tabs["probe_slices"].group_by(["rank", "dump"]).aggregate([("records_stored", "sum")]).to_pylist()
        tasks += [DumpTask(len(tasks) + i, c["rank"], c["dump"], run_dir, from_run=True, records=int(c["records_stored_sum"]))
                  for i, c in enumerate(counts)]  # every task its own index: its parts' file names
    kernel_base = {}
    base = sum(t.num_rows for t in tables["kernels"])
    for e_i, (e, dev_rank) in enumerate(zip(exports, ranks)):
        kernel_base[e_i] = base
        base += e.kernels.num_rows
        tables["kernels"].append(_with_ranks(e.kernels, dev_rank))
        tables["nvtx"].append(_with_ranks(e.nvtx, dev_rank))
        tables["gpu_metrics"].append(_with_ranks(e.gpu_metrics, dev_rank))

    held = {i: pr for pr in pairings for i in pr.dump_indices}
    loose = [dump_span_gt_ns(d.slices)[0] for i, d in enumerate(dumps) if i not in held]
    t0 = min(loose) if loose else 0
    rows = [d.dumps_row() for d in dumps]
    for i, d in enumerate(dumps):
        pr = held.get(i)
        task = DumpTask(len(tasks), d.header["rank"], display_name(d.path.name), d.path, allow_overflow=allow_overflow, t0_gt_ns=t0,
                        records=int(pc.sum(d.slices["records_stored"]).as_py() or 0))
        if pr is not None:
            task.alignment, task.epoch_ns = pr.alignment, pr.epoch_ns
            rows[i]["kernel_index"] = kernel_base[pr.export_index] + int(pr.alignment.kernel_of_dump[pr.dump_indices.index(i)])
        tasks.append(task)
    if dumps:
        tables["dumps"].append(pa.Table.from_pylist(rows, schema=TABLES["dumps"]))
    tables["probe_slices"] += [d.slices for d in dumps]
    if dumps and exports:
        aligned = "nsys session start"
    elif dumps:
        aligned = "first probe slice (no nsys report given: probe times are not on the nsys clock)"
    else:
        aligned = "nsys session start"

    gpus = []
    for e in exports:
        gpus += [g["name"] for g in e.gpus]
    for d in dumps:
        gpus.append(d.header["gpu_name"])
    for _, _, man in prior:
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
    return Plan({n: _concat(n, parts) for n, parts in tables.items()}, tasks, manifest, warnings)


def load_records(task: DumpTask) -> tuple[pa.Table, list[str]]:
    """One dump's probe records on the run's time base (``t_ns``), with the decoder's warnings."""
    if task.from_run:
        import pyarrow.dataset as ds

        from xstage_trace.collectors.dataset import table_files

        part = ds.dataset(table_files(task.path, "probes"), format="parquet")
        flt = (ds.field("dump") == task.dump) & (ds.field("rank") == task.rank)
        return conform("probes", part.to_table(filter=flt)), []  # an earlier run's probes keep their times
    d = decode_probe_dump(task.path, allow_overflow=task.allow_overflow)
    t_gt = d.records["t_gt_ns"].to_numpy().astype(np.int64)
    if task.alignment is None:
        t = (t_gt - np.int64(task.t0_gt_ns)).astype(np.float64)
    else:
        t = task.alignment.to_kernel_clock((t_gt - np.int64(task.epoch_ns)).astype(np.float64))
    if not np.isfinite(t).all():
        raise AssertionError("probe times must be finite")  # an internal invariant, never bad input
    recs = d.records
    return recs.set_column(recs.schema.get_field_index("t_ns"), "t_ns", pa.array(t)), d.warnings


def collect(inputs: list[str | Path], nsys: str | None = None, allow_overflow: bool = False,
            rank_overrides: dict[str, int] | None = None, bounds: AlignBounds = AlignBounds()) -> Collected:
    """``plan_run`` with every dump's records read into one ``probes`` table (for small runs and tests;
    ``analyze`` streams the tasks instead)."""
    plan = plan_run(inputs, nsys, allow_overflow, rank_overrides, bounds)
    parts, warnings = [], list(plan.warnings)
    for task in plan.tasks:
        recs, w = load_records(task)
        parts.append(recs)
        warnings += w
    return Collected(dict(plan.tables, probes=_concat("probes", parts)), plan.manifest, warnings)


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
