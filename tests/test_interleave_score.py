"""Docs/model.md §6's interleaving what-if at the kernel, scored on the reference fused kernel's shipped runs
(issue 26, item 4): predicted from the wave run alone, against the interleaved run's measured time."""

from __future__ import annotations

from pathlib import Path

import pytest

from xstage_trace.analysis.whatif import interleave_speedup

ROOT = Path(__file__).resolve().parents[1]


def test_interleave_speedup_by_hand():
    # V/R = 100 µs, T_L2 = 10, T0 = 5: ΔT_wave = 85 µs per Linear-2 tile; n1/n2 = 1/2 and T_L1 = 100 µs cover 50 of it:
    # ΔT_int = 35. 10 Linear-2 tiles per CTA save 10·50 = 500 µs of a 2000 µs wave run: 1500 µs, 4/3.
    d = interleave_speedup(2e6, 10, 100e3 * 10.0, 100e3, 10e3, 1, 2, 5e3, 10.0)
    assert d["issue_overhead_wave_ns"] == pytest.approx(85e3) and d["issue_overhead_interleaved_ns"] == pytest.approx(35e3)
    assert d["interleaved_kernel_ns"] == pytest.approx(1.5e6) and d["speedup"] == pytest.approx(4 / 3)


def test_predicted_interleaving_speedup_within_10_percent_of_measured_on_the_shipped_sample():
    from xstage_trace.pipeline.interleave_score import interleave_score_table

    t = interleave_score_table(ROOT / "sample_traces" / "h200_fused_moe", ROOT / "sample_traces" / "h200_calibration")
    assert {("host", "S1"), ("host", "S2"), ("host", "S3"), ("local", "S1")} <= set(zip(t["dest"], t["shape"]))
    assert (t["error_pct"].abs() <= 10).all(), t[["dest", "shape", "predicted_speedup", "measured_speedup"]]
    # the drain-limited shape gains, the negative control (S3) and the local path do not
    s1 = t[(t["dest"] == "host") & (t["shape"] == "S1")].iloc[0]
    assert s1["measured_speedup"] > 1.5 and s1["predicted_speedup"] > 1.5
    assert t[(t["shape"] == "S3") | (t["dest"] == "local")]["predicted_speedup"].tolist() == pytest.approx([1.0] * 2)
