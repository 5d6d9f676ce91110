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
    return _whatif_tables([dict(cta=cta, position=position, bytes_per_tile=bytes_per_tile, compute_ns=compute_ns, epilogue_ns=epilogue_ns,
                                steps=steps, stages=stages, ctas_options=ctas_options, cover_tiles=cover_tiles, plain_store=plain_store)],
                          model)[0]


def _alternatives(cta: np.ndarray, pos: np.ndarray, compute_ns, epilogue_ns, model: LinkModel, ctas_options) -> list[tuple]:
    """(alternative, parameter, CTA, position, first-load lag) of every alternative of ``launch_whatifs``: as run,
    each K' of the options, prefetch."""
    k = len(np.unique(cta))
    options = sorted({int(x) for x in (ctas_options if ctas_options is not None else (k // 2, k // 4, k // 8)) if 0 < int(x) < k})
    alts = [("as_run", float(k), cta, pos, 0.0)]
    alts += [("sm_count", float(kp), *redistributed(cta, pos, kp), 0.0) for kp in options]  # a handful of K' values
    alts.append(("prefetch", 1.0, cta, pos, prefetch_lag_ns(cta, pos, compute_ns, epilogue_ns, model)))
    return alts


def _whatif_tables(launches: list[dict], model: LinkModel) -> list[pd.DataFrame]:
    """``launch_whatifs`` of each launch (its arguments as a dict), every alternative of the launches that share a
    lifecycle (``cover_tiles``, ``plain_store``) predicted in one ``forward_launch`` call, each as a launch of its own."""
    alts, floors, calls = [], [], {}
    for i, a in enumerate(launches):
        cta, pos = np.asarray(a["cta"], np.int64), np.asarray(a["position"], np.int64)
        n = len(cta)
        steps = np.broadcast_to(np.asarray(a["steps"], np.int64), (n,))
        per_tile = dict(bytes_per_tile=np.broadcast_to(np.asarray(a["bytes_per_tile"], np.float64), (n,)),
                        compute_ns=np.broadcast_to(np.asarray(a["compute_ns"], np.float64), (n,)),
                        epilogue_ns=np.broadcast_to(np.asarray(a["epilogue_ns"], np.float64), (n,)), steps=steps,
                        stages=steps if a["stages"] is None else np.broadcast_to(np.asarray(a["stages"], np.int64), (n,)))
        alts.append(_alternatives(cta, pos, per_tile["compute_ns"], per_tile["epilogue_ns"], model, a["ctas_options"]))
        floors.append(link_floor_ns(per_tile["bytes_per_tile"], model))
        calls.setdefault((int(a["cover_tiles"]), bool(a["plain_store"])), []).append((i, per_tile))
    results: dict[int, list] = {}
    for (cover, plain), members in calls.items():
        parts = [(i, j, per_tile, alt) for i, per_tile in members for j, alt in enumerate(alts[i])]
        cat = lambda key: np.concatenate([p[2][key] for p in parts])  # noqa: E731
        launch = np.concatenate([np.full(len(p[3][2]), code) for code, p in enumerate(parts)])
        lag = np.concatenate([np.broadcast_to(np.asarray(p[3][4], np.float64), (len(p[3][2]),)) for p in parts])
        f, stall = forward_launch(np.concatenate([p[3][2] for p in parts]), np.concatenate([p[3][3] for p in parts]), cat("bytes_per_tile"),
                                  cat("compute_ns"), model, epilogue_ns=cat("epilogue_ns"), steps=cat("steps"), stages=cat("stages"),
                                  cover_tiles=cover, plain_store=plain, load_lag_ns=lag, launch=launch)
        at = 0
        for code, (i, j, _, alt) in enumerate(parts):
            m = len(alt[2])
            results.setdefault(i, []).append((alt[0], alt[1], float(f.kernel_by_launch_ns[code]), _median_stall(stall[at:at + m])))
            at += m
    out = []
    for i in range(len(launches)):
        rows = results[i]
        best = None
        for cand in rows[1:-1]:  # the K' alternatives: the fastest kept (the first of equals)
            best = cand if best is None or cand[2] < best[2] else best
        table = [rows[0], *([best] if best is not None else []), rows[-1],
                 ("link_floor", np.nan, floors[i], np.nan)]
        t = pd.DataFrame(table, columns=WHATIF_COLUMNS[:-1])
        t["gain"] = rows[0][2] / t["kernel_ns"]
        out.append(t)
    return out


RUN_COLUMNS = ["dest", "shape", "variant", "schedule", *WHATIF_COLUMNS]


def run_whatifs(tiles: pd.DataFrame, dumps: pd.DataFrame, link: LinkModel | None) -> pd.DataFrame:
    """docs/model.md §13: one row per configuration (dest, shape, variant, schedule) × alternative over the launches
    of ``tiles`` (the run's tiles table) whose dest is not a control and whose operands are loaded from global
    memory: ``launch_whatifs`` of each launch, all in one forward call per lifecycle (offered compute: the control's, ``control_compute_ns``; epilogue:
    ``control_epilogue_ns``), medians over the configuration's launches. Empty without a link model."""
    if link is None or tiles.empty:
        return pd.DataFrame(columns=RUN_COLUMNS)
    info = dumps.astype({"dump": str}).drop_duplicates(["rank", "dump"]).set_index(["rank", "dump"])
    launches, labels = [], []
    for (rank, dump), t in tiles.groupby([tiles["rank"], tiles["dump"].astype(str)], sort=True):  # one per launch
        d = info.loc[(rank, dump)] if (rank, dump) in info.index else {}
        if bool(d.get("is_control", False)) or str(d.get("operands", "")) == "smem":
            continue
        offered = t["control_compute_ns"].to_numpy(np.float64)
        if not np.isfinite(offered).all() or not np.nansum(t["rs_bytes"].to_numpy(np.float64)) > 0:
            continue
        col = lambda name, default: np.nan_to_num(t[name].to_numpy(np.float64)) if name in t else default  # noqa: E731
        launches.append(dict(cta=t["cta"].to_numpy(), position=t["position"].to_numpy(), bytes_per_tile=col("rs_bytes", 0.0),
                             compute_ns=offered, epilogue_ns=col("control_epilogue_ns", 0.0),
                             steps=col("load_steps", np.ones(1)).astype(np.int64), stages=col("load_stages", np.ones(1)).astype(np.int64),
                             ctas_options=None, cover_tiles=int(col("cover_tiles", np.zeros(1)).max(initial=0)),
                             plain_store=bool(t["plain_store"].iloc[0]) if "plain_store" in t else False))
        labels.append({k: str(t[k].iloc[0]) if pd.notna(t[k].iloc[0]) else "-" for k in ("dest", "shape", "variant", "schedule")})  # the verdicts' placeholder
    if not launches:
        return pd.DataFrame(columns=RUN_COLUMNS)
    rows = [w.assign(**label) for w, label in zip(_whatif_tables(launches, link), labels)]
    keys = ["dest", "shape", "variant", "schedule", "alternative"]
    out = pd.concat(rows, ignore_index=True).groupby(keys, sort=False)[["parameter", "kernel_ns", "stall_ns", "gain"]].median().reset_index()
    return out[RUN_COLUMNS]
