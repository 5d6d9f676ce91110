"""Data shaping for the dashboard: pure functions from run DataFrames to what a figure or table
needs. No Streamlit, no Plotly, no I/O; the model itself stays in ``xstage_trace.analysis``.

Times: ``*_ns`` on the run's time base (docs/run-dataset.md); figures show µs or ms.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


MAX_SPANS_DRAWN = 4000
MAX_POINTS_DRAWN = 20000
EVENT_NAMES = {"mainloop": "mainloop", "slot_wait": "slot wait", "rs": "remote store", "burst": "remote store",
               "ls": "local store"}
ROLE_OFFSET = {0: 0.2, 1: -0.2}  # lane = SM id; the MMA role just above, the epilogue just below


# ---------------------------------------------------------------- configurations and kernels

def with_config(tiles: pd.DataFrame) -> pd.DataFrame:
    """Tiles plus dest, shape, schedule, variant and ``config`` (categorical), a readable name of
    the configuration ("host S1 wave", with the variant appended when the run holds several);
    names are built once per distinct configuration."""
    cols = ["dest", "shape", "schedule", "variant"]
    cfg = tiles[cols].astype("category")
    ids = cfg.groupby(cols, observed=True, dropna=False, sort=False).ngroup().to_numpy()
    first = pd.Series(np.arange(len(ids))).groupby(ids).first()  # one tile per configuration id
    reps = cfg.iloc[first.to_numpy()].astype(object).fillna("?")
    names = reps["dest"] + " " + reps["shape"] + " " + reps["schedule"]
    if cfg["variant"].nunique(dropna=True) > 1:
        names = names + " " + reps["variant"]
    out = tiles.drop(columns=[c for c in cols if c in tiles]).join(cfg)
    out["config"] = pd.Series(names.to_numpy()[np.searchsorted(first.index.to_numpy(), ids)], index=tiles.index).astype("category")
    return out


def kernel_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name (timing scope: kernel time, nsys rows): launches and duration statistics in ms."""
    cols = ["kernel", "launches", "median_ms", "min_ms", "max_ms", "total_ms"]
    if kernels.empty:
        return pd.DataFrame(columns=cols)
    name = kernels["short_name"].fillna(kernels["name"]) if "short_name" in kernels else kernels["name"]
    d = kernels["duration_ns"] / 1e6
    g = d.groupby(name.rename("kernel"))
    out = g.agg(launches="size", median_ms="median", min_ms="min", max_ms="max", total_ms="sum").reset_index()
    return out.sort_values("total_ms", ascending=False, ignore_index=True)[cols]


def kernel_containing(kernels: pd.DataFrame, start_ns: float, end_ns: float) -> pd.Series | None:
    """The kernel row whose [start_ns, end_ns] holds the interval (the launch a probe dump came
    from, after alignment), else the one overlapping it most; None without kernels."""
    if kernels.empty:
        return None
    overlap = np.minimum(kernels["end_ns"], end_ns) - np.maximum(kernels["start_ns"], start_ns)
    i = int(np.argmax(overlap.to_numpy()))
    return kernels.iloc[i] if overlap.iloc[i] > 0 else None


# ---------------------------------------------------------------- timeline

def span_categories(spans: pd.DataFrame, tiles: pd.DataFrame) -> pd.DataFrame:
    """Spans (Run.probe_spans) with ``lane`` (SM id ± role offset), ``category`` (mainloop, slot
    wait, remote store, local store; "remote store (backpressured)" for the remote stores of
    backpressured tiles, the cause of the stall) and the tile's predicted / measured stall."""
    keys = ["rank", "dump", "cta", "tile"]
    cols = [*keys, "backpressured", "predicted_stall_ns", "measured_stall_ns"]
    if tiles.empty:
        s = spans.assign(backpressured=False, predicted_stall_ns=np.nan, measured_stall_ns=np.nan)
    else:
        s = spans.merge(tiles[[c for c in cols if c in tiles]], on=keys, how="left")
    bp = s["backpressured"].fillna(False).astype(bool)
    base = s["event"].map(EVENT_NAMES).fillna(s["event"])
    s["category"] = np.where(bp & s["event"].isin(["rs", "burst"]), base + " (backpressured)", base)
    s["lane"] = s["sm_id"] + s["role"].map(ROLE_OFFSET).fillna(0.0)
    return s


