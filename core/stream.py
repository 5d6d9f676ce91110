"""Streaming analyze in bounded memory: one dump's records in memory at a time (per worker), every
table written part by part as it is produced, per-dump work spread over processes.

Two passes over the plan's tasks, on the same workers:

1. the control dumps only (``is_control`` in the ``dumps`` table): their tile spans decide the
   statistics every tile is judged by (slot-wait floor and noise, control mainloop p99; spec §5),
   ``ControlStats``. Each control dump is read and analysed here once (``control_task``: its probes
   and bursts parts are written, its unfinished tile spans kept in a scratch Arrow file of the run's
   temporary folder); only the control tiles' few columns and the counts come back.
2. every dump (``process_task``): read its records onto the run's time base, write them as one part
   of the ``probes`` table, run the per-dump analyses (core/analyses.py), finish its tiles with the
   control statistics and write them and its bursts as one part each of the ``tiles`` and ``bursts``
   tables (``NAME/rank=R/part-NNNNN.parquet``, the layout ``read_run`` reads). A control dump only
   has its scratch spans finished and written (``finish_control_task``). Only counts and the
   calibration points come back.

Table 3 is then computed one configuration at a time from that configuration's tile parts (the
columns it needs only), so the largest thing held is one configuration's tiles, never the run's.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather

from xstage_trace.analyses import AnalysisContext, analyze_dump
from xstage_trace.analysis.tiles import ControlStats, control_stats, finish_tiles, with_dump_config
from xstage_trace.collectors.collect import DumpTask, load_records
from xstage_trace.collectors.dataset import table_part_path, write_table_part

PARALLEL_MIN_RECORDS = 2_000_000  # below this, starting worker processes costs more than it saves
CONTROL_COLUMNS = ["shape", "tile_kind", "operands", "is_control", "mainloop_ns", "slot_wait_ns"]  # what control_stats reads
TABLE3_COLUMNS = ["dest", "shape", "variant", "schedule", "tile_kind", "mainloop_ns", "rs_span_ns", "predicted_stall_ns",
                  "measured_stall_ns", "backpressured", "noise_ns", "control_mainloop_ns", "diagnosis"]  # what table3_from_tiles reads
TABLE3_CATEGORIES = ["dest", "shape", "schedule", "tile_kind", "diagnosis"]  # read as categoricals (a few values each: ~1 B a row, not ~10)


@dataclass
class DumpResult:
    """What one dump's work sends back: row counts of the parts it wrote, its calibration points, warnings."""

    records: int
    tiles: int
    bursts: int
    backpressured: int
    calibration_points: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


@dataclass
class StreamResult:
    """The whole run's results once every dump went through: row counts per streamed table, Table 3,
    calibration points, backpressured tiles and the decoder's warnings."""

    counts: dict[str, int]
    table3: pd.DataFrame
    calibration_points: pd.DataFrame
    backpressured: int
    warnings: list[str]


SCRATCH = ".control-spans"  # pass 1's unfinished tile spans of the control dumps, removed before the run is written


def _scratch_path(folder: Path, task: DumpTask) -> Path:
    return Path(folder) / SCRATCH / f"rank={task.rank}-part-{task.index:05d}.arrow"


def _analyze_and_write(task: DumpTask, folder: Path, slices: pa.Table, dump: pd.DataFrame,
                       ctx: AnalysisContext) -> tuple[pa.Table, dict[str, pd.DataFrame], list[str]]:
    """One dump's records → probes part; per-dump analyses; bursts → bursts part (parts of no rows are
    not written). Returns the records, the analyses' results and the decoder's warnings."""
    records, warnings = load_records(task)
    write_table_part(folder, "probes", task.rank, task.index, records)
    done = analyze_dump(records.to_pandas(), slices.to_pandas(), dump, ctx)
    bursts = done.get("bursts", pd.DataFrame())
    if len(bursts):
        write_table_part(folder, "bursts", task.rank, task.index, pa.Table.from_pandas(bursts, preserve_index=False))
    return records, done, warnings


def _finish_and_write(task: DumpTask, folder: Path, spans: pd.DataFrame, dump: pd.DataFrame, ctx: AnalysisContext,
                      control: ControlStats) -> pd.DataFrame:
    """One dump's tile spans finished with ``control`` → tiles part (not written when empty)."""
    tiles = finish_tiles(spans, dump, ctx.noise_ns, control) if len(spans) else pd.DataFrame()
    if len(tiles):
        write_table_part(folder, "tiles", task.rank, task.index, pa.Table.from_pandas(tiles, preserve_index=False))
    return tiles


def _result(records: int, tiles: pd.DataFrame, done: dict[str, pd.DataFrame], warnings: list[str]) -> DumpResult:
    return DumpResult(records, len(tiles), len(done.get("bursts", ())), int(tiles["backpressured"].sum()) if len(tiles) else 0,
                      done.get("calibration_points", pd.DataFrame()), warnings)


