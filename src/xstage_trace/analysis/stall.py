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
    """docs/model.md §5 Table 3 for measured runs of any kernel (§12), one row per configuration and
    schedule (dest, shape, kernel variant, schedule; ``base.schema.TABLE3``, ns), over the tiles whose
    epilogue stores remotely (a store span): their count; medians of the compute span, the other tiles'
    compute span (the fused kernel's Linear-1), the control's compute span, the cover and the store span;
    the slot model both ways — the paper's ``[median span − median T_cover]₊`` (``slot_pred_medians_ns``)
    and the median of the per-tile ``[T_lead + T_RS − T_cover]₊`` (``slot_pred_ns``) — against the median
    measured slot stall (``slot_meas_ns``) with the per-tile median and mean |predicted − measured|; the
    measured stall (§12: slot wait plus compute span beyond the control's; median, p99, its compute part)
    and the calibrated forward prediction (``forward_stall_ns``, NaN without a calibration); the counts of
    stalled, backpressured, inflated and judgeable tiles. Timing scope: probe clock64 converted to ns per SM."""
    return table3_from_parts(lambda: (tiles,), sys.maxsize)


def table3_from_parts(parts: Callable[[], Iterable[pd.DataFrame]], cap: int) -> pd.DataFrame:
    """``table3_from_tiles`` of the tiles that ``parts()`` yields part by part (anew on every call), in memory
    bounded by ``cap`` values per sample: each part's ``table3_samples``, the order statistics by
    ``selection.order_statistics`` (from the whole samples while they hold at most ``cap`` values, so the
    rows are those of one table of all the parts; past it from passes over the parts), the ``err`` means from
    the whole samples or, past the cap, from the parts' sums (then not bit-identical to one numpy sum)."""
    from xstage_trace.analysis.selection import linear_quantile_of, median_of, median_ranks, order_statistics, quantile_ranks

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
                    if k[1] == "err":
                        sums[k] = sums.get(k, 0.0) + float(v.sum())
            yield samples

    def ranks_of(name, m: int) -> list[int]:
        return median_ranks(m) + quantile_ranks(m, 0.99) if name[1] == "stall" else median_ranks(m)

    n, whole, found = order_statistics(chunks, ranks_of, cap)
    medians = {k: median_of(found[k], n[k]) for k in n}
    p99 = {k: linear_quantile_of(found[k], n[k], 0.99) for k in n if k[1] == "stall"}
    means = {k: _mean(whole[k]) if k in whole else sums[k] / n[k] for k in n if k[1] == "err"}
    return table3_rows(counts, medians, p99, means)


TABLE3_KEYS = ["dest", "shape", "variant", "schedule"]
_MEDIANS = {"compute": "mainloop_ns", "cover": "cover_ns", "store_span": "rs_span_ns", "slot_pred": "predicted_stall_ns",
            "slot_meas": "measured_stall_ns", "stall": "stall_ns", "compute_stall": "compute_stall_ns",
            "control_compute": "control_compute_ns", "forward_stall": "forward_stall_ns"}


def table3_samples(tiles: pd.DataFrame | Mapping[str, pd.Series]) -> tuple[dict[tuple, np.ndarray], dict[tuple, int | float]]:
    """What Table 3 (``table3_from_tiles``) takes of ``tiles``, per configuration (dest, shape, variant,
    schedule): the samples whose order statistics it reports, NaN dropped, as {(configuration, name): values},
    and the counts it adds up, as {(configuration, name): number}. The samples and counts of disjoint sets of
    tiles combine (values joined, numbers added) into those of their union. A missing shape, variant or
    schedule is a key of its own ("-"); tiles without a destination are left out."""
    from xstage_trace.analysis.tiles import mainloop_inflated

    samples: dict[tuple, np.ndarray] = {}
    counts: dict[tuple, int | float] = {}
    n = len(tiles["mainloop_ns"])
    if not n:
        return samples, counts
    ok = tiles["dest"].notna().to_numpy()
    codes = [_filled_codes(tiles[k], "-") for k in TABLE3_KEYS]
    config = np.zeros(n, np.int64)
    for c, names in codes:
        config = config * len(names) + c
    num = {c: np.asarray(tiles[c], np.float64) if c in tiles else np.full(n, np.nan) for c in {*_MEDIANS.values(), "noise_ns"}}
    stores = ok & ~np.isnan(num["rs_span_ns"])
    others = ok & np.isnan(num["rs_span_ns"])
    backpressured, inflated = np.asarray(tiles["backpressured"], bool), mainloop_inflated(tiles)
    stalled = num["stall_ns"] > num["noise_ns"]
    for c in np.unique(config[stores]):  # the configurations with remote-store tiles
        key, rest = [], int(c)
        for _, names in reversed(codes):
            rest, i = divmod(rest, len(names))
            key.append(names[i])
        key = tuple(reversed(key))
        same = config == c
        w = same & stores
        for name, col in _MEDIANS.items():
            samples[key, name] = _finite(num[col][w])
        samples[key, "other_compute"] = _finite(num["mainloop_ns"][same & others])
        samples[key, "err"] = _finite(np.abs(num["predicted_stall_ns"][w] - num["measured_stall_ns"][w]))
        samples[key, "noise"] = _finite(num["noise_ns"][w])
        counts.update({(key, "tiles"): int(w.sum()), (key, "stalled_tiles"): int((w & stalled).sum()),
                       (key, "measured_tiles"): int((w & ~np.isnan(num["stall_ns"])).sum()),
                       (key, "backpressured_tiles"): int((w & backpressured).sum()), (key, "inflated_tiles"): int((w & inflated).sum()),
                       (key, "inflation_judged_tiles"): int((w & ~np.isnan(np.asarray(tiles["control_mainloop_ns"], np.float64))).sum())})
    return samples, counts


