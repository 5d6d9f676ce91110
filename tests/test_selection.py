"""analysis/selection.py: exact order statistics of chunked samples in bounded memory. Truth: numpy's
median and percentile and pandas' quantile of the whole array, bit for bit."""

import numpy as np
import pandas as pd
import pytest

from xstage_trace.analysis.selection import (float_keys, key_floats, linear_quantile_of, median_of, median_ranks, numpy_percentile_of,
                                             order_statistics, quantile_ranks)


def _sample(kind: int, n: int, rng) -> np.ndarray:
    if kind == 0:
        return rng.normal(0, 1, n)
    if kind == 1:
        return rng.integers(-3, 4, n).astype(float) * np.where(rng.random(n) < 0.5, -1.0, 1.0)  # ties, -0.0 and 0.0
    if kind == 2:
        return np.where(rng.random(n) < 0.5, 0.0, rng.gamma(2, 1e4, n))  # half the values one number
    if kind == 3:
        return np.full(n, 7.25)
    return np.concatenate([rng.normal(1e6, 1, n // 2), -rng.exponential(1e-300, n - n // 2)])  # denormals beside large values


def test_keys_keep_the_order_of_the_floats_and_give_them_back():
    x = np.array([-np.inf, -1e308, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1.0, 1e308, np.inf])
    k = float_keys(x)
    assert (np.diff(k.astype(object)) > 0).all()
    assert np.array_equal(key_floats(k).view(np.uint64), x.view(np.uint64))


@pytest.mark.parametrize("kind", range(5))
def test_median_and_quantiles_from_chunks_equal_numpy_and_pandas_on_the_whole_array_whatever_the_cap(kind):
    rng = np.random.default_rng(kind)
    for trial in range(40):
        n = int(rng.integers(0, 3000))
        x = _sample(kind, n, rng)
        parts = np.array_split(x, int(rng.integers(1, 9)))
        cap = int(rng.integers(1, 2 * n + 2))  # from one value to all of them

        def ranks(name, m):
            return sorted(set(median_ranks(m) + quantile_ranks(m, 0.99) + quantile_ranks(m, 0.37)))

        count, whole, found = order_statistics(lambda: ({"x": p} for p in parts), ranks, cap)
        assert count.get("x", 0) == n
        if n == 0:
            continue
        if "x" in whole:
            assert np.array_equal(np.sort(whole["x"]), np.sort(x))
            stats = dict(enumerate(np.sort(whole["x"])))
        else:
            stats = found["x"]
        assert median_of(stats, n) == np.median(x)
        assert numpy_percentile_of(stats, n, 0.99) == np.percentile(x, 99)
        assert numpy_percentile_of(stats, n, 0.99, shift=1.5) == np.percentile(x - 1.5, 99)
        assert linear_quantile_of(stats, n, 0.37) == pd.Series(x).quantile(0.37)
