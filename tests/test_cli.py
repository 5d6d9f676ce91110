"""The xstage-trace command as a user runs it: JSON outputs, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import CALIB, REFERENCE, dump_bytes, reference_sqlite, run_sql

EXE = [sys.executable, "-m", "xstage_trace"]


def run(*args, cwd=None):
    return subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_analyze_nsys_rep_json(tmp_path):
    r = run("analyze", REFERENCE / "h200_burst_gap_quick.nsys-rep", "-o", tmp_path / "run", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["run_dir"] == str(tmp_path / "run")
    assert d["gpus"] == ["NVIDIA H200"]
    assert (d["kernels"], d["nvtx_ranges"], d["probes"], d["bursts"], d["backpressured_tiles"]) == (17, 16, 0, 0, 0)
    assert d["gpu_metrics"]["Tensor Active"] == 1860
    assert d["warnings"] == []
    assert (tmp_path / "run" / "manifest.json").is_file()


def test_analyze_probes_with_calibration(tmp_path):
    r = run("analyze", CALIB / "quick" / "quick_sweep.nsys-rep", CALIB / "quick", "-o", tmp_path / "run", "--json",
            "--calibration", CALIB / "calibration_host.json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # 16 periodic launches (64 bursts) and 6 isolated (16 bursts), 132 producers, begin + end each
    assert d["probes"] == 16 * 132 * 64 * 2 + 6 * 132 * 16 * 2
    assert d["bursts"] > 0 and d["calibration_points"] == 22
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["calibration"].endswith("calibration_host.json")
    assert {i["kind"] for i in man["inputs"]} == {"nsys-rep", "probe"}
    assert all(len(i["sha256"]) == 64 for i in man["inputs"])


def test_human_summary(tmp_path):
    r = run("analyze", reference_sqlite(), "-o", tmp_path / "run")
    assert r.returncode == 0 and "kernels" in r.stdout and "17" in r.stdout


def _one_line_error(r, path_part: str):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and path_part in lines[0]
    return lines[0]


@pytest.mark.parametrize("case", ["truncated", "corrupt", "magic", "version", "overflow", "not_nsys", "no_kernels", "missing"])
def test_bad_inputs(case, tmp_path):
    src = CALIB / "sweep_host" / "host_periodic_K132_B8192_G0.xsp.zst"
    bad = tmp_path / f"{case}.xsp"
    if case == "truncated":
        bad.write_bytes(dump_bytes(src)[:-4096])
    elif case == "corrupt":
        data = bytearray(dump_bytes(src))
        data[-9] = 0xFF
        bad.write_bytes(bytes(data))
    elif case == "magic":
        bad.write_bytes(b"GARBAGE!" + dump_bytes(src)[8:])
    elif case == "version":
        data = bytearray(dump_bytes(src))
        data[8] = 9
        bad.write_bytes(bytes(data))
    elif case == "overflow":
        bad = CALIB / "overflow" / "host_periodic_K132_B8192_G0.xsp.zst"
    elif case == "not_nsys":
        bad = run_sql(tmp_path / "other.sqlite", "CREATE TABLE x (a)")
    elif case == "no_kernels":
        bad = tmp_path / "nokernels.sqlite"
        bad.write_bytes(reference_sqlite().read_bytes())
        run_sql(bad, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    elif case == "missing":
        bad = tmp_path / "nowhere.nsys-rep"
    out = tmp_path / "run"
    line = _one_line_error(run("analyze", bad, "-o", out), bad.name)
    assert not out.exists() and not any(p.name.startswith(".run") for p in tmp_path.iterdir())
    fixes = {"truncated": "re-run", "corrupt": "re-run", "magic": ".xsp", "version": "xstage-trace release",
             "overflow": "--allow-overflow", "not_nsys": "nsys export", "no_kernels": "-t cuda", "missing": "check the path"}
    assert fixes[case] in line


def test_overflow_accepted_on_request(tmp_path):
    r = run("analyze", CALIB / "overflow", "-o", tmp_path / "run", "--json", "--allow-overflow")
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert any("overflowed" in w for w in d["warnings"])


def test_unreadable_input(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    p = tmp_path / "locked.xsp"
    p.write_bytes(dump_bytes(CALIB / "quick" / "host_periodic_K132_B8192_G0.xsp.zst"))
    p.chmod(0)
    _one_line_error(run("analyze", p, "-o", tmp_path / "run"), p.name)


def test_calibrate_fit_json(tmp_path):
    out = tmp_path / "calib.json"
    r = run("calibrate", "fit", REFERENCE / "h200_burst_gap_sweep.csv", "--dest", "host", "--json", "-o", out)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert 60 <= d["rate_gbps"] <= 75
    assert set(d["issue_floor_ns"]) >= {"132,32768", "33,2048"}
    assert d["capacity_bytes"] > 0 and d["period_err_median_pct"] <= 3 and d["period_err_mean_pct"] <= 10
    assert d["points"] == 150 and len(d["input"]["sha256"]) == 64
    assert json.loads(out.read_text())["rate_gbps"] == d["rate_gbps"]
    r = run("calibrate", "fit", REFERENCE / "h200_burst_gap_sweep.csv")
    _one_line_error(r, "h200_burst_gap_sweep.csv")


def test_calibrate_fit_from_dumps():
    r = run("calibrate", "fit", CALIB / "quick", "--dest", "host", "--json")
    assert r.returncode == 0, r.stderr
    assert 55 <= json.loads(r.stdout)["rate_gbps"] <= 80


def test_model_burst_fa4():
    r = run("model", "burst", "--rate-gbps", 717, "--issue-floor-us", 0.76, "--producers", 148,
            "--bytes-per-producer", 32768, "--gap-us", 1.0, "--capacity-mib", 4.25, "--json")
    d = json.loads(r.stdout)
    assert d["drain_time_us"] == pytest.approx(6.764, abs=0.001)
    assert d["recovery_gap_us"] == pytest.approx(6.004, abs=0.001)
    assert d["isolated_excess_bytes"] / 2**20 == pytest.approx(4.105, abs=0.001)
    assert d["capacity_ok"] is True and d["verdict"] == "reshape" and d["failed_bounds"] == ["rate bound V/(T_iss^0+G) > R"]
    assert d["issue_overhead_us"] == pytest.approx(6.764 - 1.0 - 0.76, abs=0.001)


def test_model_qloop_interleave_partition_stall():
    q = json.loads(run("model", "qloop", "--sigma-us", 0.79, "--producers", 148, "--rate-gbps", 717,
                       "--issue-floor-us", 0.76, "--capacity-mib", 4.25, "-M", 512, "-M", 8192, "--json").stdout)
    assert q["m_ub_tokens"] == 1024 and [v["verdict"] for v in q["verdicts"]] == ["reshape", "piggyback"]
    i = json.loads(run("model", "interleave", "--volume-bytes", 7119810, "--mainloop-l1-us", 9.77, "--mainloop-l2-us", 5.30,
                       "--n1", 1, "--n2", 1, "--issue-floor-us", 0.76, "--rate-gbps", 717, "--json").stdout)
    assert i["issue_overhead_interleaved_us"] == 0.0 and i["full_recovery"] is True
    p = json.loads(run("model", "partition", "--tokens-per-expert", "256,256,256,256", "--tokens", 1024, "--hidden", 2048,
                       "--reduction", 352, "--splits", 2, "--ranks", 4, "--num-sms", 8, "--rho", 1.0, "--json").stdout)
    assert p["comm_ctas_best"] == 1 and len(p["candidates"]) == 7
    s = json.loads(run("model", "stall", "--span-us", 9.93, "--cover-us", 5.30, "--json").stdout)
    assert s["predicted_stall_us"] == pytest.approx(4.63)


def test_model_sequence_from_a_run(tmp_path):
    r = run("analyze", CALIB / "quick" / "host_periodic_K132_B32768_G0.xsp.zst", "-o", tmp_path / "run", "--json",
            "--calibration", CALIB / "calibration_host.json")
    assert r.returncode == 0
    d = json.loads(run("model", "sequence", tmp_path / "run", "--calibration", CALIB / "calibration_host.json", "--json").stdout)
    # the launch's configuration K = 132, B = 32 KiB: the JSON's R(K, B), as its fit predicts
    r_kb = json.loads((CALIB / "calibration_host.json").read_text())["rate_by_configuration_gbps"]["132,32768"]
    assert d["bursts"] >= 1 and d["rate_gbps"] == pytest.approx(r_kb)
    assert all(b["rate_gbps"] == pytest.approx(r_kb) for b in d["per_burst"])
    q132 = json.loads((CALIB / "calibration_host.json").read_text())["capacity_by_producers_bytes"]["132"]  # Q(K = 132)
    assert d["capacity_bytes"] == pytest.approx(q132) and all(b["capacity_bytes"] == pytest.approx(q132) for b in d["per_burst"])


def test_instrument_flags():
    r = run("instrument", "flags")
    assert r.returncode == 0
    flags = r.stdout.strip()
    assert flags.startswith("-I") and flags.endswith("-DXSTAGE_TRACE=1")
    inc = flags.split()[0][2:]
    assert os.path.isfile(os.path.join(inc, "xstage", "probe.cuh"))


def test_calibrate_fit_rejects_a_non_table(tmp_path):
    bad = tmp_path / "points.parquet"
    bad.write_bytes(b"not parquet at all")
    line = _one_line_error(run("calibrate", "fit", bad, "--dest", "host"), bad.name)
    assert "calibration points CSV/Parquet" in line


def test_model_sequence_takes_r_and_q_of_each_bursts_producer_count(tmp_path):
    """Bursts of 66 producers × 32 KiB are audited with the calibration's R(66, 32 KiB) and Q(66),
    not the numbers of its largest K (the JSON's own entries are the truth)."""
    doc = json.loads((CALIB / "calibration_host.json").read_text())
    table = tmp_path / "bursts.csv"
    table.write_text("volume_bytes,gap_ns,producers\n" + "\n".join(f"{66 * 32768},2000,66" for _ in range(3)) + "\n")
    d = json.loads(run("model", "sequence", table, "--calibration", CALIB / "calibration_host.json", "--json").stdout)
    assert d["rate_gbps"] == pytest.approx(doc["rate_by_configuration_gbps"]["66,32768"])
    assert d["capacity_bytes"] == pytest.approx(doc["capacity_by_producers_bytes"]["66"])
    assert doc["capacity_by_producers_bytes"]["66"] != doc["capacity_by_producers_bytes"]["132"]
