"""xstage-trace report: report.md (verdict first, scoped numbers, < 60 KB), figures, offline HTML;
the docs/model.md §5 verdict rule."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from xstage_trace import open_run
from xstage_trace.analysis.verdict import config_verdicts
from xstage_trace.reports.content import Section, build_sections, worst_tiles
from xstage_trace.reports.markdown import render_markdown


@pytest.fixture(scope="module")
def report_dir(fused_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "fused.report"  # report -o names a new folder
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "report", str(fused_run), "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def test_report_md_fits_a_pr_comment_with_verdict_first(report_dir):
    md = (report_dir / "report.md").read_text()
    assert len(md.encode()) < 60_000
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headings[0] == "Verdict"
    assert {"Table 3 (docs/model.md §5)", "Burst audit (docs/model.md §4)", "Calibration residuals", "Backpressured tiles, worst first"} <= set(headings)
    # every section with numbers names its timing scope (the Run section holds none)
    for block in re.split(r"^## ", md, flags=re.M)[1:]:
        if not block.startswith("Run"):
            assert "_Timing scope:" in block.split("\n", 3)[2], block[:80]
    assert md.count("<details>") == md.count("</details>") >= 3


def test_report_figures_exist_as_svg_and_png(report_dir):
    md = (report_dir / "report.md").read_text()
    stems = re.findall(r"!\[[^\]]*\]\(figures/([\w-]+)\.svg\)", md)
    assert set(stems) == {"stall", "kernel_time", "bursts", "tile_stall"}
    for stem in stems:
        assert "<svg" in (report_dir / "figures" / f"{stem}.svg").read_text()[:400]
        assert (report_dir / "figures" / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"


def test_report_html_is_self_contained(report_dir):
    html = (report_dir / "report.html").read_text()
    assert "<script src" not in html.replace(" ", "") and not re.search(r"<(script|link)[^>]+(src|href)=['\"]?https?:", html)
    assert html.count("Plotly.newPlot(") == 4  # the four interactive figures, plotly.js inlined once
    assert "Table 3 (docs/model.md §5)" in html


def test_verdict_names_the_stall_bound_configurations(fused_run):
    # PROVENANCE: S3 is the negative control (long Linear-2 mainloop covers the span), and the local
    # store path drains fast; the host S1/S2 expert-wave schedules are the backpressured ones.
    md = render_markdown("t", build_sections(open_run(fused_run)))
    verdict = md.split("## Table 3")[0]
    assert "**2 of 8** configuration × schedule pairs are **stall-bound**" in verdict
    for line in verdict.splitlines():
        if line.startswith("- `host S1`") or line.startswith("- `host S2`"):
            assert "wave stall-bound" in line and "interleaved covered" in line
        if line.startswith("- `host S3`") or line.startswith("- `local S1`"):
            assert "stall-bound" not in line


def test_config_verdicts_rule_by_hand():
    t3 = pd.DataFrame({"dest": ["host", "host"], "shape": ["A", "B"], "variant": ["x", "y"],
                       "stall_wave_pred_tiles_us": [0.5, 0.1], "stall_wave_meas_us": [0.1, np.nan],
                       "stall_interleaved_pred_tiles_us": [0.0, np.nan], "stall_interleaved_meas_us": [0.3, np.nan],
                       "backpressured_wave": [10, 0], "kernel_ms_wave": [2.0, 1.0], "unrelated": [1, 2]})
    v = config_verdicts(t3, noise_ns=200).set_index(["shape", "schedule"])
    assert list(v.columns[:3]) == ["dest", "variant", "predicted_stall_us"]
    assert v.loc[("A", "wave"), "verdict"] == "stall-bound" and v.loc[("A", "wave"), "model_agrees"] is False  # 500 ns pred, 100 ns meas
    assert v.loc[("A", "interleaved"), "verdict"] == "stall-bound" and v.loc[("A", "interleaved"), "model_agrees"] is False  # meas 300 ns
    assert v.loc[("B", "wave"), "verdict"] == "covered" and v.loc[("B", "wave"), "model_agrees"] is None  # nothing measured
    assert ("B", "interleaved") not in v.index  # B never ran interleaved
    assert config_verdicts(t3, noise_ns=None).loc[0, "noise_us"] == 0.2  # MIN_NOISE_NS


def test_worst_tiles_are_the_largest_backpressured_stalls(fused_run):
    tiles = open_run(fused_run).tiles()
    w = worst_tiles(tiles, 10)
    bp = tiles[tiles["backpressured"]]
    expect = np.sort(np.fmax(bp["predicted_stall_ns"], bp["measured_stall_ns"]).to_numpy())[::-1][:10]
    got = np.fmax(w["Δt pred (ns, probe)"], w["Δt meas (ns, probe)"]).to_numpy()
    np.testing.assert_allclose(got, expect)


def test_markdown_cuts_long_tables_to_fit_and_keeps_the_callers_sections():
    big = pd.DataFrame({"a": np.arange(2000), "b": np.arange(2000) * 1.5})
    secs = [Section("Verdict", "kernel time", ["all good"]), Section("Long", "probe clock", [], big, details=True)]
    md = render_markdown("t", secs, max_bytes=5_000)
    assert len(md.encode()) <= 5_000 and md.index("## Verdict") < md.index("## Long")
    kept = len(re.findall(r"^\| \d+ \|", md, flags=re.M))
    assert 0 < kept < 2000 and f"of 2000 rows" in md
    assert len(secs[1].table) == 2000


def test_report_of_a_calibration_run_has_no_stall_verdict_but_its_fit(tmp_path):
    from conftest import CALIB
    from xstage_trace.reports.run_report import write_run_report
    from xstage_trace.pipeline.runner import analyze_inputs

    analyze_inputs([CALIB / "quick"], tmp_path / "cal.run")
    write_run_report(open_run(tmp_path / "cal.run"), tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    verdict = md.split("\n## ")[1]
    assert "no stall verdict" in verdict and "## Table 3" not in md
    points = pd.read_csv(tmp_path / "cal.run" / "calibration_points.csv")
    periodic = points[points["mode"] == "periodic"]
    for dest, n in periodic["dest"].value_counts().items():  # one fitted line per store path of the dumps
        assert f"- calibration {dest}: {n} periodic points" in verdict


def test_table3_display_keeps_both_predictions_of_each_schedule(fused_run):
    """The report's Table 3 shows the paper's median prediction and the per-tile one for every
    schedule, each with the values of the run's Table 3 (no column silently dropped)."""
    from xstage_trace.reports.content import table3_display

    t3 = open_run(fused_run).table3()
    shown = table3_display(t3)
    for s in ("wave", "interleaved"):
        for src, col in ((f"stall_{s}_pred_medians_us", f"Δt {s} pred, medians (µs, probe)"),
                         (f"stall_{s}_pred_tiles_us", f"Δt {s} pred, per tile (µs, probe)"),
                         (f"stall_{s}_meas_us", f"Δt {s} meas (µs, probe)")):
            assert col in shown.columns
            assert np.allclose(shown[col].to_numpy(float), t3[src].to_numpy(float), equal_nan=True)
