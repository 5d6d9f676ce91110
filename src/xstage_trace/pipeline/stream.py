"""Streaming analyze in bounded memory: one batch of dumps in memory at a time (per worker), every
table written part by part as it is produced, the work spread over processes.

The plan's dumps are cut into batches (``make_batches``): consecutive dumps of one rank and one
configuration, up to BATCH_RECORDS records (a larger dump is a batch of its own). A batch is read,
analysed and written as one: every per-dump step keys its rows by (rank, dump), so the results are
those of its dumps one by one, while the fixed cost of each step and of each Parquet file is paid once
per batch instead of once per dump (a fused-kernel dump is ~50 k records).

Two passes over the batches, on the same workers:

1. the control batches only (``is_control`` in the ``dumps`` table): their tile spans decide the
   statistics every tile is judged by (slot-wait floor and noise, control mainloop p99; docs/model.md §5),
   ``ControlStats``. Each control batch is read and analysed here once (``control_task``: its probes
   and bursts parts are written, its unfinished tile spans kept in a scratch Arrow file of the run's
   temporary folder); its control tiles' sample (their slot waits and mainloops, ``ControlSample``) waits in
   another; the counts come back, and the main process reads the samples, at most CONTROL_CAP_VALUES values
   of one held at once (``control_stats_from_samples``).
2. every batch (``process_task``): read its records onto the run's time base, write them as one part
   of the ``probes`` table, run the per-dump analyses (the registry ``DUMP_ANALYSES`` of
   pipeline/analyses.py), run the batch-scope run steps (the tiles, finished with the control statistics)
   and write every step kept as a table (the bursts) and every batch-scope step as one part each
   (``NAME/rank=R/part-NNNNN.parquet``, the layout ``read_run`` reads; NNNNN: the batch's first dump). A
   control batch only has its scratch step inputs finished and written (``finish_control_task``). Only
   counts and the rows of the steps kept as results (the calibration points) come back. A run small enough to be
   analysed in this process (below PARALLEL_MIN_RECORDS) holds its batches' finished tiles until the last, so
   that the path-drain forward prediction (docs/model.md §11) of all their launches is one call (``_pass2_linked``).
   A task's parts are written on a thread while it computes (``base.background_writes``: the Parquet writer runs
   without the GIL), every one of them written before the task returns.

Each configuration-scope run step (Table 3) is computed one configuration (and schedule: the step's ``split``) at a
time from that configuration's parts (the columns it reads only, the rows of that schedule only), on a worker, as soon
as the configuration's last batch is in (``ByConfiguration``), so the largest thing held is one Table 3 row's tiles,
never the run's. The
run-scope and results-scope steps (what-if, verdicts) follow in the runner (``run_results``).
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather

from xstage_trace.base.malloc import freed_memory_returned, keep_freed_memory, release_freed_memory
from xstage_trace.pipeline.analyses import DUMP_ANALYSES, RUN_ANALYSES, SLICE_COLUMNS, AnalysisContext, analyze_dumps, run_analysis
from xstage_trace.analysis.tiles import ControlStats, control_sample, control_stats_from_samples, with_dump_config, with_link_forward
from xstage_trace.collectors.collect import DumpTask, load_records, rows_by_dump
from xstage_trace.base.background_writes import BackgroundWrites
from xstage_trace.base.run_files import table_part_path, write_table_part

PARALLEL_MIN_RECORDS = 2_000_000  # below this, starting worker processes costs more than it saves
CONTROL_CAP_VALUES = 1 << 22  # values of one control sample (the slot waits, a group's mainloops) held at once in the main process
CONFIGURATION_CAP_VALUES = 1 << 22  # values of one Table 3 sample held at once (32 MiB); past it its medians come from passes over the parts


@dataclass
class DumpResult:
    """What one batch's work sends back: its records, the row count of each table part it wrote (the per-dump
    steps kept as tables, the batch-scope run steps), the rows of the steps kept as results, its backpressured
    tiles and the decoder's warnings."""

    records: int
    rows: dict[str, int]
    results: dict[str, pd.DataFrame]
    backpressured: int
    warnings: list[str] = field(default_factory=list)