def control_task(task: DumpTask, folder: Path, slices: pa.Table, dump_row: pa.Table, ctx: AnalysisContext) -> tuple[pd.DataFrame, DumpResult]:
    """Pass 1, one control dump: everything ``process_task`` does but finishing the tiles (which needs
    every control dump's statistics); its tile spans wait in a scratch file for ``finish_control_task``.
    Returns its tiles' CONTROL_COLUMNS (the input of ``control_stats``) and its result so far."""
    dump = dump_row.to_pandas()
    records, done, warnings = _analyze_and_write(task, folder, slices, dump, ctx)
    spans = done.get("tile_spans", pd.DataFrame())
    if len(spans):
        path = _scratch_path(folder, task)
        path.parent.mkdir(parents=True, exist_ok=True)
        feather.write_feather(pa.Table.from_pandas(spans, preserve_index=False), path, compression="uncompressed")
        t = with_dump_config(spans, dump)
        ctrl = t.loc[t["is_control"], CONTROL_COLUMNS].reset_index(drop=True)
    else:
        ctrl = pd.DataFrame()
    return ctrl, _result(records.num_rows, pd.DataFrame(), done, warnings)


def finish_control_task(task: DumpTask, folder: Path, dump_row: pa.Table, ctx: AnalysisContext, control: ControlStats,
                        partial: DumpResult) -> DumpResult:
    """Pass 2, one control dump that ``control_task`` analysed: its scratch tile spans finished with
    ``control`` → tiles part; the scratch file is removed."""
    path = _scratch_path(folder, task)
    if not path.exists():  # no tile spans in this dump
        return partial
    spans = feather.read_table(path).to_pandas()
    path.unlink()
    tiles = _finish_and_write(task, folder, spans, dump_row.to_pandas(), ctx, control)
    return DumpResult(partial.records, len(tiles), partial.bursts, int(tiles["backpressured"].sum()) if len(tiles) else 0,
                      partial.calibration_points, partial.warnings)


def process_task(task: DumpTask, folder: Path, slices: pa.Table, dump_row: pa.Table, ctx: AnalysisContext,
                 control: ControlStats) -> DumpResult:
    """Pass 2, one dump: records → probes part; per-dump analyses; tiles finished with ``control`` →
    tiles part; bursts → bursts part (parts of no rows are not written)."""
    dump = dump_row.to_pandas()
    records, done, warnings = _analyze_and_write(task, folder, slices, dump, ctx)
    tiles = _finish_and_write(task, folder, done.get("tile_spans", pd.DataFrame()), dump, ctx, control)
    return _result(records.num_rows, tiles, done, warnings)


def pass2_task(task: DumpTask, folder: Path, slices: pa.Table | None, dump_row: pa.Table, ctx: AnalysisContext,
               control: ControlStats, partial: DumpResult | None) -> DumpResult:
    """Pass 2 of one dump: ``finish_control_task`` for one pass 1 analysed (``partial``), else ``process_task``."""
    if partial is not None:
        return finish_control_task(task, folder, dump_row, ctx, control, partial)
    return process_task(task, folder, slices, dump_row, ctx, control)


def default_workers() -> int:
    """Worker processes for a large run: the CPUs this process may use, at most 8."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1), 8))


Mapper = Callable[[Callable, Iterable[tuple]], Iterator]
WINDOW_PER_WORKER = 2  # tasks handed to the pool ahead of the results read back, per worker


def _windowed(pool: ProcessPoolExecutor, func: Callable, args: Iterable[tuple], window: int) -> Iterator:
    """``func(*a)`` for each ``a`` on ``pool``, results in order, with at most ``window`` tasks
    submitted and not yet read back: a task's arguments are made only when it is about to run."""
    pending: deque = deque()
    for a in args:
        pending.append(pool.submit(func, *a))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


@contextmanager
def task_mapper(workers: int, scheduler: str | None) -> Iterator[Mapper]:
    """``map(func, arg_tuples)`` → results in order: on a Dask scheduler when one is named (``local:N``
    or an address; the run folder must then be on a file system the workers share), else in a pool
    of ``workers`` processes (kept for both passes), else (``workers`` ≤ 1) in this process."""
    if scheduler is not None:
        from xstage_trace.collectors.distributed import map_tasks

        yield lambda func, args: iter(map_tasks(func, list(args), scheduler))
    elif workers > 1:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            yield lambda func, args: _windowed(pool, func, args, WINDOW_PER_WORKER * workers)
    else:
        yield lambda func, args: (func(*a) for a in args)


def run_stats(frames: list[pd.DataFrame]) -> ControlStats:
    """The control statistics of the run from its control dumps' tiles (defaults when it has none)."""
    frames = [f for f in frames if len(f)]
    return control_stats(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {c: pd.Series(dtype=bool if c == "is_control" else float if c.endswith("_ns") else object) for c in CONTROL_COLUMNS}))


def rows_by_dump(table: pa.Table) -> dict[tuple[int, str], np.ndarray]:
    """Row indices of ``table`` per (rank, dump), in table order."""
    keys = pd.DataFrame({"rank": table["rank"].to_numpy(zero_copy_only=False), "dump": table["dump"].to_numpy(zero_copy_only=False)})
    return {k: v.astype(np.int64) for k, v in keys.groupby(["rank", "dump"], sort=False).indices.items()} if len(keys) else {}


