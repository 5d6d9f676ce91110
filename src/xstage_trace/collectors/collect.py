"""Inputs (nsys reports and exports, probe dumps, run folders) → one set of run-dataset tables."""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from xstage_trace.base.background_writes import BackgroundWrites
from xstage_trace.base.version import __version__
from xstage_trace.base.run_files import MANIFEST, is_run_dir, iter_table_files, read_manifest, read_run, table_part_path, write_parquet, write_table_part
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.collectors.nsys_rep import export_report
from xstage_trace.collectors.align import Alignment
from xstage_trace.collectors.pairing import AlignBounds, export_ranks, pair_dumps
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


PRIOR_TABLES = ("kernels", "nvtx", "gpu_metrics", "dumps")  # an earlier run's small tables; its probe_slices are copied part by part
SLICES = "probe_slices"


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
class DumpHeader:
    """What the plan keeps of one dump once its slice table is written: the header, its ``dumps`` row, its
    probe span in raw %globaltimer ns (pairing) and its records."""

    path: Path
    header: dict
    row: dict
    span_gt_ns: tuple[int, int]
    records: int


@dataclass
class Plan:
    """Everything about a run but its probe records: the small tables (kernels, nvtx, gpu_metrics, dumps), one
    task per dump, the manifest. Each dump's slice table is already in a part file of ``probe_slices`` in the
    plan's folder (``slice_parts``: (rank, dump) → its part); ``slice_summary`` keeps one row per dump: rank,
    dump, its slices' median ns_per_cycle (all the per-dump steps read of them), slices and records_stored."""

    tables: dict[str, pa.Table]
    tasks: list[DumpTask]
    manifest: dict
    slice_parts: dict[tuple[int, str], Path]
    slice_summary: pa.Table
    warnings: list[str] = field(default_factory=list)

    @property
    def slice_rows(self) -> int:
        """Rows of the run's probe_slices table (what its parts hold)."""
        return int(pc.sum(self.slice_summary["slices"]).as_py() or 0)


SUMMARY = pa.schema([("rank", pa.int32()), ("dump", pa.string()), ("ns_per_cycle", pa.float64()), ("slices", pa.int64()),
                     ("records_stored", pa.int64())])


class SliceParts:
    """Writes the dumps' slice tables as parts of ``probe_slices`` (``NAME/rank=R/part-NNNNN.parquet``) in a run's
    folder as the plan reads them, consecutive dumps of one rank together up to PART_SLICES rows (a part file
    costs ~1 ms to write whatever its size), and keeps one summary row per dump instead of the tables. The
    writes run on a thread beside the header reads (Arrow's Parquet writer releases the GIL), at most
    WRITES_AHEAD parts waiting; leaving the ``with`` block writes the last part and waits for every write."""

    PART_SLICES = 1 << 16  # ~19 MB of slice rows held before they are written
    WRITES_AHEAD = 2

    def __init__(self, folder: Path):
        self.folder, self.parts, self.rows = Path(folder), {}, []
        self.held: list[pa.Table] = []
        self.writes = BackgroundWrites(1, self.WRITES_AHEAD, "xstage-slices")
        self.written = 0

    def __enter__(self) -> "SliceParts":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None:  # after an error the folder is discarded: nothing more to write
                self._flush()
        finally:
            self.writes.__exit__(exc_type, *exc)

    def add(self, slices: pa.Table, owner: Path) -> dict:
        """Take one dump's slices (one rank and dump; ``owner``: the input they came from, named when a dump
        comes twice) for the current part and return the dump's summary row."""
        key = (int(slices["rank"][0].as_py()), str(slices["dump"][0].as_py())) if slices.num_rows else None
        if key is None:
            return {}
        if key in self.parts:
            raise InputError(owner, f"is a second dump named {key[1]} on rank {key[0]} (a run keys its dumps by rank and file name)",
                             "rename one of the two dump files, or leave one out")
        if self.held and (self.held[0]["rank"][0].as_py() != key[0] or sum(t.num_rows for t in self.held) + slices.num_rows > self.PART_SLICES):
            self._flush()
        self.held.append(slices)
        self.parts[key] = table_part_path(self.folder, SLICES, key[0], self.written)
        row = {"rank": key[0], "dump": key[1], "ns_per_cycle": float(np.median(slices["ns_per_cycle"].to_numpy())),
               "slices": slices.num_rows, "records_stored": int(pc.sum(slices["records_stored"]).as_py() or 0)}
        self.rows.append(row)
        return row

    def _flush(self) -> None:
        if not self.held:
            return
        table, rank = pa.concat_tables(self.held), self.held[0]["rank"][0].as_py()
        self.held = []
        self.writes.submit(write_table_part, self.folder, SLICES, rank, self.written, table)
        self.written += 1

    def summary(self) -> pa.Table:
        """One row per dump taken (SUMMARY)."""
        return pa.Table.from_pylist(self.rows, schema=SUMMARY)


