"""The intra-kernel gate (reports/compare.py ``compare_tiles``): the rule on hand-made tile samples, and a run
with probe dumps but no nsys report (the DeepGEMM sample) gated on its tiles."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import SAMPLES
from xstage_trace.reports.compare import GateConfig, metric_verdict


def test_metric_verdict_rule_on_hand_made_samples():
    rng = np.random.default_rng(3)
    base = 100.0 + rng.normal(0.0, 1.0, 400)
    cfg = GateConfig(gate_pct=2.0)
    assert metric_verdict(base, base + 10.0, np.median, 0.2, cfg)["verdict"] == "regression"   # +10 > 2 % of 100
    assert metric_verdict(base, base - 10.0, np.median, 0.2, cfg)["verdict"] == "improvement"
    assert metric_verdict(base, base + 1.0, np.median, 0.2, cfg)["verdict"] == "neutral"       # +1 ≤ 2 µs
    assert metric_verdict(base, base + 1.0, np.median, 5.0, cfg)["threshold"] == 5.0          # the noise floor when larger
    small = np.array([0.0, 0.0, 0.0, 0.1])
    assert metric_verdict(small, small + 0.3, np.median, 0.6, cfg)["verdict"] == "neutral"     # below the tiles' noise floor
    assert metric_verdict(base, base[:2] + 50, np.median, 0.2, cfg)["verdict"] == "inconclusive"  # too few tiles
    assert metric_verdict(base, np.zeros(0), np.median, 0.2, cfg)["verdict"] == "inconclusive"
    assert metric_verdict(np.zeros(0), base, np.median, 0.2, cfg)["verdict"] == "neutral"
    wide = np.concatenate([np.zeros(20), np.full(20, 100.0)])  # a median that can land anywhere between the modes
    v = metric_verdict(wide, wide[::-1] + 5.0, np.median, 0.2, cfg)
    assert v["ci_low"] <= 0.0 <= v["ci_high"] and v["verdict"] == "inconclusive"


@pytest.fixture(scope="module")
def deepgemm_run(tmp_path_factory):
    from xstage_trace.pipeline.runner import analyze_inputs

    out = tmp_path_factory.mktemp("dg") / "run"
    analyze_inputs([SAMPLES / "h200_deepgemm" / "dumps"], out)
    return out


def test_a_run_without_nsys_report_is_gated_on_its_tiles(deepgemm_run, tmp_path):
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "compare", str(deepgemm_run), str(deepgemm_run), "--json",
                        "-o", str(tmp_path / "c.md")], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["configurations"] == []  # no kernel trials
    metrics = {(m["dest"], m["shape"], m["metric"]): m for m in doc["tile_metrics"]}
    assert {m["verdict"] for m in doc["tile_metrics"]} == {"neutral"}
    # the host-mapped GEMM's median stall is the Table 3 value, in µs
    from xstage_trace import open_run

    t3 = open_run(deepgemm_run).table3().set_index(["dest", "shape"])
    for (dest, shape), row in t3.iterrows():
        assert metrics[(dest, shape, "stall_median_us")]["base"] == pytest.approx(row["stall_ns"] / 1e3, abs=1e-6)
        assert metrics[(dest, shape, "stalled_share_pct")]["base"] == pytest.approx(100 * row["stalled_tiles"] / row["measured_tiles"])
