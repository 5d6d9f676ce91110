"""Streaming analyze: worker processes give the same run as one process (the parts' layout: tests/test_scale_stream.py)."""

from __future__ import annotations

import pandas as pd

import xstage_trace
import xstage_trace.pipeline.stream as stream
from conftest import FUSED
from xstage_trace.pipeline.runner import analyze_inputs


def test_worker_processes_give_the_same_run(tmp_path, monkeypatch):
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    one = analyze_inputs(inputs, tmp_path / "one", warmup_launches=2, workers=1)
    monkeypatch.setattr(stream, "PARALLEL_MIN_RECORDS", 0)  # the sample is small: force the pool
    two = analyze_inputs(inputs, tmp_path / "two", warmup_launches=2, workers=2)
    assert one["table3"] == two["table3"] and one["backpressured_tiles"] == two["backpressured_tiles"]
    a, b = xstage_trace.open_run(tmp_path / "one"), xstage_trace.open_run(tmp_path / "two")
    for name in ("tiles", "bursts", "probes"):
        pd.testing.assert_frame_equal(getattr(a, name)(), getattr(b, name)())


def test_a_run_given_back_is_analyzed_again_from_its_probes(tmp_path):
    first = analyze_inputs([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], tmp_path / "a", warmup_launches=2)
    again = analyze_inputs([tmp_path / "a"], tmp_path / "b", warmup_launches=2)
    assert again["table3"] == first["table3"] and again["probes"] == first["probes"]


def test_a_dask_local_cluster_gives_the_same_run(tmp_path):
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    one = analyze_inputs(inputs, tmp_path / "one", warmup_launches=2, workers=1)
    dask = analyze_inputs(inputs, tmp_path / "dask", warmup_launches=2, scheduler="local:2")
    assert one["table3"] == dask["table3"]
    a, b = xstage_trace.open_run(tmp_path / "one"), xstage_trace.open_run(tmp_path / "dask")
    for name in ("tiles", "bursts"):
        pd.testing.assert_frame_equal(getattr(a, name)(), getattr(b, name)())


def test_expected_records_counts_dump_bytes_at_16_per_record(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "a.xsp").write_bytes(b"\0" * 1600)
    (folder / "b.xsp.zst").write_bytes(b"\0" * 320)
    (folder / "notes.txt").write_bytes(b"\0" * 10_000)  # not a dump
    (tmp_path / "c.xsp").write_bytes(b"\0" * 160)
    assert stream.expected_records([folder, tmp_path / "c.xsp"]) == (1600 + 320 + 160) // 16


def test_no_pool_is_started_early_for_a_small_run_or_a_dask_scheduler(tmp_path):
    (tmp_path / "a.xsp").write_bytes(b"\0" * 1600)
    with stream.early_pool([tmp_path], 2, None) as pool:
        assert pool is None  # 100 records: far below PARALLEL_MIN_RECORDS
    with stream.early_pool([tmp_path], 2, "local:2") as pool:
        assert pool is None


def test_table3_of_one_task_per_schedule_equals_table3_of_the_whole_tiles_table(tmp_path):
    from xstage_trace.analysis.stall import table3_from_tiles

    analyze_inputs([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], tmp_path / "run", warmup_launches=2, workers=1)
    run = xstage_trace.open_run(tmp_path / "run")
    streamed, whole = run.table3(), table3_from_tiles(run.tiles())  # whole: one call over every tile, no parts, no split
    assert streamed["schedule"].nunique() == 2 and len(streamed) == len(whole) == 8  # each batch of the sample holds both schedules
    pd.testing.assert_frame_equal(streamed[whole.columns], whole, check_dtype=False)


def test_a_configuration_task_reads_only_the_rows_of_its_schedule(tmp_path):
    from xstage_trace.analysis.stall import table3_from_tiles
    from xstage_trace.base.run_files import table_files

    analyze_inputs([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], tmp_path / "run", warmup_launches=2, workers=1)
    tiles = xstage_trace.open_run(tmp_path / "run").tiles()
    parts = [str(p) for p in table_files(tmp_path / "run", "tiles")]
    for schedule in ("wave", "interleaved"):
        got = stream.configuration_task("table3", parts, schedule)
        want = table3_from_tiles(tiles[tiles["schedule"] == schedule])
        assert set(got["schedule"]) == {schedule}
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)
    every = stream.configuration_task("table3", parts)
    assert len(every) == 8 and set(every["schedule"]) == {"wave", "interleaved"}


def test_split_values_are_each_batch_dumps_distinct_values_in_order():
    from xstage_trace.collectors.collect import DumpTask

    def task(dump: str) -> DumpTask:
        return DumpTask(path="x", rank=0, index=0, dump=dump, records=1)

    dumps = pd.DataFrame({"rank": [0, 0, 0, 0, 0], "dump": ["a", "b", "c", "d", "d"],
                          "schedule": ["wave", "interleaved", None, "wave", "late"]})
    batches = [stream.DumpBatch((task("a"), task("b"), task("a")), ("h", "s", "-"), False), stream.DumpBatch((task("c"), task("e")), ("h", "s", "-"), False),
               stream.DumpBatch((task("d"),), ("h", "s", "-"), False)]
    assert stream._split_values(batches, dumps, "schedule") == [("wave", "interleaved"), (None,), ("wave", "late")]  # e: no row, as c's None
    assert stream._split_values(batches, dumps, None) == [(stream.EVERY,)] * 3