def keep_slices(plan: Plan, keys: set[tuple[int, str]]) -> None:
    """Keep only the slices of the dumps ``keys`` (rank, dump) in ``plan``'s slice parts (a part left with none
    is deleted, one left with some is written again without the others) and summary."""
    def kept(table: pa.Table) -> pa.Array:
        rank, dump = table["rank"].to_numpy(), table["dump"].to_numpy(zero_copy_only=False)
        return pa.array(pd.MultiIndex.from_arrays([rank, dump]).isin(list(keys)))

    for path in {p for k, p in plan.slice_parts.items() if k not in keys}:
        part = pq.read_table(path)
        rows = kept(part)
        path.unlink()
        if pc.any(rows).as_py():
            write_parquet(conform(SLICES, part.filter(rows)), path)
    plan.slice_parts = {k: p for k, p in plan.slice_parts.items() if k in keys}
    plan.slice_summary = plan.slice_summary.filter(kept(plan.slice_summary))


def rows_by_dump(table: pa.Table) -> dict[tuple[int, str], np.ndarray]:
    """Row indices of ``table`` per (rank, dump), in table order."""
    keys = pd.DataFrame({"rank": table["rank"].to_numpy(zero_copy_only=False), "dump": table["dump"].to_numpy(zero_copy_only=False)})
    return {k: v.astype(np.int64) for k, v in keys.groupby(["rank", "dump"], sort=False).indices.items()} if len(keys) else {}


def _split_by_dump(slices: pa.Table) -> list[pa.Table]:
    """A probe_slices table cut into one table per (rank, dump), in first-row order."""
    return [slices.take(pa.array(rows)) for rows in rows_by_dump(slices).values()]


