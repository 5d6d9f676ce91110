"""The step registry (pipeline/analyses.py) drives the streaming analyze: a step added as one entry is run over
every batch and stored where its entry says, with no change to the stream or the runner."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import xstage_trace
import xstage_trace.pipeline.analyses as analyses
import xstage_trace.pipeline.stream as stream
from conftest import FUSED
from xstage_trace.collectors.probe_format import decode_probe_dump
from xstage_trace.pipeline.runner import analyze_inputs


def _event_counts(probes, slices, dumps, ctx, done) -> pd.DataFrame:
    """Records per (dump, event) of the batch: a per-dump step kept as a result."""
    g = probes.groupby([probes["dump"].astype(str), probes["event"].astype(str)], sort=True).size()
    return g.rename("records").reset_index().rename(columns={"level_0": "dump", "level_1": "event"})


def _tiles_per_dest(read, tables, ctx) -> pd.DataFrame:
    """Tiles per destination from every tile part: a run step of scope "run"."""
    t = read()
    return t.groupby(t["dest"].astype(str)).size().rename("tiles").reset_index()


@pytest.fixture
def with_two_more_steps(monkeypatch):
    dump_steps = analyses.DUMP_ANALYSES + (analyses.Analysis("event_counts", _event_counts, keep="result", file="event_counts.csv",
                                                               order=("dump", "event")),)
    run_steps = analyses.RUN_ANALYSES + (analyses.RunAnalysis("tiles_per_dest", lambda parts, tables, ctx: pd.DataFrame(), scope="run",
                                                               reads=("dest",), streamed=_tiles_per_dest),)
    for module in (analyses, stream):
        monkeypatch.setattr(module, "DUMP_ANALYSES", dump_steps)
        monkeypatch.setattr(module, "RUN_ANALYSES", run_steps)


def test_a_step_added_to_the_registry_is_run_on_every_batch_and_stored(tmp_path, with_two_more_steps):
    traced = FUSED / "traced"
    analyze_inputs([traced / "fused_reference.nsys-rep", traced], tmp_path / "run", warmup_launches=2, workers=1)
    got = pd.read_csv(tmp_path / "run" / "event_counts.csv")
    # independent truth: every dump decoded here, its records counted per event with numpy
    want = []
    for path in sorted(traced.glob("*.xsp.zst")):
        d = decode_probe_dump(path)
        ev = d.records["event"].to_numpy(zero_copy_only=False).astype(str)
        names, counts = np.unique(ev, return_counts=True)
        want += [(str(d.records["dump"][0]), n, int(c)) for n, c in zip(names, counts)]
    want = pd.DataFrame(want, columns=["dump", "event", "records"]).sort_values(["dump", "event"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    per_dest = pq.read_table(tmp_path / "run" / "tiles_per_dest.parquet").to_pandas()
    tiles = xstage_trace.open_run(tmp_path / "run").tiles()
    assert dict(zip(per_dest["dest"], per_dest["tiles"])) == tiles["dest"].astype(str).value_counts().to_dict()


def test_an_entry_with_an_unknown_keep_or_scope_is_refused():
    with pytest.raises(ValueError, match="keep"):
        analyses.Analysis("x", _event_counts, keep="disk")
    with pytest.raises(ValueError, match="scope"):
        analyses.RunAnalysis("x", _tiles_per_dest, scope="everywhere")
