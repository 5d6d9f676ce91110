"""Probe records of the path-drain bench (instrument/bench/path_drain.cu) → one row per synchronized burst and
one row per load round (docs/model.md §11; the inputs of ``drain_fit``).

Times are the records' %globaltimer ns (``t_gt_ns``, int64) taken relative to each dump's first record before
they become float, so that nanoseconds survive.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RAMP_KERNEL = "drain_ramp"
LOAD_KERNEL = "load_rounds"


def _relative(p: pd.DataFrame) -> pd.DataFrame:
    t0 = p.groupby("dump", observed=True)["t_gt_ns"].transform("min")
    return p.assign(t=(p["t_gt_ns"] - t0).astype(np.float64), dump=p["dump"].astype(str), event=p["event"].astype(str),
                    kind=p["kind"].astype(str))


def ramp_bursts(probes: pd.DataFrame, volume_of_dump: dict[str, float]) -> pd.DataFrame:
    """Per (dump, burst) of a ramp: volume V (``volume_of_dump``: K × B of the dump's label), the begin spread,
    and from the burst's first begin the median and last CTA acceptance (BURST end) and write completion
    (``done`` mark), ns."""
    p = _relative(probes[probes["dump"].astype(str).isin(volume_of_dump)])
    keys = ["dump", "tile"]
    begin = p[(p["event"] == "burst") & (p["kind"] == "begin")].groupby(keys)["t"].agg(["min", "max"])
    end = p[(p["event"] == "burst") & (p["kind"] == "end")].groupby(keys)["t"].agg(["median", "max"])
    done = p[p["event"] == "done"].groupby(keys)["t"].max()
    out = pd.DataFrame({"begin_spread_ns": begin["max"] - begin["min"], "accept_median_ns": end["median"] - begin["min"],
                        "accept_last_ns": end["max"] - begin["min"], "done_last_ns": done.reindex(begin.index) - begin["min"]})
    out = out.reset_index().rename(columns={"tile": "burst"})
    out["volume_bytes"] = out["dump"].map(volume_of_dump).astype(np.float64)
    return out


def load_rounds(probes: pd.DataFrame, dumps: set[str]) -> pd.DataFrame:
    """Per (dump, cta, round) of the load rounds: load issue and wait (LOAD span), store issue and acceptance
    (BURST span), ns from the dump's first record."""
    p = _relative(probes[probes["dump"].astype(str).isin(dumps)])
    keys = ["dump", "cta", "tile"]
    spans = {}
    for ev in ("load", "burst"):
        q = p[p["event"] == ev]
        spans[ev] = q.pivot_table(index=keys, columns="kind", values="t", aggfunc="first")
    out = pd.DataFrame({"load_begin_ns": spans["load"]["begin"], "load_wait_ns": spans["load"]["end"] - spans["load"]["begin"],
                        "store_begin_ns": spans["burst"]["begin"], "store_accept_ns": spans["burst"]["end"] - spans["burst"]["begin"]})
    return out.reset_index().rename(columns={"tile": "round"})


def completion_rate_gbps(accept_ns, nbytes, middle: tuple[float, float] = (0.25, 0.75)) -> float:
    """The rate at which a launch's stores were accepted: the slope of cumulative bytes over the acceptance times
    (all CTAs pooled, time order) over the ``middle`` share of them (GB/s = bytes/ns). A pooled slope is a drain
    rate where ``bytes / (time − compute)`` is not: the CTAs' gaps overlap others' drains."""
    t = np.asarray(accept_ns, dtype=np.float64)
    b = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), t.shape)
    o = np.argsort(t, kind="stable")
    t, cum = t[o], np.cumsum(b[o])
    lo, hi = int(len(t) * middle[0]), int(len(t) * middle[1])
    return float(np.polyfit(t[lo:hi], cum[lo:hi], 1)[0])
