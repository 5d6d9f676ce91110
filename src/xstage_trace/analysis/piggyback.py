"""The FlashAttention Q-loop piggyback audit (docs/model.md §7) on traced FA3 tiles.

Event mapping (recipe ``fa3``, instrument/targets/fa3/recipe.py): one slice per CTA (the first
consumer warp), per output tile a ``mainloop`` span (the Q tile's loop over its K/V blocks) and an
``epilogue`` span (O to shared memory, TMA store issued and waited: the sender-visible issue of the
tile's O burst) and, from the recipe's K/V steps, per K/V block n a ``kv_step`` span (payload n: from the
block's QK^T GEMM issued to the next block's, the last block's to the loop's exit; the tile's last 16 blocks,
all when it has no more) on the sampled tiles: a CTA's tiles 0, S, 2S, ... in its order, S being the payload of
every ``mainloop`` begin record (0 in builds without K/V steps). The tile id packs batch (bits 24..31), head (12..23) and m block (0..11). The dump
label names ``seqlen causal block_m block_n head_dim out_bytes`` (sample_traces/h200_fa3/run/driver.cu).

Per tile the gap after its O burst is the next tile's whole Q-loop on the same CTA; against each
calibrated store path: B_t = b_m·d·s_out, V = K·B_t (aligned worst case, K = the CTAs that hold
tiles), G* = [V/R − T_iss^0]₊, b^iso = [V − R·T_iss^0]₊ ≤ Q, σ = Q-loop time per K/V block,
M_ub* = b_n·⌈G*/σ⌉ (the what-if of :func:`xstage_trace.analysis.whatif.qloop_audit`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from xstage_trace.analysis.calibration_fit import rates_of
from xstage_trace.analysis.columnar import cumcount, run_ids, shift_back
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.analysis.spans import pair_spans
from xstage_trace.analysis.whatif import qloop_audit

QLOOP_EVENTS = ("mainloop", "epilogue")
KV_STEP_EVENT = "kv_step"
GEOMETRY_KEYS = ("seqlen", "causal", "block_m", "block_n", "head_dim", "out_bytes")
KEYS = ["rank", "dump", "cta", "tile"]


def decode_tile_id(tile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m_block, head, batch) of FA3 tile ids as the recipe packs them (xstage_fa3.h ``tile_id``)."""
    t = np.asarray(tile, dtype=np.int64)
    return t & 0xFFF, (t >> 12) & 0xFFF, (t >> 24) & 0xFF


