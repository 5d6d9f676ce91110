"""Run.probe_spans (one kernel's spans, windowed) and Run.calibration_document over the shipped capture."""

from __future__ import annotations

import json

import numpy as np

import xstage_trace
from conftest import CALIB

S1_WAVE = "fused_host_S1_wave_split_smem_tma"


def _dump(run, stem):
    return next(d for d in run.tiles()["dump"].unique() if d.startswith(stem))


def test_probe_spans_pair_every_tile_mainloop_of_one_dump(fused_run_dir):
    run = xstage_trace.open_run(fused_run_dir)
    dump = _dump(run, S1_WAVE)
    spans = run.probe_spans(dump, events=("mainloop",))
    tiles = run.tiles()
    tiles = tiles[tiles["dump"] == dump]
    assert set(spans["dump"]) == {dump} and set(spans["event"]) == {"mainloop"}
    assert len(spans) == len(tiles)
    m = spans.merge(tiles, on=["rank", "dump", "cta", "tile"])
    assert len(m) == len(tiles)
    np.testing.assert_allclose(m["duration_ns"], m["mainloop_ns"])
    # the end minus the begin record of the raw probes, for one tile picked independently
    p = run.probes()
    one = m.iloc[len(m) // 2]
    rec = p[(p["dump"] == dump) & (p["cta"] == one["cta"]) & (p["tile"] == one["tile"]) & (p["event"] == "mainloop")]
    assert one["duration_ns"] == rec.loc[rec["kind"] == "end", "t_ns"].iloc[0] - rec.loc[rec["kind"] == "begin", "t_ns"].iloc[0]


def test_probe_spans_window_keeps_exactly_the_overlapping_spans(fused_run_dir):
    run = xstage_trace.open_run(fused_run_dir)
    dump = _dump(run, S1_WAVE)
    every = run.probe_spans(dump)
    lo = every["start_ns"].min() + 1.0e6
    hi = lo + 50e3
    inside = run.probe_spans(dump, start_ns=lo, end_ns=hi)
    overlaps = (every["end_ns"] >= lo) & (every["start_ns"] <= hi)
    assert 0 < len(inside) == int(overlaps.sum()) < len(every)
    assert (inside["end_ns"] >= lo).all() and (inside["start_ns"] <= hi).all()


def test_calibration_document_is_the_json_the_run_was_analyzed_with(fused_run_dir, partial_runs):
    doc = xstage_trace.open_run(fused_run_dir).calibration_document()
    assert doc == json.loads((CALIB / "calibration_host.json").read_text())
    assert xstage_trace.open_run(partial_runs["no_calibration"]).calibration_document() is None


def test_the_run_keeps_the_calibration_it_was_analysed_with(fused_run_dir, partial_runs):
    run = xstage_trace.open_run(fused_run_dir)
    assert run.calibration_path() == fused_run_dir / "calibration.json"
    assert run.calibration_path().read_bytes() == (CALIB / "calibration_host.json").read_bytes()
    assert run.calibration_document() == json.loads((CALIB / "calibration_host.json").read_text())
    assert xstage_trace.open_run(partial_runs["no_calibration"]).calibration_path() is None


def test_tables_are_read_on_first_use_so_small_ones_open_without_the_probes(fused_run_dir, tmp_path):
    import shutil

    import pytest

    from xstage_trace.base.errors import InputError

    run_dir = tmp_path / "copy.xstage-run"
    shutil.copytree(fused_run_dir, run_dir)
    for part in (run_dir / "probes").rglob("*.parquet"):
        part.write_bytes(b"not parquet")  # would fail if it were read
    run = xstage_trace.open_run(run_dir)
    assert len(run.tiles()) == len(xstage_trace.open_run(fused_run_dir).tiles())
    with pytest.raises(Exception):
        run.probes()
    doc = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps(dict(doc, schema_version=99)))
    with pytest.raises(InputError, match="newer"):
        xstage_trace.open_run(run_dir).kernels()


def test_table_columns_alone_are_the_files_columns_and_checked_against_the_manifest(fused_run_dir, tmp_path):
    import shutil

    import pyarrow.parquet as pq
    import pytest

    from xstage_trace.base.errors import InputError

    run = xstage_trace.open_run(fused_run_dir)
    alone = run.table("tiles", columns=["backpressured", "dump"])
    files = sorted((fused_run_dir / "tiles").glob("rank=*/*.parquet"))
    raw = [pq.read_table(f, partitioning=None) for f in files]  # pyarrow over the files themselves
    assert alone.column_names == ["backpressured", "dump"] and alone.num_rows == sum(t.num_rows for t in raw)
    assert alone["backpressured"].to_pylist() == [b for t in raw for b in t["backpressured"].to_pylist()]
    assert alone["dump"].cast("string").to_pylist() == [d for t in raw for d in t["dump"].cast("string").to_pylist()]
    whole = run.table("tiles")  # read whole afterwards: the same columns from it
    assert run.table("tiles", columns=["dump", "backpressured"]).equals(whole.select(["dump", "backpressured"]))
    with pytest.raises(KeyError):
        run.table("tiles", columns=["no_such_column"])
    copy = shutil.copytree(fused_run_dir, tmp_path / "copy.run")
    part = sorted((copy / "tiles").glob("rank=*/*.parquet"))[0]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    part.write_bytes(bytes(data))
    with pytest.raises(InputError, match="sha256"):
        xstage_trace.open_run(copy).table("tiles", columns=["backpressured"])
