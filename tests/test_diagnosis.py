"""Diagnosis per tile and per configuration (analysis/tiles.py, analysis/verdict.py, Table 3) on
hand-built tiles: one of each class, the precedence, and a configuration the slot model calls
covered that mainloop inflation makes stall-bound."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.stall import table3_from_tiles
from xstage_trace.analysis.tiles import finish_tiles
from xstage_trace.analysis.verdict import config_verdicts, configuration_diagnosis, configuration_verdicts


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


def test_table3_counts_inflated_mainloops_whatever_the_slot_wait(tiles):
    t3 = table3_from_tiles(tiles.reset_index()).set_index(["dest", "shape"])
    host = t3.loc[("host", "S1")]
    assert host["inflated_wave"] == 2 and host["inflation_judged_wave"] == 4  # B and D of four
    assert t3.loc[("local", "S1"), "inflated_wave"] == 0
    assert t3.loc[("host", "S9"), "inflation_judged_wave"] == 0  # no control of that shape: not judged, not "0 %"


def test_configuration_diagnosis_rule():
    got = configuration_diagnosis(["stall", "no stall", "no stall", "no stall", "unknown"], [0.9, 0.51, 0.5, np.nan, 0.8])
    assert got.tolist() == ["slot_backpressure", "mainloop_inflation", "none", "none", "mainloop_inflation"]


def _table3(inflated, judged=100):
    return pd.DataFrame({"dest": ["host"], "shape": ["S1"], "variant": ["stg"], "stall_wave_pred_tiles_us": [0.0],
                         "stall_wave_meas_us": [0.0], "backpressured_wave": [10], "inflated_wave": [inflated],
                         "inflation_judged_wave": [judged]})


def test_mainloop_inflation_is_not_reported_as_no_stall():
    """The st.global case: slot medians at zero, most Linear-2 mainloops inflated → stall-bound."""
    v = config_verdicts(_table3(70), 200.0).iloc[0]
    assert v["verdict"] == "stall-bound" and v["diagnosis"] == "mainloop_inflation" and v["inflated_share"] == 0.7
    v = config_verdicts(_table3(30), 200.0).iloc[0]
    assert v["verdict"] == "covered" and v["diagnosis"] == "none"


def test_configuration_verdicts_over_tiles_see_inflation():
    ctrl = _spans("ctrl", [1000.0] * 10, [300.0] * 10)
    host = _spans("host", [1300.0, 1300.0, 1000.0], [300.0] * 3)  # two of three inflated, no slot wait
    t = finish_tiles(pd.concat([ctrl, host], ignore_index=True), DUMPS)
    v = configuration_verdicts(t).set_index("dest")
    assert v.loc["host", "inflated_tiles"] == 2 and v.loc["host", "diagnosis"] == "mainloop_inflation"
    assert v.loc["host", "verdict"] == "stall" and v.loc["local", "verdict"] == "no stall"


def test_report_says_where_inflation_was_not_judged():
    from xstage_trace.reports.content import headline

    t3 = pd.concat([_table3(70), _table3(0, judged=0).assign(variant="blind")], ignore_index=True)
    lines = headline(config_verdicts(t3, 200.0), pd.DataFrame())
    assert any(line.startswith("- `host S1 stg`: wave stall-bound by mainloop inflation") for line in lines)
    blind = [line for line in lines if "not judged" in line]
    assert len(blind) == 1 and "`host S1 blind`" in blind[0] and "`host S1 stg`" not in blind[0]


def test_a_table3_without_judged_counts_claims_nothing_about_inflation():
    from xstage_trace.reports.content import headline

    v = config_verdicts(_table3(70).drop(columns=["inflation_judged_wave"]), 200.0)
    assert "inflated_share" not in v and v["diagnosis"].tolist() == ["none"]
    assert not any("not judged" in line for line in headline(v, pd.DataFrame()))
