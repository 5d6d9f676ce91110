"""Paper 004's communication-CTA choice on measured service times (analysis/partition_select.py) and its scoring
against a C sweep (analysis/partition_regret.py), docs/model.md §9, on small hand-made inputs whose answers are
worked out by hand in the comments (docs/mutation.md: written against the mutants test_partition_select.py's hand
tests let through)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.partition import PartitionProblem
from xstage_trace.analysis.partition_regret import fixed_c_speedup, regret_table, speedup_by_fixed_c, time_cube
from xstage_trace.analysis.partition_select import (ServiceTimes, comm_rho, fit_service_times, predicted_completion,
                                                    select_comm_ctas)

# §9's worked case of test_model.py: 4 experts × 256 tokens, N = 2048, L = 2, D = 4, 8 SMs (o_comm = 1, o_comp = 2),
# C = 1 … 4: W_comp = 64, W_comm = 2; P(C) = 2·(8 − C) = 14, 12, 10, 8; V_comp = 5, 6, 7, 8; empty last-wave slots
# Δ = 70 − 64, 72 − 64, 70 − 64, 64 − 64 = 6, 8, 6, 0; A_s = (5, 10), (6, 11), (7, 13), (8, 16); V_comm = 2, 1, 1, 1.
# With ρ = 1 (τ = t_wave) T(C) = max(A_0 + 2q, A_1 + q) = 12, 12, 14, 17 waves.
SMALL = PartitionProblem((256,) * 4, 1024, 2048, 352, 2, 4, num_sms=8, max_comm_ctas=4)

# ---------------------------------------------------------------- service times and ρ(C)


def test_service_times_need_one_value_of_each_per_c():
    ServiceTimes((1.0,), (2.0,))  # one C: fine
    for wave, tau in [((1.0, 2.0), (1.0,)), ((1.0,), (1.0, 2.0)), ((), ())]:
        with pytest.raises(ValueError, match="^t_wave_ns and tau_ns need one value per C = 1 … C_max, the same number of each$"):
            ServiceTimes(wave, tau)


def test_rho_is_tau_over_the_wave_for_the_first_c_max_values():
    s = ServiceTimes((100.0, 200.0, 400.0), (50.0, 300.0, 100.0))
    assert comm_rho(s, 3).tolist() == [0.5, 1.5, 0.25]  # 50/100, 300/200, 100/400
    assert comm_rho(s, 2).tolist() == [0.5, 1.5]
    with pytest.raises(ValueError, match="^service times cover C ≤ 3, not 4$"):
        comm_rho(s, 4)


def test_predicted_completion_is_the_wave_count_times_each_cs_wave():
    # ρ = 1: T = 12, 12, 14, 17 waves of t_wave = 3000, 3000, 1700, 1400 ns → 36000, 36000, 23800, 23800 ns
    tw = (3000.0, 3000.0, 1700.0, 1400.0)
    cols = predicted_completion(SMALL, ServiceTimes(tw, tw))
    assert cols["wave_ns"].tolist() == list(tw)
    assert cols["completion_ns"].tolist() == [36000.0, 36000.0, 23800.0, 23800.0]


def test_a_tie_in_ns_goes_to_the_fewest_empty_slots_even_at_a_larger_c():
    # the case above: C = 3 (Δ = 6) and C = 4 (Δ = 0) tie at 23800 ns → C = 4
    tw = (3000.0, 3000.0, 1700.0, 1400.0)
    assert select_comm_ctas(SMALL, ServiceTimes(tw, tw)) == 4
    # C = 4 slower by 3e-7 ns (within the 1e-6 ns of a tie): still C = 4; slower by 3e-6 ns: C = 3
    for extra_ns, want in ((3e-7, 4), (3e-6, 3)):
        slow = (3000.0, 3000.0, 1700.0, 1400.0 + extra_ns / 17)
        assert select_comm_ctas(SMALL, ServiceTimes(slow, slow)) == want


def test_a_tie_in_ns_and_empty_slots_goes_to_the_smaller_c():
    # ρ = 1, t_wave = 1400, 2000, 1200, 2000: T = 16800, 24000, 16800, 34000 ns; C = 1 and C = 3 both have Δ = 6 → C = 1
    tw = (1400.0, 2000.0, 1200.0, 2000.0)
    assert select_comm_ctas(SMALL, ServiceTimes(tw, tw)) == 1


def test_fit_service_times_averages_unordered_launches_per_c():
    # launches at C = 2, 1, 2, 3, 2 (floats, as a CSV may hold them): C = 2's waves (10, 20, 60) → 30 ns, τ (1, 2, 6) → 3
    s = fit_service_times(np.array([2.0, 1.0, 2.0, 3.0, 2.0]), [10.0, 5.0, 20.0, 7.0, 60.0], [1.0, 4.0, 2.0, 9.0, 6.0])
    assert s.t_wave_ns == (5.0, 30.0, 7.0) and s.tau_ns == (4.0, 3.0, 9.0)
    s = fit_service_times(pd.Series([1]), pd.Series([8]), pd.Series([3]))  # one C; integer spans average as floats
    assert s.t_wave_ns == (8.0,) and s.tau_ns == (3.0,)


@pytest.mark.parametrize("c", [[], [2, 3], [1, 3, 3]])
def test_fit_service_times_refuses_a_missing_c(c):
    with pytest.raises(ValueError, match="^fit_service_times needs a probed launch at every C = 1 … C_max$"):
        fit_service_times(c, [1.0] * len(c), [1.0] * len(c))


# ---------------------------------------------------------------- the C sweep's scoring


def _times(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["workload", "comm_ctas", "trial", "kernel_ms"])


def test_time_cube_places_each_trial_and_leaves_missing_ones_nan():
    # workloads given b before a, trials labelled 7 and 3, C = 3 past max_comm_ctas = 2 dropped, (a, C = 2, trial 7)
    # missing: names (a, b), trials sorted (3, 7)
    t = _times([("b", 1, 7, 1.0), ("b", 2, 3, 2.0), ("a", 1, 3, 3.0), ("a", 1, 7, 4.0), ("a", 2, 3, 5.0),
                ("b", 2, 7, 6.0), ("b", 1, 3, 7.0), ("a", 3, 3, 0.1)])
    names, cs, cube = time_cube(t, max_comm_ctas=2)
    assert names == ["a", "b"] and cs.tolist() == [1, 2]
    np.testing.assert_array_equal(cube, [[[3.0, 4.0], [5.0, np.nan]], [[7.0, 1.0], [2.0, 6.0]]])


def test_time_cube_defaults_to_c_up_to_16():
    # C = 16 kept, C = 17 dropped: C = 1 … 16, a's C = 1 … 15 NaN
    names, cs, cube = time_cube(_times([("a", 16, 0, 2.0), ("a", 17, 0, 1.0)]))
    assert cs.tolist() == list(range(1, 17))
    assert np.isnan(cube[0, :15, 0]).all() and cube[0, 15, 0] == 2.0


def _sweep(med: dict[str, list[list[float]]]) -> pd.DataFrame:
    """{workload: [[trial times] per C = 1, 2, …]}."""
    return _times([(w, c + 1, k, v) for w, per_c in med.items() for c, vs in enumerate(per_c) for k, v in enumerate(vs)])


def test_regret_table_by_hand_on_medians_within_the_legal_domain():
    # a: C = 1 … 17 all 9 ms but C = 2 (trials 2, 2, 14: median 2 where the mean is 6) and C = 17 (0.5 ms, past the
    # legal 16): oracle C = 2 at 2 ms; selected C = 5 (9 ms): regret (9 − 2)/2 = 350 %.
    # b: C = 3 fastest (trials 2, 2, nan: median 2), selected C = 3: regret 0.
    a = [[9.0] * 3 for _ in range(17)]
    a[1], a[16] = [2.0, 2.0, 14.0], [0.5] * 3
    b = [[4.0] * 3 for _ in range(16)]
    b[2] = [2.0, 2.0, np.nan]
    r = regret_table(_sweep({"a": a, "b": b}), {"a": 5, "b": 3})
    want = pd.DataFrame({"workload": ["a", "b"], "c_oracle": [2, 3], "t_oracle_ms": [2.0, 2.0], "c_selected": [5, 3],
                         "t_selected_ms": [9.0, 2.0], "regret_pct": [350.0, 0.0]})
    pd.testing.assert_frame_equal(r, want, check_dtype=False)
    # within C ≤ 1 (a's C = 2 out of the domain) a's oracle is C = 1 at 9 ms, selected C = 1: regret 0
    r1 = regret_table(_sweep({"a": a, "b": b}), {"a": 1, "b": 1}, max_comm_ctas=1)
    assert r1["c_oracle"].tolist() == [1, 1] and r1["regret_pct"].tolist() == [0.0, 0.0]


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_speedup_over_each_fixed_c_by_hand():
    # a: (2, 4, 6) ms, b: (6, 4, 2) ms; the selection takes each one's best (2 ms): over C = 1 the geomean of 2/2 and
    # 6/2 = √3, over C = 2 √(2·2) = 2, over C = 3 √3. a's C = 1 has trials (2, 2, 20): median 2.
    t = _sweep({"a": [[2.0, 2.0, 20.0], [4.0] * 3, [6.0] * 3], "b": [[6.0] * 3, [4.0] * 3, [2.0] * 3]})
    got = speedup_by_fixed_c(t, {"a": 1, "b": 3}, max_comm_ctas=3)
    assert list(got) == [1, 2, 3]
    assert got == pytest.approx({1: math.sqrt(3), 2: 2.0, 3: math.sqrt(3)}, rel=1e-12)
    # the default domain C = 1 … 16: C = 4 … 16 have no time (NaN)
    wide = speedup_by_fixed_c(t, {"a": 1, "b": 3})
    assert list(wide) == list(range(1, 17)) and all(math.isnan(wide[c]) for c in range(4, 17))


def test_fixed_c_speedup_reports_its_settings_and_the_best_fixed_c_by_hand():
    # three workloads over C = 1, 2: a (3, 12), b (12, 3), c (3, 6) ms (one trial each); the selection takes each best
    # (3 ms), so a speedup is the geomean of times / 3 at the best fixed C. Fixed C = 1: geomean(1, 4, 1) = 4^(1/3);
    # C = 2: geomean(4, 1, 2) = 2 → best fixed C = 1, speedup 4^(1/3) = 1.587. A replicate (three workloads drawn,
    # 27 draws): from a and c only (8) or b only (1): speedup 1; b, b, c (3): min(16, 2)^(1/3) = 1.26; every other
    # (15): 4^(1/3). With 1/3 of the mass at 1 and 15/27 at 4^(1/3), the 25th and 75th percentiles are 1 and 4^(1/3);
    # the 40th and 60th (level 0.2) fall on 1.26 (cumulative 1/3 … 4/9) and 4^(1/3).
    t = _sweep({"a": [[3.0], [12.0]], "b": [[12.0], [3.0]], "c": [[3.0], [6.0]]})
    s = fixed_c_speedup(t, {"a": 1, "b": 2, "c": 1}, max_comm_ctas=2, n_boot=600, seed=3, level=0.5)
    assert s["best_fixed_c"] == 1 and s["speedup_geomean"] == pytest.approx(4 ** (1 / 3), rel=1e-12)
    assert (s["level"], s["n_boot"], s["seed"]) == (0.5, 600, 3)
    assert s["ci_low"] == pytest.approx(1.0, rel=1e-12) and s["ci_high"] == pytest.approx(4 ** (1 / 3), rel=1e-12)
    n = fixed_c_speedup(t, {"a": 1, "b": 2, "c": 1}, max_comm_ctas=2, n_boot=2000, level=0.2)
    assert n["ci_low"] == pytest.approx(2 ** (1 / 3), rel=1e-12) and n["ci_high"] == pytest.approx(4 ** (1 / 3), rel=1e-12)


def test_fixed_c_speedup_defaults_to_c_up_to_16_2000_replicates_seed_0_and_95_percent():
    # one workload at C = 1 … 17, every C 4 ms but the selected C = 16 (2 ms) and C = 17 (1 ms, outside the default
    # domain): best fixed C = 16, speedup 1 (with C = 17 it would be 17 and 0.5)
    t = _sweep({"a": [[4.0, 4.0]] * 15 + [[2.0, 2.0], [1.0, 1.0]]})
    d = fixed_c_speedup(t, {"a": 16})
    assert (d["level"], d["n_boot"], d["seed"]) == (0.95, 2000, 0)
    assert (d["best_fixed_c"], d["speedup_geomean"], d["ci_low"], d["ci_high"]) == (16, 1.0, 1.0, 1.0)


def test_fixed_c_speedup_with_fewer_replicates_than_a_chunk_or_one():
    # one workload, C = 1 selected at 1 ms, C = 2 at 2 ms: every replicate gives speedup 1
    t = _sweep({"a": [[1.0, 1.0], [2.0, 2.0]]})
    for n_boot in (1, 100):
        s = fixed_c_speedup(t, {"a": 1}, max_comm_ctas=2, n_boot=n_boot)
        assert (s["ci_low"], s["ci_high"], s["n_boot"]) == (1.0, 1.0, n_boot)


def test_one_seed_gives_one_interval():
    # six workloads over C = 1, 2, three trials each, times spread enough that the interval depends on the draws
    rows = {f"w{i}": [[1.0 + 0.1 * i, 1.2, 0.9 + 0.05 * i], [1.1, 0.8 + 0.1 * i, 1.3 - 0.04 * i]] for i in range(6)}
    sel = {f"w{i}": 1 + i % 2 for i in range(6)}
    a = fixed_c_speedup(_sweep(rows), sel, max_comm_ctas=2, n_boot=300, seed=7)
    assert a == fixed_c_speedup(_sweep(rows), sel, max_comm_ctas=2, n_boot=300, seed=7)


def test_fixed_c_speedup_resamples_the_trials_by_hand():
    # one workload, selected C = 1; trials (interleaved over C) at C = 1: 1, 1, 1 ms, at C = 2: 0.5, 3, 3 ms. The
    # medians pick C = 1 (C = 2's median is 3): speedup 1. A replicate draws three trials: with trial 0 at least twice
    # (probability 7/27 = 26 %) C = 2's median is 0.5, the best fixed C is 2 and the speedup 0.5; else 1. The 95 %
    # interval is therefore [0.5, 1].
    t = _sweep({"a": [[1.0, 1.0, 1.0], [0.5, 3.0, 3.0]]})
    s = fixed_c_speedup(t, {"a": 1}, max_comm_ctas=2, n_boot=400)
    assert (s["best_fixed_c"], s["speedup_geomean"]) == (1, 1.0)
    assert (s["ci_low"], s["ci_high"]) == (0.5, 1.0)


def test_a_c_not_measured_for_every_workload_is_not_the_best_fixed_c():
    # C = 3 measured for a only (1 ms), C = 1 for both (a 4, b 4 ms), C = 2 for both (a 8, b 2 ms); selection a → 3,
    # b → 2. Only C = 1 and 2 are candidates: geomeans 4 and 4 (tie: the first, C = 1). Speedup: geomean(4/1, 4/2)
    # = 8^(1/2) = 2.828 (before the fix argmin took C = 3, whose geomean is NaN, and the speedup was NaN).
    t = _sweep({"a": [[4.0], [8.0], [1.0]], "b": [[4.0], [2.0], [np.nan]]})
    s = fixed_c_speedup(t.dropna(), {"a": 3, "b": 2}, max_comm_ctas=3, n_boot=10)
    assert s["best_fixed_c"] == 1 and s["speedup_geomean"] == pytest.approx(8 ** 0.5, rel=1e-12)
