"""docs/model.md §11: the forward prediction (analysis.forward) against hand calculations from the spec, the
path-drain fit (analysis.drain_fit) against synthetic bench data with known parameters, and the calibration
JSON's version-5 objects (round trip, checks, older files)."""

import json
from pathlib import Path

import numpy as np
import pytest

from xstage_trace.analysis.drain_fit import LoadRoundCase, fit_load_rate, fit_ramp, predict_load_rounds
from xstage_trace.analysis.drain_points import completion_rate_gbps
from xstage_trace.analysis.forward import LinkModel, forward_tiles
from xstage_trace.base.errors import InputError
from xstage_trace.analysis.calibration_model import link_model_of_document
from xstage_trace.collectors.calibration_io import check_document, read_document

ROOT = Path(__file__).resolve().parents[1]
R = 50.0  # GB/s = bytes/ns


def test_lockstep_round_waits_for_the_whole_round_hand_calculation():
    # 4 CTAs, 2 tiles each, 1000 bytes per tile, compute 100 ns, R = 50: tile 0s issue their stores together at
    # 100 ns; the link drains them FIFO in 4 x 20 ns, done at 180 ns. The loads of tile 1 (issued at the store issue
    # plus a 5 ns lag, after every store) return when all four are drained: 180 ns, so each waits 180 - 105 = 75 ns;
    # the stores of tile 1 go at 180 + 100 = 280 ns and drain until 360 ns.
    cta, pos = np.repeat(np.arange(4), 2), np.tile(np.arange(2), 4)
    f = forward_tiles(cta, pos, 1000.0, 100.0, LinkModel(R, 0.0), load_lag_ns=5.0)
    assert np.allclose(f.stall_ns[pos == 0], 0.0)
    assert np.allclose(f.stall_ns[pos == 1], 75.0)
    assert np.allclose(f.store_issue_ns[pos == 1], 280.0)
    assert f.kernel_ns == pytest.approx(360.0)
    # FIFO departures of the first round: 120, 140, 160, 180 ns in CTA order (stable on equal issue times)
    assert np.allclose(np.sort(f.drained_ns[pos == 0]), [120.0, 140.0, 160.0, 180.0])


def test_a_load_issued_before_later_stores_waits_only_for_the_earlier_ones():
    # CTA 0 finishes its compute at 100 ns, CTA 1 at 150 ns; 1000-byte tiles at R = 50 (20 ns each). CTA 0's loads
    # (no lag) wait for its own store only: drained at 120, stall 20 ns. CTA 1's store at 150 finds an idle link:
    # drained at 170, its loads wait 20 ns too.
    f = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], 1000.0, [100.0, 10.0, 150.0, 10.0], LinkModel(R, 0.0))
    assert np.allclose(f.stall_ns, [0.0, 20.0, 0.0, 20.0])
    # with λ = 30 ns the 20 ns drains are hidden behind the load latency: no stall
    g = forward_tiles([0, 0, 1, 1], [0, 1, 0, 1], 1000.0, [100.0, 40.0, 150.0, 40.0], LinkModel(R, 0.0, load_latency_ns=30.0))
    assert np.allclose(g.stall_ns, 0.0)


def test_streamed_loads_wait_behind_stores_issued_while_the_tile_computes_hand_calculation():
    # CTA 0: tile 0 computes 100 ns, stores 1000 bytes (drained 100 -> 120 at R = 50); tile 1 has 4 load steps, one
    # stage, 40 ns of compute (10 ns a step). Its step-0 loads wait for its own store: back at 120. Step j >= 1 is
    # loaded when step j - 1 is done: at 130, 140, 150. CTA 1 stores 5000 bytes at 125 (an idle link: drained at
    # 225), so steps 1-3 arrive at 225; the compute ends at max(120 + 40, 225 + 30, 225 + 20, 225 + 10) = 255: a stall
    # of 255 - 100 - 40 = 115 ns, where loading every step up front would have stalled 20 ns.
    args = ([0, 0, 1], [0, 1, 0], [1000.0, 1000.0, 5000.0], [100.0, 40.0, 125.0], LinkModel(R, 0.0))
    f = forward_tiles(*args, steps=[1, 4, 1], stages=1)
    assert f.stall_ns[1] == pytest.approx(115.0)
    assert f.store_issue_ns[1] == pytest.approx(255.0)
    assert forward_tiles(*args).stall_ns[1] == pytest.approx(20.0)


def test_acceptance_is_the_isolated_law_of_the_spec():
    # §3 isolated law, per store: accepted at max(s + T_iss^0, f_own - Q/R). 10 CTAs x 1000 bytes at once, Q = 3000:
    # the k-th store (k = 1..10) drains at 100 + 20k ns, accepted at max(100 + 5, 100 + 20k - 60).
    f = forward_tiles(np.arange(10), np.zeros(10), 1000.0, 100.0, LinkModel(R, 3000.0, issue_floor_ns=5.0))
    k = np.arange(1, 11)
    assert np.allclose(np.sort(f.accept_ns), np.maximum(105.0, 100.0 + 20.0 * k - 60.0))


