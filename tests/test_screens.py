"""What a user reads first on each text surface (issue 24): the model commands' grouped answers,
rounded with units; ``model sequence`` per launch; a readable ``collection``; markup rendered;
unknown metrics refused; runs named relative to the working folder; one verdict sentence per
configuration (reports/verdict_text) in ``analyze``; the report's figures chosen for a glance."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import CALIB, ROOT

EXE = [sys.executable, "-m", "xstage_trace"]
# this checkout's sources also when a command runs in another folder (a relative PYTHONPATH would not follow)
ENV = dict(os.environ, COLUMNS="120", PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))


def run(*args, cwd=None):
    return subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=600, env=ENV)


# ----------------------------------------------------------------------------- model

def test_model_stall_by_prints_the_grouped_summary_not_every_tile(tmp_path):
    n = 3000
    t = pd.DataFrame({"g": np.repeat(["a", "b"], n // 2), "span_us": np.r_[np.full(n // 2, 9.0), np.full(n // 2, 2.0)],
                      "cover_us": 5.0})
    t.to_csv(tmp_path / "t.csv", index=False)
    r = run("model", "stall", "--tiles", tmp_path / "t.csv", "--by", "g")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"^│ [ab] ", ln)]
    assert len(rows) == 2  # one row per group, not one line per tile
    cells = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]] for ln in rows}
    assert "4" in cells["a"] and "0" in cells["b"]  # by hand: [9 − 5]₊ = 4 µs and [2 − 5]₊ = 0 µs
    assert "predicted stall med (µs)" in re.sub(r"\s*│\s*┃?", " ", r.stdout) or "(µs)" in r.stdout  # units in the headers
    assert f"{n:,} tiles: per-tile values with --json" in r.stdout and len(r.stdout.splitlines()) < 40


def test_model_burst_rounds_and_names_units():
    r = run("model", "burst", "--rate-gbps", 66.6, "--issue-floor-us", 0.8, "--producers", 132, "--bytes-per-producer", 32768, "--gap-us", 7.7)
    assert r.returncode == 0, r.stderr
    drain = 132 * 32768 / 66.6 / 1e3  # µs, by hand
    assert f"{drain:.4g} µs" in r.stdout
    assert not re.search(r"\d\.\d{6,}", r.stdout)  # nothing printed unrounded


def test_model_sequence_audits_each_launch_on_its_own(fused_run):
    """The backlog restarts with every launch: the onset per dump equals a hand recurrence over that
    dump's bursts alone (docs/model.md §4: q_{n+1} = [q_n + V_n − R·(T0_n + G_n)]₊, guard q_n + b_iso ≤ Q)."""
    from xstage_trace import open_run

    calib = json.loads((CALIB / "calibration_host.json").read_text())
    flags = ["--rate-gbps", 65.2, "--issue-floor-us", 0.626, "--capacity-mib", calib["capacity_bytes"] / 2**20]
    r = run("model", "sequence", fused_run, *flags, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    bursts = open_run(fused_run).bursts()
    assert d["sequences"] == bursts["dump"].nunique() and d["onset_burst"] is None  # several launches: no merged onset
    for c in d["configurations"]:
        b = bursts[bursts["dump"] == c["dump"]].sort_values("burst")
        v, t0, g = b["volume_bytes"].to_numpy(), np.full(len(b), 626.0), b["gap_ns"].fillna(np.inf).to_numpy()
        q, onset = 0.0, None
        for n in range(len(b)):
            if onset is None and q + max(v[n] - 65.2 * t0[n], 0.0) > calib["capacity_bytes"]:
                onset = n
            q = max(q + v[n] - 65.2 * (t0[n] + g[n]), 0.0)
        assert c["bursts"] == len(b) and c["onset_burst"] == onset, c["dump"]
    assert any(c["onset_burst"] is not None for c in d["configurations"])
    text = run("model", "sequence", fused_run, *flags)
    assert "per sequence: see the table above" in text.stdout and "onset burst" in text.stdout


# ----------------------------------------------------------------------------- collection, instrument, export

def test_collection_fits_the_terminal_and_names_what_it_left_out(fused_run):
    r = run("collection", fused_run.parent)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 160  # the piped console's width
    assert sum(ln.startswith("┃") for ln in lines) == 1  # every header on one line: no column squeezed and wrapped
    assert "more columns with --json" in r.stdout


def test_open_collection_takes_one_folder_or_a_list(fused_run):
    from xstage_trace.dataset.collection import open_collection

    one, listed = open_collection(str(fused_run.parent)), open_collection([fused_run.parent])
    assert one.run_dirs == listed.run_dirs and len(one.run_dirs) >= 1


def test_instrument_list_renders_its_markup():
    r = run("instrument", "list")
    assert r.returncode == 0 and "[bold]" not in r.stdout and "[/bold]" not in r.stdout


def test_export_refuses_an_unknown_metric_naming_the_ones_there(fused_run, tmp_path):
    r = run("export", fused_run, "--metric", "nope", "-o", tmp_path / "t.pftrace")
    assert r.returncode == 2 and not (tmp_path / "t.pftrace").exists()
    line = r.stderr.strip()
    assert "'nope'" in line and "SM Active" in line and len(line.splitlines()) == 1


# ----------------------------------------------------------------------------- paths in outputs

def test_shown_path_is_relative_inside_the_working_folder_and_a_name_outside(tmp_path):
    from xstage_trace.base.paths import shown_path

    assert shown_path(tmp_path / "a" / "r.run", base=tmp_path) == "a/r.run"
    assert shown_path("/somewhere/else/r.run", base=tmp_path) == "r.run"
    assert not shown_path(tmp_path / "r.run", base=tmp_path).startswith("/")


def test_report_and_compare_md_name_runs_without_absolute_paths(fused_run, tmp_path):
    for args in (["report", fused_run, "-o", tmp_path / "rep"], ["compare", fused_run, fused_run, "-o", tmp_path / "c.md"]):
        r = run(*args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    for md in (tmp_path / "rep" / "report.md", tmp_path / "c.md"):
        text = md.read_text()
        assert str(fused_run) not in text and str(fused_run.parent) not in text and f"`{fused_run.name}`" in text


# ----------------------------------------------------------------------------- verdict sentences

def _verdicts(**cols) -> pd.DataFrame:
    base = {"dest": "host", "shape": "S1", "variant": "v", "basis": "measured", "tiles": 100, "noise_ns": 200.0,
            "slot_stall_ns": np.nan, "compute_stall_ns": 0.0, "slot_model_stall_ns": 0.0, "predicted_stall_ns": np.nan}
    return pd.DataFrame({**base, **cols})


def test_a_stall_bound_wave_sentence_names_cause_size_and_the_measured_fix():
    from xstage_trace.reports.verdict_text import in_display_units, with_sentences

    v = in_display_units(_verdicts(schedule=["wave", "interleaved"], verdict=["stall-bound", "covered"],
                                   diagnosis=["slot_backpressure", "none"], stalled_tiles=[80, 2],
                                   measured_stall_ns=[49_500.0, 2.0], slot_model_stall_ns=[48_400.0, 0.0],
                                   kernel_ns=[4.5e6, 3.0e6]))
    s = with_sentences(v)["sentence"].tolist()
    assert s[0].startswith("host S1 v wave: stall-bound by slot backpressure: median stall 49.5 µs measured (slot model 48.4 µs)")
    assert "80 % of 100" in s[0] and "kernel 4.5 ms" in s[0]
    assert "Fix: interleave" in s[0] and "measured 3 ms, 1.50× faster" in s[0]  # 4.5 / 3.0, the run's own two schedules
    assert s[1].startswith("host S1 v interleaved: covered") and "noise floor" in s[1]


def test_an_inflation_sentence_explains_why_the_slot_model_reads_zero():
    """The st.global case: stall-bound while the slot model's Δt is 0 µs; the sentence must carry
    the stall it does measure (the compute part) rather than contradict its verdict."""
    from xstage_trace.reports.verdict_text import in_display_units, with_sentences

    v = in_display_units(_verdicts(schedule=["wave"], verdict=["stall-bound"], diagnosis=["mainloop_inflation"], stalled_tiles=[77],
                                   measured_stall_ns=[50_800.0], slot_stall_ns=[51.0], compute_stall_ns=[48_700.0], kernel_ns=[np.nan]))
    s = with_sentences(v)["sentence"].iloc[0]
    assert "stall-bound by mainloop inflation" in s and "median stall 50.8 µs measured, 48.7 µs of it in a compute span" in s
    assert "slot model 0 µs" in s and "cannot see this stall" in s and "kernel" not in s


def test_schedule_speedups_are_wave_over_interleaved_where_both_ran():
    from xstage_trace.reports.verdict_text import in_display_units, schedule_speedups

    v = in_display_units(pd.concat([_verdicts(schedule=["wave", "interleaved"], verdict="covered", diagnosis="none", stalled_tiles=0,
                                              measured_stall_ns=0.0, kernel_ns=[4.5e6, 3.0e6]),
                                    _verdicts(shape="S2", schedule=["wave"], verdict="covered", diagnosis="none", stalled_tiles=0,
                                              measured_stall_ns=0.0, kernel_ns=[4.0e6])], ignore_index=True))
    sp = schedule_speedups(v)
    assert sp["shape"].tolist() == ["S1"] and sp["speedup"].tolist() == [1.5]


# ----------------------------------------------------------------------------- analyze

def test_analyze_leads_with_the_verdicts_fits_120_columns_and_says_what_it_wrote(fused_run, tmp_path):
    from xstage_trace import open_run

    r = run("analyze", fused_run, "-o", tmp_path / "again.run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 120
    assert lines[0].startswith("Verdict (again.run")
    v = open_run(tmp_path / "again.run").verdicts()
    n_bound = int((v["verdict"] == "stall-bound").sum())
    assert lines[1] == f"{n_bound} of {len(v)} configuration × schedule pairs are stall-bound; {len(v) - n_bound} covered."
    assert sum(ln.startswith("• ") for ln in lines) == len(v)
    table_rows = [ln for ln in lines if ln.startswith("│ host ") or ln.startswith("│ local ")]
    assert table_rows and all("split/smem/tma" in ln for ln in table_rows)  # the variant never cut
    size = sum(p.stat().st_size for p in (tmp_path / "again.run").rglob("*") if p.is_file()) / 1e6
    assert re.search(rf"^wrote again\.run \(\d+ tables, {size:.1f} MB\)$", r.stdout, flags=re.M)
    assert "xstage-trace report again.run" in r.stdout and "xstage-trace dashboard again.run" in r.stdout
    wide = run("analyze", fused_run, "-o", tmp_path / "wide.run", "--wide", cwd=tmp_path)
    assert "p99 µs" in wide.stdout and "p99 µs" not in r.stdout  # the details behind --wide


def test_analyze_json_carries_the_verdict_sentences(fused_run, tmp_path):
    d = json.loads(run("analyze", fused_run, "-o", tmp_path / "j.run", "--json").stdout)
    assert len(d["verdict_sentences"]) == len(d["verdicts"]) > 0
    assert any(s.split(": ")[1].startswith("stall-bound") for s in d["verdict_sentences"])


# ----------------------------------------------------------------------------- report figures

def test_tile_stall_heat_map_colours_on_a_log_scale(fused_run):
    from xstage_trace import open_run
    from xstage_trace.reports.interactive import tile_stall_plot

    tiles = open_run(fused_run).tiles()
    fig = tile_stall_plot(tiles)
    heat = fig.data[0]
    counts = np.asarray(heat.customdata, dtype=float)
    z = np.asarray(heat.z, dtype=float)
    hit = counts > 0
    np.testing.assert_allclose(z[hit], np.log10(counts[hit]))  # colour = log10(tiles per bin); empty bins blank
    assert np.isnan(z[~hit]).all() and counts.max() / counts[hit].min() >= 100  # the counts span decades
    assert list(heat.colorbar.ticktext[:3]) == ["1", "10", "100"]


def test_bursts_plot_runs_over_the_burst_index_per_launch(fused_run):
    from xstage_trace import open_run
    from xstage_trace.reports.interactive import burst_plot

    b = open_run(fused_run).bursts()
    fig = burst_plot(b, pd.Series(dtype=str))
    lines = [t for t in fig.data if t.name != "T_iss^0 (calibration)"]
    assert len(lines) == b["dump"].nunique()
    for t in lines:
        assert list(t.x) == sorted(t.x) and len(set(t.x)) == len(t.x) > 1  # one point per burst index, not one stripe
    assert fig.layout.xaxis.title.text == "burst index in the launch" and fig.layout.yaxis.type == "log"
