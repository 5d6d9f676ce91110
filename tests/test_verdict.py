"""The verdict rule per configuration (analysis/verdict.py) on hand-made tile tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.verdict import configuration_verdicts, stall_verdict

WAVE = {"dest": "host", "shape": "S1", "schedule": "wave", "variant": "split/smem/tma"}
INTER = dict(WAVE, schedule="interleaved")


def _tiles(cfg, kinds, pred, meas, rs=None, noise=200.0):
    n = len(kinds)
    return pd.DataFrame({
        **{k: [v] * n for k, v in cfg.items()}, "tile_kind": kinds, "predicted_stall_ns": pred, "measured_stall_ns": meas,
        "rs_span_ns": rs if rs is not None else [1000.0] * n, "noise_ns": noise,
        "backpressured": (np.asarray(pred) > noise) | (np.nan_to_num(np.asarray(meas, float)) > noise),
    })


def test_stall_verdict_rule_per_element():
    got = stall_verdict([300, 100, 100, np.nan, np.nan, 200], [0, 250, 100, 201, np.nan, 200], 200)
    assert got.tolist() == ["stall", "stall", "no stall", "stall", "unknown", "no stall"]


def test_median_over_linear2_tiles_with_a_remote_store_decides():
    # wave: Linear-2 measured stalls 0, 500, 900 → median 500 > 200 → stall; the Linear-1 tile and
    # the Linear-2 tile without a remote store (huge values) must not count.
    wave = _tiles(WAVE, ["linear2", "linear2", "linear2", "linear1", "linear2"],
                  [0.0, 0.0, 0.0, 9e9, 9e9], [0.0, 500.0, 900.0, 9e9, 9e9], rs=[1e3, 1e3, 1e3, np.nan, np.nan])
    # interleaved: measured 0, 0, 900 → median 0; predicted 0, 150, 400 → median 150 ≤ 200 → no stall
    inter = _tiles(INTER, ["linear2"] * 3, [0.0, 150.0, 400.0], [0.0, 0.0, 900.0])
    v = configuration_verdicts(pd.concat([wave, inter], ignore_index=True)).set_index("schedule")
    assert v.loc["wave", "l2_tiles"] == 3 and v.loc["interleaved", "l2_tiles"] == 3
    assert v.loc["wave", "measured_stall_med_ns"] == 500.0
    assert v.loc["wave", "verdict"] == "stall"
    assert v.loc["interleaved", "predicted_stall_med_ns"] == 150.0
    assert v.loc["interleaved", "verdict"] == "no stall"
    assert v.loc["interleaved", "backpressured_tiles"] == 1  # only the third tile exceeds 200 ns
    assert set(v["dest"]) == {"host"} and set(v["shape"]) == {"S1"} and set(v["variant"]) == {"split/smem/tma"}


def test_predicted_median_alone_gives_stall_when_nothing_was_measured():
    t = _tiles(WAVE, ["linear2"] * 3, [300.0, 400.0, 100.0], [np.nan] * 3)
    assert configuration_verdicts(t)["verdict"].tolist() == ["stall"]


def test_configurations_of_different_variants_get_their_own_verdict():
    t = pd.concat([_tiles(WAVE, ["linear2"], [0.0], [0.0]).assign(variant="a"),
                   _tiles(WAVE, ["linear2"], [900.0], [900.0]).assign(variant="b")], ignore_index=True)
    v = configuration_verdicts(t).set_index("variant")
    assert v.loc["a", "verdict"] == "no stall" and v.loc["b", "verdict"] == "stall"


def test_no_tiles_gives_an_empty_table_with_the_columns():
    v = configuration_verdicts(pd.DataFrame())
    assert v.empty and "verdict" in v.columns
