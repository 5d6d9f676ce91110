"""The column kernels (analysis/selection.py, columnar.py, spans.py, platform.py) on small hand-made inputs
whose answers are worked out by hand or are numpy's and pandas' own on the same values: edge sizes
(0, 1, 2 values, the last rank), the dtypes the docstrings promise, mixed-radix overflow, and the
platform model's interpolation (docs/mutation.md: written against the kernels group's survivors)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.columnar import as_text, cumcount, run_ids, sort_codes, text_codes, text_of_codes
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.selection import (float_keys, key_floats, linear_quantile_of, median_of, median_ranks, numpy_percentile_of,
                                             order_statistics, quantile_ranks)
from xstage_trace.analysis.spans import join_rows, key_codes, pair_spans

# ---------------------------------------------------------------- selection.py


def test_median_and_quantile_ranks_at_small_sizes():
    assert [median_ranks(n) for n in range(4)] == [[], [0], [0, 1], [1]]
    assert median_ranks(5) == [2]
    # ⌊(n − 1)·q⌋ and the next one while there is one
    assert quantile_ranks(0, 0.5) == [] and quantile_ranks(1, 0.5) == [0]
    assert quantile_ranks(3, 0.75) == [1, 2] and quantile_ranks(3, 1.0) == [2]


def test_median_and_quantile_of_one_value_and_of_none():
    assert median_of({0: 3.5}, 1) == 3.5 and math.isnan(median_of({}, 0))
    assert linear_quantile_of({0: 3.5}, 1, 0.9) == 3.5 and math.isnan(linear_quantile_of({}, 0, 0.9))


def test_quantiles_at_the_last_rank_and_just_below_it():
    x = np.array([1.0, 2.0, 4.0])
    stats = dict(enumerate(x))
    # q = 1: the largest value; q = 0.75: 2 + 0.5·(4 − 2) = 3
    assert linear_quantile_of({2: 4.0}, 3, 1.0) == 4.0 == pd.Series(x).quantile(1.0)
    assert linear_quantile_of(stats, 3, 0.75) == 3.0 == pd.Series(x).quantile(0.75)
    assert numpy_percentile_of({2: 4.0}, 3, 1.0) == 4.0 == np.percentile(x, 100)


def test_numpy_percentile_at_an_exact_half_interpolates_from_the_upper_value():
    # virtual index (3 − 1)·0.25 = 0.5: numpy takes b − (b − a)·0.5, which differs from a + (b − a)·0.5 in the last bit here
    a, b = -0.1321048632913019, 0.1257302210933933
    x = np.array([a, b, b + 1.0])
    assert (b - (b - a) * 0.5) != (a + (b - a) * 0.5)
    assert numpy_percentile_of({0: a, 1: b}, 3, 0.25) == np.percentile(x, 25)


def _chunks(*parts):
    return lambda: iter(parts)


def test_order_statistics_count_every_sample_of_a_chunk_after_one_goes_over_the_cap():
    # cap 2: "a" goes over in the first chunk, "b" (after it in the same chunk) and "c" must still be counted and held
    # (and in the next chunk, where "a" is already over, "b" after it too)
    chunks = _chunks({"a": np.array([3.0, 1.0, 2.0]), "b": np.array([5.0]), "c": np.array([7.0, 8.0])},
                     {"a": np.array([0.0, 4.0]), "b": np.array([6.0])})
    n, whole, found = order_statistics(chunks, lambda name, m: median_ranks(m), 2)
    assert n == {"a": 5, "b": 2, "c": 2}
    assert set(whole) == {"b", "c"} and whole["b"].tolist() == [5.0, 6.0] and whole["c"].tolist() == [7.0, 8.0]
    assert found["a"] == {2: 2.0}


def test_order_statistics_of_integer_chunks_over_the_cap_narrow_on_their_float_values():
    n, whole, found = order_statistics(_chunks({"x": np.array([5, -3, 9])}, {"x": np.array([0, 2])}),
                                       lambda name, m: median_ranks(m), 2)
    assert found["x"] == {2: 2.0}  # sorted: −3, 0, 2, 5, 9
    x = np.array([-2.5, -1.0, -0.0])
    assert key_floats(float_keys(x).tolist()).tolist() == x.tolist()  # keys as Python ints (all below 2^63 here)


def test_narrowing_collects_a_rank_only_once_its_range_holds_at_most_cap_keys():
    # 0.0 and the two smallest denormals have keys 2^63, 2^63 + 1, 2^63 + 2: with cap 2 they share a bin of
    # every pass (2^48, 2^32, 2^16 keys wide) until the last one splits them one key per bin, so the chunks are read
    # 1 + 64/16 = 5 times and the median (rank 2) is the key 2^63 + 2; with cap 3 the 3 keys of the first pass's bin
    # are collected in the second: 3 reads
    x = np.array([0.0, 5e-324, 1e-323, 1.0, 2.0])
    for cap, reads in ((2, 5), (3, 3)):
        calls = []

        def chunks():
            calls.append(1)
            return iter([{"x": x[:2]}, {"x": x[2:]}])

        assert order_statistics(chunks, lambda name, m: median_ranks(m), cap)[2] == {"x": {2: 1e-323}}
        assert len(calls) == reads


def test_order_statistics_hold_a_sample_of_exactly_the_cap_whole_as_float64():
    n, whole, found = order_statistics(_chunks({"x": np.array([4, 1])}, {"x": np.array([9])}), lambda name, m: [0, m - 1], 3)
    assert n == {"x": 3} and whole["x"].tolist() == [4.0, 1.0, 9.0] and whole["x"].dtype == np.float64
    assert found["x"] == {0: 1.0, 2: 9.0}  # the ranks asked of a held sample, from its whole values


def test_order_statistics_ask_each_sample_for_its_own_ranks():
    # ranks by name: the minimum of "lo", the maximum of "hi", none of "none"; "hi" and ("t", 1) are over the cap (2)
    def ranks(name, m):
        return {"lo": [0], "hi": [m - 1], ("t", 1): [1]}.get(name, [])

    chunks = _chunks({"lo": np.array([6.0, 5.0]), "hi": np.array([1.0, 9.0, 3.0]), "none": np.array([2.0]),
                      ("t", 1): np.array([8.0, 6.0, 7.0])})
    n, whole, found = order_statistics(chunks, ranks, 2)
    assert found == {"lo": {0: 5.0}, "none": {}, "hi": {2: 9.0}, ("t", 1): {1: 7.0}}


# ---------------------------------------------------------------- columnar.py


def test_text_of_codes_builds_the_text_column():
    got = text_of_codes(np.array([2, 0, 0, 1]), ["mma", "epi", "ctl"])
    pd.testing.assert_extension_array_equal(got, pd.array(["ctl", "mma", "mma", "epi"], dtype="str"))


def test_sort_codes_are_int64_for_integers_categories_and_text():
    for col in (pd.Series([3, -1, 2], dtype=np.int32), pd.Series(pd.Categorical(["b", "a"], categories=["b", "a"])),
                pd.Series(["b", "a", "c"], dtype=object)):
        assert sort_codes(col).dtype == np.int64


def test_sort_codes_put_missing_text_last_as_sort_values_does():
    col = pd.Series(["b", None, "a", "c"], dtype=object)
    assert np.argsort(sort_codes(col), kind="stable").tolist() == col.sort_values(kind="stable").index.tolist() == [2, 0, 3, 1]


def test_text_codes_of_a_categorical_and_of_numbers():
    codes, names = text_codes(pd.Series(pd.Categorical(["b", None, "a"], categories=["a", "b"])))
    assert codes.tolist() == [1, -1, 0] and codes.dtype == np.int64 and names == ["a", "b"]
    codes, names = text_codes(pd.Series([7, 3, 7]))
    assert codes.tolist() == [0, 1, 0] and codes.dtype == np.int64 and names == ["7", "3"]


def test_as_text_keeps_the_name_and_index():
    got = as_text(pd.Series(pd.Categorical(["b", "a"]), index=[4, 2], name="role"))
    assert got.name == "role" and got.index.tolist() == [4, 2] and got.tolist() == ["b", "a"]


def test_run_ids_of_no_keys_and_cumcount_of_zero_and_one_row():
    assert len(run_ids()) == 0
    empty = cumcount(np.zeros(0, np.int64))
    assert len(empty) == 0 and empty.dtype == np.int64
    assert cumcount(np.array([5])).tolist() == [0]


# ---------------------------------------------------------------- spans.py


def _same_code_as_groups(frame: pd.DataFrame, keys: list[str]) -> None:
    code = key_codes(frame, keys)
    assert code.dtype == np.int64
    groups = frame.groupby(keys, dropna=False, sort=False, observed=True).ngroup().to_numpy()
    np.testing.assert_array_equal(code[:, None] == code[None, :], groups[:, None] == groups[None, :])


def test_key_codes_are_int64_for_every_kind_of_column():
    frame = pd.DataFrame({"i": np.array([1, 2, 1], np.int16), "c": pd.Categorical(["x", "y", "x"]),
                          "t": pd.Series(["a", "a", "b"], dtype=object), "f": [0.5, 0.5, 1.5]})
    for keys in (["i"], ["c"], ["t"], ["f"], ["i", "c", "t", "f"]):
        _same_code_as_groups(frame, keys)


def test_key_codes_renumber_before_a_product_of_radices_would_wrap():
    # radices 2^10, 2^20, 2^41 (each column's min is 0, its max radix − 1): 2^10·2^20 < 2^62, so the third column
    # must renumber first; without it row (8, 0, 0) would code as 8·2^61 = 2^64 ≡ 0 (mod 2^64), row (0, 0, 0)'s code
    frame = pd.DataFrame({"a": [0, 8, 1023], "b": [0, 0, 2**20 - 1], "c": [0, 0, 2**41 - 1]}, dtype=np.int64)
    _same_code_as_groups(frame, ["a", "b", "c"])
    # two columns whose product of radices is 5·(2^62 + 1): (4, 0) and (0, 4) would both code as 4 (mod 2^64)
    frame = pd.DataFrame({"a": [4, 0, 0, 0], "b": [0, 4, 0, 2**62]}, dtype=np.int64)
    _same_code_as_groups(frame, ["a", "b"])


def test_join_rows_is_an_inner_join_by_default_with_intp_indices():
    li, ri = join_rows(np.array([1, 2, 1]), np.array([1, 3, 1]))
    assert li.tolist() == [0, 0, 2, 2] and ri.tolist() == [0, 2, 0, 2] and ri.dtype == np.intp
    li, ri = join_rows(np.array([1, 2]), np.array([1]), "left")
    assert li.tolist() == [0, 1] and ri.tolist() == [0, -1] and ri.dtype == np.intp
    with pytest.raises(ValueError, match="how must be 'inner' or 'left', not 'outer'"):
        join_rows(np.array([1]), np.array([1]), "outer")


def _probes(event_dtype=object) -> pd.DataFrame:
    rows = [("store", "begin", 0, 0, 100, 1100, 0), ("store", "end", 0, 0, 150, 1150, 64),
            ("mma", "begin", 0, 0, 50, 1050, 0), ("mma", "end", 0, 0, 90, 1090, 1),
            ("store", "begin", 1, 0, 120, 1120, 0), ("store", "end", 1, 0, 200, 1200, 32),
            ("store", "begin", 1, 1, 300, 1300, 0),  # no end: dropped
            ("store", "end", 2, 0, 400, 1400, 8)]   # no begin: dropped
    p = pd.DataFrame(rows, columns=["event", "kind", "cta", "tile", "t_ns", "t2_ns", "payload"])
    p["event"] = p["event"].astype(event_dtype)
    return p


@pytest.mark.parametrize("event_dtype", [object, "category"])
def test_pair_spans_by_hand(event_dtype):
    s = pair_spans(_probes(event_dtype), ["store"], ["cta", "tile"])
    assert s.to_dict("list") == {"cta": [0, 1], "tile": [0, 0], "start": [100, 120], "end": [150, 200],
                                 "payload": [64, 32], "duration": [50, 80]}
    # two events, matched on the event too, in the begin records' order; another time column
    s = pair_spans(_probes(event_dtype), ("store", "mma"), ["event", "cta", "tile"], time_col="t2_ns")
    assert s[["cta", "start", "end", "payload", "duration"]].values.tolist() == [
        [0, 1100, 1150, 64, 50], [0, 1050, 1090, 1, 40], [1, 1120, 1200, 32, 80]]
    assert s["event"].astype(str).tolist() == ["store", "mma", "store"]


def test_pair_spans_without_begins_or_without_ends_is_empty():
    p = _probes()
    for rows in (p[p["kind"] == "begin"], p[p["kind"] == "end"]):
        s = pair_spans(rows, ["store"], ["cta", "tile"])
        assert len(s) == 0 and list(s.columns) == ["cta", "tile", "start", "end", "payload", "duration"]


# ---------------------------------------------------------------- platform.py

# issue floors at K = 1 (B = 1000, 4000, 16000 bytes) and K = 4 (B = 1000, 4000), given out of order
FLOORS = {(4, 4000): 500.0, (1, 1000): 100.0, (1, 16000): 700.0, (4, 1000): 200.0, (1, 4000): 300.0}


def test_capacity_at_the_largest_k_and_at_the_nearest_k():
    m = PlatformModel(1.0, FLOORS, {4: 400.0, 1: 100.0, 2: 200.0})
    assert m.capacity_bytes == 400.0
    # nearest calibrated K: 1 → Q(1), 2.2 → Q(2), 3.6 → Q(4), 10 → Q(4)
    assert m.capacity([1, 2.2, 3.6, 10]).tolist() == [100.0, 200.0, 400.0, 400.0]
    assert m.capacity(1).tolist() == [100.0]
    for none in (None, {}):
        m = PlatformModel(1.0, FLOORS, none)
        assert m.capacity_bytes is None and m.capacity([1]) is None


def test_floor_is_log_linear_in_b_between_points_and_proportional_outside():
    m = PlatformModel(1.0, FLOORS)
    # K = 1: B = 2000 is halfway in log between 1000 and 4000: 100 + ½·(300 − 100) = 200; B = 8000 between 4000 and
    # 16000: 300 + ½·(700 − 300) = 500; B = 500: 100·500/1000 = 50; B = 32000: 700·32000/16000 = 1400; the points themselves
    got = m.floor_ns(1, [2000.0, 8000.0, 500.0, 32000.0, 1000.0, 4000.0, 16000.0])
    np.testing.assert_allclose(got, [200.0, 500.0, 50.0, 1400.0, 100.0, 300.0, 700.0], rtol=1e-12)
    # K = 3 → nearest calibrated K = 4: 200 + ½·(500 − 200) = 350; K = 1.4 → K = 1
    np.testing.assert_allclose(m.floor_ns([3, 4, 1.4], [2000.0, 1000.0, 2000.0]), [350.0, 200.0, 200.0], rtol=1e-12)


def test_floor_of_queries_that_reach_only_the_larger_k():
    m = PlatformModel(1.0, FLOORS)
    np.testing.assert_allclose(m.floor_ns([4, 4], [1000.0, 8000.0]), [200.0, 1000.0], rtol=1e-12)
    assert m.floor_ns(np.array([[4, 1], [1, 4]]), 1000.0).tolist() == [[200.0, 100.0], [100.0, 200.0]]


def test_floor_at_the_calibrated_end_points_is_the_calibrated_value_exactly():
    # t·B/B is not t in floating point for these two (the proportional rule outside the range must not apply at its ends)
    lo, hi = 237.3639424086752, 351.9959036792751
    assert lo * 1536.0 / 1536.0 != lo and hi * 24576.0 / 24576.0 != hi
    m = PlatformModel(1.0, {(2, 1536): lo, (2, 24576): hi})
    assert m.floor_ns(2, [1536.0, 24576.0]).tolist() == [lo, hi]


def test_floor_without_points_is_refused():
    with pytest.raises(ValueError, match="^platform model has no issue floor points$"):
        PlatformModel(1.0).floor_ns(1, 1000.0)
