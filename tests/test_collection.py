"""Run collections (issue 15): many run folders written by analyze, queried as one DuckDB dataset.

Truth is each run's own API (``open_run(d).table3()``, ``.tiles()``, ``.kernels()``), the runs'
calibration_points.csv and calibration JSONs read here with pandas/json, and the capture dates in
the samples' PROVENANCE.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import xstage_trace
from conftest import CALIB, FUSED, SAMPLES

EXE = [sys.executable, "-m", "xstage_trace"]
PEER = SAMPLES / "h200x2_peer" / "fused"
SHARED_POINTS = ["host_periodic_K132_B32768_G0", "host_periodic_K132_B32768_G2000", "host_periodic_K132_B32768_G8000",
                 "host_periodic_K132_B32768_G32000", "host_isolated_K132_B32768_G452538"]


def analyze(out: Path, *inputs) -> Path:
    r = subprocess.run(EXE + ["analyze", *map(str, inputs), "-o", str(out), "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def one(folder: Path, pattern: str) -> Path:
    (hit,) = folder.glob(pattern)
    return hit


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Run folders of five real captures (some nested one level down), and a calibration folder."""
    root = tmp_path_factory.mktemp("collection")
    traced = FUSED / "traced"
    d = {
        "fused": analyze(root / "ci" / "fused.run", one(traced, "*.nsys-rep"), traced,
                         "--calibration", CALIB / "calibration_host.json"),
        # probe dumps only: no kernels (Table 3 without kernel times), capture time from %globaltimer
        "probe_only": analyze(root / "ci" / "nested" / "probe_only.run", one(traced, "fused_host_S2_wave_*.xsp*"),
                              one(traced, "fused_host_S2_interleaved_*.xsp*")),
        # two ranks: tables partitioned by rank
        "peer": analyze(root / "peer.run", one(PEER, "fused_rank0.nsys-rep"), one(PEER, "fused_rank1.nsys-rep"),
                        *sorted(PEER.glob("fused_peer_rank*_S1_*.xsp*"))),
        "quick": analyze(root / "cal" / "quick.run", one(CALIB / "quick", "*.nsys-rep"), CALIB / "quick"),
        "sweep": analyze(root / "cal" / "sweep.run", *[one(CALIB / "sweep_host", f"{n}.xsp*") for n in SHARED_POINTS]),
    }
    # the layout analyze will write (issue 9): table3.parquet beside the tables, here with a column
    # today's Table 3 lacks, to show that stored tables are read as they are and line up by name
    stored = root / "ci" / "stored_table3.run"
    shutil.copytree(d["probe_only"], stored)
    xstage_trace.open_run(stored).table3().assign(note="stored").to_parquet(stored / "table3.parquet")
    manifest = json.loads((stored / "manifest.json").read_text())  # the run lists (and hashes) exactly what it holds
    manifest["files"]["table3.parquet"] = hashlib.sha256((stored / "table3.parquet").read_bytes()).hexdigest()
    (stored / "manifest.json").write_text(json.dumps(manifest))
    d["stored"] = stored
    return root, d


def test_finds_every_run_folder_under_the_roots(runs):
    root, d = runs
    c = xstage_trace.open_collection([root / "ci", root / "peer.run", root / "cal"])
    assert sorted(map(str, c.run_dirs)) == sorted(map(str, d.values()))


