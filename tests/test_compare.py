"""xstage-trace compare: the regression gate, checked on the sample capture split by schedule
(expected directions from the CUDA-event kernel times in sample_traces/h200_fused_moe/times, a
separate measurement from the nsys rows compare reads) and on hand-made samples."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import FUSED, SAMPLE_WARMUPS
from xstage_trace import open_run
from xstage_trace.analysis.stall import kernel_trials
from xstage_trace.reports.compare import GateConfig, bootstrap_change_pct, compare_runs, kernel_verdict
from xstage_trace.reports.configs import slowest_rank_trials

GATE = 2.0


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "xstage_trace", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


def driver_trials() -> pd.DataFrame:
    """The traced trials the kernel driver wrote (one row per rank, configuration, trial; warm-ups not written)."""
    t = pd.concat([pd.read_csv(f) for f in sorted((FUSED / "traced").glob("fused_trials_*_on.csv"))])
    return t[t["traced"] == 1]


def expected_verdicts() -> dict[tuple[str, str], str]:
    """wave → interleaved change per (dest, shape) from the 21-trial CUDA-event medians (probes on):
    improvement / regression beyond the gate, neutral well inside it; ambiguous ones left out."""
    t = pd.concat([pd.read_csv(f) for f in sorted((FUSED / "times").glob("fused_times_*_split_smem_on.csv"))])
    m = t.pivot_table(index=["dest", "shape"], columns="schedule", values="kernel_ms_median")
    change = 100 * (m["interleaved"] / m["wave"] - 1)
    out = {}
    for key, c in change.items():
        if c < -2 * GATE:
            out[key] = "improvement"
        elif abs(c) < GATE / 2:
            out[key] = "neutral"
    return out


def test_interleaving_is_an_improvement_where_cuda_events_say_so(split_runs, tmp_path):
    wave, inter = split_runs
    r = cli("compare", wave, inter, "--by", "dest,shape,kernel", "--gate", GATE, "--json", "-o", tmp_path / "compare.md")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    got = {(c["dest"], c["shape"]): c["verdict"] for c in doc["configurations"]}
    want = expected_verdicts()
    assert {("host", "S1"), ("host", "S2"), ("host", "S3"), ("local", "S1")} <= set(want)  # the table decides every traced config
    assert {k: got[k] for k in want if k in got} == {k: v for k, v in want.items() if k in got} and len(got) == 4
    md = (tmp_path / "compare.md").read_text()
    assert md.splitlines()[2].startswith("**PASS") and "Timing scope" in md


def test_the_reverse_change_fails_the_gate_unless_accepted(split_runs, tmp_path):
    wave, inter = split_runs
    r = cli("compare", inter, wave, "--by", "dest,shape,kernel", "--json", "-o", tmp_path / "c.md")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    regressed = {(c["dest"], c["shape"]) for c in doc["configurations"] if c["verdict"] == "regression"}
    assert regressed == {k for k, v in expected_verdicts().items() if v == "improvement"}
    r = cli("compare", inter, wave, "--by", "dest,shape,kernel", "--accept", "wave schedule kept for the ablation", "-o", tmp_path / "c.md", "--force")
    assert r.returncode == 0
    md = (tmp_path / "c.md").read_text()
    assert "ACCEPTED (wave schedule kept for the ablation)" in md and "accepted: wave schedule kept for the ablation" in md


def test_stall_and_backpressure_deltas_follow_the_tiles(split_runs):
    wave, inter = (open_run(p) for p in split_runs)
    t = compare_runs(wave, inter, GateConfig(keys=("dest", "shape", "kernel"))).set_index(["dest", "shape"])
    for run, side in ((wave, "base"), (inter, "new")):
        tiles = run.tiles()
        l2 = tiles[(tiles["tile_kind"] == "linear2") & (tiles["dest"] == "host") & (tiles["shape"] == "S1")]
        assert t.loc[("host", "S1"), f"backpressured_tiles_{side}"] == l2["backpressured"].sum()
        assert t.loc[("host", "S1"), f"stall_meas_us_{side}"] == pytest.approx(l2["measured_stall_ns"].median() / 1e3)
    assert t.loc[("host", "S1"), "backpressured_tiles_delta"] < 0


def test_a_run_against_itself_is_neutral(fused_run, tmp_path):
    r = cli("compare", fused_run, fused_run, "--json", "-o", tmp_path / "c.md")
    assert r.returncode == 0
    doc = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert {c["verdict"] for c in doc["configurations"]} == {"neutral"}
    # only the traced configurations' launches are trials (the unlabelled checksum kernel is none), each with its tiles' stall
    assert {(c["dest"], c["shape"], c["schedule"]) for c in doc["configurations"]} == set(driver_trials()[["dest", "shape", "schedule"]].itertuples(index=False))
    assert all(c["stall_meas_us_base"] is not None for c in doc["configurations"])


@pytest.mark.parametrize("args", [("not-a-run",), ("SELF", "--by", "dest,colour"), ("SELF", "--gate", "-1")])
def test_bad_input_exits_2_with_one_line_and_no_compare_md(fused_run, tmp_path, args):
    args = [fused_run if a == "SELF" else (tmp_path / a if a == "not-a-run" else a) for a in args]
    r = cli("compare", fused_run, *args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "compare.md").exists()


def test_disjoint_configurations_are_bad_input(split_runs, tmp_path):
    r = cli("compare", *split_runs, cwd=tmp_path)  # schedule is a key: wave and interleaved never match
    assert r.returncode == 2 and "no configuration in common" in r.stderr


def test_kernel_verdict_rule_on_hand_made_samples():
    base = 100_000 + np.tile([-300.0, -100, 0, 100, 300], 4)  # IQR/median 0.2 %
    cfg = GateConfig(gate_pct=2.0)
    assert kernel_verdict(base, base * 1.10, cfg)["verdict"] == "regression"
    assert kernel_verdict(base, base * 0.90, cfg)["verdict"] == "improvement"
    assert kernel_verdict(base, base * 1.01, cfg)["verdict"] == "neutral"  # inside the 2 % gate
    noisy = 100_000 * np.array([0.6, 0.8, 1.0, 1.2, 1.4, 0.7, 1.3, 1.1, 0.9, 1.25])  # IQR/median ~ 40 %
    v = kernel_verdict(base, noisy * 1.10, cfg)
    assert v["verdict"] == "neutral" and v["threshold_pct"] > 30  # the noise floor raises the threshold
    assert kernel_verdict(base, base[:2], cfg)["verdict"] == "inconclusive"
    assert kernel_verdict(base, None, cfg)["verdict"] == "inconclusive"
    assert kernel_verdict(None, base, cfg)["verdict"] == "neutral"


def test_bootstrap_interval_brackets_a_known_shift():
    rng = np.random.default_rng(7)
    base = rng.normal(1e6, 1e3, 15)
    lo, hi = bootstrap_change_pct(base, base * 1.05, GateConfig())
    assert lo < 5.0 < hi and hi - lo < 1.0


def test_matching_on_the_kernel_name_alone_pools_its_trials(split_runs):
    wave, inter = (open_run(p) for p in split_runs)
    t = compare_runs(wave, inter, GateConfig(keys=("kernel",)))
    assert t["kernel"].tolist() == ["fused_moe_kernel"]
    issued = driver_trials().groupby("schedule").size()  # the driver's trials, warm-ups excluded
    assert t.loc[0, "base_trials"] == issued["wave"] == 20 and t.loc[0, "new_trials"] == issued["interleaved"]
    assert np.isnan(t.loc[0, "stall_meas_us_base"])  # tiles have no kernel-name key to pool on


def test_trials_drop_the_warmups_and_keep_the_slowest_rank_per_trial():
    """By hand: two ranks, one configuration, 4 launches each, 1 warm-up: trials 0-2, each the max of the two ranks."""
    ms = {0: [9.0, 1.0, 3.0, 2.0], 1: [8.0, 2.0, 1.0, 5.0]}
    kernels = pd.DataFrame([{"rank": r, "name": "k(int)", "short_name": "k", "start_ns": 100 * i, "duration_ns": v * 1e6, "nvtx_range": "dest=host shape=S1 schedule=wave"}
                            for r, vs in ms.items() for i, v in enumerate(vs)]
                           + [{"rank": 0, "name": "other", "short_name": "other", "start_ns": 50, "duration_ns": 1e6, "nvtx_range": None}])
    dumps = pd.DataFrame([{"rank": r, "label": "dest=host shape=S1 schedule=wave", "dest": "host", "shape": "S1", "variant": None, "schedule": "wave"} for r in ms])
    per_trial = slowest_rank_trials(kernel_trials(kernels, dumps, warmup_launches=1))
    assert per_trial["trial"].tolist() == [0, 1, 2] and per_trial["kernel_ms"].tolist() == [2.0, 3.0, 5.0]
    assert (per_trial["ranks"] == 2).all() and (per_trial["kernel"] == "k").all()


def test_compare_uses_the_trials_table3_reports(split_runs):
    """One definition of a trial: compare's median per configuration is Table 3's kernel time of the same run."""
    wave, inter = (open_run(p) for p in split_runs)
    t = compare_runs(wave, inter, GateConfig(keys=("dest", "shape"))).set_index(["dest", "shape"])
    for run, side, sched in ((wave, "base", "wave"), (inter, "new", "interleaved")):
        t3 = run.table3()
        t3 = t3[t3["schedule"] == sched].set_index(["dest", "shape"])
        assert t[f"{side}_ms"].to_numpy() == pytest.approx(t3.loc[t.index, "kernel_ns"].to_numpy() / 1e6)
        assert (t[f"{side}_trials"] == t3.loc[t.index, "trials"]).all()