def analyze_streaming(tasks: list[DumpTask], folder: Path, tables: dict[str, pa.Table], ctx: AnalysisContext,
                      workers: int | None = None, tick=None, scheduler: str | None = None) -> StreamResult:
    """Both passes over ``tasks`` (module text), writing the probes, tiles and bursts parts into the
    run's temporary ``folder``; then Table 3 per configuration from the tile parts."""
    pa.default_memory_pool().release_unused()  # what reading the exports and dump headers left in the pool
    sl, dumps = tables["probe_slices"], tables["dumps"]
    slice_rows, dump_rows = rows_by_dump(sl), rows_by_dump(dumps)

    def of(t: DumpTask, table: pa.Table, rows: dict) -> pa.Table:
        return table.take(rows.get((t.rank, t.dump), np.zeros(0, np.int64)))

    controls = [t for t in tasks if any(of(t, dumps, dump_rows)["is_control"].to_pylist())]
    workers = default_workers() if workers is None else workers
    big = sum(t.records for t in tasks) >= PARALLEL_MIN_RECORDS
    pool_size = min(workers, len(tasks)) if (big and len(tasks) > 1) else 1
    results: list[DumpResult] = []
    with task_mapper(pool_size, scheduler) as mapper:
        first = list(mapper(control_task, ((t, folder, of(t, sl, slice_rows), of(t, dumps, dump_rows), ctx) for t in controls)))
        stats = run_stats([ctrl for ctrl, _ in first])
        partial = {(t.rank, t.index): r for t, (_, r) in zip(controls, first)}  # the part a task writes: unique per task
        del first
        args = ((t, folder, None if (t.rank, t.index) in partial else of(t, sl, slice_rows), of(t, dumps, dump_rows), ctx, stats,
                 partial.get((t.rank, t.index))) for t in tasks)
        for r in mapper(pass2_task, args):
            results.append(r)
            if tick:
                tick()
    shutil.rmtree(Path(folder) / SCRATCH, ignore_errors=True)
    counts = {name: sum(getattr(r, name) for r in results) for name in ("tiles", "bursts")}
    counts["probes"] = sum(r.records for r in results)
    points = [r.calibration_points for r in results if len(r.calibration_points)]
    return StreamResult(counts={n: c for n, c in counts.items() if c or n == "probes"},
                        table3=table3_by_configuration(folder, tasks, dumps.to_pandas(), tables["kernels"].to_pandas(), ctx, results),
                        calibration_points=pd.concat(points, ignore_index=True) if points else pd.DataFrame(),
                        backpressured=sum(r.backpressured for r in results), warnings=[w for r in results for w in r.warnings])


def table3_by_configuration(folder: Path, tasks: list[DumpTask], dumps: pd.DataFrame, kernels: pd.DataFrame,
                            ctx: AnalysisContext, results: list[DumpResult]) -> pd.DataFrame:
    """Spec §5 Table 3 (``table3_from_tiles`` + kernel times), each configuration's row from the tile
    parts of that configuration's dumps only: a row reads every tile of its configuration and none
    of another's, so the rows equal those of the whole tile table."""
    from xstage_trace.analysis.stall import CONFIG, attach_kernel_times, kernel_trials, table3_from_tiles

    written = [t for t, r in zip(tasks, results) if r.tiles]
    if not written:
        return pd.DataFrame()
    cfg = dumps.astype({"dump": str}).assign(variant=dumps["variant"].fillna("-")).set_index(["rank", "dump"])[["dest", "shape", "variant"]]
    by_config: dict[tuple, list[str]] = {}
    for t in written:
        key = tuple(cfg.loc[(t.rank, t.dump)].astype(str))
        by_config.setdefault(key, []).append(str(table_part_path(folder, "tiles", t.rank, t.index)))
    rows = [table3_from_tiles(_read_columns(files)) for _, files in sorted(by_config.items())]
    table3 = pd.concat([r for r in rows if len(r)], ignore_index=True) if any(len(r) for r in rows) else pd.DataFrame()
    if table3.empty:
        return table3
    table3 = table3.sort_values(CONFIG, kind="stable").reset_index(drop=True)
    return attach_kernel_times(table3, kernel_trials(kernels, dumps, ctx.warmup_launches))


def _read_columns(files: list[str]) -> pd.DataFrame:
    """TABLE3_COLUMNS of the given tile parts as one frame, read part by part (no multi-file read
    buffers) and converted with the Arrow columns freed as they go."""
    import pyarrow.parquet as pq

    parts = pa.concat_tables([pq.read_table(f, columns=TABLE3_COLUMNS, read_dictionary=TABLE3_CATEGORIES) for f in files]).unify_dictionaries()
    frame = parts.to_pandas(self_destruct=True, split_blocks=True)
    del parts
    pa.default_memory_pool().release_unused()
    return frame
