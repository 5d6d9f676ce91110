"""Exact order statistics of samples too large to hold: medians and quantiles over values that arrive
in chunks (the parts of a run folder), in memory bounded by a cap on the values held per sample.

``order_statistics`` reads the chunks once and keeps every sample of at most ``cap`` values whole (the
caller then computes what it computes today on the whole array: the same values, so the same result).
For a larger sample it finds the wanted order statistics (0-based ranks in ascending order) by narrowing:
the float64 values are mapped to integer keys of the same order (``float_keys``), each wanted rank's
key range is cut into 2^BITS bins and one more pass over the chunks counts the keys per bin, which
leaves the rank's bin as the new range, until the keys in range fit under the cap (then they are
collected and sorted) or the range is one key (then that key is the value). At most 64 / BITS
narrowing passes; NaN must be dropped before (as pandas' median and quantile skip it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

BITS = 16  # bins per narrowing pass: 2^16 counts (512 KiB) per wanted rank
SIGN = np.uint64(1 << 63)
KEY_MAX = (1 << 64) - 1


def float_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys in the order of the float64 ``values`` (−0.0 just below +0.0; no NaN)."""
    bits = np.ascontiguousarray(values, np.float64).view(np.uint64)
    return np.where(bits & SIGN, ~bits, bits | SIGN)


def key_floats(keys: np.ndarray) -> np.ndarray:
    """The float64 values of ``float_keys``' keys."""
    keys = np.asarray(keys, np.uint64)
    return np.where(keys & SIGN, keys ^ SIGN, ~keys).view(np.float64)