def test_drifted_ctas_follow_max_of_drain_and_compute():
    # CTAs far apart in phase (compute of CTA c's first tile = c x drain period / K) never wait behind each other:
    # with compute C < V/R the link stays busy, so the kernel time tends to the drain time N·V/R, not N·(V/R + C).
    K, N, B, C = 16, 40, 1000.0, 100.0  # V/R = 16 x 20 = 320 ns per round > C
    cta, pos = np.repeat(np.arange(K), N), np.tile(np.arange(N), K)
    comp = np.where(pos == 0, 20.0 * np.repeat(np.arange(K), N) + C, C)
    f = forward_tiles(cta, pos, B, comp, LinkModel(R, 0.0))
    assert f.kernel_ns == pytest.approx(K * N * B / R, rel=0.03)
    assert f.kernel_ns < 0.8 * N * (K * B / R + C)


def test_two_tiles_at_one_position_are_refused():
    with pytest.raises(ValueError, match="share a position"):
        forward_tiles([0, 0], [1, 1], 1.0, 1.0, LinkModel(R, 0.0))


def test_completion_rate_of_a_steady_stream():
    t = np.arange(1000) * 40.0  # one 2000-byte acceptance every 40 ns: 50 GB/s
    assert completion_rate_gbps(t[::-1], 2000.0) == pytest.approx(50.0)


def test_ramp_fit_recovers_synthetic_rate_and_capacity():
    # synthetic ramp: t_last = (V - Q)/R with 1 % multiplicative noise, R = 52 GB/s, Q = 1.2 MB
    rng = np.random.default_rng(1)
    v = np.repeat(np.array([8.65e6, 13e6, 17.3e6, 26e6, 34.6e6, 51.9e6, 69.2e6]), 12)
    t = (v - 1.2e6) / 52.0 * (1 + 0.01 * rng.standard_normal(len(v)))
    f = fit_ramp(np.concatenate(([1e6], v)), np.concatenate(([10.0], t)))  # the burst below the knee is left out
    assert f.bursts == len(v)
    assert f.rate_gbps == pytest.approx(52.0, rel=0.01)
    assert f.capacity_interval_bytes[0] <= 1.2e6 <= f.capacity_interval_bytes[1]
    assert f.rate_interval_gbps[0] <= f.rate_gbps <= f.rate_interval_gbps[1]


def test_load_rate_fit_recovers_the_synthetic_one():
    # synthetic bench: load rounds predicted by the model itself with load rate 3000 GB/s; the fit must find it
    truth = LinkModel(52.0, 1.0e6, 1500.0, 700.0, 3000.0)
    cases = []
    for x in (0.0, 40000.0, 160000.0):
        c = LoadRoundCase(32, 12, 32768.0, 131072.0, x, 1100.0, 1.0, 1.0)
        k, w = predict_load_rounds(c, truth)
        cases.append(LoadRoundCase(32, 12, 32768.0, 131072.0, x, 1100.0, k, w))
    best, err = fit_load_rate(cases, LinkModel(52.0, 1.0e6, 1500.0, 700.0))
    assert best == 3000.0 and err[3000.0] == pytest.approx(0.0, abs=1e-12)


def _v5_doc() -> dict:
    doc = json.loads((ROOT / "sample_traces/h200_calibration/calibration_host_tensor2d.json").read_text())
    return dict(doc, calibration_version=5,
                drain={"rate_gbps": 52.8, "capacity_bytes": 1.2e6, "rate_source": "test"},
                load_coupling={"load_latency_ns": 1500.0, "load_rate_gbps": 3000.0, "issue_floor_ns": 650.0, "window_ns": 0.0})


def test_version5_round_trip_gives_the_link_model(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(_v5_doc()))
    m = link_model_of_document(read_document(p), p)
    assert m == LinkModel(52.8, 1.2e6, 1500.0, 650.0, 3000.0, 0.0)


def test_older_calibration_files_still_load_without_a_link_model():
    for name in ("calibration_host_tensor2d.json", "calibration_host.json", "calibration_local.json"):
        p = ROOT / "sample_traces/h200_calibration" / name
        doc = read_document(p)
        assert doc["calibration_version"] <= 5
        if doc["calibration_version"] < 5:
            assert link_model_of_document(doc, p) is None


@pytest.mark.parametrize("change, message", [
    (lambda d: d["drain"].update(rate_gbps=0.0), "drain.rate_gbps"),
    (lambda d: d["load_coupling"].update(load_rate_gbps=float("nan")), "load_coupling.load_rate_gbps"),
    (lambda d: d.update(load_coupling=None), "drain without load_coupling"),
    (lambda d: d.update(calibration_version=4), "version 4 has no"),
])
def test_bad_version5_objects_are_refused(change, message):
    doc = _v5_doc()
    change(doc)
    with pytest.raises(InputError, match=message):
        check_document(doc, "c.json")


