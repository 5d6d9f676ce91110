"""The launch-time partition selector on measured service times and its scoring against the H200 C sweep
(docs/model.md §9, paper 004; issue 26). Hand calculations, a few lines of numpy over the shipped sample's raw
times, the C++ launcher's selector against the Python one, and the reference kernel's build."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.partition import PartitionProblem, choose_comm_ctas, completion_columns
from xstage_trace.analysis.partition_regret import fixed_c_speedup, regret_table
from xstage_trace.analysis.partition_select import ServiceTimes, fit_service_times, predicted_completion, select_comm_ctas

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "h200_partition"
EXAMPLES = ROOT / "src" / "xstage_trace" / "instrument" / "examples"
# The §9 worked case of test_model.py: 4 experts x 256 tokens, N = 2048, L = 2, D = 4, 8 SMs, C = 1..4:
# W_comp = 64 tiles per split, W_comm = 2.
SMALL = PartitionProblem((256,) * 4, 1024, 2048, 352, 2, 4, num_sms=8, max_comm_ctas=4)


def test_constant_service_times_reduce_to_section9_with_rho_tau_over_wave():
    s = ServiceTimes((1000.0,) * 4, (1000.0,) * 4)  # rho = 1
    cols = predicted_completion(SMALL, s)
    assert list(cols["completion_waves"]) == [12, 12, 14, 17]  # test_model.py's hand calculation
    assert list(cols["completion_ns"]) == [12000, 12000, 14000, 17000]
    assert select_comm_ctas(SMALL, s) == choose_comm_ctas(completion_columns(SMALL, 1.0)) == 1  # tie -> fewer empty slots


def test_c_dependent_service_times_by_hand():
    # C=1: P=14, A=(5,10) waves x 1000 ns, q = ceil(2/1) x 2000 = 4000: F0 = 9000, F1 = max(10000, 9000) + 4000 = 14000
    # C=2: P=12, A=(6,11) x 1100 = (6600, 12100), q = 1 x 1500: F0 = 8100, F1 = 12100 + 1500 = 13600
    # C=3: P=10, A=(7,13) x 1000, q = 1200: 14200;  C=4: P=8, A=(8,16) x 1000, q = 1000: 17000
    s = ServiceTimes((1000.0, 1100.0, 1000.0, 1000.0), (2000.0, 1500.0, 1200.0, 1000.0))
    cols = predicted_completion(SMALL, s)
    assert cols["completion_ns"] == pytest.approx([14000, 13600, 14200, 17000])
    assert select_comm_ctas(SMALL, s) == 2


def test_fit_service_times_averages_each_c_and_needs_every_c():
    s = fit_service_times([1, 2, 2, 3], [10.0, 11.0, 13.0, 12.0], [100.0, 150.0, 170.0, 300.0])
    assert s.t_wave_ns == (10.0, 12.0, 12.0) and s.tau_ns == (100.0, 160.0, 300.0)
    with pytest.raises(ValueError):
        fit_service_times([1, 3], [10.0, 12.0], [100.0, 300.0])


def _times(med: dict[str, list[float]], trials: int = 3) -> pd.DataFrame:
    rows = [(w, c + 1, t, v) for w, vs in med.items() for c, v in enumerate(vs) for t in range(trials)]
    return pd.DataFrame(rows, columns=["workload", "comm_ctas", "trial", "kernel_ms"])


def test_regret_table_by_hand():
    t = _times({"a": [2.0, 1.0, 1.5], "b": [1.0, 1.2, 1.1]})
    r = regret_table(t, {"a": 3, "b": 1}, max_comm_ctas=3).set_index("workload")
    assert r.loc["a", "c_oracle"] == 2 and r.loc["a", "regret_pct"] == pytest.approx(50.0)
    assert r.loc["b", "c_oracle"] == 1 and r.loc["b", "regret_pct"] == 0.0


def test_fixed_c_speedup_by_hand():
    # a: (1, 2, 3) ms, b: (3, 2, 1) ms over C = 1..3; the selection takes each one's best. Fixed C = 1 or 3 both
    # have geomean sqrt(3) < 2 (C = 2): best fixed C = 1, speedup = sqrt(3). A replicate drawing one workload
    # twice has its best fixed C = the selection (speedup 1), a mixed one sqrt(3): the interval lies in [1, sqrt(3)].
    t = _times({"a": [1.0, 2.0, 3.0], "b": [3.0, 2.0, 1.0]})
    s = fixed_c_speedup(t, {"a": 1, "b": 3}, max_comm_ctas=3, n_boot=400)
    assert s["best_fixed_c"] == 1 and s["speedup_geomean"] == pytest.approx(math.sqrt(3))
    assert 1.0 - 1e-12 <= s["ci_low"] <= s["ci_high"] <= math.sqrt(3) + 1e-12
    assert s["ci_low"] == pytest.approx(1.0) and s["ci_high"] == pytest.approx(math.sqrt(3))


@pytest.fixture(scope="module")
def shipped():
    return json.loads((SAMPLE / "partition_regret.json").read_text())


def test_shipped_sample_has_the_issues_matrix(shipped):
    ws = shipped["workloads"]
    assert len(ws) >= 15
    assert {w["parameters"]["shape"] for w in ws} == {"granite", "qwen", "deepseek"}
    assert {w["parameters"]["skew"] for w in ws} == {0.0, 0.6, 1.2}
    assert all(set(range(1, 17)) <= {int(c) for c in w["times_ms"]} for w in ws)
    assert max(len(w["times_ms"]) for w in ws) == 32
    raw = pd.read_csv(SAMPLE / "results" / "times_sweep_host_off.csv.gz")
    assert raw.groupby(["workload", "comm_ctas"])["trial"].nunique().min() >= 20


def test_shipped_times_and_regret_from_the_raw_trials(shipped):
    raw = pd.read_csv(SAMPLE / "results" / "times_sweep_host_off.csv.gz")
    regrets = []
    for w in shipped["workloads"]:
        r = raw[raw["workload"] == w["workload"]]
        cs = np.sort(r["comm_ctas"].unique())
        med = np.array([np.median(r.loc[r["comm_ctas"] == c, "kernel_ms"].to_numpy()) for c in cs])
        assert np.allclose(med, [w["times_ms"][str(c)] for c in cs], atol=1e-5)
        legal = cs <= 16
        oracle = cs[legal][np.argmin(med[legal])]
        t_sel = med[cs == w["c_selected"]][0]
        t_or = med[cs == oracle][0]
        assert w["c_oracle"] == oracle
        assert w["regret_pct"] == pytest.approx(100 * (t_sel - t_or) / t_or, abs=1e-3)
        regrets.append(100 * (t_sel - t_or) / t_or)
    assert shipped["mean_regret_pct"] == pytest.approx(np.mean(regrets), abs=1e-3)
    assert shipped["max_regret_pct"] == pytest.approx(np.max(regrets), abs=1e-3)


def _calibrated_service(dest: str) -> dict[str, ServiceTimes]:
    calib = pd.read_csv(SAMPLE / "results" / f"probes_calib_{dest}_on.csv")
    shapes = pd.read_csv(SAMPLE / "results" / f"workloads_calib_{dest}_on.csv").set_index("workload")["shape"]
    return {shapes[w]: fit_service_times(g["comm_ctas"], g["comp_tile_mean_us"] * 1e3, g["comm_tile_mean_us"] * 1e3)
            for w, g in calib.groupby("workload")}


def _problem(par: dict) -> PartitionProblem:
    return PartitionProblem(tuple(par["rows_per_expert"]), par["tokens"], par["hidden"], par["ffn"], par["splits"], 1,
                            128, 128, 128, 1024, par["num_sms"], par["occupancy"], par["occupancy"], 16)


def test_shipped_selection_is_the_selector_on_each_workloads_own_quantities(shipped):
    service = _calibrated_service("host")
    sweep = {w["workload"] for w in shipped["workloads"]}
    calib = set(pd.read_csv(SAMPLE / "results" / "workloads_calib_host_on.csv")["workload"])
    assert not sweep & calib  # the service times come from workloads the sweep does not score
    for w in shipped["workloads"]:
        par = w["parameters"]
        assert sum(par["rows_per_expert"]) == par["tokens"] * par["topk"]
        assert select_comm_ctas(_problem(par), service[par["shape"]]) == w["c_selected"]


GXX = shutil.which("g++") or shutil.which("c++")


@pytest.mark.skipif(GXX is None, reason="no C++ compiler")
def test_cpp_launcher_selector_agrees_with_python(shipped, tmp_path):
    exe = tmp_path / "psb"
    r = subprocess.run([GXX, "-O2", "-std=c++17", str(EXAMPLES / "partition_select_bench.cpp"), "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    service = _calibrated_service("host")
    lines, want = [], []
    for w in shipped["workloads"]:
        par = w["parameters"]
        s = service[par["shape"]]
        fields = [par["tokens"], par["hidden"], par["splits"], par["num_sms"], par["occupancy"], par["occupancy"], 16,
                  par["experts"], *par["rows_per_expert"], *s.t_wave_ns[:16], *s.tau_ns[:16]]
        lines.append(" ".join(repr(float(x)) if isinstance(x, float) else str(x) for x in fields))
        want.append(select_comm_ctas(_problem(par), s))
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    got = [int(line.split()[0]) for line in out.stdout.split("\n") if line.strip()]
    assert got == want


def test_shipped_dump_holds_both_roles_records_as_documented():
    """gather_rs_moe.cu's probe layout on a real dump: CTAs 0 … C−1 are the communication role (one ready_wait
    pair per split, one comm_tile pair per communication tile), the others the compute role (one comp_tile pair
    per tile, the end's payload its split), every CTA on its own SM (o_comp = o_comm = 1)."""
    from xstage_trace.collectors.probe_format import decode_probe_dump

    d = decode_probe_dump(SAMPLE / "dumps" / "grs_host_qwen_M8192_s0.00_r1021_C6.xsp.zst")
    r = d.records.to_pandas()
    c, w_comp, w_comm, splits = (int(d.config.extra[k]) for k in ("comm_ctas", "w_comp", "w_comm", "splits"))
    comm = r[r["cta"] < c]
    comp = r[r["cta"] >= c]
    assert set(comm["event"]) == {"ready_wait", "comm_tile"} and set(comp["event"]) == {"comp_tile"}
    assert (comm[comm["event"] == "ready_wait"].groupby("cta").size() == 2 * splits).all()
    assert (comm["event"] == "comm_tile").sum() == 2 * w_comm * splits
    ends = comp[comp["kind"] == "end"]
    assert len(ends) == w_comp * splits and sorted(ends["tile"]) == list(range(w_comp * splits))
    assert (ends["payload"] == ends["tile"] // w_comp).all()
    assert d.slices.to_pandas()["sm_id"].nunique() == d.config.ctas == 132


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("traced", [False, True])
def test_gather_rs_kernel_builds_without_spills(traced, tmp_path):
    inc = ROOT / "src" / "xstage_trace" / "instrument" / "include"
    cmd = [NVCC, "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-I{inc}", "-Xptxas", "-v", "-c",
           *(["-DXSTAGE_TRACE"] if traced else []), str(EXAMPLES / "gather_rs_moe.cu"), "-o", str(tmp_path / "k.o")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    report = r.stderr[r.stderr.index("gather_rs_kernel"):]
    assert "0 bytes spill stores, 0 bytes spill loads" in report.split("Compiling entry")[0]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "xstage_trace", *map(str, args)], capture_output=True, text=True, timeout=600)


def test_cli_partition_sweep_reproduces_the_shipped_regrets(shipped, tmp_path):
    r = _cli("model", "partition-sweep", SAMPLE / "results", "--dest", "host", "--n-boot", 100, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [w["c_selected"] for w in doc["workloads"]] == [w["c_selected"] for w in shipped["workloads"]]
    assert doc["mean_regret_pct"] == shipped["mean_regret_pct"] and doc["max_regret_pct"] == shipped["max_regret_pct"]


@pytest.mark.parametrize("args", [("--dest", "peer"), ()])
def test_cli_partition_sweep_bad_input_is_one_line_exit_2(args, tmp_path):
    folder = SAMPLE / "results" if args else tmp_path  # an empty folder: no sweep files
    r = _cli("model", "partition-sweep", folder, *args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_cli_model_partition_with_measured_service_picks_the_shipped_choice(shipped):
    w = next(x for x in shipped["workloads"] if x["workload"].startswith("qwen_M8192_s0.00"))
    par = w["parameters"]
    r = _cli("model", "partition", "--tokens-per-expert", ",".join(map(str, par["rows_per_expert"])), "--tokens", par["tokens"],
             "--hidden", par["hidden"], "--reduction", par["ffn"], "--splits", par["splits"], "--ranks", 1, "--num-sms", par["num_sms"],
             "--comp-per-sm", 1, "--comm-per-sm", 1, "--service", SAMPLE / "partition_regret.json", "--service-shape", "qwen", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["comm_ctas_best"] == w["c_selected"]
    pred = {str(c["comm_ctas"]): c["completion_ns"] / 1e6 for c in doc["candidates"]}
    assert pred == pytest.approx(w["predicted_ms"], rel=1e-3)  # the JSON's service times are rounded to 0.1 ns
    bad = _cli("model", "partition", "--tokens-per-expert", "256", "--tokens", 64, "--hidden", 2048, "--reduction", 1408, "--splits", 2,
               "--ranks", 1, "--service", SAMPLE / "partition_regret.json", "--service-shape", "mixtral")
    assert bad.returncode == 2 and "mixtral" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