def median_ranks(n: int) -> list[int]:
    """The order statistics numpy's median of ``n`` values takes (none for n = 0)."""
    return [] if n == 0 else [n // 2] if n % 2 else [n // 2 - 1, n // 2]


def median_of(stats: Mapping[int, float], n: int) -> float:
    """numpy's median of ``n`` values from their order statistics ``median_ranks(n)`` (NaN for none)."""
    if n == 0:
        return np.nan
    if n % 2:
        return float(stats[n // 2])
    return float(np.mean(np.array([stats[n // 2 - 1], stats[n // 2]])))


def quantile_ranks(n: int, q: float) -> list[int]:
    """The order statistics a linear-interpolation quantile ``q`` of ``n`` values reads (none for n = 0)."""
    if n == 0:
        return []
    i = int(np.floor((n - 1) * q))
    return [i] if i + 1 >= n else [i, i + 1]


def linear_quantile_of(stats: Mapping[int, float], n: int, q: float) -> float:
    """pandas' linear-interpolation quantile ``q`` of ``n`` values from their order statistics
    ``quantile_ranks(n, q)``: the one at q·(n − 1) plus the fraction of the way to the next (NaN for none)."""
    if n == 0:
        return np.nan
    at = q * (n - 1)
    i = int(at)
    if i + 1 >= n:
        return float(stats[i])
    lo, hi = stats[i], stats[i + 1]
    return float(lo + (at % 1) * (hi - lo))


def numpy_percentile_of(stats: Mapping[int, float], n: int, q: float, shift: float = 0.0) -> float:
    """``np.percentile(x - shift, 100 q)`` (method linear) of ``n`` values from the order statistics
    ``quantile_ranks(n, q)`` of ``x``, bit for bit: numpy's virtual index (n − 1)·q and its interpolation,
    which takes b − (b − a)(1 − γ) from γ = 0.5 up."""
    virtual = np.float64(n - 1) * np.float64(q)
    i = int(np.floor(virtual))
    a = np.float64(stats[i]) - np.float64(shift)
    b = np.float64(stats[min(i + 1, n - 1)]) - np.float64(shift)
    gamma = virtual - np.floor(virtual)
    diff = b - a
    return float(b - diff * (1 - gamma)) if gamma >= 0.5 else float(a + diff * gamma)


@dataclass
class _Rank:
    """One wanted rank of one sample while it is narrowed: keys in [lo, hi] hold it; ``below`` keys lie under lo."""

    name: str
    rank: int
    lo: int = 0
    hi: int = KEY_MAX
    below: int = 0
    inside: int = 0


def order_statistics(chunks: Callable[[], Iterable[Mapping[str, np.ndarray]]], ranks_of: Callable[[str, int], Sequence[int]],
                     cap: int) -> tuple[dict[str, int], dict[str, np.ndarray], dict[str, dict[int, float]]]:
    """(n per sample, the whole values of every sample of at most ``cap`` values, {rank: value} of every
    sample for the ranks ``ranks_of(name, n)`` asks: taken from the whole values where they are held, else
    by narrowing). ``chunks()`` yields, on every call anew, the chunks: mappings of sample name → float64
    values without NaN (a sample may be missing from a chunk)."""
    n: Counter = Counter()
    held: dict[str, list[np.ndarray]] = {}
    over: set[str] = set()
    for chunk in chunks():
        for name, v in chunk.items():
            n[name] += len(v)
            if name in over:
                continue
            if n[name] > cap:
                over.add(name)
                held.pop(name, None)
            else:
                held.setdefault(name, []).append(np.asarray(v, np.float64))
    # each sample's chunks let go as it is joined: the held values and one joined copy at a time, never two of all
    whole = {name: np.concatenate(held.pop(name)) if held.get(name) else np.zeros(0) for name in n if name not in over}
    wanted = [_Rank(name, r, inside=n[name]) for name in sorted(over, key=repr) for r in sorted(set(ranks_of(name, n[name])))]
    found: dict[str, dict[int, float]] = {name: {} for name in over}
    for name, v in whole.items():
        ranks = sorted(set(ranks_of(name, len(v))))
        found[name] = dict(zip(ranks, np.partition(v, ranks)[ranks].tolist())) if ranks else {}
    while wanted:
        wanted = _narrow(chunks, wanted, cap, found)
    return dict(n), whole, found


def _narrow(chunks, wanted: list[_Rank], cap: int, found: dict[str, dict[int, float]]) -> list[_Rank]:
    """One pass over the chunks: each wanted rank whose range holds at most ``cap`` keys is resolved from
    them; each other one gets the counts of its range's bins and keeps the bin it lies in."""
    collect = [w for w in wanted if w.inside <= cap]
    count = [w for w in wanted if w.inside > cap]
    shifts = [max(0, (w.hi - w.lo).bit_length() - BITS) for w in count]
    bins = [np.zeros(((w.hi - w.lo) >> s) + 1, np.int64) for w, s in zip(count, shifts)]
    kept: list[list[np.ndarray]] = [[] for _ in collect]
    for chunk in chunks():
        keys = {name: float_keys(v) for name, v in chunk.items() if any(w.name == name for w in wanted)}
        for w, store in zip(collect, kept):
            if w.name in keys:
                k = keys[w.name]
                store.append(k[(k >= np.uint64(w.lo)) & (k <= np.uint64(w.hi))])
        for w, s, b in zip(count, shifts, bins):
            if w.name in keys:
                k = keys[w.name]
                k = k[(k >= np.uint64(w.lo)) & (k <= np.uint64(w.hi))]
                b += np.bincount(((k - np.uint64(w.lo)) >> np.uint64(s)).astype(np.int64), minlength=len(b))
    for w, store in zip(collect, kept):
        k = np.sort(np.concatenate(store)) if store else np.zeros(0, np.uint64)
        found[w.name][w.rank] = float(key_floats(k[w.rank - w.below : w.rank - w.below + 1])[0])
    left = []
    for w, s, b in zip(count, shifts, bins):
        cum = np.cumsum(b)
        i = int(np.searchsorted(cum, w.rank - w.below, side="right"))  # the bin holding the rank
        before = int(cum[i - 1]) if i else 0
        lo = w.lo + (i << s)
        if s == 0:  # the bin is one key: its value
            found[w.name][w.rank] = float(key_floats(np.array([lo], np.uint64))[0])
            continue
        left.append(_Rank(w.name, w.rank, lo, min(w.hi, lo + (1 << s) - 1), w.below + before, int(b[i])))
    return left