def _launch_case(seed: int):
    """A random launch: up to 12 CTAs × up to 8 tiles (some missing), bytes (some 0), compute, epilogue, load steps and
    stages; every third launch in lockstep (one compute for all, so many stores share an issue time)."""
    r = np.random.default_rng(seed)
    k, t = int(r.integers(1, 13)), int(r.integers(1, 9))
    cta, pos = np.repeat(np.arange(k), t), np.tile(np.arange(t), k)
    keep = r.random(len(cta)) < 0.85
    cta, pos = cta[keep], pos[keep]
    n = len(cta)
    compute = np.full(n, 100.0) if seed % 3 == 0 else r.uniform(10, 400, n)
    return dict(cta=cta, position=pos, bytes_per_tile=r.uniform(0, 8000, n) * (r.random(n) < 0.9), compute_ns=compute,
                epilogue_ns=r.uniform(0, 50, n) if seed % 3 else np.zeros(n), steps=r.integers(1, 5, n), stages=r.integers(1, 3, n))


@pytest.mark.parametrize("load_issue, lag, window", [("issue", 0.0, 0.0), ("accept", 10.0, 5.0), ("issue", -30.0, 200.0)])
def test_launches_predicted_together_get_the_numbers_each_gets_alone(load_issue, lag, window):
    # docs/model.md §11: launches share nothing, so one call over several (``launch``) must give each launch, bit for bit,
    # what a call over that launch alone gives (its own link, load server, time origin); a 200 ns window exceeds the
    # shortest works, so the pass that resolves a launch's earliest loads with the stores known is taken too
    model = LinkModel(20.0, 4000.0, load_latency_ns=30.0, issue_floor_ns=20.0, load_rate_gbps=100.0, window_ns=window)
    cases = [_launch_case(s) for s in range(9)]
    alone = [forward_tiles(**c, model=model, load_issue=load_issue, load_bytes=500.0, load_lag_ns=lag) for c in cases]
    cat = {key: np.concatenate([c[key] for c in cases]) for key in cases[0]}
    launch = np.concatenate([np.full(len(c["cta"]), 100 - 7 * i) for i, c in enumerate(cases)])  # any integers, any order
    f = forward_tiles(**cat, model=model, load_issue=load_issue, load_bytes=500.0, load_lag_ns=lag, launch=launch)
    at = np.cumsum([0] + [len(c["cta"]) for c in cases])
    for i, one in enumerate(alone):
        part = slice(at[i], at[i + 1])
        for field in ("store_issue_ns", "accept_ns", "drained_ns", "compute_start_ns", "stall_ns"):
            np.testing.assert_array_equal(getattr(f, field)[part], getattr(one, field))
        assert f.kernel_by_launch_ns[len(cases) - 1 - i] == one.kernel_ns  # codes ascending: the last case is the first
    assert f.kernel_ns == max(one.kernel_ns for one in alone)


def test_a_store_inserted_behind_a_draining_one_continues_its_departures_hand_calculation():
    # launch A at R = 50 B/ns: CTA 0 stores 1000 B at 10 ns (drains 10 -> 30); its tile 1 loads 10 ns before that store
    # (lag -10) and computes 10 ns from the store's issue: its 1000 B store goes at 20 ns, behind the draining one, so it
    # drains 30 -> 50 (FIFO). CTA 1's first store, at 1000 ns, was known before it: the new store lands between two
    # known ones, and its departure must continue the queue's sums from the first. Launch B (one tile) makes it a
    # two-launch call; A's numbers are those it gets alone.
    a = dict(cta=[0, 0, 1], position=[0, 1, 0], bytes_per_tile=1000.0, compute_ns=[10.0, 10.0, 1000.0], load_lag_ns=[0.0, -10.0, 0.0])
    model = LinkModel(R, 1e9)
    alone = forward_tiles(**a, model=model)
    assert alone.drained_ns.tolist() == [30.0, 50.0, 1020.0] and alone.store_issue_ns.tolist() == [10.0, 20.0, 1000.0]
    both = forward_tiles(cta=[0, 0, 1, 0], position=[0, 1, 0, 0], bytes_per_tile=1000.0, compute_ns=[10.0, 10.0, 1000.0, 5.0],
                         load_lag_ns=[0.0, -10.0, 0.0, 0.0], model=model, launch=[0, 0, 0, 1])
    np.testing.assert_array_equal(both.drained_ns[:3], alone.drained_ns)
    np.testing.assert_array_equal(both.accept_ns[:3], alone.accept_ns)
    assert both.kernel_by_launch_ns.tolist() == [1020.0, 25.0]
