"""The numpy group-by and join kernels (analysis/columnar.py, analysis/spans.py) against pandas itself,
the reference they claim to reproduce: random inputs over many seeds, plus empty inputs, ties and nulls."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.columnar import (as_text, cumcount, group_cumsum, group_median, group_nunique, lexsort_presorted, run_ids, shift_back,
                                             sort_codes, value_mask)
from xstage_trace.analysis.spans import join_rows, key_codes, take_matched

SEEDS = range(12)


def _key_frame(rng: np.random.Generator, n: int, nulls: bool) -> pd.DataFrame:
    """Rows with few distinct keys (many ties) of every kind the analyses join on: int, categorical, text, float."""
    cats = pd.Categorical(rng.choice(["mma", "epi", "ctl"], n), categories=["mma", "epi", "ctl", "unused"])
    text = rng.choice(np.array(["a.xsp", "b.xsp", "c"], dtype=object), n)
    flt = rng.choice([0.5, 1.5, 2.5], n)
    if nulls and n:
        hole = rng.random(n) < 0.2
        cats[hole] = np.nan
        text = np.where(rng.random(n) < 0.2, None, text)
        flt = np.where(hole, np.nan, flt)
    return pd.DataFrame({"rank": rng.integers(0, 3, n).astype(np.int32), "cta": rng.integers(-2, 4, n), "role": cats,
                         "dump": pd.Series(text, dtype=object), "x": flt})


def _merge_rows(left: pd.DataFrame, right: pd.DataFrame, keys: list[str], how: str) -> tuple[np.ndarray, np.ndarray]:
    m = pd.merge(left[keys].assign(_li=np.arange(len(left))), right[keys].assign(_ri=np.arange(len(right))), on=keys, how=how, sort=False)
    return m["_li"].to_numpy(), m["_ri"].fillna(-1).to_numpy().astype(np.int64)


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_join_rows_gives_the_rows_and_order_of_pandas_merge(seed, nulls, how):
    rng = np.random.default_rng(seed)
    n_left, n_right = rng.integers(0, 60, 2)
    left, right = _key_frame(rng, int(n_left), nulls), _key_frame(rng, int(n_right), nulls)
    keys = list(rng.choice(["rank", "cta", "role", "dump", "x"], int(rng.integers(1, 5)), replace=False))
    code = key_codes(pd.concat([left, right], ignore_index=True), keys)
    li, ri = join_rows(code[: len(left)], code[len(left):], how=how)
    want_li, want_ri = _merge_rows(left, right, keys, how)
    np.testing.assert_array_equal(li, want_li)
    np.testing.assert_array_equal(ri, want_ri)


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("seed", SEEDS)
def test_join_rows_where_each_left_row_matches_at_most_once_gives_the_rows_of_pandas_merge(seed, how):
    # a tile's spans: the right keys distinct (a permutation), the left ones drawn with misses and repeats
    rng = np.random.default_rng(200 + seed)
    right = pd.DataFrame({"k": rng.permutation(int(rng.integers(1, 40))) * 3})
    left = pd.DataFrame({"k": rng.integers(-3, 3 * len(right) + 3, int(rng.integers(0, 40)))})
    li, ri = join_rows(left["k"].to_numpy(np.int64), right["k"].to_numpy(np.int64), how=how)
    want_li, want_ri = _merge_rows(left, right, ["k"], how)
    np.testing.assert_array_equal(li, want_li)
    np.testing.assert_array_equal(ri, want_ri)


def test_join_rows_of_empty_sides():
    empty, some = np.zeros(0, np.int64), np.array([3, 1, 3], np.int64)
    for a, b, how in ((empty, some, "inner"), (some, empty, "inner"), (empty, empty, "left")):
        li, ri = join_rows(a, b, how)
        assert len(li) == len(ri) == 0
    li, ri = join_rows(some, empty, "left")  # every left row once, unmatched
    np.testing.assert_array_equal(li, [0, 1, 2])
    np.testing.assert_array_equal(ri, [-1, -1, -1])
    np.testing.assert_array_equal(take_matched(np.zeros(0), ri, 7.0), [7.0, 7.0, 7.0])
    with pytest.raises(ValueError):
        join_rows(some, some, "outer")


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_key_codes_are_equal_exactly_where_the_keys_are(seed, nulls):
    rng = np.random.default_rng(100 + seed)
    frame = _key_frame(rng, int(rng.integers(0, 80)), nulls)
    keys = ["rank", "cta", "role", "dump", "x"]
    code = key_codes(frame, keys)
    groups = frame.groupby(keys, dropna=False, sort=False, observed=True).ngroup().to_numpy()  # pandas: NaN keys equal each other
    same_code = code[:, None] == code[None, :]
    same_group = groups[:, None] == groups[None, :]
    np.testing.assert_array_equal(same_code, same_group)


def test_key_codes_stay_exact_when_the_mixed_radix_would_overflow():
    rng = np.random.default_rng(7)
    n = 500
    big = pd.DataFrame({k: rng.choice([0, 1 << 40, (1 << 40) + 1], n).astype(np.int64) for k in "abcd"})  # radix 2^40 each
    code = key_codes(big, list("abcd"))
    groups = big.groupby(list("abcd"), sort=False).ngroup().to_numpy()
    np.testing.assert_array_equal(code[:, None] == code[None, :], groups[:, None] == groups[None, :])


def _sorted_groups(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.sort(rng.integers(0, max(1, n // 4), n))


@pytest.mark.parametrize("seed", SEEDS)
def test_run_ids_and_cumcount_match_pandas_groupby(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(0, 100))
    a = _sorted_groups(rng, n)
    b = np.zeros(n, np.int64)
    if n:
        for g in np.unique(a):  # a second key, sorted within the first
            b[a == g] = np.sort(rng.integers(0, 3, int((a == g).sum())))
    ids = run_ids(a, b)
    frame = pd.DataFrame({"a": a, "b": b})
    np.testing.assert_array_equal(ids, frame.groupby(["a", "b"], sort=True).ngroup().to_numpy())
    np.testing.assert_array_equal(cumcount(ids), frame.groupby(["a", "b"]).cumcount().to_numpy())


@pytest.mark.parametrize("seed", SEEDS)
def test_shift_and_cumsum_match_pandas_groupby(seed):
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(0, 100))
    ids = _sorted_groups(rng, n)
    values = np.where(rng.random(n) < 0.15, np.nan, rng.normal(1000, 300, n))
    s = pd.Series(values)
    for j in (1, 2, 3, n + 1):
        np.testing.assert_array_equal(shift_back(values, ids, j), s.groupby(ids).shift(-j).to_numpy(dtype=float))
    whole = rng.integers(0, 1000, n).astype(float)  # cumsum is used on NaN-free sizes
    np.testing.assert_allclose(group_cumsum(whole, ids), pd.Series(whole).groupby(ids).cumsum().to_numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_group_median_and_nunique_match_pandas_groupby(seed):
    rng = np.random.default_rng(400 + seed)
    n = int(rng.integers(0, 120))
    groups = int(rng.integers(1, 10))
    ids = rng.integers(0, groups, n)  # unsorted, some groups empty
    values = np.where(rng.random(n) < 0.2, np.nan, rng.choice([1.0, 2.0, 2.0, 5.5, 9.0], n))  # ties and NaN
    want = pd.Series(values).groupby(ids).median().reindex(range(groups)).to_numpy()
    np.testing.assert_array_equal(group_median(values, ids, groups), want)
    whole = rng.integers(0, 5, n)
    want_n = pd.Series(whole).groupby(ids).nunique().reindex(range(groups), fill_value=0).to_numpy()
    np.testing.assert_array_equal(group_nunique(whole, ids, groups), want_n)


@pytest.mark.parametrize("groups", [95_000, 131_072, 150_000])
def test_group_median_matches_pandas_past_16_bit_group_ids(groups):
    # over 2^16 groups: ids that 16 bits cannot hold (the radix sort's limit), up to and past 2^17
    rng = np.random.default_rng(groups)
    ids = rng.integers(0, groups, 300_000)
    values = np.where(rng.random(len(ids)) < 0.1, np.nan, rng.integers(0, 50, len(ids)) * 0.5)
    want = pd.Series(values).groupby(ids).median().reindex(range(groups)).to_numpy()
    np.testing.assert_array_equal(group_median(values, ids, groups), want)


def test_group_median_takes_signed_zeros_in_input_order():
    # group 0: (0.0, −0.0, 0.0) → its middle value, the −0.0, as a stable sort leaves it; group 1: (−0.0, 0.0) → 0.0
    out = group_median(np.array([0.0, -0.0, -0.0, 0.0, 0.0]), np.array([0, 0, 1, 1, 0]), 2)
    assert np.signbit(out[0]) and out[0] == 0.0 and not np.signbit(out[1])


def test_group_median_of_only_nan_and_of_nothing():
    np.testing.assert_array_equal(group_median(np.array([1.0, 3.0]), np.array([0, 0]), 3), [2.0, np.nan, np.nan])  # empty last groups
    np.testing.assert_array_equal(group_median(np.array([np.nan, np.nan]), np.array([1, 1]), 3), [np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(group_median(np.zeros(0), np.zeros(0, np.int64), 2), [np.nan, np.nan])
    np.testing.assert_array_equal(group_nunique(np.zeros(0, np.int64), np.zeros(0, np.int64), 2), [0, 0])


@pytest.mark.parametrize("seed", SEEDS)
def test_sort_codes_order_rows_as_sort_values(seed):
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(0, 60))
    cols = {
        "int": pd.Series(rng.integers(-5, 5, n)),
        "float": pd.Series(rng.choice([0.25, -1.0, 3.0], n)),
        "text": pd.Series(rng.choice(np.array(["b", "a", "ab", "B"], dtype=object), n)),
        "cat": pd.Series(pd.Categorical(rng.choice(["z", "y", "x"], n), categories=["z", "x", "y"])),
    }
    for name, col in cols.items():
        got = np.argsort(sort_codes(col), kind="stable")
        np.testing.assert_array_equal(got, col.sort_values(kind="stable").index.to_numpy(), err_msg=name)


def test_as_text_matches_astype_str():
    cat = pd.Series(pd.Categorical(["b", "a", "b"], categories=["a", "b", "c"]), index=[5, 6, 7])
    pd.testing.assert_series_equal(as_text(cat), cat.astype(str).astype(object), check_dtype=False)
    with_null = pd.Series(pd.Categorical(["b", None]))
    assert as_text(with_null).tolist() == with_null.astype(str).tolist()
    assert as_text(pd.Series([], dtype="category")).tolist() == []


@pytest.mark.parametrize("seed", SEEDS)
def test_value_mask_matches_isin(seed):
    rng = np.random.default_rng(seed)
    f = _key_frame(rng, int(rng.integers(0, 60)), nulls=bool(seed % 2))
    for values in (["mma"], ["epi", "ctl", "absent"], [], ["unused"]):
        assert np.array_equal(value_mask(f["role"], values), f["role"].isin(values).to_numpy())
        text = [v.replace("mma", "a.xsp").replace("epi", "c") for v in values]
        assert np.array_equal(value_mask(f["dump"], text), f["dump"].isin(text).to_numpy())


@pytest.mark.parametrize("seed", SEEDS)
def test_lexsort_presorted_is_lexsort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    keys = (rng.choice([0.5, 1.5, 2.5, -0.0, 0.0], n), rng.integers(0, 3, n), rng.integers(-2, 2, n))
    if seed % 3 == 1 and n:  # NaN in a float key: lexsort puts it last
        keys[0][rng.random(n) < 0.2] = np.nan
    for ks in (keys, tuple(k[np.lexsort(keys)] for k in keys), tuple(k[np.lexsort(keys)][::-1] for k in keys)):  # random, sorted, reversed
        assert np.array_equal(lexsort_presorted(ks), np.lexsort(ks))


def test_lexsort_presorted_sorts_only_rows_out_of_order(monkeypatch):
    import xstage_trace.analysis.columnar as columnar

    sorts = []
    monkeypatch.setattr(columnar.np, "lexsort", lambda keys: sorts.append(len(keys)) or _LEXSORT(keys))
    primary, secondary = np.array([0, 0, 1, 1]), np.array([2.0, 5.0, 1.0, 1.0])
    assert lexsort_presorted((secondary, primary)).tolist() == [0, 1, 2, 3] and sorts == []  # in order (ties included): no sort
    assert lexsort_presorted((np.array([5.0, 2.0, 1.0, 1.0]), primary)).tolist() == [1, 0, 2, 3]  # a later key out of order
    assert lexsort_presorted((secondary, np.array([1, 0, 1, 1]))).tolist() == [1, 2, 3, 0]  # the primary key out of order
    assert sorts == [2, 2]
    empty = lexsort_presorted(())
    assert empty.tolist() == [] and empty.dtype.kind == "i" and lexsort_presorted((np.zeros(1),)).tolist() == [0]  # an index, even empty
    # NaN sorts after every number: NaN before 1.0 in one primary group is out of order, though no comparison says so
    assert lexsort_presorted((np.array([np.nan, 1.0]), np.array([0, 0]))).tolist() == [1, 0]
    # a third key is judged only where both keys above it are equal to the row before's: rows (0, 0, 0), (0, 1, 5), (0, 1, 3)
    assert lexsort_presorted((np.array([0, 5, 3]), np.array([0, 1, 1]), np.array([0, 0, 0]))).tolist() == [0, 2, 1]


_LEXSORT = np.lexsort