def plan_run(inputs: list[str | Path], folder: Path, nsys: str | None = None, allow_overflow: bool = False,
             rank_overrides: dict[str, int] | None = None, bounds: AlignBounds = AlignBounds()) -> Plan:
    """Read every input but the probe records: exports, dump headers and slice tables; pair dumps with the
    export that holds them (by data) and fix each dump's clock mapping. Records are read per task later.
    Each dump's slice table goes to ``folder`` as a part of probe_slices as soon as it is read (``SliceParts``),
    so the plan holds a few numbers per dump, whatever the number of slices."""
    warnings: list[str] = []
    digests: dict[Path, str] = {}
    inputs = unique_inputs(inputs, warnings, digests)

    def digest(path: Path) -> str:
        return digests.get(path) or sha256_of(path)

    sources: list[dict] = []
    exports = []
    dumps: list[DumpHeader] = []
    prior: list[tuple[Path, dict, dict, list[dict]]] = []
    probe_paths: list[Path] = []
    with SliceParts(folder) as slices:  # every slice part written when the block is left
        for raw in inputs:
            path = Path(raw)
            kind = classify(path)
            if kind == "run":
                tabs, man = read_run(path, tables=list(PRIOR_TABLES))  # bursts and tiles are recomputed from its probes
                rows = [slices.add(part, path) for table in iter_table_files(path, man, SLICES) for part in _split_by_dump(table)]
                prior.append((path, tabs, man, [r for r in rows if r]))
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
            row = slices.add(d.slices, p)
            dumps.append(DumpHeader(d.path, d.header, d.dumps_row(), d.span_gt_ns, row.get("records_stored", 0)))
            sources.append({"path": str(p), "kind": "probe", "sha256": digest(p), "gpu": d.header["gpu_name"], "label": d.header["label"]})
            del d  # its slice table is on its way to disk
    if not exports and not dumps and not prior:
        raise InputError(None, "no inputs", "pass at least one .nsys-rep, .sqlite, parquetdir, probe dump or run folder")
    refuse_same_capture(exports)

    pairings = pair_dumps(exports, dumps, bounds) if exports and dumps else []
    ranks = export_ranks(exports, pairings, rank_overrides or {})
    tables: dict[str, list[pa.Table]] = {n: [] for n in TABLES if n not in ("probes", SLICES)}
    tasks: list[DumpTask] = []
    for run_dir, tabs, _, rows in prior:
        for n, t in tabs.items():
            tables[n].append(t)
        tasks += [DumpTask(len(tasks) + i, r["rank"], r["dump"], run_dir, from_run=True, records=r["records_stored"])
                  for i, r in enumerate(rows)]  # every task its own index: its parts' file names
    kernel_base = {}
    base = sum(t.num_rows for t in tables["kernels"])
    for e_i, (e, dev_rank) in enumerate(zip(exports, ranks)):
        kernel_base[e_i] = base
        base += e.kernels.num_rows
        tables["kernels"].append(_with_ranks(e.kernels, dev_rank))
        tables["nvtx"].append(_with_ranks(e.nvtx, dev_rank))
        tables["gpu_metrics"].append(_with_ranks(e.gpu_metrics, dev_rank))

    held = {i: pr for pr in pairings for i in pr.dump_indices}
    loose = [d.span_gt_ns[0] for i, d in enumerate(dumps) if i not in held]
    t0 = min(loose) if loose else 0
    rows = [d.row for d in dumps]
    for i, d in enumerate(dumps):
        pr = held.get(i)
        task = DumpTask(len(tasks), d.header["rank"], display_name(d.path.name), d.path, allow_overflow=allow_overflow, t0_gt_ns=t0,
                        records=d.records)
        if pr is not None:
            task.alignment, task.epoch_ns = pr.alignment, pr.epoch_ns
            rows[i]["kernel_index"] = kernel_base[pr.export_index] + int(pr.alignment.kernel_of_dump[pr.dump_indices.index(i)])
        tasks.append(task)
    if dumps:
        tables["dumps"].append(pa.Table.from_pylist(rows, schema=TABLES["dumps"]))
    if dumps and exports:
        aligned = "nsys session start"
    elif dumps:
        aligned = "first probe slice (no nsys report given: probe times are not on the nsys clock)"
    elif exports:
        aligned = "nsys session start"
    else:  # re-analysis of run folders alone: their own time base (a dumps-only run stays on its probes' clock)
        bases = sorted({str(man.get("time_base")) for _, _, man, _ in prior if man.get("time_base")})
        if len(bases) > 1:
            raise InputError(prior[0][0], f"the run folders given have different time bases ({'; '.join(bases)})",
                             "re-analyze runs of one time base together, or pass the nsys reports with their dumps")
        aligned = bases[0] if bases else "nsys session start"

    gpus = []
    for e in exports:
        gpus += [g["name"] for g in e.gpus]
    for d in dumps:
        gpus.append(d.header["gpu_name"])
    for _, _, man, _ in prior:
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
    return Plan({n: _concat(n, parts) for n, parts in tables.items()}, tasks, manifest, slices.parts, slices.summary(), warnings)


def load_records(task: DumpTask) -> tuple[pa.Table, list[str]]:
    """One dump's probe records on the run's time base (``t_ns``), with the decoder's warnings."""
    if task.from_run:
        import pyarrow.dataset as ds

        from xstage_trace.base.run_files import table_files

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
    """``plan_run`` with every dump's records and slices read into one ``probes`` and one ``probe_slices``
    table (for small runs and tests; ``analyze`` streams the tasks instead)."""
    with tempfile.TemporaryDirectory(prefix="xstage-collect-") as folder:
        plan = plan_run(inputs, Path(folder), nsys, allow_overflow, rank_overrides, bounds)
        slices = _concat(SLICES, [pq.read_table(p) for p in dict.fromkeys(plan.slice_parts.values())])
    parts, warnings = [], list(plan.warnings)
    for task in plan.tasks:
        recs, w = load_records(task)
        parts.append(recs)
        warnings += w
    return Collected(dict(plan.tables, probes=_concat("probes", parts), probe_slices=slices), plan.manifest, warnings)


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
