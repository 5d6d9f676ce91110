"""Pairing begin/end probe records into spans: the one matcher every analyzer uses, sort-based on numpy.

``key_codes`` folds several key columns into one int64 code per row (equal codes ⇔ equal keys);
``join_rows`` is a relational join of two code arrays by sorting and binary search, in the row order
of ``pandas.merge`` (left rows in order, each one's matches in right order; a left join keeps an
unmatched left row once, with right index -1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.columnar import value_mask

_CODE_LIMIT = 1 << 62


def _column_codes(col: pd.Series) -> np.ndarray:
    """Integer codes of one key column: a categorical's codes, numbers as they are, text factorized."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy().astype(np.int64)
    if col.dtype.kind in "biu":
        return col.to_numpy().astype(np.int64)
    return pd.factorize(col, use_na_sentinel=False)[0].astype(np.int64)


def key_codes(frame: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """One int64 per row, equal exactly where the rows' ``keys`` are equal (a mixed-radix code,
    renumbered densely whenever the next column would overflow it)."""
    code = np.zeros(len(frame), np.int64)
    span = 1
    for k in keys:
        v = _column_codes(frame[k])
        if len(v) == 0:
            continue
        lo = int(v.min())
        radix = int(v.max()) - lo + 1
        if span * radix >= _CODE_LIMIT:
            uniq, code = np.unique(code, return_inverse=True)
            code = code.astype(np.int64)
            span = len(uniq)
        code = code * radix + (v - lo)
        span *= radix
    return code


def join_rows(left: np.ndarray, right: np.ndarray, how: str = "inner") -> tuple[np.ndarray, np.ndarray]:
    """Row indices (into ``left``, into ``right``) of the join of two code arrays on equality, in the
    order of ``pandas.merge(sort=False)``: ``how="inner"`` or ``"left"`` (right index -1 where a left
    row has no match)."""
    if how not in ("inner", "left"):
        raise ValueError(f"how must be 'inner' or 'left', not {how!r}")
    order = np.argsort(right, kind="stable")
    lo, count = _matches(right[order], left)
    if not len(count) or count.max() <= 1:  # each left row matches at most once (a tile's spans): nothing to repeat
        li = np.arange(len(left)) if how == "left" else np.flatnonzero(count)
        return li, np.where(count[li] > 0, order[lo[li]] if len(order) else -1, -1).astype(np.intp)
    keep = np.maximum(count, 1) if how == "left" else count
    li = np.repeat(np.arange(len(left)), keep)
    first = np.cumsum(keep) - keep
    offset = np.arange(len(li)) - np.repeat(first, keep)
    pos = np.repeat(lo, keep) + offset
    ri = take_matched(order, np.where(np.repeat(count, keep) > 0, pos, -1), -1).astype(np.intp)
    return li, ri


def _matches(ordered: np.ndarray, left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value of ``left``, (the first position of its equal values in the sorted ``ordered``, how many there are;
    0 and 0 where none): one binary search among the distinct values instead of two among all of them."""
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else np.zeros(0, np.intp)
    if not len(starts):
        return np.zeros(len(left), np.intp), np.zeros(len(left), np.intp)
    distinct = ordered[starts]
    at = np.minimum(np.searchsorted(distinct, left), len(starts) - 1)
    hit = distinct[at] == left
    sizes = np.diff(np.r_[starts, len(ordered)])
    return np.where(hit, starts[at], 0), np.where(hit, sizes[at], 0)


def take_matched(values: np.ndarray, index: np.ndarray, fill=np.nan) -> np.ndarray:
    """``values[index]`` where ``index`` >= 0 (a matched row of ``join_rows``), ``fill`` where it is -1."""
    if len(values) == 0:
        return np.full(len(index), fill)
    return np.where(index >= 0, values[np.maximum(index, 0)], fill)


def pair_spans(probes: pd.DataFrame, events, keys: list[str], time_col: str = "t_ns") -> pd.DataFrame:
    """Begin and end records of ``events`` matched on ``keys`` (unmatched ones dropped): ``keys`` plus
    ``start``, ``end``, ``duration`` (from ``time_col``) and the end record's ``payload``."""
    chosen = value_mask(probes["event"], events)  # categorical or text alike, without converting each row
    kind = probes["kind"]
    begin = np.flatnonzero(chosen & (kind == "begin").to_numpy())
    end = np.flatnonzero(chosen & (kind == "end").to_numpy())
    at = [probes.columns.get_loc(k) for k in keys]  # the key columns taken at the chosen rows only, not copied whole
    if len(begin) and len(end):
        code = key_codes(probes.iloc[np.concatenate([begin, end]), at], keys)
        li, ri = join_rows(code[: len(begin)], code[len(begin):])
    else:
        li = ri = np.zeros(0, np.intp)
    b, e = begin[li], end[ri]
    s = probes.iloc[b, at].reset_index(drop=True)
    t = probes[time_col].to_numpy()
    s["start"] = t[b]
    s["end"] = t[e]
    s["payload"] = probes["payload"].to_numpy()[e]
    s["duration"] = s["end"] - s["start"]
    return s
