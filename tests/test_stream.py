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