def kv_blocks(m_block, seqlen: int, block_m: int, block_n: int, causal: bool) -> np.ndarray:
    """K/V blocks a Q tile's loop visits (equal Q and K lengths): ⌈M/b_n⌉, causal ⌈min(M, (m+1)·b_m)/b_n⌉
    (FA3's n_block_max with n_block_min = 0)."""
    m = np.asarray(m_block, dtype=np.int64)
    last_col = np.minimum(seqlen, (m + 1) * block_m) if causal else np.full(m.shape, seqlen)
    return -(-last_col // block_n)


def _geometry(dumps: pd.DataFrame) -> pd.DataFrame:
    """Per dump the label's tile geometry (integers), from the ``extra`` words; dumps without all keys are left out."""
    rows = []
    for _, d in dumps.iterrows():  # one row per dump
        words = dict(w.split("=", 1) for w in str(d.get("extra") or "").split() if "=" in w)
        if not all(k in words for k in GEOMETRY_KEYS):
            continue
        try:
            geo = {k: int(words[k]) for k in GEOMETRY_KEYS}
        except ValueError:
            continue
        rows.append({"rank": int(d["rank"]), "dump": str(d["dump"]), "dest": d.get("dest"), "shape": d.get("shape"), **geo})
    return pd.DataFrame(rows, columns=["rank", "dump", "dest", "shape", *GEOMETRY_KEYS])


def kv_step_spans(probes: pd.DataFrame) -> pd.DataFrame:
    """The recipe's K/V steps (``kv_step`` begin/end pairs matched per tile and K/V block): ``KEYS``, ``kv_block``
    (the payload), ``start_ns``, ``end_ns`` and ``step_ns``."""
    s = pair_spans(probes, [KV_STEP_EVENT], [*KEYS, "payload"])
    return s.rename(columns={"payload": "kv_block", "start": "start_ns", "end": "end_ns", "duration": "step_ns"})[
        [*KEYS, "kv_block", "start_ns", "end_ns", "step_ns"]]


def _kv_step_columns(probes: pd.DataFrame) -> pd.DataFrame:
    """Per tile with K/V steps: how many were recorded (``kv_steps``), their median and longest duration and the
    end of the last one (block 0's: the K/V loop's exit)."""
    s = kv_step_spans(probes).assign(dump=lambda f: f["dump"].astype(str))
    return s.groupby(KEYS, sort=False).agg(kv_steps=("step_ns", "size"), kv_step_median_ns=("step_ns", "median"),
                                            kv_step_max_ns=("step_ns", "max"), kv_exit_ns=("end_ns", "max")).reset_index()


def _kv_every(probes: pd.DataFrame) -> pd.DataFrame:
    """Per dump the recipe's K/V-step sampling period S: the payload of its ``mainloop`` begin records (0: no K/V
    steps)."""
    b = probes[(probes["event"] == QLOOP_EVENTS[0]).to_numpy() & (probes["kind"] == "begin").to_numpy()]
    return (b.assign(dump=lambda f: f["dump"].astype(str)).groupby(["rank", "dump"], sort=False)["payload"].max()
            .rename("kv_every").reset_index())


def qloop_tiles(probes: pd.DataFrame, dumps: pd.DataFrame) -> pd.DataFrame:
    """Per FA3 output tile: its Q-loop (``mainloop_ns``), O epilogue (``epilogue_ns``), K/V blocks and
    σ = mainloop_ns / kv_blocks, the CTA's tile order (``position``) and ``gap_after_ns`` = the next
    tile's Q-loop on the same CTA (NaN for a CTA's last tile); ``kv_every`` (the dump's K/V-step sampling period
    S, 0 without K/V steps) and ``kv_sampled`` (S > 0 and ``position`` a multiple of S: the tile must carry its
    steps); from the ``kv_step`` spans where the dump holds them (else 0 and NaN): ``kv_steps`` recorded, their median and longest (``kv_step_median_ns``,
    ``kv_step_max_ns``) and ``qloop_tail_ns``, the Q-loop after the K/V loop's exit (the last PV GEMM, O's final
    rescale, the scheduler's next tile). Dumps whose label lacks the geometry (``GEOMETRY_KEYS``) are left out."""
    geo = _geometry(dumps)
    if probes.empty or geo.empty:
        return pd.DataFrame()
    p = probes[probes["dump"].astype(str).isin(geo["dump"]) & probes["event"].isin([*QLOOP_EVENTS, KV_STEP_EVENT])]
    ml, ep = (pair_spans(p, [ev], KEYS) for ev in QLOOP_EVENTS)
    if ml.empty or ep.empty:
        return pd.DataFrame()
    ml = ml.rename(columns={"start": "start_ns", "duration": "mainloop_ns"})[[*KEYS, "start_ns", "mainloop_ns"]]
    ep = ep.rename(columns={"duration": "epilogue_ns"})[[*KEYS, "epilogue_ns"]]
    t = ml.merge(ep, on=KEYS, how="inner").assign(dump=lambda f: f["dump"].astype(str))
    t = t.merge(geo, on=["rank", "dump"], how="inner")
    t = t.sort_values(["rank", "dump", "cta", "start_ns"], kind="stable").reset_index(drop=True)
    ids = run_ids(t["rank"].to_numpy(), t["dump"].to_numpy(), t["cta"].to_numpy())
    t["position"] = cumcount(ids)
    m_block, head, batch = decode_tile_id(t["tile"])
    t["m_block"], t["head"], t["batch"] = m_block, head, batch
    kv = np.empty(len(t), dtype=np.int64)
    for (seqlen, causal, bm, bn), idx in t.groupby(["seqlen", "causal", "block_m", "block_n"]).indices.items():  # one per geometry
        kv[idx] = kv_blocks(m_block[idx], seqlen, bm, bn, bool(causal))
    t["kv_blocks"] = kv
    t["sigma_ns"] = t["mainloop_ns"] / t["kv_blocks"]
    t["gap_after_ns"] = shift_back(t["mainloop_ns"].to_numpy(dtype=np.float64), ids, 1)
    t = t.merge(_kv_every(p), on=["rank", "dump"], how="left")
    t["kv_every"] = t["kv_every"].fillna(0).astype(np.int64)
    t["kv_sampled"] = (t["kv_every"] > 0) & (t["position"] % t["kv_every"].clip(lower=1) == 0)
    t = t.merge(_kv_step_columns(p), on=KEYS, how="left")
    t["kv_steps"] = t["kv_steps"].fillna(0).astype(np.int64)
    t["qloop_tail_ns"] = t["start_ns"] + t["mainloop_ns"] - t["kv_exit_ns"]
    return t[["rank", "dump", "dest", "shape", "cta", "position", "tile", "m_block", "head", "batch", "kv_blocks",
              "start_ns", "mainloop_ns", "epilogue_ns", "sigma_ns", "gap_after_ns", "kv_every", "kv_sampled", "kv_steps", "kv_step_median_ns",
              "kv_step_max_ns", "qloop_tail_ns", *GEOMETRY_KEYS]]


def piggyback_audit(tiles: pd.DataFrame, models: dict[str, PlatformModel], control_dest: str = "local") -> tuple[pd.DataFrame, pd.DataFrame]:
    """docs/model.md §7 per shape and calibrated path, from the control run's tiles (``dest == control_dest``:
    O in local HBM, the Q-loop undisturbed by a slow store path), measured against the run that stored
    O over the path (``dest`` = the path's name) where one was traced.

    Audit (control tiles): B_t = b_m·d·s_out, K = the CTAs holding tiles, V = K·B_t, T_iss^0(K, B_t),
    G* = [V/R − T_iss^0]₊, b^iso = [V − R·T_iss^0]₊ vs Q(K), σ = the median Q-loop time per K/V block,
    M_ub* = b_n·⌈G*/σ⌉, the verdict at the run's sequence length, and the share of bursts whose next
    Q-loop (the gap) covers G*.

    Prediction vs measurement (path run, tiles joined by tile id): each Q-loop after a burst lasts
    T_period − T_iss^0 = max(G, V/R − T_iss^0) with G the control's Q-loop of the same tile (Eq. 1:
    the issue floor stays in the epilogue, the drain-limited rest lands in the next Q-loop, where the
    K/V loads wait behind the stores); a CTA's first tile follows no burst (predicted = G).

    Returns (per-tile rows of the path runs with ``predicted_qloop_ns`` / ``measured_qloop_ns``, one
    row per shape and path)."""
    if tiles.empty or not models:
        return pd.DataFrame(), pd.DataFrame()
    per_tile, summary = [], []
    for (rank, shape), ctrl in tiles[tiles["dest"] == control_dest].groupby(["rank", "shape"], sort=True):  # one per shape
        first = ctrl.iloc[0]
        producers = int(ctrl["cta"].nunique())
        b_t = int(first["block_m"]) * int(first["head_dim"]) * int(first["out_bytes"])
        sigma = float(ctrl["sigma_ns"].median())
        gaps = ctrl["gap_after_ns"].to_numpy(dtype=np.float64)
        gaps = gaps[np.isfinite(gaps)]
        for path, model in sorted(models.items()):
            floor = float(model.floor_ns(producers, b_t)[0])
            rate = float(rates_of(model, [producers], [b_t])[0])  # R(K, B) where the calibration has it
            cap = model.capacity(producers)
            audit = qloop_audit(int(first["block_m"]), int(first["head_dim"]), int(first["out_bytes"]), int(first["block_n"]),
                                sigma, producers, rate, floor, None if cap is None else float(cap[0]),
                                [int(first["seqlen"])])
            row = {
                "rank": rank, "shape": shape, "seqlen": int(first["seqlen"]), "causal": int(first["causal"]), "path": path,
                "producers": producers, "bytes_per_producer": b_t, "volume_bytes": audit["volume_bytes"],
                "rate_gbps": rate, "issue_floor_ns": floor, "drain_time_ns": audit["drain_time_ns"],
                "recovery_gap_ns": audit["recovery_gap_ns"], "isolated_excess_bytes": audit["isolated_excess_bytes"],
                "capacity_bytes": None if cap is None else float(cap[0]), "capacity_ok": audit["capacity_ok"],
                "sigma_ns": sigma, "m_ub_tokens": audit["m_ub_tokens"], "qloop_gap_lb_ns": audit["per_seq_len"][0]["qloop_gap_lb_ns"],
                "verdict": audit["per_seq_len"][0]["verdict"],
                "gap_median_ns": float(np.median(gaps)) if len(gaps) else np.nan,
                "covered_fraction": float(np.mean(gaps >= audit["recovery_gap_ns"])) if len(gaps) else np.nan,
            }
            measured = tiles[(tiles["rank"] == rank) & (tiles["shape"] == shape) & (tiles["dest"] == path)]
            if path != control_dest and len(measured):
                m = measured.merge(ctrl[["tile", "mainloop_ns"]].rename(columns={"mainloop_ns": "control_qloop_ns"}), on="tile", how="inner")
                after_burst = m["position"].to_numpy() > 0
                drain_rest = audit["drain_time_ns"] - floor
                pred = np.where(after_burst, np.maximum(m["control_qloop_ns"].to_numpy(), drain_rest), m["control_qloop_ns"].to_numpy())
                m = m.assign(path=path, predicted_qloop_ns=pred, measured_qloop_ns=m["mainloop_ns"])
                per_tile.append(m)
                err = m["measured_qloop_ns"] - m["predicted_qloop_ns"]
                row.update({
                    "measured_dump": str(measured["dump"].iloc[0]), "tiles_joined": int(len(m)),
                    "control_qloop_median_ns": float(m["control_qloop_ns"].median()),
                    "predicted_qloop_median_ns": float(np.median(pred)), "measured_qloop_median_ns": float(m["measured_qloop_ns"].median()),
                    "qloop_median_error": float(m["measured_qloop_ns"].median() / np.median(pred) - 1.0),
                    "qloop_mae_ns": float(err.abs().mean()),
                    # V over the measured burst period: the drain rate the path achieved where the run is drain-limited
                    "implied_rate_gbps": float(audit["volume_bytes"] / (m["measured_qloop_ns"].median() + m["epilogue_ns"].median())),
                    "epilogue_median_ns": float(m["epilogue_ns"].median()),
                    "control_epilogue_median_ns": float(ctrl["epilogue_ns"].median()),
                })
            summary.append(row)
    rows = pd.DataFrame(summary).sort_values(["rank", "causal", "seqlen", "shape", "path"], kind="stable", ignore_index=True)
    return (pd.concat(per_tile, ignore_index=True) if per_tile else pd.DataFrame()), rows
