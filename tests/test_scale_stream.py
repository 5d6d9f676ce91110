"""The streaming analyze (tables written per dump, control statistics from a first pass, Table 3 per
configuration) gives the run the whole-table path gives: every dump's records in one table, the
analyses over all of it at once (``analyze_frames``), on the shipped samples."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import xstage_trace
import xstage_trace.pipeline.stream as stream
from conftest import CALIB, FUSED, SAMPLES, SAMPLE_WARMUPS
from xstage_trace.pipeline.analyses import AnalysisContext, analyze_frames
from xstage_trace.base.schema import conform
from xstage_trace.dataset.calibration import load_platform
from xstage_trace.collectors.collect import collect
from xstage_trace.collectors.probe_format import decode_probe_dump
from xstage_trace.pipeline.runner import analyze_inputs

HOST_CAL = CALIB / "calibration_host.json"
SAMPLE_RUNS = {  # name → (inputs, calibration, warm-up launches)
    "fused_traced": ([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], HOST_CAL, SAMPLE_WARMUPS),
    "fused_variants": ([FUSED / "variants"], HOST_CAL, 0),
    "calibration_quick": ([CALIB / "quick" / "quick_sweep.nsys-rep", CALIB / "quick"], None, 0),
    "peer_two_ranks": ([SAMPLES / "h200x2_peer" / "fused"], None, 0),
}


def _whole_table(inputs, calibration, warmups) -> dict[str, pd.DataFrame]:
    """The reference: collect every record into one probes table and analyze it in one go."""
    c = collect(inputs)
    frames = {n: c.tables[n].to_pandas() for n in ("probes", "probe_slices", "dumps", "kernels")}
    ctx = AnalysisContext(model=load_platform(calibration) if calibration else None, warmup_launches=warmups)
    return analyze_frames(frames, ctx)


def _as_stored(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """A whole-table result as the run folder stores it (schema types, rows by rank as the folder orders them)."""
    if frame.empty:
        return frame
    t = conform(name, pa.Table.from_pandas(frame, preserve_index=False)).to_pandas()
    return t.sort_values("rank", kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module", params=sorted(SAMPLE_RUNS))
def both(request, tmp_path_factory):
    inputs, calibration, warmups = SAMPLE_RUNS[request.param]
    out = tmp_path_factory.mktemp(request.param) / "run"
    summary = analyze_inputs(inputs, out, calibration=calibration, warmup_launches=warmups, workers=1)
    return request.param, summary, xstage_trace.open_run(out), _whole_table(inputs, calibration, warmups)


def test_streamed_tiles_equal_the_whole_table_tiles(both):
    name, summary, run, whole = both
    want = _as_stored("tiles", whole.get("tiles", pd.DataFrame()))
    got = run.tiles()
    if want.empty:
        assert got.empty and name in ("calibration_quick",)  # the calibration bench has no tiles
        return
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    assert summary["backpressured_tiles"] == int(want["backpressured"].sum())


def test_streamed_bursts_equal_the_whole_table_bursts(both):
    _, _, run, whole = both
    want = _as_stored("bursts", whole["bursts"])
    assert len(want)  # every sample stores remotely
    pd.testing.assert_frame_equal(run.bursts().reset_index(drop=True), want)


def test_streamed_table3_equals_the_whole_table_table3(both):
    name, _, run, whole = both
    want = whole.get("table3", pd.DataFrame())
    got = run.table3()
    if want.empty:
        assert got.empty
        return
    assert name.startswith("fused") or name.startswith("peer")
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)


def test_streamed_calibration_points_equal_the_whole_table_points(both):
    name, summary, run, whole = both
    want = whole.get("calibration_points", pd.DataFrame())
    assert summary["calibration_points"] == len(want)
    if name == "calibration_quick":
        got = pd.read_csv(run.path / "calibration_points.csv")
        cols = ["dest", "mode", "K", "B", "V", "gap_ns", "tiss_med_ns", "tiss_p90_ns", "period_med_ns"]
        want = want.sort_values(["dest", "mode", "K", "B", "gap_ns"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(got[cols], want[cols], check_dtype=False)


def test_tables_are_written_one_part_per_configuration_batch_and_no_scratch_is_left(tmp_path, monkeypatch):
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    monkeypatch.setattr(stream, "PARALLEL_MIN_RECORDS", 0)  # the sample is small: force the pool of two
    analyze_inputs(inputs, tmp_path / "run", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=2)
    # the dumps in plan order (by name) and their configuration, from the names: fused_<dest>_<shape>_<schedule>_…
    names = sorted(p.name for p in (FUSED / "traced").glob("*.xsp*"))  # a dump is named by its file
    config = [tuple(n.split("_")[1:3]) for n in names]
    firsts = [i for i in range(len(names)) if i == 0 or config[i] != config[i - 1]]
    assert len(firsts) < len(names)  # the sample has configurations of several dumps: they share a part
    run = xstage_trace.open_run(tmp_path / "run")
    for table in ("probes", "tiles", "bursts"):
        parts = sorted(p.name for p in (tmp_path / "run" / table / "rank=0").iterdir())
        assert parts == [f"part-{i:05d}.parquet" for i in firsts], table
        for part, first in zip(parts, firsts):  # each part holds its configuration's dumps and no other's
            held = set(pq.read_table(tmp_path / "run" / table / "rank=0" / part, columns=["dump"])["dump"].to_pylist())
            assert held == {n for n, c in zip(names, config) if c == config[first]}, (table, part)
        assert set(getattr(run, table)()["dump"].astype(str)) == set(names)
    assert not (tmp_path / "run" / "tiles.parquet").exists()
    # the control pass's scratch tile spans are gone from the folder and were never in its manifest
    assert not (tmp_path / "run" / stream.SCRATCH).exists()
    assert not [f for f in run.manifest["files"] if f.startswith(stream.SCRATCH)]


def test_a_batch_ends_at_its_record_limit_and_the_run_is_the_same(tmp_path, monkeypatch):
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    analyze_inputs(inputs, tmp_path / "a", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=1)
    monkeypatch.setattr(stream, "BATCH_RECORDS", 1)  # every dump is larger: one batch, one part per dump
    analyze_inputs(inputs, tmp_path / "b", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=1)
    dumps = len(list((FUSED / "traced").glob("*.xsp*")))
    assert len(list((tmp_path / "b" / "tiles" / "rank=0").iterdir())) == dumps
    a, b = xstage_trace.open_run(tmp_path / "a"), xstage_trace.open_run(tmp_path / "b")
    for name in ("tiles", "bursts", "probes", "table3"):
        pd.testing.assert_frame_equal(getattr(a, name)(), getattr(b, name)(), check_categorical=False)


def test_a_run_with_samples_over_the_memory_caps_gives_the_same_tiles_and_table3(tmp_path, monkeypatch):
    """Past the caps on values held (the control statistics' and Table 3's samples), the statistics come
    from passes over the parts: the same tiles (which carry the control floor, noise and p99) and the same
    Table 3 medians and counts as with every sample held; the err means agree to the last bits (a sum
    over parts instead of one numpy sum)."""
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    analyze_inputs(inputs, tmp_path / "a", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=1)
    monkeypatch.setattr(stream, "CONTROL_CAP_VALUES", 50)
    monkeypatch.setattr(stream, "CONFIGURATION_CAP_VALUES", 50)
    analyze_inputs(inputs, tmp_path / "b", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=1)
    a, b = xstage_trace.open_run(tmp_path / "a"), xstage_trace.open_run(tmp_path / "b")
    pd.testing.assert_frame_equal(a.tiles(), b.tiles(), check_categorical=False)
    ta, tb = a.table3(), b.table3()
    means = [c for c in ta if c.endswith("_mean_ns")]
    assert len(ta) > 1 and means
    pd.testing.assert_frame_equal(ta.drop(columns=means), tb.drop(columns=means))
    pd.testing.assert_frame_equal(ta[means], tb[means], check_exact=False, rtol=1e-12)


def test_a_run_analyzed_again_from_its_folder_keeps_every_dump(tmp_path):
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    analyze_inputs(inputs, tmp_path / "a", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=1)
    analyze_inputs([tmp_path / "a"], tmp_path / "b", calibration=HOST_CAL, warmup_launches=SAMPLE_WARMUPS, workers=1)
    a, b = xstage_trace.open_run(tmp_path / "a"), xstage_trace.open_run(tmp_path / "b")
    keys = {"tiles": ["rank", "dump", "cta", "position"], "bursts": ["rank", "dump", "burst"], "probes": ["rank", "dump", "slice", "t_ns"]}
    for name, by in keys.items():
        x, y = (getattr(r, name)().sort_values(by, kind="stable").reset_index(drop=True) for r in (a, b))
        assert x["dump"].nunique() == len(list((FUSED / "traced").glob("*.xsp*")))
        pd.testing.assert_frame_equal(x, y, check_categorical=False)
    pd.testing.assert_frame_equal(a.table3(), b.table3())


def test_a_run_without_control_dumps_streams_like_the_whole_table(tmp_path):
    """No control dump: the control pass has nothing to read, every tile gets the default floor and noise."""
    chosen = tmp_path / "dumps"
    chosen.mkdir()
    for src in sorted((FUSED / "traced").glob("fused_host_S1_*.xsp*")):  # host S1 is not a control configuration
        shutil.copyfile(src, chosen / src.name)
    whole = _whole_table([chosen], None, 0)
    assert len(whole["tiles"]) and not whole["tiles"]["wait_floor_ns"].any()  # spec default: floor 0 without a control
    analyze_inputs([chosen], tmp_path / "run", workers=1)
    run = xstage_trace.open_run(tmp_path / "run")
    pd.testing.assert_frame_equal(run.tiles().reset_index(drop=True), _as_stored("tiles", whole["tiles"]))
    pd.testing.assert_frame_equal(run.table3().reset_index(drop=True), whole["table3"].reset_index(drop=True), check_dtype=False)


def test_the_plan_writes_the_dumps_slices_as_it_reads_them_and_keeps_one_row_per_dump(tmp_path, monkeypatch):
    """plan_run holds no slice table: the dumps' slices go into parts of probe_slices in the folder as the headers
    are read (consecutive dumps of one rank up to PART_SLICES rows; the decoder's tables, row for row), and the
    summary keeps each dump's median ns_per_cycle (what the per-dump steps read), slices and records_stored,
    checked against the decoder."""
    from xstage_trace.collectors.collect import SliceParts, plan_run

    paths = sorted((FUSED / "traced").glob("*.xsp*"))
    decoded = [decode_probe_dump(p, records=False).slices for p in paths]
    per_dump = decoded[0].num_rows
    assert all(d.num_rows == per_dump for d in decoded)
    monkeypatch.setattr(SliceParts, "PART_SLICES", 2 * per_dump + 1)  # two dumps a part
    plan = plan_run([FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"], tmp_path)
    assert "probe_slices" not in plan.tables and "probes" not in plan.tables
    parts = list(dict.fromkeys(plan.slice_parts.values()))
    assert len(parts) == (len(paths) + 1) // 2
    assert pa.concat_tables(pq.read_table(p) for p in parts).equals(pa.concat_tables(decoded))
    summary = plan.slice_summary.to_pandas().set_index("dump")
    assert len(summary) == len(plan.slice_parts) == len(paths)
    for i, d in enumerate(decoded):
        name = d["dump"][0].as_py()
        assert plan.slice_parts[(0, name)] == parts[i // 2]
        npc = d["ns_per_cycle"].to_numpy()
        assert summary.loc[name, "ns_per_cycle"] == np.median(npc)
        assert summary.loc[name, "slices"] == len(npc) and summary.loc[name, "records_stored"] == pa.compute.sum(d["records_stored"]).as_py()
    assert plan.slice_rows == sum(decode_probe_dump(p, records=False).header["num_slices"] for p in paths)


def test_a_runs_probe_slices_are_the_decoded_slices_of_its_dumps(tmp_path):
    inputs = [FUSED / "traced" / "fused_reference.nsys-rep", FUSED / "traced"]
    analyze_inputs(inputs, tmp_path / "run", workers=1)
    paths = sorted((FUSED / "traced").glob("*.xsp*"))
    assert (tmp_path / "run" / "probe_slices" / "rank=0").is_dir() and not (tmp_path / "run" / "probe_slices.parquet").exists()
    decoded = pa.concat_tables(decode_probe_dump(p, records=False).slices for p in paths).to_pandas()
    stored = xstage_trace.open_run(tmp_path / "run").probe_slices()
    key = ["dump", "slice"]
    pd.testing.assert_frame_equal(stored.astype({"dump": str, "label": str}).sort_values(key).reset_index(drop=True),
                                  decoded.sort_values(key).reset_index(drop=True), check_dtype=False)
