"""The gate's intra-kernel rule (reports/compare.py ``metric_verdict``, absolute changes of a tile
quantity) and the outcome over kernel and tile verdicts, by hand (docs/mutation.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.reports.compare import GateConfig, gate_outcome, kernel_verdict, metric_verdict

CFG = GateConfig(gate_pct=2.0)
KEYS = {"base", "new", "change", "ci_low", "ci_high", "threshold", "verdict", "reason"}


def test_metric_rule_by_hand():
    flat = np.full(10, 100.0)
    # threshold = max(2 % of the base value, the floor): 2 with floor 0, 5 with floor 5
    v = metric_verdict(flat, flat + 3, np.median, 0.0, CFG)
    assert set(v) == KEYS and (v["base"], v["new"], v["change"], v["threshold"]) == (100.0, 103.0, 3.0, 2.0)
    assert (v["ci_low"], v["ci_high"]) == (3.0, 3.0) and v["verdict"] == "regression"
    assert v["reason"] == "up by more than 2, interval above 0"
    v = metric_verdict(flat, flat + 3, np.median, 5.0, CFG)
    assert v["threshold"] == 5.0 and v["verdict"] == "neutral" and v["reason"] == "|change| ≤ 5"
    v = metric_verdict(flat, flat - 3, np.median, 0.0, CFG)
    assert v["verdict"] == "improvement" and v["reason"] == "down by more than 2, interval below 0"
    # exactly at the threshold: neutral; a negative base: the gate's share of |base|
    assert metric_verdict(flat, flat + 2, np.median, 0.0, CFG)["verdict"] == "neutral"
    assert metric_verdict(-flat, -flat - 3, np.median, 0.0, CFG)["threshold"] == 2.0
    # a statistic other than the median: the p99 of 0..99 is 98.01 (numpy linear)
    v = metric_verdict(np.arange(100.0), np.arange(100.0), lambda x: np.percentile(x, 99), 0.0, CFG)
    assert v["base"] == pytest.approx(98.01) and v["change"] == 0.0 and v["verdict"] == "neutral"


def test_metric_rule_missing_sides_and_few_tiles():
    flat = np.full(10, 100.0)
    v = metric_verdict(np.array([]), flat, np.median, 0.0, CFG)
    assert (v["verdict"], v["reason"], v["new"]) == ("neutral", "new configuration (no baseline)", 100.0) and np.isnan(v["base"])
    v = metric_verdict(flat, np.array([]), np.median, 0.0, CFG)
    assert (v["verdict"], v["reason"], v["base"]) == ("inconclusive", "missing from the new run", 100.0) and np.isnan(v["new"])
    v = metric_verdict(flat, flat[:2] + 50, np.median, 0.0, GateConfig(min_trials=3))
    assert (v["verdict"], v["reason"], v["change"]) == ("inconclusive", "fewer than 3 tiles", 50.0) and np.isnan(v["ci_low"])
    assert metric_verdict(flat[:3], flat[:3] + 50, np.median, 0.0, GateConfig(min_trials=3))["verdict"] == "regression"


def test_metric_rule_inconclusive_both_ways():
    """Five tiles, four shifted and one at the base value: 5.8 % of resamples keep the base's median
    (change 0), inside the 95 % interval (test_mutation_gate.py has the binomial)."""
    base = np.full(5, 100.0)
    up = np.array([150.0] * 4 + [100.0])
    v = metric_verdict(base, up, np.median, 0.0, CFG)
    assert v["change"] == 50.0 and v["ci_low"] == 0.0 and v["verdict"] == "inconclusive"
    assert v["reason"] == "change beyond the threshold but the interval contains 0"
    down = np.array([50.0] * 4 + [100.0])
    v = metric_verdict(base, down, np.median, 0.0, CFG)
    assert v["change"] == -50.0 and v["ci_high"] == 0.0 and v["verdict"] == "inconclusive"


def test_small_changes_past_a_small_gate():
    """Gate 0.5 %: +0.8 % and −0.8 % on flat samples are a regression and an improvement (the interval
    is the change itself), not caught between the comparison's constants."""
    flat = np.full(5, 1_000_000.0)
    cfg = GateConfig(gate_pct=0.5)
    v = kernel_verdict(flat, flat * 1.008, cfg)
    assert v["verdict"] == "regression" and 0 < v["ci_low_pct"] < 1
    assert kernel_verdict(flat, flat * 0.992, cfg)["verdict"] == "improvement"
    m = metric_verdict(np.full(5, 10.0), np.full(5, 10.5), np.median, 0.0, GateConfig(gate_pct=1.0))
    assert m["ci_low"] == pytest.approx(0.5) and m["verdict"] == "regression"


def test_outcome_counts_tile_verdicts_too():
    kernels = pd.DataFrame({"verdict": ["neutral", "improvement"]})
    tiles = pd.DataFrame({"verdict": ["neutral", "regression", "inconclusive"]})
    assert gate_outcome(kernels, None) == (0, "PASS: 1 improvement, 1 neutral")
    assert gate_outcome(kernels, None, tiles) == (1, "FAIL: 1 regression, 1 improvement, 2 neutral, 1 inconclusive")
    assert gate_outcome(kernels, "known", tiles) == (0, "ACCEPTED (known): 1 regression, 1 improvement, 2 neutral, 1 inconclusive")
    assert gate_outcome(kernels, None, tiles.iloc[0:0]) == (0, "PASS: 1 improvement, 1 neutral")
    assert gate_outcome(pd.DataFrame(), None, tiles) == (1, "FAIL: 1 regression, 1 neutral, 1 inconclusive")
