"""From epilogue stall to compute stall (docs/model.md §5, Table 3)."""

from __future__ import annotations

import sys
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from xstage_trace.analysis.columnar import text_codes
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.stall_law import predicted_stall_ns


def stall_summary(tiles: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Table-3 style summary over tiles grouped by ``by``: medians of span, cover, mainloops,
    predicted and measured stall; counts of backpressured tiles."""
    agg = {
        "tiles": ("rs_span_ns", "size"),
        "span_med_ns": ("rs_span_ns", "median"),
        "cover_med_ns": ("cover_ns", "median"),
        "predicted_stall_med_ns": ("predicted_stall_ns", "median"),
        "predicted_stall_mean_ns": ("predicted_stall_ns", "mean"),
    }
    if "measured_stall_ns" in tiles:
        agg["measured_stall_med_ns"] = ("measured_stall_ns", "median")
        agg["measured_stall_mean_ns"] = ("measured_stall_ns", "mean")
    if "backpressured" in tiles:
        agg["backpressured_tiles"] = ("backpressured", "sum")
    return tiles.groupby(by, dropna=False).agg(**agg).reset_index()


CONFIG = ["dest", "shape", "variant"]
SCHEDULES = {"wave": "linear2", "interleaved": "linear1"}  # schedule → the tile kind whose mainloop covers (docs/model.md §5)


def _us(x: float) -> float:
    return float(x) / 1e3


def _filled_codes(col: pd.Series, fill: str) -> tuple[np.ndarray, list[str]]:
    """(code per row, names): the column as text codes (``columnar.text_codes``), missing values as ``fill``."""
    codes, names = text_codes(col)
    codes = codes.astype(np.int32)
    if (codes < 0).any():
        if fill not in names:
            names.append(fill)
        codes[codes < 0] = names.index(fill)
    return codes, names


def _finite(x: np.ndarray) -> np.ndarray:
    return x[~np.isnan(x)]


def _mean(x: np.ndarray) -> float:
    """Mean of ``x`` (no NaN) as one numpy sum over the count (NaN when empty)."""
    return float(x.sum() / len(x)) if len(x) else np.nan


def table3_from_tiles(tiles: pd.DataFrame | Mapping[str, pd.Series]) -> pd.DataFrame:
    """Spec §5 Table 3 for measured runs, one row per configuration (dest, shape, kernel variant):
    medians of the Linear-2 remote-store span per schedule and of the Linear-2 / Linear-1 mainloops;
    the predicted Δt both ways — the paper's ``[median span − median T^mma]₊`` (``*_pred_medians_us``,
    wave covered by the Linear-2 mainloop, interleaved by the Linear-1 one) and the median of the per-tile
    ``[T_lead + T_RS − T_cover]₊`` (``*_pred_tiles_us``) — the median measured stall, the per-tile median and mean
    |predicted − measured|, the count of backpressured tiles, the count of Linear-2 tiles whose mainloop
    is inflated against the local control's (``analysis.tiles.mainloop_inflated``, whatever their slot
    wait) and of those that could be judged (``inflation_judged_*``: a control of that shape and operand
    path was traced). Timing scope: probe clock64 converted to ns per SM."""
    return table3_from_parts(lambda: (tiles,), sys.maxsize)


def table3_from_parts(parts: Callable[[], Iterable[pd.DataFrame]], cap: int) -> pd.DataFrame:
    """``table3_from_tiles`` of the tiles that ``parts()`` yields part by part (anew on every call), in memory
    bounded by ``cap`` values per sample: each part's ``table3_samples``, the medians by
    ``selection.order_statistics`` (from the whole samples while they hold at most ``cap`` values, so the
    rows are those of one table of all the parts; past it from passes over the parts), the ``err`` means from
    the whole samples or, past the cap, from the parts' sums (then not bit-identical to one numpy sum)."""
    from xstage_trace.analysis.selection import median_of, median_ranks, order_statistics

    counts: dict[tuple, int | float] = {}
    sums: dict[tuple, float] = {}
    passes = [0]

    def chunks() -> Iterator[dict[tuple, np.ndarray]]:
        passes[0] += 1
        for part in parts():
            samples, c = table3_samples(part)
            if passes[0] == 1:  # the counts and sums of the first pass only
                for k, v in c.items():
                    counts[k] = counts.get(k, 0) + v
                for k, v in samples.items():
                    if k[1].startswith("err_"):
                        sums[k] = sums.get(k, 0.0) + float(v.sum())
            yield samples

    n, whole, found = order_statistics(chunks, lambda name, m: median_ranks(m), cap)
    medians = {k: median_of(found[k], n[k]) for k in n}
    means = {k: _mean(whole[k]) if k in whole else sums[k] / n[k] for k in n if k[1].startswith("err_")}
    return table3_rows(counts, medians, means)