@dataclass
class StreamResult:
    """The whole run's results once every dump went through: row counts per streamed table, the results (the
    per-dump steps kept as results, concatenated; the configuration-scope run steps, e.g. Table 3), the
    backpressured tiles and the decoder's warnings."""

    counts: dict[str, int]
    results: dict[str, pd.DataFrame]
    backpressured: int
    warnings: list[str]


SCRATCH = ".control-spans"  # pass 1's unfinished tile spans of the control dumps, removed before the run is written
BATCH_RECORDS = 500_000  # dumps of one configuration analysed together up to this many records (one part per batch)


@dataclass(frozen=True)
class DumpBatch:
    """Consecutive dumps of one rank and one configuration (``config``: the ``dumps`` table's dest,
    shape and variant as text, ``control``: its ``is_control``), analysed together and written as one
    part of each table (``index``: its first dump's)."""

    tasks: tuple[DumpTask, ...]
    config: tuple[str, str, str]
    control: bool

    @property
    def rank(self) -> int:
        return self.tasks[0].rank

    @property
    def index(self) -> int:
        return self.tasks[0].index

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks)


def make_batches(tasks: list[DumpTask], dumps: pd.DataFrame, batch_records: int | None = None) -> list[DumpBatch]:
    """``tasks`` in order, cut into batches: a new batch where the rank or the configuration changes,
    or where the batch would pass ``batch_records`` records (default BATCH_RECORDS; a larger dump is a
    batch of its own)."""
    batch_records = BATCH_RECORDS if batch_records is None else batch_records
    d = dumps.astype({"dump": str}).drop_duplicates(["rank", "dump"])
    cfg = d.assign(variant=d["variant"].fillna("-"), is_control=d["is_control"].fillna(False).astype(bool))
    key = {(r, n): (tuple(map(str, c)), bool(ctl)) for r, n, *c, ctl in cfg[["rank", "dump", "dest", "shape", "variant", "is_control"]].to_numpy()}
    out: list[tuple[tuple, list[DumpTask]]] = []
    size = 0
    for t in tasks:
        k = (t.rank, key.get((t.rank, t.dump), (("None", "None", "-"), False)))
        if not out or k != out[-1][0] or size + t.records > batch_records:
            out.append((k, []))
            size = 0
        out[-1][1].append(t)
        size += t.records
    return [DumpBatch(tuple(b), *k[1]) for k, b in out]


def _scratch_path(folder: Path, batch: DumpBatch, name: str) -> Path:
    return Path(folder) / SCRATCH / f"{name}-rank={batch.rank}-part-{batch.index:05d}.arrow"


def _load_batch(batch: DumpBatch) -> tuple[pa.Table, list[str]]:
    """The batch's records, dump after dump, as one table (one dictionary per text column), and the decoder's warnings."""
    tables, warnings = [], []
    for t in batch.tasks:
        records, w = load_records(t)
        tables.append(records)
        warnings += w
    if len(tables) == 1:
        return tables[0], warnings
    return pa.concat_tables(tables).unify_dictionaries().combine_chunks(), warnings


def _analyze_and_write(batch: DumpBatch, folder: Path, slices: pa.Table, dump: pd.DataFrame, ctx: AnalysisContext,
                       writes: BackgroundWrites) -> tuple[pa.Table, dict[str, pd.DataFrame], list[str]]:
    """A batch's records → probes part; per-dump analyses; each step kept as a table → its part (parts of no
    rows are not written), the parts handed to ``writes`` (the probes part is written while the analyses run).
    Returns the records, the analyses' results and the decoder's warnings."""
    records, warnings = _load_batch(batch)
    writes.submit(write_table_part, folder, "probes", batch.rank, batch.index, records)
    done = analyze_dumps(records.to_pandas(), slices.to_pandas(), dump, ctx)
    for a in DUMP_ANALYSES:
        if a.keep == "table" and len(done.get(a.name, ())):
            writes.submit(write_table_part, folder, a.name, batch.rank, batch.index, pa.Table.from_pandas(done[a.name], preserve_index=False))
    return records, done, warnings


def _finish(done: dict[str, pd.DataFrame], dump: pd.DataFrame, ctx: AnalysisContext, control: ControlStats) -> dict[str, pd.DataFrame]:
    """A batch's batch-scope run steps (the tiles, finished with ``control``)."""
    return {a.name: a.streamed(done, dump, ctx, control) for a in RUN_ANALYSES if a.scope == "batch"}


