"""What a kernel engineer can change on a host-mapped path, predicted with the load-coupling forward model
(docs/model.md §13, built on §11): per launch, the kernel time and median stall as run, with fewer CTAs storing
(the tiles redistributed over K' persistent CTAs), with the next tile's loads issued before the store (prefetch
one tile), and the link floor (every byte once through R: no schedule gets below it).

Inputs are the forward model's (per tile its CTA, position, bytes, the control's compute and epilogue, load steps
and stages) and the bench-calibrated ``LinkModel``: never a measured host span of the same run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.forward import LinkModel, forward_launch

WHATIF_COLUMNS = ["alternative", "parameter", "kernel_ns", "stall_ns", "gain"]


def link_floor_ns(bytes_per_tile, model: LinkModel) -> float:
    """docs/model.md §13, Eq. 49: T_floor = Σ B / R, the least kernel time any schedule of these stores reaches."""
    return float(np.nansum(np.asarray(bytes_per_tile, dtype=np.float64))) / float(model.rate_gbps)


def redistributed(cta, position, ctas: int) -> tuple[np.ndarray, np.ndarray]:
    """docs/model.md §13, Eq. 50: the tiles dealt round-robin over ``ctas`` persistent CTAs in the order they ran
    (position, then CTA): tile g of that order goes to CTA g mod K' at position ⌊g / K'⌋."""
    order = np.lexsort((np.asarray(cta), np.asarray(position)))
    g = np.empty(len(order), np.int64)
    g[order] = np.arange(len(order))
    return g % ctas, g // ctas


def prefetch_lag_ns(cta, position, compute_ns, epilogue_ns, model: LinkModel) -> np.ndarray:
    """docs/model.md §13, Eq. 51: the first-load lag L of each tile when its loads are issued one tile ahead, at
    the previous tile's compute start: L = −(C_prev − λ + E_prev) (0 for a CTA's first tile)."""
    cta, pos = np.asarray(cta, np.int64), np.asarray(position, np.int64)
    n = len(cta)
    work = np.broadcast_to(np.asarray(compute_ns, np.float64), (n,)) + np.broadcast_to(np.asarray(epilogue_ns, np.float64), (n,))
    order = np.lexsort((pos, cta))
    prev = np.r_[np.nan, work[order][:-1] - model.load_latency_ns]
    prev[np.r_[True, np.diff(cta[order]) != 0]] = 0.0
    lag = np.empty(n)
    lag[order] = -np.maximum(prev, 0.0)
    return lag


def _median_stall(stall_ns) -> float:
    """The median predicted stall over the launch's tiles, as Table 3 takes the prediction's median (NaN: none)."""
    s = np.asarray(stall_ns, np.float64)
    return float(np.nanmedian(s)) if np.isfinite(s).any() else float("nan")


def launch_whatifs(cta, position, bytes_per_tile, compute_ns, model: LinkModel, epilogue_ns=0.0, steps=1, stages=None,
                   ctas_options=None, cover_tiles: int = 0, plain_store: bool = False) -> pd.DataFrame:
    """docs/model.md §13: one row per alternative (``WHATIF_COLUMNS``) for one launch: ``as_run``; ``sm_count`` for
    each K' of ``ctas_options`` (default: a half, a quarter and an eighth of the launch's CTAs), the best kept;
    ``prefetch`` (Eq. 51); ``link_floor`` (Eq. 49, no stall). ``gain`` = as-run kernel time / the alternative's.
    Every alternative is ``forward.forward_launch`` of its inputs, the function ``analyze``'s prediction is (with the
    lifecycle's buffer wait, ``cover_tiles``, and plain stores, ``plain_store``, Eq. 48), so ``as_run`` is that
    prediction. Kernel time: the forward model's first compute start to the last drain (Eq. 43); stall: median
    over the launch's tiles (Table 3's median of the prediction)."""
    cta, pos = np.asarray(cta, np.int64), np.asarray(position, np.int64)
    n = len(cta)
    steps_a = np.broadcast_to(np.asarray(steps, np.int64), (n,))
    stages_a = steps_a if stages is None else np.broadcast_to(np.asarray(stages, np.int64), (n,))
    kw = dict(epilogue_ns=epilogue_ns, steps=steps_a, stages=stages_a, cover_tiles=cover_tiles, plain_store=plain_store)
    rows = []
    base, stall = forward_launch(cta, pos, bytes_per_tile, compute_ns, model, **kw)
    rows.append(("as_run", float(len(np.unique(cta))), base.kernel_ns, _median_stall(stall)))
    k = len(np.unique(cta))
    options = sorted({int(x) for x in (ctas_options if ctas_options is not None else (k // 2, k // 4, k // 8)) if 0 < int(x) < k})
    best = None
    for kp in options:  # a handful of K' values
        c2, p2 = redistributed(cta, pos, kp)
        f, stall = forward_launch(c2, p2, bytes_per_tile, compute_ns, model, **kw)
        cand = ("sm_count", float(kp), f.kernel_ns, _median_stall(stall))
        best = cand if best is None or cand[2] < best[2] else best
    if best is not None:
        rows.append(best)
    lag = prefetch_lag_ns(cta, pos, compute_ns, epilogue_ns, model)
    f, stall = forward_launch(cta, pos, bytes_per_tile, compute_ns, model, load_lag_ns=lag, **kw)
    rows.append(("prefetch", 1.0, f.kernel_ns, _median_stall(stall)))
    rows.append(("link_floor", np.nan, link_floor_ns(np.broadcast_to(np.asarray(bytes_per_tile, np.float64), (n,)), model), np.nan))
    out = pd.DataFrame(rows, columns=WHATIF_COLUMNS[:-1])
    out["gain"] = base.kernel_ns / out["kernel_ns"]
    return out


RUN_COLUMNS = ["dest", "shape", "variant", "schedule", *WHATIF_COLUMNS]


def run_whatifs(tiles: pd.DataFrame, dumps: pd.DataFrame, link: LinkModel | None) -> pd.DataFrame:
    """docs/model.md §13: one row per configuration (dest, shape, variant, schedule) × alternative over the launches
    of ``tiles`` (the run's tiles table) whose dest is not a control and whose operands are loaded from global
    memory: ``launch_whatifs`` per launch (offered compute: the control's, ``control_compute_ns``; epilogue:
    ``control_epilogue_ns``), medians over the configuration's launches. Empty without a link model."""
    if link is None or tiles.empty:
        return pd.DataFrame(columns=RUN_COLUMNS)
    info = dumps.astype({"dump": str}).drop_duplicates(["rank", "dump"]).set_index(["rank", "dump"])
    rows = []
    for (rank, dump), t in tiles.groupby([tiles["rank"], tiles["dump"].astype(str)], sort=True):  # one per launch
        d = info.loc[(rank, dump)] if (rank, dump) in info.index else {}
        if bool(d.get("is_control", False)) or str(d.get("operands", "")) == "smem":
            continue
        offered = t["control_compute_ns"].to_numpy(np.float64)
        if not np.isfinite(offered).all() or not np.nansum(t["rs_bytes"].to_numpy(np.float64)) > 0:
            continue
        col = lambda name, default: np.nan_to_num(t[name].to_numpy(np.float64)) if name in t else default  # noqa: E731
        w = launch_whatifs(t["cta"].to_numpy(), t["position"].to_numpy(), col("rs_bytes", 0.0), offered, link,
                           epilogue_ns=col("control_epilogue_ns", 0.0), steps=col("load_steps", np.ones(1)).astype(np.int64),
                           stages=col("load_stages", np.ones(1)).astype(np.int64), cover_tiles=int(col("cover_tiles", np.zeros(1)).max(initial=0)),
                           plain_store=bool(t["plain_store"].iloc[0]) if "plain_store" in t else False)
        for k in ("dest", "shape", "variant", "schedule"):
            w[k] = str(t[k].iloc[0]) if pd.notna(t[k].iloc[0]) else "-"  # the verdicts' placeholder
        rows.append(w)
    if not rows:
        return pd.DataFrame(columns=RUN_COLUMNS)
    keys = ["dest", "shape", "variant", "schedule", "alternative"]
    out = pd.concat(rows, ignore_index=True).groupby(keys, sort=False)[["parameter", "kernel_ns", "stall_ns", "gain"]].median().reset_index()
    return out[RUN_COLUMNS]
