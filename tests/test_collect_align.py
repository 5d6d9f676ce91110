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


def _exact_max_margin(t, lo, hi):
    """The margin program solved in rational arithmetic by brute force, independent of the module's method:
    every vertex (three constraints c0 + c1·t_i ± m = hi_i / lo_i held with equality), kept when it satisfies
    all constraints; those of largest margin m are the optimal ones. Returns (c0, c1, m) of one of them and the
    distinct slopes c1 of all of them, as Fractions."""
    from fractions import Fraction as F
    from itertools import combinations

    rows = [((F(1), F(float(ti)), F(1)), F(float(h))) for ti, h in zip(t, hi)]  # c0 + c1 t + m ≤ hi
    rows += [((F(-1), F(-float(ti)), F(1)), F(-float(l))) for ti, l in zip(t, lo)]  # −c0 − c1 t + m ≤ −lo

    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))

    vertices = []
    for tri in combinations(rows, 3):
        a = [list(r[0]) for r in tri]
        d = det(a)
        if d == 0:
            continue
        x = []
        for k in range(3):
            m = [row[:] for row in a]
            for j in range(3):
                m[j][k] = tri[j][1]
            x.append(det(m) / d)
        if all(sum(c * v for c, v in zip(r[0], x)) <= r[1] for r in rows):
            vertices.append(x)
    em = max(v[2] for v in vertices)
    best = [v for v in vertices if v[2] == em]
    return (*best[0], sorted({v[1] for v in best}))


def test_the_clock_line_is_the_exact_optimum_of_the_margin_program_to_within_an_ulp():
    """align._max_margin_line (docs/nsys-formats.md §1) against the program solved exactly: random intervals
    around a drifting line (4–6 dumps), and a case where no line fits every interval (negative margin)."""
    from fractions import Fraction as F

    from xstage_trace.collectors.align import _max_margin_line

    rng = np.random.default_rng(7)
    cases = []
    for _ in range(12):
        n = int(rng.integers(4, 7))
        t = np.sort(rng.uniform(0, 5e9, n))
        t -= t[0]
        mid = rng.uniform(-1e5, 1e5) + rng.uniform(-5e-6, 5e-6) * t + rng.normal(0, 2e3, n)
        cases.append((t, mid - rng.uniform(1e3, 3e4, n), mid + rng.uniform(1e3, 3e4, n)))
    t = np.array([0.0, 1e9, 2e9, 3e9])
    cases.append((t, np.array([0.0, 5e3, -5e3, 0.0]), np.array([1e3, 6e3, -4e3, 1e3])))  # a zigzag no line fits
    unique = 0
    for t, lo, hi in cases:
        c0, c1, m = _max_margin_line(t, lo, hi, fit_drift=True)
        e0, e1, em, optimal_slopes = _exact_max_margin(t, lo, hi)
        assert abs(F(m) - em) <= F(np.spacing(abs(float(em)))) + F(1, 10**9)
        assert min(float(np.min(hi - c0 - c1 * t)), float(np.min(c0 + c1 * t - lo))) >= float(em) - 1e-6  # the line holds the margin
        if len(optimal_slopes) == 1:  # one optimal line: it is that line, to within an ulp
            unique += 1
            assert abs(F(c0) - e0) <= F(np.spacing(abs(float(e0)))) + F(1, 10**9)
            assert abs(F(c1) - e1) <= F(2 * np.spacing(abs(float(e1))))
        else:  # one interval binds alone: the middle of the optimal slopes
            mid = (min(optimal_slopes) + max(optimal_slopes)) / 2
            assert abs(F(c1) - mid) <= F(1, 10**12) * max(abs(mid), F(1, 10**9))
    assert unique >= 3
    assert em < 0 and m < 0  # the zigzag: no line fits, the margin says by how much