def _write_finished(batch: DumpBatch, folder: Path, finished: dict[str, pd.DataFrame], writes: BackgroundWrites) -> None:
    """A batch's batch-scope tables → one part each (not written when empty), handed to ``writes``."""
    for name, frame in finished.items():
        if len(frame):
            writes.submit(write_table_part, folder, name, batch.rank, batch.index, pa.Table.from_pandas(frame, preserve_index=False))


def _backpressured(finished: dict[str, pd.DataFrame]) -> int:
    """The backpressured tiles among a batch's finished tiles."""
    tiles = finished.get("tiles", pd.DataFrame())
    return int(tiles["backpressured"].sum()) if len(tiles) else 0


def _result(records: int, done: dict[str, pd.DataFrame], finished: dict[str, pd.DataFrame], warnings: list[str]) -> DumpResult:
    rows = {a.name: len(done.get(a.name, ())) for a in DUMP_ANALYSES if a.keep == "table"}
    rows.update({name: len(frame) for name, frame in finished.items()})
    results = {a.name: done.get(a.name, pd.DataFrame()) for a in DUMP_ANALYSES if a.keep == "result"}
    return DumpResult(records, rows, results, _backpressured(finished), warnings)


def _step_inputs(done: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The per-dump results kept only for later steps (``keep="step"``): what a batch-scope step finishes."""
    return {a.name: done[a.name] for a in DUMP_ANALYSES if a.keep == "step" and len(done.get(a.name, ()))}


def control_task(batch: DumpBatch, folder: Path, slices: pa.Table, dump_rows: pa.Table, ctx: AnalysisContext) -> tuple[str | None, DumpResult]:
    """Pass 1, one batch of control dumps: everything ``process_task`` does but the batch-scope steps (which
    need every control dump's statistics); the inputs they finish (the tile spans) wait in scratch files for
    ``finish_control_task``, its control tiles' sample (slot waits, mainloops per group: 16 B a tile) in another.
    Returns the sample's path (None: no tiles) and its result so far."""
    dump = dump_rows.to_pandas()
    with BackgroundWrites() as writes:
        records, done, warnings = _analyze_and_write(batch, folder, slices, dump, ctx, writes)
        kept = _step_inputs(done)
        for name, frame in kept.items():
            path = _scratch_path(folder, batch, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            writes.submit(feather.write_feather, pa.Table.from_pandas(frame, preserve_index=False), path, "uncompressed")
        partial = _result(records.num_rows, done, {}, warnings)
        spans = kept.get("tile_spans")
        if spans is None:
            return None, partial
        sample = _scratch_path(folder, batch, "tile_spans").with_suffix(".sample")
        sample.write_bytes(pickle.dumps(control_sample(with_dump_config(spans, dump))))
    return str(sample), partial


def finish_control_task(batch: DumpBatch, folder: Path, dump_rows: pa.Table, ctx: AnalysisContext, control: ControlStats,
                        partial: DumpResult) -> tuple[DumpResult, dict[str, pd.DataFrame]]:
    """Pass 2, one batch that ``control_task`` analysed: its scratch step inputs finished with ``control`` by the
    batch-scope steps (the scratch files are removed). Returns its result and the finished tables, not yet written."""
    done = {}
    for a in DUMP_ANALYSES:
        path = _scratch_path(folder, batch, a.name)
        if a.keep == "step" and path.exists():
            done[a.name] = feather.read_table(path).to_pandas()
            path.unlink()
    if not done:  # no tile spans in this batch
        return partial, {}
    finished = _finish(done, dump_rows.to_pandas(), ctx, control)
    rows = dict(partial.rows, **{name: len(frame) for name, frame in finished.items()})
    return DumpResult(partial.records, rows, partial.results, _backpressured(finished), partial.warnings), finished


def process_task(batch: DumpBatch, folder: Path, slices: pa.Table, dump_rows: pa.Table, ctx: AnalysisContext,
                 control: ControlStats, writes: BackgroundWrites) -> tuple[DumpResult, dict[str, pd.DataFrame]]:
    """Pass 2, one batch: records → probes part; per-dump analyses → their table parts (parts of no rows are not
    written; handed to ``writes``); the batch-scope steps (tiles finished with ``control``). Returns its result and
    the finished tables, not yet written."""
    dump = dump_rows.to_pandas()
    records, done, warnings = _analyze_and_write(batch, folder, slices, dump, ctx, writes)
    finished = _finish(done, dump, ctx, control)
    return _result(records.num_rows, done, finished, warnings), finished


def _pass2(batch: DumpBatch, folder: Path, slices: pa.Table | None, dump_rows: pa.Table, ctx: AnalysisContext,
           control: ControlStats, partial: DumpResult | None, writes: BackgroundWrites) -> tuple[DumpResult, dict[str, pd.DataFrame]]:
    """Pass 2 of one batch: ``finish_control_task`` for one pass 1 analysed (``partial``), else ``process_task``."""
    if partial is not None:
        return finish_control_task(batch, folder, dump_rows, ctx, control, partial)
    return process_task(batch, folder, slices, dump_rows, ctx, control, writes)


def pass2_task(batch: DumpBatch, folder: Path, slices: pa.Table | None, dump_rows: pa.Table, ctx: AnalysisContext,
               control: ControlStats, partial: DumpResult | None) -> DumpResult:
    """Pass 2 of one batch (``_pass2``), its batch-scope tables written as one part each (every part written when
    it returns)."""
    with BackgroundWrites() as writes:
        result, finished = _pass2(batch, folder, slices, dump_rows, ctx, control, partial, writes)
        _write_finished(batch, folder, finished, writes)
    return result


def _pass2_linked(args: Iterable[tuple], folder: Path, dumps: pd.DataFrame, ctx: AnalysisContext) -> Iterator[DumpResult]:
    """Pass 2 of a run analysed in this process (``pass2_task``'s ``args``), with the path-drain forward prediction of
    every batch's launches (docs/model.md §11) made in one call once every batch is finished
    (``analysis.tiles.with_link_forward``) instead of one call per batch: a call costs the causal passes of its
    longest launch, so the run pays those instead of their sum over the batches. The tables are those of one batch at
    a time; every batch's finished tables are held until then (a run below PARALLEL_MIN_RECORDS records)."""
    from xstage_trace.pipeline.analyses import calibrated_models

    unlinked = replace(ctx, link=None)
    with BackgroundWrites(threads=2, ahead=4) as writes:
        staged = [(batch, *_pass2(batch, folder, slices, rows, unlinked, control, partial, writes))
                  for batch, _, slices, rows, _, control, partial in args]  # args' folder is ``folder``, its context ``ctx``
        models = {d: m[1] for d, m in calibrated_models(ctx.model, dumps, ctx.link).items()}
        tiles = with_link_forward([f.get("tiles", pd.DataFrame()) for _, _, f in staged], dumps, models)
        for (batch, result, finished), t in zip(staged, tiles):
            _write_finished(batch, folder, {**finished, "tiles": t} if "tiles" in finished else finished, writes)
    yield from (result for _, result, _ in staged)


def default_workers() -> int:
    """Worker processes for a large run: the CPUs this process may use, at most 8."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1), 8))


Mapper = Callable[[Callable, Iterable[tuple]], Iterator]
Submit = Callable[..., Callable[[], object]]  # submit(func, *args) → a handle; calling it waits for the result
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


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker_start() -> None:
    """A pool worker's initializer: freed memory kept for the next batch (``keep_freed_memory``), and, once the
    pool has stopped it (multiprocessing has flushed its queues and run its finalizers by then), its interpreter's
    teardown skipped: freeing pandas, pyarrow and the last batch one object at a time took ~0.9 s at the end of
    a 10 M-record run, with the main process waiting for it."""
    keep_freed_memory()
    atexit.register(_exit_now)


def _warm() -> None:
    """A worker's first task: import what the batch tasks need while the main process plans the run."""
    import pyarrow.parquet  # noqa: F401

    import xstage_trace.analysis.bursts  # noqa: F401
    import xstage_trace.analysis.stall  # noqa: F401
    import xstage_trace.analysis.tiles  # noqa: F401
    import xstage_trace.collectors.probe_format  # noqa: F401


def expected_records(inputs: Iterable[str | Path]) -> int:
    """The probe records ``inputs`` may hold, from file sizes alone: the bytes of their dumps (given, or
    inside a given folder) at 16 B a record (a plain dump's header adds a little; a compressed dump
    counts its compressed bytes, so it is underestimated)."""
    from xstage_trace.base.probe_layout import RECORD_BYTES
    from xstage_trace.collectors.probe_format import is_probe_dump_name

    total = 0
    for raw in inputs:
        p = Path(raw)
        files = [q for q in p.iterdir() if is_probe_dump_name(q.name)] if p.is_dir() else [p] if is_probe_dump_name(p.name) else []
        total += sum(q.stat().st_size for q in files if q.is_file())
    return total // RECORD_BYTES


@contextmanager
def early_pool(inputs: list[str | Path], workers: int | None, scheduler: str | None) -> Iterator[ProcessPoolExecutor | None]:
    """The worker pool started before the plan is made, so that the workers' start-up (a new interpreter,
    pandas, pyarrow: ~1 s) overlaps planning, where the inputs' sizes alone show a run large enough for
    a pool (``expected_records`` ≥ PARALLEL_MIN_RECORDS); None otherwise. Shut down on leaving."""
    workers = default_workers() if workers is None else workers
    if scheduler is not None or workers <= 1 or expected_records(inputs) < PARALLEL_MIN_RECORDS:
        yield None
        return
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_start)
    try:
        for _ in range(workers):  # each submit to a pool with no idle worker starts one
            pool.submit(_warm)
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


def _now(func: Callable, *args) -> Callable[[], object]:
    """``func(*args)`` run here at once, as a handle whose call returns the result."""
    result = func(*args)
    return lambda: result


@contextmanager
def task_mapper(workers: int, scheduler: str | None, pool: ProcessPoolExecutor | None = None) -> Iterator[tuple[Mapper, Submit]]:
    """(``map(func, arg_tuples)`` → results in order, ``submit(func, *args)`` → a handle whose call
    returns the result): on a Dask scheduler when one is named (``local:N`` or an address; the run folder
    must then be on a file system the workers share), else in a pool of ``workers`` processes (``pool``
    when given, left running; else one started here, kept for both passes), else (``workers`` ≤ 1) in
    this process. A submitted task queues behind the tasks mapped before it; on Dask and here it runs at once."""
    if scheduler is not None:
        from xstage_trace.pipeline.distributed import map_tasks

        yield (lambda func, args: iter(map_tasks(func, list(args), scheduler))), (lambda func, *a: _now(lambda: map_tasks(func, [a], scheduler)[0]))
    elif workers > 1 and pool is not None:
        yield (lambda func, args: _windowed(pool, func, args, WINDOW_PER_WORKER * workers)), (lambda func, *a: pool.submit(func, *a).result)
    elif workers > 1:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_start) as own:
            yield (lambda func, args: _windowed(own, func, args, WINDOW_PER_WORKER * workers)), (lambda func, *a: own.submit(func, *a).result)
    else:
        yield (lambda func, args: (func(*a) for a in args)), _now


def run_stats(samples: list[str]) -> ControlStats:
    """The control statistics of the run from its control batches' sample files (defaults when it has none),
    at most CONTROL_CAP_VALUES values of a sample held at once."""
    with freed_memory_returned():
        return control_stats_from_samples(lambda: (pickle.loads(Path(p).read_bytes()) for p in samples), CONTROL_CAP_VALUES)


def analyze_streaming(tasks: list[DumpTask], folder: Path, tables: dict[str, pa.Table], ctx: AnalysisContext,
                      workers: int | None = None, tick=None, scheduler: str | None = None,
                      pool: ProcessPoolExecutor | None = None) -> StreamResult:
    """Both passes over ``tasks`` in batches (module text), writing the probes, tiles and bursts parts into
    the run's temporary ``folder``; then Table 3 per configuration from the tile parts. ``tables``: kernels,
    dumps, and probe_slices' rows the steps read (SLICE_COLUMNS; a plan's slice_summary, one row per dump,
    reads the same as every slice). ``pool``: workers already started (``early_pool``), used when the run is
    large enough for a pool."""
    pa.default_memory_pool().release_unused()  # what reading the exports and dump headers left in the pool
    release_freed_memory()  # and in the heap
    sl, dumps = tables["probe_slices"].select(SLICE_COLUMNS), tables["dumps"]  # a task gets its dumps' rows of what the steps read
    slice_rows, dump_rows = rows_by_dump(sl), rows_by_dump(dumps)
    dumps_frame = dumps.to_pandas()
    batches = make_batches(tasks, dumps_frame)

    def of(b: DumpBatch, table: pa.Table, rows: dict) -> pa.Table:
        return table.take(np.concatenate([rows.get((t.rank, t.dump), np.zeros(0, np.int64)) for t in b.tasks]))

    controls = [b for b in batches if b.control]
    workers = default_workers() if workers is None else workers
    big = sum(t.records for t in tasks) >= PARALLEL_MIN_RECORDS
    pool_size = min(workers, len(batches)) if (big and len(batches) > 1) else 1
    results: list[DumpResult] = []
    with task_mapper(pool_size, scheduler, pool) as (mapper, submit):
        first = list(mapper(control_task, ((b, folder, of(b, sl, slice_rows), of(b, dumps, dump_rows), ctx) for b in controls)))
        stats = run_stats([sample for sample, _ in first if sample is not None])
        release_freed_memory()  # the samples read back
        partial = {(b.rank, b.index): r for b, (_, r) in zip(controls, first)}  # the part a batch writes: unique per batch
        del first
        args = ((b, folder, None if (b.rank, b.index) in partial else of(b, sl, slice_rows), of(b, dumps, dump_rows), ctx, stats,
                 partial.get((b.rank, b.index))) for b in batches)
        configs = [ByConfiguration(a, folder, batches, submit, dumps_frame) for a in RUN_ANALYSES if a.scope == "configuration"]
        linked = pool_size == 1 and scheduler is None and not big and ctx.link is not None
        pass2 = _pass2_linked(args, folder, dumps_frame, ctx) if linked else mapper(pass2_task, args)
        for i, (b, r) in enumerate(zip(batches, pass2)):
            results.append(r)
            for c in configs:
                c.batch_done(i, r)
            for _ in b.tasks if tick else ():
                tick()
        small = {"dumps": dumps_frame, "kernels": tables["kernels"].to_pandas()}
        by_config = {c.step.name: c.result(small, ctx) for c in configs}
    shutil.rmtree(Path(folder) / SCRATCH, ignore_errors=True)
    counts = {"probes": sum(r.records for r in results)}
    for r in results:
        for name, n in r.rows.items():
            counts[name] = counts.get(name, 0) + n
    collected = {}
    for a in DUMP_ANALYSES:
        if a.keep == "result":
            frames = [r.results[a.name] for r in results if len(r.results.get(a.name, ()))]
            collected[a.name] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return StreamResult(counts={n: c for n, c in counts.items() if c or n == "probes"}, results={**collected, **by_config},
                        backpressured=sum(r.backpressured for r in results), warnings=[w for r in results for w in r.warnings])


def run_results(folder: Path, tables: dict[str, pd.DataFrame], ctx: AnalysisContext, results: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """``results`` (the streamed ones) with the run steps of scope "run" (over the ``reads`` columns of every part of
    their source table that a streaming analyze wrote into ``folder``; the parts are read only when the step reads
    them) and "results" (over the results before them), in registry order. ``tables``: dumps and kernels."""
    import pyarrow.parquet as pq

    from xstage_trace.base.run_files import table_files

    out = dict(results)
    for a in RUN_ANALYSES:
        if a.scope == "run":
            parts = table_files(Path(folder), a.source)

            def read(parts=parts, columns=list(a.reads)) -> pd.DataFrame:
                return pd.concat([pq.read_table(p, columns=columns).to_pandas() for p in parts], ignore_index=True) if parts else pd.DataFrame()

            out[a.name] = a.streamed(read, tables, ctx)
        elif a.scope == "results":
            out[a.name] = a.run(out, tables, ctx)
    return out


class ByConfiguration:
    """A run step of scope "configuration" (docs/model.md §5 Table 3), each configuration's rows from the parts of
    that configuration's batches only (a batch holds one configuration), and per value of the step's ``split``
    column (a batch's dumps may hold several: their ``dumps`` rows say which) from those parts' rows of that value
    only: a row reads every tile of its configuration and value and none of another's, so the rows equal those of
    the whole table. A configuration's rows are computed (``configuration_task``, submitted to the workers) as soon
    as the last of its batches is in, while later batches are still analysed; one task at a time (its parts'
    ``reads`` columns of one value are the largest thing a worker holds)."""

    def __init__(self, step, folder: Path, batches: list[DumpBatch], submit: Submit, dumps: pd.DataFrame):
        self.step, self.folder, self.batches, self.submit = step, folder, batches, submit
        self.values = _split_values(batches, dumps, step.split)
        self.last = {(b.config, v): i for i, b in enumerate(batches) for v in self.values[i]}  # each task's last batch
        self.files: dict[tuple, list[str]] = {}
        self.rows: dict[tuple, pd.DataFrame] = {}
        self.pending: tuple[tuple, Callable[[], object]] | None = None

    def batch_done(self, i: int, result: DumpResult) -> None:
        """Batch ``i`` is analysed (``result``; the batches before it are too): the rows of each of its values are
        submitted where it was the last batch of its configuration holding that value."""
        b = self.batches[i]
        for v in self.values[i]:
            key = (b.config, v)
            if result.rows.get(self.step.source):
                self.files.setdefault(key, []).append(str(table_part_path(self.folder, self.step.source, b.rank, b.index)))
            if self.last[key] == i and key in self.files:
                self._collect()
                self.pending = (key, self.submit(configuration_task, self.step.name, self.files.pop(key), v))

    def _collect(self) -> None:
        if self.pending is not None:
            key, result = self.pending
            self.rows[key] = result()
            self.pending = None

    def result(self, tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
        """Every configuration's rows, in configuration order, completed by the step's ``finish`` (``tables``:
        dumps and kernels)."""
        self._collect()
        return self.step.finish([r for _, r in sorted(self.rows.items(), key=lambda kv: repr(kv[0]))], tables, ctx)


EVERY = ("every",)  # the one split value of a step without a split column: all of a part's rows


def _split_values(batches: list[DumpBatch], dumps: pd.DataFrame, column: str | None) -> list[tuple]:
    """Per batch the distinct values (text; None where missing) of ``column`` in its dumps' rows of ``dumps``, in the
    rows' order, None for a dump without a row (its tiles' value is missing too); ``(EVERY,)`` without a column."""
    if column is None:
        return [(EVERY,) for _ in batches]
    of: dict[tuple, list] = {}
    for r, d, v in zip(dumps["rank"].to_numpy(), dumps["dump"].astype(str), dumps[column]):
        of.setdefault((int(r), d), []).append(None if pd.isna(v) else str(v))
    return [tuple(dict.fromkeys(v for t in b.tasks for v in of.get((t.rank, t.dump), [None]))) for b in batches]


def configuration_task(name: str, files: list[str], value=EVERY) -> pd.DataFrame:
    """The rows of run step ``name`` (scope "configuration") from ``files`` (one configuration's parts, the
    columns it reads; their rows whose ``split`` column holds ``value``, None: missing), at most
    CONFIGURATION_CAP_VALUES values of a sample held at once. Text columns are read as categoricals (their
    dictionary pages as they are stored)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from xstage_trace.base.schema import TABLES

    step = run_analysis(name)
    text = [c for c in step.reads if pa.types.is_string(TABLES[step.source].field(c).type)]
    rows_of = None if value == EVERY else pc.field(step.split).is_null() if value is None else pc.field(step.split) == value

    def parts() -> Iterator[pd.DataFrame]:
        return (pq.read_table(f, columns=list(step.reads), filters=rows_of, read_dictionary=text).to_pandas() for f in files)

    release_freed_memory()  # what the batch tasks before this one left free in the heap: this task does not reuse it
    with freed_memory_returned():  # the samples are held to the end, the parts read and dropped one by one
        rows = step.streamed(parts, CONFIGURATION_CAP_VALUES)
    pa.default_memory_pool().release_unused()  # the samples held: a batch task after this one does not reuse them
    release_freed_memory()
    return rows