def table3_rows(counts: Mapping[tuple, int | float], medians: Mapping[tuple, float], p99: Mapping[tuple, float],
                err_means: Mapping[tuple, float]) -> pd.DataFrame:
    """Table 3's rows (``table3_from_tiles``, schema ``base.schema.TABLE3``) from the order statistics of
    ``table3_samples``' samples, the means of its ``err`` samples and its counts, one row per configuration in key order."""
    from xstage_trace.base.schema import TABLE3

    rows = []
    for key in sorted({k for k, _ in counts}):
        row = dict(zip(TABLE3_KEYS, key))
        row.update({f"{name}_ns": medians[key, name] for name in (*_MEDIANS, "other_compute")})
        row["slot_pred_medians_ns"] = float(predicted_stall_ns(medians[key, "store_span"], medians[key, "cover"]))
        row["slot_err_median_ns"], row["slot_err_mean_ns"] = medians[key, "err"], err_means[key, "err"]
        row["stall_p99_ns"] = p99[key, "stall"]
        row["noise_ns"] = medians[key, "noise"]
        row.update({c: int(counts[key, c]) for c in ("tiles", "measured_tiles", "stalled_tiles", "backpressured_tiles", "inflated_tiles",
                                                     "inflation_judged_tiles")})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[f.name for f in TABLE3 if f.name not in ("kernel_ns", "trials", "ranks")])
    return frame


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
    """Add to each Table 3 row its kernel time in ns (docs/model.md §10: per trial the slowest rank, then
    the median over trials; warm-ups already excluded by ``kernel_trials``), the trials and the ranks
    counted (NaN where the run has no nsys report for the configuration)."""
    from xstage_trace.analysis.timing import max_across_ranks_median

    out = table3.copy()
    out["kernel_ns"], out["trials"], out["ranks"] = np.nan, np.nan, np.nan
    if out.empty or trials.empty:
        return out
    med = max_across_ranks_median(trials.assign(schedule=trials["schedule"].fillna("-")), CONFIG + ["schedule"]).set_index(TABLE3_KEYS)
    idx = pd.MultiIndex.from_frame(out[TABLE3_KEYS])
    out["kernel_ns"] = med["kernel_ms_max_rank_median"].reindex(idx).to_numpy() * 1e6
    out["trials"] = med["trials"].reindex(idx).to_numpy()
    out["ranks"] = med["ranks"].reindex(idx).to_numpy()
    return out


def store_stall_predictions(bursts: pd.DataFrame, gap_ns: float | np.ndarray, model: PlatformModel) -> tuple[np.ndarray, float]:
    """Predicted issue stall per burst of one launch (rows in burst order), beyond the floor, and the
    drain rate R used (R(K, B) of the full round): with a calibrated capacity the docs/model.md §4 stalled
    trajectory (T_iss,n − T_iss,n^0, issue stretched to respect Q), else Eq. 1's
    ΔT_iss = [V/R − G − T_iss^0]₊. ``gap_ns`` is the offered compute between bursts (the
    uncontended mainloop; one value, or one per burst); the last burst's gap is unbounded."""
    overhead, _, rate = issue_overhead_of_rounds(bursts["producers"].to_numpy(np.float64), bursts["volume_bytes"].to_numpy(np.float64),
                                                 gap_ns, model)
    return overhead, rate