def busy_fraction(spans: pd.DataFrame, start_ns: float, end_ns: float, bins: int, lane_col: str = "sm_id") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per lane and time bin, the fraction of the bin covered by spans (summed: overlapping spans of
    one lane can exceed 1). Exact: busy(t) = Σ [t − start]₊ − Σ [t − end]₊, evaluated at the bin
    edges per lane with sorted cumulative sums. Returns (bin edges ns, lanes, fraction[lane, bin])."""
    edges = np.linspace(start_ns, end_ns, bins + 1)
    lanes = np.unique(spans[lane_col].to_numpy()) if len(spans) else np.array([], dtype=int)
    if not len(lanes):
        return edges, lanes, np.zeros((0, bins))
    li = np.searchsorted(lanes, spans[lane_col].to_numpy())
    width = end_ns - start_ns
    # one key axis for all lanes: lane index · 4·width + time offset clipped to [−width, 2·width]
    # (clipping changes no difference between edges), so each lane's points sort apart
    stride = 4.0 * width
    s = np.clip(spans["start_ns"].to_numpy(dtype=np.float64) - start_ns, -width, 2 * width)
    e = np.clip(spans["end_ns"].to_numpy(dtype=np.float64) - start_ns, -width, 2 * width)

    def ramp(t: np.ndarray) -> np.ndarray:  # Σ over a lane's points p of [q − p]₊ at every query q
        key = li * stride + t
        order = np.argsort(key, kind="stable")
        ks, ts = key[order], t[order]
        csum = np.concatenate(([0.0], np.cumsum(ts)))
        lane_first = np.searchsorted(ks, np.arange(len(lanes)) * stride - width)
        q_t = edges - start_ns
        q = (np.arange(len(lanes))[:, None] * stride + q_t[None, :])
        n_at = np.searchsorted(ks, q, side="right")
        n_lane = n_at - lane_first[:, None]
        s_lane = csum[n_at] - csum[lane_first][:, None]
        return n_lane * q_t[None, :] - s_lane

    busy = ramp(s) - ramp(e)
    per_bin = np.diff(busy, axis=1) / np.diff(edges)[None, :]
    return edges, lanes, per_bin


def binned_metrics(gpu_metrics: pd.DataFrame, metrics: list[str], start_ns: float, end_ns: float,
                   max_points: int = 2000) -> pd.DataFrame:
    """GPU metric samples of ``metrics`` inside [start_ns, end_ns], averaged into at most
    ``max_points`` equal bins per metric (bins without samples dropped): metric, t_ns, value, samples."""
    cols = ["metric", "t_ns", "value", "samples"]
    if gpu_metrics.empty or not metrics:
        return pd.DataFrame(columns=cols)
    ts = gpu_metrics["timestamp_ns"]
    m = gpu_metrics[(ts >= start_ns) & (ts <= end_ns)]
    m = m[m["metric"].isin(metrics)]
    if m.empty:
        return pd.DataFrame(columns=cols)
    width = max((end_ns - start_ns) / max_points, 1.0)
    b = np.floor((m["timestamp_ns"].to_numpy() - start_ns) / width).astype(np.int64)
    g = m.assign(bin=b, metric=m["metric"].astype(str)).groupby(["metric", "bin"], sort=True)
    out = g.agg(t_ns=("timestamp_ns", "mean"), value=("value", "mean"), samples=("value", "size")).reset_index()
    return out[cols]


def window_around(start_ns: float, end_ns: float, lo_ns: float, hi_ns: float, pad_frac: float = 0.25) -> tuple[float, float]:
    """A window around [start_ns, end_ns] padded by ``pad_frac`` of its length on each side,
    clipped to [lo_ns, hi_ns] (to show a selected tile in its surroundings)."""
    pad = (end_ns - start_ns) * pad_frac
    return max(lo_ns, start_ns - pad), min(hi_ns, end_ns + pad)


# ---------------------------------------------------------------- tiles

def stall_agreement(tiles: pd.DataFrame) -> dict:
    """Predicted vs measured stall over tiles with both: count, Spearman ρ, median and mean
    absolute error (ns)."""
    t = tiles.dropna(subset=["predicted_stall_ns", "measured_stall_ns"])
    out = {"tiles": int(len(t)), "spearman": float("nan"), "median_abs_err_ns": float("nan"), "mean_abs_err_ns": float("nan")}
    if len(t) == 0:
        return out
    err = np.abs(t["predicted_stall_ns"].to_numpy() - t["measured_stall_ns"].to_numpy())
    out["median_abs_err_ns"] = float(np.median(err))
    out["mean_abs_err_ns"] = float(np.mean(err))
    if len(t) > 1 and t["predicted_stall_ns"].nunique() > 1 and t["measured_stall_ns"].nunique() > 1:
        from scipy import stats  # 1 s to import: only the Tiles page needs it

        out["spearman"] = float(stats.spearmanr(t["predicted_stall_ns"], t["measured_stall_ns"]).statistic)
    return out


def scatter_sample(tiles: pd.DataFrame, max_points: int = MAX_POINTS_DRAWN, seed: int = 0) -> pd.DataFrame:
    """At most ``max_points`` tiles for a scatter: every backpressured tile first (as many as fit),
    then a fixed-seed random sample of the others."""
    if len(tiles) <= max_points:
        return tiles
    bp = tiles["backpressured"].fillna(False).astype(bool) if "backpressured" in tiles else pd.Series(False, index=tiles.index)
    hot = tiles[bp]
    if len(hot) >= max_points:
        return hot.sample(max_points, random_state=seed)
    rest = tiles[~bp].sample(max_points - len(hot), random_state=seed)
    return pd.concat([hot, rest])


def group_quantiles(tiles: pd.DataFrame, by: str, value: str) -> pd.DataFrame:
    """Per group of ``by``: tiles, min, p25, median, p75, max and mean of ``value`` (for box plots
    drawn from precomputed statistics rather than every tile)."""
    t = tiles.dropna(subset=[value])
    if t.empty:
        return pd.DataFrame(columns=[by, "tiles", "min", "p25", "median", "p75", "max", "mean"])
    g = t.groupby(by, sort=True)[value]
    q = g.quantile([0.25, 0.5, 0.75]).unstack()
    out = pd.DataFrame({"tiles": g.size(), "min": g.min(), "p25": q[0.25], "median": q[0.5], "p75": q[0.75],
                        "max": g.max(), "mean": g.mean()})
    return out.reset_index()


def quantiles_in_us(q: pd.DataFrame) -> pd.DataFrame:
    """group_quantiles of an ``*_ns`` value for display: the statistics in µs, the unit in each
    header ("median (µs)"), rounded to 3 decimals (1 ns)."""
    stats_cols = ["min", "p25", "median", "p75", "max", "mean"]
    out = q.copy()
    for c in stats_cols:
        if c in out:
            out[c] = (out[c].astype(float) / 1e3).round(3)
    return out.rename(columns={c: f"{c} (µs)" for c in stats_cols})


def backpressured_tiles(tiles: pd.DataFrame, limit: int = 5000) -> pd.DataFrame:
    """Backpressured tiles, the largest measured stall first (then predicted), at most ``limit``,
    with the times in µs."""
    t = tiles[tiles["backpressured"].fillna(False).astype(bool)]
    t = t.sort_values(["measured_stall_ns", "predicted_stall_ns"], ascending=False, na_position="last").head(limit)
    keep = [c for c in ("config", "dump", "cta", "position", "tile", "tile_kind", "expert", "wave") if c in t]
    out = t[keep].copy()
    for c in ("rs_span_ns", "cover_ns", "mainloop_ns", "predicted_stall_ns", "measured_stall_ns"):
        if c in t:
            out[c.replace("_ns", "_us")] = t[c] / 1e3
    return out.reset_index(drop=True)


# ---------------------------------------------------------------- bursts

def burst_sequence(bursts: pd.DataFrame, capacity_bytes: np.ndarray | None) -> pd.DataFrame:
    """One dump's bursts in order with the §4 audit in display units and the guard's terms:
    V_n (MiB), G_n (µs), ρ_n, q_n and q_n + b_n^iso (MiB), Q(K_n) (MiB, NaN without calibration)."""
    b = bursts.sort_values("burst").reset_index(drop=True)
    mib = float(1 << 20)
    out = pd.DataFrame({
        "burst": b["burst"], "volume_mib": b["volume_bytes"] / mib, "gap_us": b["gap_ns"] / 1e3,
        "producers": b["producers"], "rho": b["rho"], "q_mib": b["q_bytes"] / mib,
        "guard_lhs_mib": (b["q_bytes"] + b["b_iso_bytes"]) / mib,
        "capacity_mib": np.asarray(capacity_bytes, dtype=np.float64) / mib if capacity_bytes is not None else np.nan,
        "guard_ok": b["guard_ok"],
    })
    return out


def guard_onset(seq: pd.DataFrame) -> int | None:
    """The first burst whose capacity guard q_n + b_n^iso ≤ Q fails (docs/model.md §4), or None."""
    fails = seq.index[seq["guard_ok"].astype("boolean").fillna(True) == False]  # noqa: E712 (nullable booleans)
    return int(seq.loc[fails[0], "burst"]) if len(fails) else None


# ---------------------------------------------------------------- compare

def compare_verdicts(a: pd.DataFrame, b: pd.DataFrame, keys=("dest", "shape", "variant", "schedule")) -> pd.DataFrame:
    """Two runs' verdict tables (reports.verdict_text.verdict_table) side by side, matched on ``keys``
    (those both tables have; the gate's keys on the Compare page), outer join; ``in both`` marks the
    configurations both runs hold, and ``changed`` is True only there (a configuration in one run alone
    has no verdict to change). Rows of one run that share the keys (variants, when the keys leave
    variant out) keep the most severe verdict and the largest stalls (µs)."""
    keys = [k for k in keys if k in a and k in b]
    cols = ["measured_stall_us", "slot_model_stall_us", "stalled_tiles", "verdict"]
    if not keys:
        return pd.DataFrame(columns=["in both", "changed"])

    def per_key(v: pd.DataFrame) -> pd.DataFrame:
        v = v.assign(_sev=v["verdict"].astype(str).map({"stall-bound": 2, "covered": 1}).fillna(0))
        g = v.sort_values("_sev", ascending=False).groupby(keys, sort=True, observed=True, dropna=False)
        return g.agg(measured_stall_us=("measured_stall_us", "max"), slot_model_stall_us=("slot_model_stall_us", "max"),
                     stalled_tiles=("stalled_tiles", "sum"), verdict=("verdict", "first")).reset_index()

    m = per_key(a).merge(per_key(b), on=keys, how="outer", suffixes=(" A", " B"), indicator=True)
    m["in both"] = m.pop("_merge") == "both"
    m["changed"] = m["in both"] & (m["verdict A"] != m["verdict B"])
    m = m[keys + [f"{c} {r}" for c in cols for r in ("A", "B")] + ["in both", "changed"]]
    return m.rename(columns={f"{c}_us {r}": f"{c.replace('_', ' ')} (µs) {r}" for c in ("measured_stall", "slot_model_stall") for r in ("A", "B")})


def gate_headline(table: pd.DataFrame) -> dict:
    """The Compare page's first line from reports.compare.compare_runs' table: configurations in
    both runs, the median kernel-time change over them (%), and the largest slow-down and speed-up
    (configuration label, %)."""
    both = table.dropna(subset=["change_pct"]) if "change_pct" in table else table.iloc[0:0]
    out = {"in_both": int(len(both)), "median_change_pct": float(both["change_pct"].median()) if len(both) else np.nan,
           "worst": None, "best": None}
    keys = [c for c in ("dest", "shape", "schedule", "kernel") if c in table]
    if len(both):
        label = lambda r: " ".join(str(r[k]) for k in keys)  # noqa: E731
        hi, lo = both.loc[both["change_pct"].idxmax()], both.loc[both["change_pct"].idxmin()]
        out["worst"] = (label(hi), float(hi["change_pct"]))
        out["best"] = (label(lo), float(lo["change_pct"]))
    return out


# ---------------------------------------------------------------- what-if

def measured_start(tiles: pd.DataFrame, bursts: pd.DataFrame) -> dict:
    """The What-if's starting point from one configuration's own measurements (dest × shape × variant,
    both schedules): per schedule the median Linear-2 remote-store span T_RS, cover T_cover, lead
    T_lead and measured stall (µs, probe clock per SM), the median Linear-2 / Linear-1 mainloops
    (µs), the tile counts n1 / n2, and from its wave bursts the producers K and bytes per producer B
    (medians). Missing pieces are NaN (or None for counts)."""
    out = {"l2_us": np.nan, "l1_us": np.nan, "producers": None, "bytes_per_producer": np.nan, "n1": None, "n2": None,
           "noise_ns": np.nan, "schedules": {}}
    if tiles.empty:
        return out
    kind = tiles["tile_kind"].astype(str)
    l2, l1 = tiles[kind == "linear2"], tiles[kind == "linear1"]
    out["l2_us"] = float(l2["mainloop_ns"].median()) / 1e3 if len(l2) else np.nan
    out["l1_us"] = float(l1["mainloop_ns"].median()) / 1e3 if len(l1) else np.nan
    out["noise_ns"] = float(tiles["noise_ns"].max())
    if len(l1) and len(l2):
        per_sched = tiles.groupby([tiles["schedule"].astype(str), kind], observed=True).size()
        sched = str(l2["schedule"].astype(str).mode().iloc[0])
        c1, c2 = int(per_sched.get((sched, "linear1"), 0)), int(per_sched.get((sched, "linear2"), 0))
        if c1 and c2:
            g = math.gcd(c1, c2)
            out["n1"], out["n2"] = c1 // g, c2 // g
    stall_col = "stall_ns" if "stall_ns" in tiles else "measured_stall_ns"  # the verdict's measured stall (slot + compute part)
    for sched, g in l2.groupby(l2["schedule"].astype(str), sort=True):
        rs = g.dropna(subset=["rs_span_ns"])
        out["schedules"][sched] = {
            "span_us": float(rs["rs_span_ns"].median()) / 1e3 if len(rs) else np.nan,
            "cover_us": float(rs["cover_ns"].median()) / 1e3 if len(rs) else np.nan,
            "lead_us": float(rs["epilogue_lead_ns"].fillna(0).median()) / 1e3 if len(rs) and "epilogue_lead_ns" in rs else 0.0,
            "measured_stall_us": float(rs[stall_col].median()) / 1e3 if len(rs) else np.nan,
        }
    b = bursts[bursts["schedule"].astype(str) == "wave"] if len(bursts) and "schedule" in bursts else bursts
    b = b if len(b) else bursts
    if len(b):
        out["producers"] = int(b["producers"].median())
        out["bytes_per_producer"] = float((b["volume_bytes"] / b["producers"].clip(lower=1)).median())
    return out
