"""The regression gate's rule (reports/compare.py) on hand-made samples, every branch and boundary:
the numbers below are worked out by hand from the rule in the module docstring (docs/mutation.md:
these tests were written against planted bugs that the CLI tests did not catch)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.reports.compare import GateConfig, bootstrap_change_pct, compare_markdown, gate_outcome, kernel_verdict, rel_iqr_pct

CFG = GateConfig(gate_pct=2.0)
FLAT = np.full(9, 1_000_000.0)  # IQR 0: the gate alone sets the threshold; 1 ms: the changes below are exact


def test_rel_iqr_by_hand():
    # numpy's linear percentiles of 1..5: q1 = 2, median = 3, q3 = 4 -> 100 * 2 / 3
    assert rel_iqr_pct(np.array([1.0, 2, 3, 4, 5])) == pytest.approx(200 / 3)
    assert rel_iqr_pct(np.array([5.0, 1, 4, 2, 3])) == pytest.approx(200 / 3)  # order does not matter
    assert np.isnan(rel_iqr_pct(np.array([0.0, 0, 0])))  # a zero median has no relative spread


def test_slowdown_beyond_the_threshold_with_an_interval_containing_zero_is_inconclusive():
    """New run bimodal: 6 trials at 100 µs, 7 at 150 µs. Median 150 µs: +50 % against a flat base.
    Its IQR/median is (150 − 100)/150 = 33.3 %, so the threshold is 33.3 % and +50 % exceeds it; but a
    resample holds ≤ 6 of the 7 slow trials with probability ≈ 0.4 (binomial 13, 7/13), its median
    is then 100 µs, a change of exactly 0: the 95 % interval contains 0 -> inconclusive, not regression."""
    new = np.array([100_000.0] * 6 + [150_000.0] * 7)
    v = kernel_verdict(np.full(13, 100_000.0), new, CFG)
    assert v["change_pct"] == pytest.approx(50.0)
    assert v["noise_pct"] == pytest.approx(100 / 3) and v["threshold_pct"] == pytest.approx(100 / 3)
    assert v["ci_low_pct"] == 0.0 and v["ci_high_pct"] == pytest.approx(50.0)
    assert v["verdict"] == "inconclusive" and "interval contains 0" in v["reason"]


def test_both_directions_inconclusive_where_a_few_trials_reach_zero():
    """Five trials, four in one mode and one at the base's 100 µs: IQR 0 (q1 = q3 = the mode), so the
    gate's 2 % is the threshold. A resample draws the odd trial at least 3 times of 5 with probability
    10·0.2³·0.8² + 5·0.2⁴·0.8 + 0.2⁵ = 5.8 % > 2.5 %: its median is 100 µs, a change of 0, inside the
    95 % interval. So +150 % and −60 % are both inconclusive, and a flat base makes the interval the
    change itself elsewhere."""
    base = np.full(5, 100_000.0)
    slow = np.array([250_000.0] * 4 + [100_000.0])
    v = kernel_verdict(base, slow, CFG)
    assert v["change_pct"] == pytest.approx(150.0) and v["threshold_pct"] == 2.0
    assert v["ci_low_pct"] == 0.0 and v["ci_high_pct"] == pytest.approx(150.0)
    assert v["verdict"] == "inconclusive"
    fast = np.array([40_000.0] * 4 + [100_000.0])
    v = kernel_verdict(base, fast, CFG)
    assert v["change_pct"] == pytest.approx(-60.0) and v["ci_high_pct"] == 0.0 and v["ci_low_pct"] == pytest.approx(-60.0)
    assert v["verdict"] == "inconclusive" and "interval contains 0" in v["reason"]
    # without the odd trial the interval is the change: regression / improvement
    assert kernel_verdict(base, np.full(5, 250_000.0), CFG)["verdict"] == "regression"
    assert kernel_verdict(base, np.full(5, 40_000.0), CFG)["verdict"] == "improvement"


def test_boundaries_of_the_rule():
    base = FLAT
    # |change| exactly at the threshold is neutral (≤): 100 -> 150 µs is +50.0 % exactly
    v = kernel_verdict(base, base * 1.5, GateConfig(gate_pct=50.0))
    assert v["change_pct"] == 50.0 and v["verdict"] == "neutral"
    v = kernel_verdict(base, base * 0.5, GateConfig(gate_pct=50.0))
    assert v["change_pct"] == -50.0 and v["verdict"] == "neutral"
    # just past it: regression / improvement (flat samples: the interval is the change itself)
    assert kernel_verdict(base, base * 1.5, GateConfig(gate_pct=49.0))["verdict"] == "regression"
    assert kernel_verdict(base, base * 0.5, GateConfig(gate_pct=49.0))["verdict"] == "improvement"
    # exactly min_trials trials decide; one fewer is inconclusive
    three = np.full(3, 1_000_000.0)
    assert kernel_verdict(three, three * 1.5, GateConfig(gate_pct=2.0, min_trials=3))["verdict"] == "regression"
    v = kernel_verdict(three, three[:2] * 1.5, GateConfig(gate_pct=2.0, min_trials=3))
    assert v["verdict"] == "inconclusive" and v["reason"] == "fewer than 3 trials"
    v = kernel_verdict(three[:2], three * 1.5, GateConfig(gate_pct=2.0, min_trials=3))
    assert v["verdict"] == "inconclusive"
    assert np.isnan(v["ci_low_pct"]) and v["change_pct"] == pytest.approx(50.0)  # the change is still reported


def test_threshold_is_the_larger_of_gate_and_either_runs_noise():
    spread = np.array([90_000.0, 95_000, 100_000, 105_000, 110_000])  # q1 95, q3 105: 10 %
    flat = np.full(5, 100_000.0)
    assert kernel_verdict(spread, flat, CFG)["noise_pct"] == pytest.approx(10.0)  # the base's noise
    assert kernel_verdict(flat, spread, CFG)["noise_pct"] == pytest.approx(10.0)  # the new run's
    assert kernel_verdict(flat, flat, GateConfig(gate_pct=12.0))["threshold_pct"] == 12.0
    assert kernel_verdict(spread, flat, GateConfig(gate_pct=3.0))["threshold_pct"] == pytest.approx(10.0)


def test_row_columns_by_hand():
    base = np.array([1e6, 2e6, 3e6])  # ns
    new = np.array([2e6, 4e6, 6e6, 8e6])
    v = kernel_verdict(base, new, CFG)
    assert v["base_ms"] == 2.0 and v["new_ms"] == 5.0  # medians, ns -> ms
    assert v["base_trials"] == 3 and v["new_trials"] == 4
    assert v["change_pct"] == pytest.approx(150.0)
    only_base = kernel_verdict(base, None, CFG)
    assert only_base["verdict"] == "inconclusive" and only_base["reason"] == "missing from the new run"
    assert only_base["base_ms"] == 2.0 and only_base["new_trials"] == 0 and np.isnan(only_base["new_ms"])
    only_new = kernel_verdict(None, new, CFG)
    assert only_new["verdict"] == "neutral" and only_new["new_ms"] == 5.0 and only_new["base_trials"] == 0


def test_bootstrap_interval_by_hand():
    flat = np.full(7, 1e6)
    assert bootstrap_change_pct(flat, flat * 1.1, GateConfig()) == pytest.approx((10.0, 10.0))
    # two-valued new sample: every resample's median is 1.0 or 2.0 ms, so the interval's ends are 0 % and 100 %
    new = np.array([1e6] * 5 + [2e6] * 6)
    lo, hi = bootstrap_change_pct(np.full(11, 1e6), new, GateConfig())
    assert (lo, hi) == (0.0, 100.0)
    # a narrower confidence keeps fewer resamples' tails: with 50 % both ends still fall on the two modes
    rng = np.random.default_rng(3)
    base, shifted = rng.normal(1e6, 2e4, 21), rng.normal(1.05e6, 2e4, 21)
    lo95, hi95 = bootstrap_change_pct(base, shifted, GateConfig(confidence=0.95))
    lo50, hi50 = bootstrap_change_pct(base, shifted, GateConfig(confidence=0.50))
    assert lo95 < lo50 < hi50 < hi95
    true = 100 * (np.median(shifted) / np.median(base) - 1)
    assert lo95 < true < hi95
    # fixed seed: the same call gives the same interval; another seed another one
    assert bootstrap_change_pct(base, shifted, GateConfig()) == (lo95, hi95)
    assert bootstrap_change_pct(base, shifted, GateConfig(seed=1)) != (lo95, hi95)


def _table(*verdicts: str) -> pd.DataFrame:
    return pd.DataFrame({"dest": ["host"] * len(verdicts), "shape": [f"S{i}" for i in range(len(verdicts))], "verdict": list(verdicts)})


def test_gate_outcome_by_hand():
    assert gate_outcome(_table("neutral", "improvement", "neutral"), None) == (0, "PASS: 1 improvement, 2 neutral")
    assert gate_outcome(_table("regression", "neutral"), None) == (1, "FAIL: 1 regression, 1 neutral")
    assert gate_outcome(_table("inconclusive"), None) == (1, "FAIL: 1 inconclusive")
    assert gate_outcome(_table("regression", "inconclusive", "improvement"), None) == (1, "FAIL: 1 regression, 1 improvement, 1 inconclusive")
    assert gate_outcome(_table("regression", "neutral"), "known: new tiling") == (0, "ACCEPTED (known: new tiling): 1 regression, 1 neutral")
    assert gate_outcome(_table("neutral"), "unused reason") == (0, "PASS: 1 neutral")
    assert gate_outcome(_table("regression"), "") == (1, "FAIL: 1 regression")  # an empty reason accepts nothing


def test_compare_markdown_lists_outcome_scope_and_rows_worst_first():
    cfg = GateConfig(gate_pct=2.5, keys=("dest", "shape"), resamples=1000)
    t = _table("neutral", "regression", "inconclusive").assign(base_ms=[1.0, 2.0, 3.0], new_ms=[1.0, 2.5, 3.1], reason=["a", "b", "c"])
    md = compare_markdown(t, "FAIL: 1 regression", "runs/base", "runs/new", cfg, None)
    lines = md.split("\n")
    assert lines[0] == "# xstage-trace compare" and lines[2] == "**FAIL: 1 regression**"
    assert "- base: `runs/base`" in lines and "- new: `runs/new`" in lines
    assert "2.5 % on the median kernel time per configuration (dest, shape)" in md and "95 % bootstrap interval" in md and "1000 resamples" in md
    assert "Timing scope: kernel time = nsys kernel rows" in md and "accepted" not in md
    header = next(line for line in lines if line.startswith("| dest"))
    assert header.split("|")[1:-1] == [" dest ", " shape ", " verdict ", " base (ms, nsys) ", " new (ms, nsys) ", " reason "]
    rows = [line for line in lines if line.startswith("| host")]
    assert [r.split("|")[3].strip() for r in rows] == ["regression", "neutral", "inconclusive"]  # VERDICTS order
    accepted = compare_markdown(t, "ACCEPTED (x): 1 regression", "a", "b", cfg, "x")
    assert "- accepted: x" in accepted.split("\n")


ROW_KEYS = {"base_ms", "new_ms", "base_trials", "new_trials", "change_pct", "ci_low_pct", "ci_high_pct", "noise_pct", "threshold_pct",
            "verdict", "reason"}


def test_every_branch_returns_the_full_row_and_its_reason():
    flat = np.full(5, 1_000_000.0)
    cases = [
        (None, flat, "neutral", "new configuration (no baseline)"),
        (flat, None, "inconclusive", "missing from the new run"),
        (flat, flat[:2], "inconclusive", "fewer than 3 trials"),
        (flat, flat * 1.01, "neutral", "|change| ≤ 2.00 %"),
        (flat, flat * 1.5, "regression", "slower by more than 2.00 %, interval above 0"),
        (flat, flat * 0.5, "improvement", "faster by more than 2.00 %, interval below 0"),
        (flat, np.array([2.5e6] * 4 + [1e6]), "inconclusive", "change beyond the threshold but the interval contains 0"),
    ]
    for base, new, verdict, reason in cases:
        v = kernel_verdict(base, new, CFG)
        assert set(v) == ROW_KEYS and (v["verdict"], v["reason"]) == (verdict, reason)
    # the columns a branch has not reached stay NaN
    v = kernel_verdict(None, flat, CFG)
    assert all(np.isnan(v[c]) for c in ("base_ms", "change_pct", "ci_low_pct", "ci_high_pct", "noise_pct", "threshold_pct"))
    v = kernel_verdict(flat, flat[:2], CFG)
    assert np.isnan(v["ci_low_pct"]) and np.isnan(v["ci_high_pct"]) and v["threshold_pct"] == 2.0


def test_the_confidence_sets_the_interval_ends():
    """The five-trial sample above: 5.8 % of resamples at a change of 0, the rest at +150 %. At 95 % the
    lower end (the 2.5 % quantile) is 0: inconclusive. At 85 % it is the 7.5 % quantile, past the 5.8 %
    at 0: +150 %, a regression."""
    base, slow = np.full(5, 1_000_000.0), np.array([2.5e6] * 4 + [1e6])
    assert kernel_verdict(base, slow, GateConfig(gate_pct=2.0, confidence=0.95))["verdict"] == "inconclusive"
    v = kernel_verdict(base, slow, GateConfig(gate_pct=2.0, confidence=0.85))
    assert v["ci_low_pct"] == pytest.approx(150.0) and v["verdict"] == "regression"


def test_relative_iqr_of_a_zero_median_is_nan_even_with_spread():
    assert np.isnan(rel_iqr_pct(np.array([-1.0, 0.0, 1.0])))
