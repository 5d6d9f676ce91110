"""Streaming analyze: one dump's records in memory at a time, per-dump work spread over processes.

``process_task`` is the unit of work: read one dump's records onto the run's time base, write them as
their own Parquet file of the ``probes`` table inside the run's temporary folder, and run the per-dump
analyses (core/analyses.py) on them. Only the small per-dump results come back. ``run_tasks`` maps it
over the plan's tasks in this process or in a pool of worker processes.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pandas as pd
import pyarrow as pa

from xstage_trace.analyses import AnalysisContext, analyze_dump
from xstage_trace.collectors.collect import DumpTask, load_records
from xstage_trace.collectors.dataset import write_probe_part

PARALLEL_MIN_RECORDS = 2_000_000  # below this, starting worker processes costs more than it saves


def process_task(task: DumpTask, folder: Path, slices: pa.Table, dump_row: pa.Table, ctx: AnalysisContext) -> tuple[dict, list[str], int]:
    """One dump: records → probes part file in ``folder``; per-dump analyses → (results, warnings, records)."""
    records, warnings = load_records(task)
    write_probe_part(folder, task.rank, task.index, records)
    results = analyze_dump(records.to_pandas(), slices.to_pandas(), dump_row.to_pandas(), ctx)
    return results, warnings, records.num_rows


def default_workers() -> int:
    """Worker processes for a large run: the CPUs this process may use, at most 8."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1), 8))


def run_tasks(tasks: list[DumpTask], folder: Path, tables: dict[str, pa.Table], ctx: AnalysisContext,
              workers: int | None = None, tick=None, scheduler: str | None = None) -> tuple[list[dict], list[str], int]:
    """Every task through ``process_task``, in order: on a Dask scheduler when one is named
    (``local:N`` or an address; the run folder must then be on a file system the workers share),
    else in worker processes when the run is large, else in this process."""
    import pyarrow.compute as pc

    sl, dumps = tables["probe_slices"], tables["dumps"]

    def of(t: DumpTask, table: pa.Table) -> pa.Table:
        return table.filter(pc.and_(pc.equal(table["rank"], t.rank), pc.equal(table["dump"], t.dump)))

    args = [(t, folder, of(t, sl), of(t, dumps), ctx) for t in tasks]
    workers = default_workers() if workers is None else workers
    big = sum(t.records for t in tasks) >= PARALLEL_MIN_RECORDS
    results, warnings, n = [], [], 0
    if scheduler is not None:
        from xstage_trace.collectors.distributed import map_tasks

        for r, w, k in map_tasks(process_task, args, scheduler):
            results.append(r), warnings.extend(w)
            n += k
        return results, warnings, n
    if workers > 1 and len(tasks) > 1 and big:
        with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=get_context("spawn")) as pool:
            outs = pool.map(process_task, *zip(*args))
            for r, w, k in outs:
                results.append(r), warnings.extend(w)
                n += k
                if tick:
                    tick()
    else:
        for a in args:
            r, w, k = process_task(*a)
            results.append(r), warnings.extend(w)
            n += k
            if tick:
                tick()
    return results, warnings, n


def frames_of(tables: dict[str, pa.Table], names=("probe_slices", "dumps", "kernels")) -> dict[str, pd.DataFrame]:
    """The small run tables the whole-run analyses need, as pandas."""
    return {n: tables[n].to_pandas() for n in names}