def table3_samples(tiles: pd.DataFrame | Mapping[str, pd.Series]) -> tuple[dict[tuple, np.ndarray], dict[tuple, int | float]]:
    """What Table 3 (``table3_from_tiles``) takes of ``tiles``, per configuration (dest, shape, variant):
    the samples whose medians it reports, NaN dropped, as {(configuration, name): values}, and the counts
    and sums it adds up, as {(configuration, name): number}. The samples and counts of disjoint sets of
    tiles combine (values joined, numbers added) into those of their union."""
    from xstage_trace.analysis.tiles import mainloop_inflated

    samples: dict[tuple, np.ndarray] = {}
    counts: dict[tuple, int | float] = {}
    n = len(tiles["mainloop_ns"])
    if not n:
        return samples, counts
    ok = (tiles["schedule"].notna() & tiles["dest"].notna() & tiles["shape"].notna()).to_numpy()  # as groupby drops missing keys
    dest, dest_names = _filled_codes(tiles["dest"], "")
    shape, shape_names = _filled_codes(tiles["shape"], "")
    variant, variant_names = _filled_codes(tiles["variant"], "-")
    sched, sched_names = _filled_codes(tiles["schedule"], "")
    kind, kind_names = _filled_codes(tiles["tile_kind"], "")
    config = (dest * len(shape_names) + shape) * len(variant_names) + variant
    of_kind = {k: ok & (kind == kind_names.index(k)) if k in kind_names else np.zeros(n, bool) for k in ("linear1", "linear2")}
    l2 = of_kind["linear2"]
    num = {c: tiles[c].to_numpy(np.float64) for c in ("mainloop_ns", "rs_span_ns", "predicted_stall_ns", "measured_stall_ns", "control_mainloop_ns")}
    backpressured, inflated = tiles["backpressured"].to_numpy(bool), mainloop_inflated(tiles)
    per_dest = len(shape_names) * len(variant_names)
    for c in np.unique(config[l2]):  # the configurations with Linear-2 tiles
        key = (dest_names[c // per_dest], shape_names[(c // len(variant_names)) % len(shape_names)], variant_names[c % len(variant_names)])
        same = config == c
        for k in ("linear1", "linear2"):
            samples[key, f"mainloop_{k}"] = _finite(num["mainloop_ns"][same & of_kind[k]])
        for name in SCHEDULES:
            w = same & l2 & (sched == (sched_names.index(name) if name in sched_names else -1))
            pred, meas = num["predicted_stall_ns"][w], num["measured_stall_ns"][w]
            samples[key, f"span_{name}"] = _finite(num["rs_span_ns"][w])
            samples[key, f"pred_{name}"], samples[key, f"meas_{name}"] = _finite(pred), _finite(meas)
            samples[key, f"err_{name}"] = _finite(np.abs(pred - meas))
            counts.update({(key, f"backpressured_{name}"): int(backpressured[w].sum()), (key, f"inflated_{name}"): int(inflated[w].sum()),
                           (key, f"inflation_judged_{name}"): int((~np.isnan(num["control_mainloop_ns"][w])).sum()), (key, f"tiles_{name}"): int(w.sum())})
    return samples, counts


def table3_rows(counts: Mapping[tuple, int | float], medians: Mapping[tuple, float], err_means: Mapping[tuple, float]) -> pd.DataFrame:
    """Table 3's rows (``table3_from_tiles``) from the medians of ``table3_samples``' samples, the means
    of its ``err_*`` samples and its counts, one row per configuration in key order."""
    rows = []
    for key in sorted({k for k, _ in counts}):
        ml = {k: medians[key, f"mainloop_{k}"] for k in ("linear1", "linear2")}
        row = {"dest": key[0], "shape": key[1], "variant": key[2], "mainloop_l2_us": _us(ml["linear2"]), "mainloop_l1_us": _us(ml["linear1"]), "tiles_l2": 0}
        for name, cover_kind in SCHEDULES.items():
            span = medians[key, f"span_{name}"]
            row.update({
                f"span_{name}_us": _us(span),
                f"stall_{name}_pred_medians_us": _us(predicted_stall_ns(span, ml[cover_kind])),
                f"stall_{name}_pred_tiles_us": _us(medians[key, f"pred_{name}"]),
                f"stall_{name}_meas_us": _us(medians[key, f"meas_{name}"]),
                f"err_{name}_median_us": _us(medians[key, f"err_{name}"]),
                f"err_{name}_mean_us": _us(err_means[key, f"err_{name}"]),
                **{f"{c}_{name}": int(counts[key, f"{c}_{name}"]) for c in ("backpressured", "inflated", "inflation_judged")},
            })
            row["tiles_l2"] = max(row["tiles_l2"], int(counts[key, f"tiles_{name}"]))
        rows.append(row)
    return pd.DataFrame(rows)


def kernel_trials(kernels: pd.DataFrame, dumps: pd.DataFrame, warmup_launches: int = 0) -> pd.DataFrame:
    """One row per (rank, configuration, trial) with the kernel time in ms (timing scope: kernel time,
    nsys) and ``kernel``, the nsys short name of the launched kernel. A configuration's launches are
    the kernels under NVTX ranges named by one of its dumps' labels; ``trial`` counts them in time
    order per rank, and the first ``warmup_launches`` of each (rank, configuration) are warm-ups,
    left out. A label that carries ``trial=N`` (negative for warm-ups) is used as is. This is the
    project's one definition of a trial (Table 3, report, ``compare``)."""
    from xstage_trace.base.config import RunConfig

    cols = ["rank", *CONFIG, "schedule", "kernel", "trial", "kernel_ms"]
    if kernels.empty or dumps.empty:
        return pd.DataFrame(columns=cols)
    cfg = dumps.drop_duplicates(["rank", "label"])[["rank", "label", *CONFIG, "schedule"]]
    k = kernels.dropna(subset=["nvtx_range"])
    k = k.assign(kernel=k["short_name"].fillna(k["name"]).astype(str) if "short_name" in k else k["name"].astype(str))
    k = k.merge(cfg, left_on=["rank", "nvtx_range"], right_on=["rank", "label"], how="inner")
    k = k.sort_values(["rank", "start_ns"], kind="stable")
    k["trial"] = k.groupby(["rank", "nvtx_range"]).cumcount() - int(warmup_launches)
    trial_of = {text: RunConfig.from_label(text).trial for text in k["nvtx_range"].unique()}  # one per configuration
    labelled = k["nvtx_range"].map(trial_of)
    k["trial"] = labelled.where(labelled.notna(), k["trial"]).astype(int)
    k = k[k["trial"] >= 0]
    return k.assign(kernel_ms=k["duration_ns"] / 1e6, variant=k["variant"].fillna("-"))[cols].reset_index(drop=True)


def attach_kernel_times(table3: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Add per schedule the kernel time (docs/model.md §10: per trial the slowest rank, then the median over
    trials; warm-ups already excluded by ``kernel_trials``), the trials and the ranks counted."""
    from xstage_trace.analysis.timing import max_across_ranks_median

    out = table3.copy()
    if out.empty or trials.empty:
        return out
    med = max_across_ranks_median(trials, CONFIG + ["schedule"])
    idx = pd.MultiIndex.from_frame(out[CONFIG])
    for sched in SCHEDULES:
        m = med[med["schedule"] == sched].set_index(CONFIG)
        out[f"kernel_ms_{sched}"] = m["kernel_ms_max_rank_median"].reindex(idx).to_numpy()
        out[f"trials_{sched}"] = m["trials"].reindex(idx).to_numpy()
        out[f"ranks_{sched}"] = m["ranks"].reindex(idx).to_numpy()
    return out


def store_stall_predictions(bursts: pd.DataFrame, gap_ns: float, model: PlatformModel) -> tuple[np.ndarray, float]:
    """Predicted issue stall per burst of one launch (rows in burst order), beyond the floor, and the
    drain rate R used (R(K, B) of the full round): with a calibrated capacity the docs/model.md §4 stalled
    trajectory (T_iss,n − T_iss,n^0, issue stretched to respect Q), else Eq. 1's
    ΔT_iss = [V/R − G − T_iss^0]₊. ``gap_ns`` is the offered compute between bursts (the
    uncontended mainloop); the last burst's gap is unbounded."""
    from xstage_trace.analysis.burst_gap import issue_overhead_ns
    from xstage_trace.analysis.calibration_fit import rates_of
    from xstage_trace.analysis.recurrence import stalled_trajectory

    k = bursts["producers"].to_numpy(np.float64)
    v = bursts["volume_bytes"].to_numpy(np.float64)
    b = v / np.maximum(k, 1)
    floor = model.floor_ns(k, b)
    gap = np.full(len(v), float(gap_ns))
    gap[-1:] = np.inf
    top = int(np.argmax(k))
    rate = float(rates_of(model, k[top:top + 1], b[top:top + 1])[0])  # the full round's R(K, B)
    cap = model.capacity(k[top:top + 1])
    if cap is None:
        return issue_overhead_ns(gap, v, rate, floor), rate
    return stalled_trajectory(v, gap, floor, rate, float(cap[0]), model.loop_overhead_ns)["issue_overhead_ns"].to_numpy(), rate


STORE_CASE = ["dest", "shape"]


def store_wait_vs_model(tiles: pd.DataFrame, bursts: pd.DataFrame, models: dict[str, PlatformModel]) -> pd.DataFrame:
    """Per tile of a kernel whose tiles store through one staging buffer (DeepGEMM sm_90): the stall
    the calibrated path predicts for the tile's store round vs what the tile measured.

    Burst n of a launch is the n-th store of every CTA (``bursts``), i.e. the tiles at position n.
    Its offered gap G is the median mainloop of the control tiles of the same shape (``is_control``;
    the run's ``tiles()`` carry no such column, then the local-store destination, as RunConfig has it):
    the mainloop as it runs without backpressure (the measured one is not offered compute once the
    path stalls it). ``models`` maps a destination (``dest``) to its calibrated platform; tiles of
    another destination are left out. Per tile: ``predicted_stall_ns`` (store_stall_predictions),
    ``store_wait_stall_ns`` (the measured wait for the staging buffer before the next tile's
    epilogue, beyond the control's floor: ``measured_stall_ns``) and ``mainloop_excess_ns`` (the next
    tile's mainloop beyond G: where a stall shows when the store holds up the next tile's operand
    loads instead of its epilogue). Timing scope: probe clock per SM."""
    cols = [*STORE_CASE, "dump", "cta", "position", "tile", "gap_ns", "rate_gbps", "predicted_stall_ns", "store_wait_stall_ns", "mainloop_excess_ns"]
    control = tiles["is_control"].astype(bool) if "is_control" in tiles else tiles["dest"] == "local"  # RunConfig.is_control
    gap_of = tiles[control].groupby("shape")["mainloop_ns"].median()
    frames = []
    for (rank, dest, dump), b in bursts.groupby(["rank", "dest", "dump"], sort=True):  # one burst sequence per launch
        t = tiles[(tiles["rank"] == rank) & (tiles["dump"] == dump)]
        shape = t["shape"].iloc[0] if len(t) else None
        if dest not in models or shape not in gap_of.index:
            continue
        b = b.sort_values("burst")
        stall, rate = store_stall_predictions(b, float(gap_of[shape]), models[dest])
        pred = pd.Series(stall, index=b["burst"].to_numpy())
        frames.append(pd.DataFrame({
            "dest": dest, "shape": shape, "dump": dump, "cta": t["cta"].to_numpy(), "position": t["position"].to_numpy(),
            "tile": t["tile"].to_numpy(), "gap_ns": float(gap_of[shape]), "rate_gbps": rate,
            "predicted_stall_ns": pred.reindex(t["position"].to_numpy()).to_numpy(),
            "store_wait_stall_ns": t["measured_stall_ns"].to_numpy(),
            "mainloop_excess_ns": t["cover_ns"].to_numpy() - float(gap_of[shape]),
        }))
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def round_rate_gbps(bursts: pd.DataFrame) -> pd.Series:
    """Per launch (rank, dump), the rate the store rounds actually went at: the bytes of every round
    but the last over the time from the first round's start to the last one's (GB/s = bytes/ns)."""
    b = bursts.sort_values(["rank", "dump", "burst"], kind="stable")
    g = b.groupby(["rank", "dump"], sort=True)
    span = g["start_ns"].last() - g["start_ns"].first()
    volume = g["volume_bytes"].sum() - g["volume_bytes"].last()
    return (volume / span).where(span > 0)


def store_wait_summary(per_tile: pd.DataFrame, bursts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per case (dest, shape): tiles compared, the drain rate R the model used and (given ``bursts``)
    the median round rate the launches achieved (round_rate_gbps), median and p90 of predicted stall,
    measured store-wait stall and mainloop excess (µs), and for each measurement its Spearman ρ with
    the prediction and the mean absolute error |predicted − measured| (µs). Tiles without a successor
    (no measurement) are left out; ρ is NaN where either side is constant (e.g. a prediction of 0
    everywhere)."""
    from scipy.stats import spearmanr

    rates = round_rate_gbps(bursts) if bursts is not None and len(bursts) else pd.Series(dtype=float)
    rows = []
    for (dest, shape), g in per_tile.groupby(STORE_CASE, sort=True):
        g = g.dropna(subset=["predicted_stall_ns", "store_wait_stall_ns", "mainloop_excess_ns"])
        launches = rates[rates.index.get_level_values("dump").isin(g["dump"].unique())] if len(rates) else rates
        row = {"dest": dest, "shape": shape, "tiles": len(g), "launches": g["dump"].nunique(),
               "rate_model_gbps": float(g["rate_gbps"].median()), "rate_rounds_gbps": float(launches.median()) if len(launches) else np.nan}
        for col, name in (("predicted_stall_ns", "pred"), ("store_wait_stall_ns", "wait"), ("mainloop_excess_ns", "excess")):
            row[f"{name}_median_us"] = _us(g[col].median())
            row[f"{name}_p90_us"] = _us(g[col].quantile(0.9))
        for col, name in (("store_wait_stall_ns", "wait"), ("mainloop_excess_ns", "excess")):
            constant = g[col].nunique() < 2 or g["predicted_stall_ns"].nunique() < 2
            row[f"{name}_spearman"] = np.nan if constant else float(spearmanr(g["predicted_stall_ns"], g[col]).statistic)
            row[f"{name}_mae_us"] = _us((g["predicted_stall_ns"] - g[col]).abs().mean())
        rows.append(row)
    return pd.DataFrame(rows)
