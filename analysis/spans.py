"""Pairing begin/end probe records into spans: the one matcher every analyzer uses."""

from __future__ import annotations

import pandas as pd


def pair_spans(probes: pd.DataFrame, events, keys: list[str], time_col: str = "t_ns") -> pd.DataFrame:
    """Begin and end records of ``events`` matched on ``keys`` (unmatched ones dropped): ``keys`` plus
    ``start``, ``end``, ``duration`` (from ``time_col``) and the end record's ``payload``."""
    p = probes[probes["event"].isin(list(events))]  # categorical or text alike, without converting each row
    kind = p["kind"]
    cols = keys + [time_col]
    begin = p[kind == "begin"][cols].rename(columns={time_col: "start"})
    end = p[kind == "end"][cols + ["payload"]].rename(columns={time_col: "end"})
    s = begin.merge(end, on=keys, how="inner")
    s["duration"] = s["end"] - s["start"]
    return s
