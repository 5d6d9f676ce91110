"""Collection of several inputs into one run, clock alignment, and the run dataset on disk."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from xstage_trace.base.errors import InputError

from conftest import CALIB
from xstage_trace.collectors.align import align_dumps
from xstage_trace.collectors.collect import collect
from xstage_trace.base.run_files import read_run
from xstage_trace.dataset.run_folder import write_run
from xstage_trace.base.schema import TABLES


@pytest.fixture(scope="module")
def quick_run():
    rep = CALIB / "quick" / "quick_sweep.nsys-rep"
    return collect([rep, CALIB / "quick"])


def test_every_dump_lands_inside_its_kernel(quick_run):
    a = quick_run.manifest["alignment"]["rank0"]
    assert a["dumps_matched"] == a["dumps_total"] == 22
    assert a["residual_ns"] == 0.0
    lo, hi = a["drift_range_ppm"]  # identified or not, the feasible drift range holds what a real capture allows
    assert -50 < lo <= hi < 50
    k = quick_run.tables["kernels"].to_pandas()
    p = quick_run.tables["probes"].to_pandas()
    burst = k[k["short_name"] == "burst_kernel"]
    # Each dump's records fall inside exactly one burst kernel, whose NVTX range names the same config.
    for dump, g in p.groupby("dump", observed=True):
        lo, hi = g["t_ns"].min(), g["t_ns"].max()
        inside = burst[(burst["start_ns"] <= lo) & (burst["end_ns"] >= hi)]
        assert len(inside) == 1, dump
        label = quick_run.tables["probe_slices"].to_pandas().query("dump == @dump")["label"].iloc[0]
        assert inside["nvtx_range"].iloc[0] == label


def test_alignment_recovers_a_known_offset_and_drift():
    rng = np.random.default_rng(3)
    dur = rng.uniform(1e4, 1e6, 200)  # one stream: kernels back to back with launch gaps
    ks = np.cumsum(dur + rng.uniform(2e3, 5e5, 200)) - dur
    ke = ks + dur
    pick = rng.choice(200, 40, replace=False)
    off, drift = 123_456.0, 5e-6
    a_true = ks[pick] + 0.1 * (ke[pick] - ks[pick])
    b_true = ke[pick] - 0.1 * (ke[pick] - ks[pick])
    # probe clock = kernel clock + offset + drift·t
    a = a_true + off + drift * a_true
    b = b_true + off + drift * b_true
    al = align_dumps(a, b, ks, ke)
    assert al.dumps_matched == 40 and al.residual_ns == 0.0
    assert np.all(al.kernel_of_dump == pick)
    mapped = al.to_kernel_clock(a)
    assert np.all((mapped >= ks[pick]) & (mapped <= ke[pick]))


def test_run_dataset_round_trip_and_duckdb(quick_run, tmp_path):
    run = tmp_path / "run"
    write_run(run, quick_run.tables, quick_run.manifest)
    tables, manifest = read_run(run)
    assert set(tables) == set(TABLES)
    for n in TABLES:
        assert tables[n].num_rows == quick_run.tables[n].num_rows
    assert json.loads((run / "manifest.json").read_text())["tables"]["kernels"] == 26
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{run}/kernels.parquet') WHERE short_name = 'burst_kernel'").fetchone()[0]
    assert n == 24  # plus two clock-rate kernels
    m = con.execute(f"SELECT count(DISTINCT metric) FROM read_parquet('{run}/gpu_metrics.parquet')").fetchone()[0]
    assert m == 22


def test_several_ranks_are_partitioned(quick_run, tmp_path):
    k = quick_run.tables["kernels"]
    k1 = k.set_column(0, "rank", pa.array(np.ones(k.num_rows, np.int32)))
    tables = dict(quick_run.tables, kernels=pa.concat_tables([k, k1]))
    run = tmp_path / "multi"
    write_run(run, tables, quick_run.manifest)
    assert sorted(p.name for p in (run / "kernels").iterdir()) == ["rank=0", "rank=1"]
    back, _ = read_run(run)
    assert back["kernels"].num_rows == 2 * k.num_rows
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{run}/kernels/*/*.parquet', hive_partitioning = true) WHERE rank = 1").fetchone()[0]
    assert n == k.num_rows


def test_failed_write_leaves_no_run_dir(quick_run, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(InputError, match="disk is full"):
        write_run(tmp_path / "never", quick_run.tables, quick_run.manifest)
    assert list(tmp_path.iterdir()) == []


def test_probe_only_run_is_timed_from_its_first_slice_open():
    c = collect([CALIB / "quick" / "host_periodic_K132_B8192_G0.xsp.zst"])
    assert c.manifest["time_base"].startswith("first probe slice")
    t = c.tables["probes"].column("t_ns")
    first_open = pc.min(c.tables["probe_slices"]["open_gt_ns"]).as_py()
    first_rec = pc.min(c.tables["probes"]["t_gt_ns"]).as_py()
    assert pc.min(t).as_py() == float(first_rec - first_open) >= 0.0


def test_reanalysing_a_run_keeps_its_aligned_times(quick_run, tmp_path):
    run = tmp_path / "run"
    write_run(run, quick_run.tables, quick_run.manifest)
    again = collect([run])
    before = quick_run.tables["probes"].column("t_ns").to_numpy()
    after = again.tables["probes"].column("t_ns").to_numpy()
    assert np.array_equal(before, after)  # still on the nsys time base, not re-based to the first probe
