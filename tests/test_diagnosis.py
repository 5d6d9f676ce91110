"""Diagnosis per tile and per configuration (analysis/tiles.py, analysis/verdict.py, Table 3) on
hand-built tiles: one of each class, the precedence, and a configuration the slot model calls
covered that mainloop inflation makes stall-bound."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.stall import table3_from_tiles
from xstage_trace.analysis.tiles import finish_tiles
from xstage_trace.analysis.verdict import config_verdicts


def _spans(dump, mainloops_ns, slot_waits_ns, kinds=None):
    """tile_spans-shaped rows of one CTA: given mainloops and the slot wait measured for each tile;
    epilogue spans far below the cover, so no stall is predicted."""
    n = len(mainloops_ns)
    l2 = np.array([k == "linear2" for k in kinds]) if kinds else np.ones(n, bool)
    return pd.DataFrame({
        "rank": 0, "dump": dump, "cta": 0, "tile": np.arange(n), "position": np.arange(n), "mainloop_ns": np.asarray(mainloops_ns, float),
        "is_l2": l2, "expert": 0, "wave": 0, "wait_ns": np.nan, "rs_ns": np.where(l2, 100.0, np.nan), "ls_ns": np.where(l2, np.nan, 100.0),
        "cover_ns": 5000.0, "slot_wait_ns": np.asarray(slot_waits_ns, float), "epilogue_span_ns": 100.0, "predicted_stall_ns": 0.0,
    })


DUMPS = pd.DataFrame([
    {"rank": 0, "dump": "ctrl", "dest": "local", "shape": "S1", "schedule": "wave", "variant": "v", "operands": "smem", "is_control": True},
    {"rank": 0, "dump": "host", "dest": "host", "shape": "S1", "schedule": "wave", "variant": "v", "operands": "smem", "is_control": False},
    {"rank": 0, "dump": "other", "dest": "host", "shape": "S9", "schedule": "wave", "variant": "v", "operands": "smem", "is_control": False},
])


@pytest.fixture(scope="module")
def tiles():
    # control: every slot wait 300 ns (the floor: noise = max(p99 of 0, 200) = 200 ns), mainloops 1000 ns (p99 1000)
    ctrl = _spans("ctrl", [1000.0] * 10, [300.0] * 10)
    # host tiles: A waits 500 ns past the floor; B's mainloop is 300 ns over the control's (> 200 noise, > 5 %);
    # C's is 100 ns over (within the noise); D has both (the slot wait takes precedence)
    host = _spans("host", [1000.0, 1300.0, 1100.0, 1300.0], [800.0, 300.0, 300.0, 800.0])
    # a shape no control was traced for: a 5000 ns mainloop cannot be judged
    other = _spans("other", [5000.0], [300.0])
    return finish_tiles(pd.concat([ctrl, host, other], ignore_index=True), DUMPS).set_index(["dump", "tile"])


def test_one_tile_of_each_class(tiles):
    assert tiles.loc[("host", 0), "diagnosis"] == "slot_backpressure"
    assert tiles.loc[("host", 1), "diagnosis"] == "mainloop_inflation"
    assert tiles.loc[("host", 2), "diagnosis"] == "none"
    assert tiles.loc[("host", 3), "diagnosis"] == "slot_backpressure"  # both: the slot wait first
    assert tiles.loc[("other", 0), "diagnosis"] == "none" and np.isnan(tiles.loc[("other", 0), "control_mainloop_ns"])
    assert (tiles.loc["ctrl", "diagnosis"] == "none").all()
    assert tiles.loc[("host", 0), "measured_stall_ns"] == 500.0 and tiles.loc[("host", 0), "noise_ns"] == 200.0


def test_measured_stall_adds_the_compute_span_beyond_the_control_median_where_inflated(tiles):
    # docs/model.md §12 by hand: control mainloops all 1000 ns (median 1000, p99 1000), floor 300, noise 200
    assert tiles.loc[("host", 0), "stall_ns"] == 500.0            # slot wait 800 − 300; mainloop at the control's
    assert tiles.loc[("host", 1), "compute_stall_ns"] == 300.0    # 1300 − 1000, inflated (> 200 and > 5 %)
    assert tiles.loc[("host", 1), "stall_ns"] == 300.0
    assert tiles.loc[("host", 2), "compute_stall_ns"] == 0.0      # 1100: within the noise, not inflated
    assert tiles.loc[("host", 3), "stall_ns"] == 800.0            # both parts: 500 + 300
    assert np.isnan(tiles.loc[("other", 0), "compute_stall_ns"])  # no control of S9: not judged
    assert tiles.loc[("other", 0), "stall_ns"] == 0.0             # its slot wait is at the floor


def test_table3_counts_inflated_mainloops_whatever_the_slot_wait(tiles):
    t3 = table3_from_tiles(tiles.reset_index()).set_index(["dest", "shape"])
    host = t3.loc[("host", "S1")]
    assert host["inflated_tiles"] == 2 and host["inflation_judged_tiles"] == 4  # B and D of four
    assert host["stalled_tiles"] == 3 and host["stall_ns"] == np.median([500.0, 300.0, 0.0, 800.0])
    assert t3.loc[("local", "S1"), "inflated_tiles"] == 0
    assert t3.loc[("host", "S9"), "inflation_judged_tiles"] == 0  # no control of that shape: not judged, not "0 %"


def _table3(slot_ns, compute_ns, stall_ns, stalled, tiles=100, inflated=0, backpressured=0):
    return pd.DataFrame({"dest": ["host"], "shape": ["S1"], "variant": ["stg"], "schedule": ["wave"], "tiles": [tiles], "measured_tiles": [tiles],
                         "stalled_tiles": [stalled], "backpressured_tiles": [backpressured], "inflated_tiles": [inflated],
                         "slot_pred_ns": [0.0], "slot_meas_ns": [slot_ns], "compute_stall_ns": [compute_ns], "stall_ns": [stall_ns],
                         "stall_p99_ns": [stall_ns], "forward_stall_ns": [np.nan], "noise_ns": [200.0], "kernel_ns": [np.nan]})


def test_mainloop_inflation_is_not_reported_as_no_stall():
    """The st.global case: slot stall at zero, the compute part of the median tile 900 ns → stall-bound by inflation."""
    v = config_verdicts(_table3(0.0, 900.0, 900.0, 70, inflated=70)).iloc[0]
    assert v["verdict"] == "stall-bound" and v["diagnosis"] == "mainloop_inflation"
    v = config_verdicts(_table3(0.0, 0.0, 0.0, 20, inflated=20)).iloc[0]  # 20 % of the tiles: under STALLED_SHARE
    assert v["verdict"] == "covered" and v["diagnosis"] == "none"


def test_a_large_minority_of_stalled_tiles_is_stall_bound_with_a_median_of_zero():
    v = config_verdicts(_table3(0.0, 0.0, 0.0, 42, inflated=42)).iloc[0]  # 42 % of the tiles stall, the median tile does not
    assert v["verdict"] == "stall-bound" and v["diagnosis"] == "mainloop_inflation"


def test_slot_backpressure_takes_precedence_over_inflation():
    v = config_verdicts(_table3(5000.0, 900.0, 5900.0, 90, inflated=60, backpressured=80)).iloc[0]
    assert v["verdict"] == "stall-bound" and v["diagnosis"] == "slot_backpressure"