def issue_overhead_of_rounds(producers: np.ndarray, volume_bytes: np.ndarray, gap_ns: float | np.ndarray,
                             model: PlatformModel) -> tuple[np.ndarray, np.ndarray, float]:
    """``store_stall_predictions`` of one launch's rounds given as arrays (their producers K and bytes V; docs/model.md §4):
    (the issue stall per round beyond its floor, the floor T_iss^0 it is beyond, R)."""
    from xstage_trace.analysis.burst_gap import issue_overhead_ns
    from xstage_trace.analysis.calibration_fit import rates_of
    from xstage_trace.analysis.recurrence import stalled_issue

    k, v = producers, volume_bytes
    b = v / np.maximum(k, 1)
    floor = model.floor_ns(k, b)
    gap = np.broadcast_to(np.asarray(gap_ns, np.float64), v.shape).copy()
    gap[-1:] = np.inf
    top = int(np.argmax(k))
    rate = float(rates_of(model, k[top:top + 1], b[top:top + 1])[0])  # the full round's R(K, B)
    cap = model.capacity(k[top:top + 1])
    if cap is None:
        return issue_overhead_ns(gap, v, rate, floor), floor, rate
    _, issue, _, floor0 = stalled_issue(v, gap, floor, rate, float(cap[0]), model.loop_overhead_ns)
    return issue - floor0, floor, rate