def test_table3_is_the_concatenation_of_each_runs_table3(runs):
    root, d = runs
    got = xstage_trace.open_collection([root]).table3()
    assert set(got["run"]) == {str(p) for p in d.values() if len(xstage_trace.open_run(p).table3())}
    for p in d.values():
        want = xstage_trace.open_run(p).table3()
        mine = got[got["run"] == str(p)]
        assert len(mine) == len(want)
        if want.empty:  # calibration runs have no tiles
            continue
        want = want.sort_values(["dest", "shape"]).reset_index(drop=True)
        mine = mine.sort_values(["dest", "shape"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine[want.columns], want, check_dtype=False)
        # columns only other runs have are empty here (union by name)
        assert mine.drop(columns=[*want.columns, "run", "captured_utc"]).isna().all(axis=None)


def test_stored_table3_parquet_is_read_as_written(runs):
    root, d = runs
    got = xstage_trace.open_collection([root]).table3()
    assert set(got.loc[got["note"].notna(), "run"]) == {str(d["stored"])}
    assert (got.loc[got["run"] == str(d["stored"]), "note"] == "stored").all()


def _configuration(row) -> str:
    return " ".join(f"{k}={row[k]}" for k in ("dest", "shape", "schedule", "variant") if pd.notna(row[k])) or row["dump"]


def test_worst_ranks_run_configurations_by_backpressured_tiles(runs):
    root, d = runs
    rows = []
    for p in d.values():
        t = xstage_trace.open_run(p).tiles()
        if t.empty:
            continue
        t = t.assign(configuration=t.apply(_configuration, axis=1))
        g = t.groupby("configuration").agg(tiles=("tile", "size"), backpressured_tiles=("backpressured", "sum"), ranks=("rank", "nunique"))
        rows.append(g.reset_index().assign(run=str(p)))
    truth = pd.concat(rows, ignore_index=True)
    got = xstage_trace.open_collection([root]).worst(limit=None)
    assert len(got) == len(truth)
    assert np.all(np.diff(got["backpressured_tiles"].to_numpy()) <= 0)
    key = ["run", "configuration"]
    merged = got.merge(truth, on=key, suffixes=("", "_truth"), validate="one_to_one")
    assert len(merged) == len(truth)
    for col in ("tiles", "backpressured_tiles", "ranks"):
        assert (merged[col] == merged[f"{col}_truth"]).all(), col
    top = truth.sort_values("backpressured_tiles", ascending=False).iloc[0]
    assert (got.iloc[0]["backpressured_tiles"], got.iloc[0]["configuration"]) == (top["backpressured_tiles"], top["configuration"])
    # the two ranks of one peer launch are one configuration
    assert set(got.loc[got["run"] == str(d["peer"]), "ranks"]) == {2}
    assert set(got.loc[got["run"] == str(d["fused"]), "dest"]) == {"host", "local"}


def test_capture_time_is_the_first_kernel_or_probe(runs):
    root, d = runs
    r = xstage_trace.open_collection([root]).runs().set_index("run")
    k = xstage_trace.open_run(d["fused"]).kernels()["start_utc_ns"].min()
    s = xstage_trace.open_run(d["probe_only"]).probe_slices()["open_gt_ns"].min()
    assert r.loc[str(d["fused"]), "captured_utc"] == pd.Timestamp(int(k) // 1000, unit="us")
    assert r.loc[str(d["probe_only"]), "captured_utc"] == pd.Timestamp(int(s) // 1000, unit="us")
    assert r.loc[str(d["probe_only"]), "captured_from"].startswith("first probe")
    # sample_traces/h200_fused_moe/PROVENANCE.md: Nsight Systems capture 2026-12-01T15:12Z
    assert r.loc[str(d["fused"]), "captured_utc"].floor("min") == pd.Timestamp("2026-12-01 15:12")


def test_point_drift_against_the_earliest_run(runs):
    root, d = runs
    c = xstage_trace.open_collection([root / "cal"])
    when = c.runs().set_index("run")["captured_utc"]
    first, later = sorted(["quick", "sweep"], key=lambda n: when[str(d[n])])
    keys = ["dest", "mode", "K", "B", "V", "gap_ns"]
    a, b = (pd.read_csv(d[n] / "calibration_points.csv") for n in (first, later))
    m = b.merge(a, on=keys, suffixes=("", "_first"))
    assert len(m) >= len(SHARED_POINTS)
    got = c.point_drift().set_index(["run", "dest"])
    for dest, g in m.groupby("dest"):
        tiss = np.median(100 * (g["tiss_med_ns"] / g["tiss_med_ns_first"] - 1))
        period = np.median(100 * (g["period_med_ns"] / g["period_med_ns_first"] - 1))
        row = got.loc[(str(d[later]), dest)]
        assert (row["points"], row["points_compared"]) == ((b["dest"] == dest).sum(), len(g))
        assert row["tiss_drift_med_pct"] == pytest.approx(tiss) and row["period_drift_med_pct"] == pytest.approx(period)
    earliest = got.loc[str(d[first])]
    assert (earliest["points_compared"] == 0).all() and earliest["tiss_drift_med_pct"].isna().all()


def test_calibration_drift_orders_fits_by_time(runs, tmp_path):
    root, d = runs
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    shutil.copyfile(CALIB / "calibration_host.json", old)
    r = subprocess.run(EXE + ["calibrate", "fit", str(d["quick"]), "--dest", "host", "--platform",
                                json.loads(old.read_text())["platform"], "-o", str(new)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    os.utime(old, ns=(1_700_000_000 * 10**9,) * 2)
    os.utime(new, ns=(1_800_000_000 * 10**9,) * 2)
    (tmp_path / "notes.json").write_text('{"not": "a calibration"}')
    got = xstage_trace.open_collection([d["fused"], tmp_path]).calibration_drift()
    assert list(got["file"]) == [str(old), str(new)]
    r_old, r_new = (json.loads(p.read_text())["rate_gbps"] for p in (old, new))
    assert got["rate_drift_pct"].tolist() == pytest.approx([0.0, 100 * (r_new / r_old - 1)])
    assert set(got["measured_from"]) == {"file mtime"}


def test_cli_json_worst_and_sql(runs):
    root, d = runs
    r = subprocess.run(EXE + ["collection", str(root), "--query", "worst", "--limit", "2", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["runs"] == len(d) and len(doc["rows"]) == 2
    tiles = [xstage_trace.open_run(p).tiles() for p in d.values()]
    per_configuration = [t.assign(c=t.apply(_configuration, axis=1)).groupby("c")["backpressured"].sum().max() for t in tiles if len(t)]
    assert doc["rows"][0]["backpressured_tiles"] == max(per_configuration)
    r = subprocess.run(EXE + ["collection", str(root), "--query", "sql", "--sql", "SELECT run, count(*) AS n FROM tiles GROUP BY run", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    n = {row["run"]: row["n"] for row in json.loads(r.stdout)["rows"]}
    assert n == {str(p): len(xstage_trace.open_run(p).tiles()) for p in d.values() if len(xstage_trace.open_run(p).tiles())}


def test_cli_corrupt_parquet_in_a_run_is_one_line_naming_it(runs, tmp_path):
    _, d = runs
    broken = tmp_path / "broken.run"
    shutil.copytree(d["probe_only"], broken)
    (broken / "tiles.parquet").write_bytes(b"not parquet")
    (broken / "table3.parquet").write_bytes(b"not parquet")
    for query, where in (("worst", broken / "tiles.parquet"), ("table3", broken)):  # DuckDB's read of each
        r = subprocess.run(EXE + ["collection", str(d["fused"]), str(broken), "--query", query], capture_output=True, text=True)
        assert r.returncode == 2, (r.stdout, r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and "Traceback" not in r.stderr and str(where) in lines[0], lines


@pytest.mark.parametrize("args, where", [
    (["{missing}"], "{missing}"),
    (["{empty}"], "{empty}"),
    (["{root}", "--query", "sql"], "--sql"),
    (["{root}", "--query", "sql", "--sql", "SELECT nope FROM tiles"], "nope"),
])
def test_cli_bad_input_is_one_line(runs, tmp_path, args, where):
    root, _ = runs
    (tmp_path / "empty").mkdir()
    subs = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty"), "root": str(root)}
    r = subprocess.run(EXE + ["collection", *[a.format(**subs) for a in args]], capture_output=True, text=True)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr and where.format(**subs) in lines[0]