def load_steps(rule: str | None, tile: np.ndarray, shape: str | None, extra: str | None) -> np.ndarray:
    """docs/model.md §11: the operand-load steps of each tile of one launch under a lifecycle's ``load_steps`` rule:
    "k_blocks" — K / 128 of the shape label ``m…n…k<K>``; "kv_blocks" — the attention tile's K/V blocks (its m block
    from the tile id, the label's seqlen, block_m, block_n, causal); one step otherwise or where the label lacks them."""
    n = len(tile)
    if rule == "k_blocks" and shape and "k" in str(shape):
        k = str(shape).rsplit("k", 1)[1]
        return np.full(n, max(int(k) // 128, 1)) if k.isdigit() else np.ones(n, np.int64)
    if rule == "kv_blocks":
        from xstage_trace.analysis.piggyback import decode_tile_id, kv_blocks

        words = dict(w.split("=", 1) for w in str(extra or "").split() if "=" in w)
        try:
            geo = [int(words[k]) for k in ("seqlen", "block_m", "block_n", "causal")]
        except (KeyError, ValueError):
            return np.ones(n, np.int64)
        return np.maximum(kv_blocks(decode_tile_id(tile)[0], geo[0], geo[1], geo[2], bool(geo[3])), 1)
    return np.ones(n, np.int64)


def launch_codes(tiles: pd.DataFrame) -> np.ndarray:
    """docs/model.md §4: a code per tile naming its launch, the (rank, dump) pair (a dump's name is unique
    only within its rank), numbered in order of first appearance; built from the dump column's codes and
    the integer ranks, with no text per row (rank·(D + 1) + dump code, D distinct dumps: one integer per pair, the
    missing dump's −1 included)."""
    dump, names = text_codes(tiles["dump"])
    return pd.factorize(tiles["rank"].to_numpy(np.int64) * (len(names) + 1) + dump)[0]


def forward_link_launches(tiles: pd.DataFrame, models: Mapping[str, object]) -> Iterator[tuple[np.ndarray, object, np.ndarray]]:
    """docs/model.md §11: per launch (rank, dump) of ``tiles`` that a path-drain calibration (``analysis.forward.LinkModel``
    per destination in ``models``) predicts, (its rows in ``tiles``, ``forward_tiles``' result, the per-tile stall):
    from its tiles' bytes, order and offered compute alone, the load wait that stretches the tile's compute span
    (operand loads queued behind the host writes issued before them, streamed over the tile's ``load_steps`` with
    ``load_stages`` in flight), plus, for a lifecycle whose staging buffer is waited for (``cover_tiles`` ≥ 1), the
    wait for the buffer: the store's acceptance beyond the end of the compute that covers it, and for plain stores
    (``plain_store``, Eq. 48) the wait inside the store span: its issue round's drain beyond its issue. The offered compute is
    the control's compute span of the same tile (``control_compute_ns``; the tile's own where no control was traced),
    the epilogue before the store is issued the control's epilogue span of the same tile (``control_epilogue_ns``; 0
    where unknown). Launches whose operands sit in shared memory (``operands`` smem: nothing to queue behind the host
    writes; ``forward_stall_ns`` predicts those) or without a model are skipped."""
    from xstage_trace.analysis.forward import Forward, forward_launch

    n = len(tiles)
    if not n or not models:
        return

    def col(name: str, default, dtype) -> np.ndarray:
        return np.nan_to_num(tiles[name].to_numpy(dtype)) if name in tiles else np.full(n, default, dtype)

    launch = launch_codes(tiles)
    dests = tiles["dest"].astype(str).to_numpy()
    offered = tiles["control_compute_ns"].fillna(tiles["mainloop_ns"]).to_numpy(np.float64)
    epilogue, nbytes = col("control_epilogue_ns", 0.0, np.float64), col("rs_bytes", 0.0, np.float64)
    steps, stages, cover_tiles = col("load_steps", 1, np.int64), col("load_stages", 1, np.int64), col("cover_tiles", 1, np.int64)
    cta, pos = tiles["cta"].to_numpy(np.int64), tiles["position"].to_numpy(np.int64)
    on_chip = (tiles["operands"].astype(str) == "smem").to_numpy() if "operands" in tiles else np.zeros(n, bool)
    plain = tiles["plain_store"].to_numpy(bool) if "plain_store" in tiles else np.zeros(n, bool)
    calls: dict[tuple, list[np.ndarray]] = {}
    for code in np.unique(launch):  # the launches that share a model and a lifecycle are predicted in one call
        rows = np.flatnonzero(launch == code)
        model = models.get(dests[rows[0]])
        if model is None or not np.isfinite(offered[rows]).all() or on_chip[rows[0]]:
            continue
        calls.setdefault((dests[rows[0]], int(cover_tiles[rows].max(initial=0)), bool(plain[rows[0]])), []).append(rows)
    for (dest, cover, plain_store), parts in calls.items():
        rows = np.concatenate(parts)
        f, stall = forward_launch(cta[rows], pos[rows], nbytes[rows], offered[rows], models[dest], epilogue_ns=epilogue[rows],
                                  steps=steps[rows], stages=stages[rows], cover_tiles=cover, plain_store=plain_store,
                                  launch=launch[rows])
        at = 0
        for i, part in enumerate(parts):  # launch codes ascending: the i-th part is the i-th launch of the call
            sub = slice(at, at + len(part))
            at += len(part)
            yield part, Forward(f.store_issue_ns[sub], f.accept_ns[sub], f.drained_ns[sub], f.compute_start_ns[sub], f.stall_ns[sub],
                                float(f.kernel_by_launch_ns[i]), f.kernel_by_launch_ns[i:i + 1]), stall[sub]


def forward_link_stall_ns(tiles: pd.DataFrame, models: Mapping[str, object]) -> np.ndarray:
    """docs/model.md §11: per tile the stall the path-drain calibration predicts (``forward_link_launches``); NaN
    where no model applies."""
    out = np.full(len(tiles), np.nan)
    for rows, _, stall in forward_link_launches(tiles, models):
        out[rows] = stall
    return out


def forward_link_kernels(tiles: pd.DataFrame, models: Mapping[str, object]) -> pd.DataFrame:
    """docs/model.md §11: per launch (rank, dump) the predicted kernel time (``kernel_ns``: the first compute start
    to the last store drained) and the predicted span to the last store issue (``last_issue_ns``) of
    ``forward_link_launches``."""
    rows = [(int(tiles["rank"].iloc[r[0]]), str(tiles["dump"].iloc[r[0]]), f.kernel_ns, float(np.nanmax(f.store_issue_ns)))
            for r, f, _ in forward_link_launches(tiles, models)]
    return pd.DataFrame(rows, columns=["rank", "dump", "kernel_ns", "last_issue_ns"])


def forward_stall_ns(tiles: pd.DataFrame, models: Mapping[str, PlatformModel]) -> np.ndarray:
    """docs/model.md §4, §5, §12: per tile the stall the calibrated store path predicts from the launch's
    burst sequence and offered compute alone, never from the tile's measured store span.

    Per launch (rank, dump) whose destination has a calibrated model (``models``: dest → model), the
    store tiles (those with a store span) of each CTA in order form the issue rounds (round n = every
    CTA's n-th store, ``analysis.bursts``): V_n = Σ their bytes, K_n = their CTAs. The offered compute
    after a store tile is the control's median compute span (``control_compute_ns``) of the tiles up to
    the CTA's next store tile; the round's gap G_n is its median over the round's CTAs. The recurrence
    (``store_stall_predictions``: the §4 stalled trajectory with the calibrated capacity, else Eq. 1)
    gives round n's issue time T_iss,n = T_iss^0(K_n, B_n) + ΔT_iss,n, and the tile's predicted stall is
    [T_iss,n − T_cover^0]₊, T_cover^0 being the offered compute of the ``cover_tiles`` tiles after it (the
    §5 rule with the predicted store span). Where no control of a tile's shape was traced its own compute
    span stands in for the offered compute. NaN where no model applies."""
    from xstage_trace.analysis.columnar import cumcount, group_median, lexsort_presorted, run_ids, shift_back

    n = len(tiles)
    out = np.full(n, np.nan)
    if not n or not models:
        return out
    launch = launch_codes(tiles)  # a launch is (rank, dump)
    order = lexsort_presorted((tiles["position"].to_numpy(), tiles["cta"].to_numpy(), launch, tiles["rank"].to_numpy()))  # tile_spans' order
    launch = launch[order]

    def col(name: str) -> np.ndarray:  # one column in (rank, dump, cta, position) order, not the whole frame
        return tiles[name].to_numpy(np.float64)[order]

    ids = run_ids(tiles["rank"].to_numpy()[order], launch, tiles["cta"].to_numpy()[order])
    # the offered compute: the control's, else (no control of the tile's shape) the tile's own compute span
    offered = col("control_compute_ns")
    offered = np.where(np.isnan(offered), col("mainloop_ns"), offered)
    k_cover = tiles["cover_tiles"].to_numpy(np.int64)[order] if "cover_tiles" in tiles else np.ones(n, np.int64)
    cover0 = np.zeros(n)
    for j in range(1, int(k_cover.max(initial=0)) + 1):
        cover0 += np.where(k_cover >= j, shift_back(offered, ids, j), 0.0)
    store = ~np.isnan(col("rs_span_ns"))
    rs_bytes = col("rs_bytes") if "rs_bytes" in tiles else np.zeros(n)
    # offered compute after each store tile, up to and including the CTA's next store tile
    seg = np.cumsum(store) - store  # store tiles so far, before this tile: the segment a tile's compute belongs to
    dest_code, dest_names = text_codes(tiles["dest"])
    dest_code = dest_code[order]
    by_launch = np.argsort(launch, kind="stable")  # each launch's rows in order, one slice of it per launch
    bounds = np.flatnonzero(np.r_[True, launch[by_launch][1:] != launch[by_launch][:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        rows = by_launch[lo:hi]
        model = models.get(dest_names[dest_code[rows[0]]] if dest_code[rows[0]] >= 0 else "nan")
        if model is None:
            continue
        srows = rows[store[rows]]
        if not len(srows):
            continue
        rnd = cumcount(ids[srows])
        # per CTA, the offered compute of the tiles whose segment index is the store tile's + 1
        key = ids[rows].astype(np.int64) * (n + 1) + seg[rows]
        uniq, inv = np.unique(key, return_inverse=True)
        seg_sum = np.bincount(inv, weights=np.nan_to_num(offered[rows]), minlength=len(uniq))
        want = ids[srows].astype(np.int64) * (n + 1) + seg[srows] + 1
        at = np.searchsorted(uniq, want)
        found = (at < len(uniq)) & (uniq[np.minimum(at, len(uniq) - 1)] == want)
        gap_tile = np.where(found, seg_sum[np.minimum(at, len(uniq) - 1)], np.nan)
        rounds = int(rnd.max()) + 1
        vol = np.bincount(rnd, weights=rs_bytes[srows], minlength=rounds)
        producers = np.bincount(rnd, minlength=rounds)
        gap = group_median(gap_tile, rnd, rounds)  # the round's median over its CTAs (NaN: none known)
        if np.isnan(gap[:-1]).any() or not np.isfinite(offered[srows]).any():
            continue
        overhead, floor, _ = issue_overhead_of_rounds(producers.astype(np.float64), vol, gap, model)
        issue = floor + overhead
        out[order[srows]] = np.maximum(issue[rnd] - cover0[srows], 0.0)
    return out


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
