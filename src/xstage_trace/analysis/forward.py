"""Forward prediction of per-tile stall and kernel time from the calibration, the tiles' burst sequence and
their compute gaps alone (docs/model.md §11, load coupling; §4's drain rate R and capacity Q).

Never from a tile's measured store span or mainloop: the inputs are, per tile, its CTA, its place in that
CTA's order, the bytes it stores and its compute gap (the mainloop as it runs without backpressure, e.g.
the local control's), and the path's calibration.

The model (§11), per CTA, tile after tile:

- tile n's compute starts when its operand loads return; the loads are issued at ``load_issue`` of tile
  n − 1: its store issue (``"issue"``, kernels whose producer prefetches the next tile while the epilogue
  stores, DeepGEMM, FlashAttention) or the moment the engine accepted its store (``"accept"``: the
  calibration bench, which waits for the store's read before loading);
- the link drains every CTA's stores first in, first out at R: f_k = max(f_{k−1}, s_k) + B_k/R over the
  stores in issue order (fluid, work-conserving);
- a load waits behind the host writes issued before it: it returns at max(ℓ + λ, F(ℓ + w)), F(t) the time the
  link has drained every store issued at or before t, λ the unloaded load latency, w the window (stores issued
  that soon after the load still go first; 0 as calibrated);
- the store of tile n is issued at its compute start + (C_n − λ) + E_n (C_n the compute gap, which holds one
  unloaded load latency, E_n the epilogue); the engine accepts it (the stage may be reused) at
  max(s + T_iss^0, f_own − Q/R): Q bytes may wait accepted ahead of the drain;
- loads released together are served first in, first out at the load rate (``load_bytes`` per tile);
- a tile of S load steps (k-blocks, K/V blocks) with D pipeline stages (``steps``, ``stages``; default one step)
  loads its first D at ℓ and step j ≥ D when step j − D is done, at a + (j − D + 1)·c (c = (C − λ)/S, a the first
  loads' return); each of those waits behind the stores issued by then, and the compute ends at
  max_j(arrival_j + (S − j)·c).

Tile n's stall is its compute end beyond the unstalled one, max(ℓ, s_{n−1}) + C (the mainloop inflation; with one
step, its load wait beyond λ, [F(ℓ) − ℓ − λ]₊); tile 0 has none. A CTA computes one tile at a time: loads issued
before the previous tile's store (a negative lag, the prefetch what-if) may return early, but tile n's compute
starts no earlier than that store's issue s_{n−1}. The
kernel ends when the last store has drained. Lockstep rounds and the CTAs' drift are not assumed: they come
out of the recurrence (all CTAs whose loads were issued after a round's stores wait for the whole round,
those issued before most of them get ahead).

Computation: causal batches, vectorised over CTAs. Every store that is not yet known is issued no earlier
than H = min over the CTAs of (ℓ_c + C_next + E_next) (waits are ≥ 0), so every CTA whose loads were issued
at ℓ_c + w < H sees all the stores that precede them (a store issued at H itself may not be known yet; a tile
whose later load steps are issued by then likewise waits for a later pass): those are resolved together (one numpy pass each), their
next stores inserted in issue order and the FIFO departures recomputed (Lindley form, a cumulative max).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOAD_ISSUE = ("issue", "accept")


@dataclass(frozen=True)
class LinkModel:
    """What the forward prediction takes of a calibration (docs/model.md §11): the drain rate R (GB/s =
    bytes/ns), the accepted-ahead capacity Q (bytes), the unloaded operand-load latency λ (ns), the issue
    floor T_iss^0 of one store (ns), the rate loads released together are served at (GB/s) and the window w (ns)."""

    rate_gbps: float
    capacity_bytes: float
    load_latency_ns: float = 0.0
    issue_floor_ns: float = 0.0
    load_rate_gbps: float = float("inf")
    window_ns: float = 0.0


@dataclass(frozen=True)
class Forward:
    """Per tile (in the input's order): store issue, acceptance and drain completion, the compute start and
    the predicted stall (ns); and the kernel time (ns, first compute start at 0 to the last drain)."""

    store_issue_ns: np.ndarray
    accept_ns: np.ndarray
    drained_ns: np.ndarray
    compute_start_ns: np.ndarray
    stall_ns: np.ndarray
    kernel_ns: float


def _departures(t_ns: np.ndarray, service_ns: np.ndarray) -> np.ndarray:
    """FIFO fluid departures f_k = max(f_{k−1}, t_k) + service_k over stores sorted by issue time t (f_{−1} = 0):
    f = S + cummax(t − S_prev), S the cumulative service."""
    s = np.cumsum(service_ns)
    return s + np.maximum.accumulate(t_ns - (s - service_ns))


def _streamed_finish(back, step_ns, steps, stages, w_t, dep, lam) -> np.ndarray:
    """End of the compute of tiles whose steps D … S − 1 load while they compute (rows: tiles): step j ≥ D is
    loaded when step j − D is done, unstalled at back + (j − D + 1)·c, and arrives at max(ℓ_j + λ, F(ℓ_j)); the
    compute ends at max_j(arrival_j + (S − j)·c) (the first D arrive at back)."""
    j = np.arange(int(steps.max()))[None, :]
    issue = back[:, None] + (j - stages[:, None] + 1) * step_ns[:, None]
    k = np.searchsorted(w_t, issue, side="right") - 1
    arrive = np.maximum(issue + lam, np.where(k >= 0, dep[np.maximum(k, 0)], -np.inf))
    arrive = np.where(j < stages[:, None], back[:, None], arrive)
    arrive = np.where(j < steps[:, None], arrive + (steps[:, None] - j) * step_ns[:, None], -np.inf)
    return arrive.max(axis=1)


def forward_tiles(cta, position, bytes_per_tile, compute_ns, model: LinkModel, epilogue_ns=0.0,
                  load_issue: str = "issue", load_bytes=0.0, load_lag_ns=0.0, steps=1, stages=None) -> Forward:
    """docs/model.md §11: the forward prediction of one launch. ``cta``, ``position`` (the tile's place in its
    CTA's order, 0, 1, …), ``bytes_per_tile`` (bytes the tile stores through the path), ``compute_ns`` (its compute
    gap), ``epilogue_ns`` (scalar or per tile): arrays of one row per tile, any order. ``load_issue``: "issue" or
    "accept" (see the module docstring); ``load_lag_ns``: the first loads' issue after that point (negative: before
    it); ``load_bytes``: what they load (served at ``model.load_rate_gbps``); ``steps`` / ``stages``: per tile, its
    load steps and pipeline stages (streamed loads, module docstring)."""
    if load_issue not in LOAD_ISSUE:
        raise ValueError(f"load_issue {load_issue!r} is not one of {LOAD_ISSUE}")
    cta = np.asarray(cta, dtype=np.int64)
    pos = np.asarray(position, dtype=np.int64)
    n = len(cta)
    nbytes = np.broadcast_to(np.asarray(bytes_per_tile, dtype=np.float64), (n,))
    lag = np.broadcast_to(np.asarray(load_lag_ns, dtype=np.float64), (n,))
    n_steps = np.broadcast_to(np.asarray(steps, dtype=np.int64), (n,))
    n_stages = np.minimum(n_steps, np.broadcast_to(np.asarray(n_steps if stages is None else stages, dtype=np.int64), (n,)))
    if (n_steps < 1).any() or (n_stages < 1).any():
        raise ValueError("steps and stages must be >= 1")
    lbytes = np.broadcast_to(np.asarray(load_bytes, dtype=np.float64), (n,))
    epi = np.broadcast_to(np.asarray(epilogue_ns, dtype=np.float64), (n,))
    work = np.broadcast_to(np.asarray(compute_ns, dtype=np.float64), (n,)) + epi
    order = np.lexsort((pos, cta))
    if n and (np.diff(cta[order]) == 0).any() and (np.diff(pos[order])[np.diff(cta[order]) == 0] <= 0).any():
        raise ValueError("two tiles of one CTA share a position")
    lam, rate, eps = float(model.load_latency_ns), float(model.rate_gbps), float(model.window_ns)
    _, first, per_cta = np.unique(cta[order], return_index=True, return_counts=True)
    ctas = len(first)
    out = {k: np.full(n, np.nan) for k in ("issue", "accept", "drained", "start", "stall")}
    # per CTA: index (into `order`) of its tile whose loads are pending, and when they were issued
    cur = first.copy()
    end = first + per_cta
    # tile 0 of every CTA: loads unstalled, compute from 0
    t0 = order[first]
    out["start"][t0], out["stall"][t0] = 0.0, 0.0
    issue = work[t0]  # store issue of each CTA's current tile
    w_t = np.empty(0)  # stores known so far: issue time, service time, tile, sorted by issue time
    w_s = np.empty(0)
    w_i = np.empty(0, dtype=np.int64)
    load_free = 0.0  # when the load server has served every released load so far
    pending = np.ones(ctas, bool)  # the current tile's store is issued but not yet inserted
    while True:
        # insert the stores issued since the last pass, in issue order, and recompute the departures
        if pending.any():
            idx = order[cur[pending]]
            out["issue"][idx] = issue[pending]
            w_t = np.concatenate((w_t, issue[pending]))
            w_s = np.concatenate((w_s, nbytes[idx] / rate))
            w_i = np.concatenate((w_i, idx))
            srt = np.argsort(w_t, kind="stable")
            w_t, w_s, w_i = w_t[srt], w_s[srt], w_i[srt]
            dep = _departures(w_t, w_s)
            out["drained"][w_i] = dep
            out["accept"][w_i] = np.maximum(w_t + model.issue_floor_ns, dep - model.capacity_bytes / rate)
            pending[:] = False
            # a later store inserted before an earlier-resolved one delays that one's drain and acceptance, never
            # a departure that a resolved load used (those stores were issued before the horizon it was resolved at)
            load_at = out["accept" if load_issue == "accept" else "issue"][order[cur]] + lag[order[np.minimum(cur + 1, end - 1)]]
        nxt = cur + 1
        alive = nxt < end
        if not alive.any():
            break
        # every store not yet known is issued no earlier than horizon
        nxt_tile = order[np.where(alive, nxt, cur)]
        horizon = np.min(np.where(alive, load_at + work[nxt_tile], np.inf))
        ready = alive & (load_at + eps < horizon)
        if not ready.any():  # a window longer than the shortest work: resolve the earliest loads with the stores known
            ready = alive & (load_at == np.min(np.where(alive, load_at, np.inf)))
        # loads return when every store issued up to the window after them has drained
        k = np.searchsorted(w_t, load_at[ready] + eps, side="right") - 1
        drained_before = np.where(k >= 0, dep[np.maximum(k, 0)], -np.inf)
        avail = np.maximum(load_at[ready] + lam, drained_before)
        tiles = order[nxt[ready]]
        # the released loads are served first in, first out at the load rate (HBM / L2), after the earlier ones
        by = np.argsort(avail, kind="stable")
        done = _departures(np.maximum(avail[by], load_free), lbytes[tiles[by]] / model.load_rate_gbps)
        back = np.empty_like(avail)
        back[by] = done
        # streamed loads: step j >= D of the tile is loaded when step j - D is done, behind the stores issued by then
        step_ns = np.maximum(work[tiles] - epi[tiles] - lam, 0.0) / n_steps[tiles]
        last_load = back + (n_steps[tiles] - n_stages[tiles]) * step_ns
        bound = np.where(alive, load_at + work[nxt_tile], np.inf)
        bound[np.flatnonzero(ready)] = back - lam + work[tiles]
        final = last_load < bound.min()
        if not final.any():  # the stores its later loads wait behind are not all known: resolve the earliest with those known
            final = back == back.min()
        sel = np.flatnonzero(ready)[final]
        tiles, back, step_ns = tiles[final], back[final], step_ns[final]
        load_free = max(load_free, float(back.max()))
        # a CTA computes one tile at a time: loads issued ahead of the previous tile's store (a negative lag) can
        # return early, but the compute starts no earlier than that store's issue, where the previous tile ends
        busy = issue[sel]
        back = np.maximum(back, busy + lam)
        finish = back - lam + work[tiles] - epi[tiles]
        many = n_steps[tiles] > n_stages[tiles]
        if many.any():
            finish[many] = _streamed_finish(back[many], step_ns[many], n_steps[tiles[many]], n_stages[tiles[many]], w_t, dep, lam)
        out["start"][tiles] = back - lam
        out["stall"][tiles] = finish - np.maximum(load_at[sel], busy) - (work[tiles] - epi[tiles])
        issue[sel] = finish + epi[tiles]
        cur[sel] = nxt[sel]
        pending[sel] = True
    kernel = float(dep.max()) if len(w_t) else 0.0
    return Forward(out["issue"], out["accept"], out["drained"], out["start"], out["stall"], kernel)


def forward_launch(cta, position, bytes_per_tile, compute_ns, model: LinkModel, epilogue_ns=0.0, steps=1, stages=None,
                   cover_tiles: int = 0, plain_store: bool = False, load_lag_ns=0.0) -> tuple[Forward, np.ndarray]:
    """docs/model.md §11, Eq. 48: one launch's forward prediction (``forward_tiles``) and its per-tile stall: the load
    wait that stretches the compute, plus, for a lifecycle whose staging buffer is waited for (``cover_tiles`` ≥ 1
    compute spans cover a store), the store's acceptance beyond the end of the compute that covers it, and for plain
    stores (``plain_store``, Eq. 48: the stores of one issue round share the link and each completes when its round
    has drained) that round's drain beyond the store's issue. The prediction of ``analyze`` and every what-if
    alternative (§13) are this function of their inputs."""
    from xstage_trace.analysis.columnar import shift_back

    cta, pos = np.asarray(cta, np.int64), np.asarray(position, np.int64)
    n = len(cta)
    nbytes = np.broadcast_to(np.asarray(bytes_per_tile, np.float64), (n,))
    offered = np.broadcast_to(np.asarray(compute_ns, np.float64), (n,))
    f = forward_tiles(cta, pos, nbytes, offered, model, epilogue_ns=epilogue_ns, steps=steps, stages=stages, load_lag_ns=load_lag_ns)
    stall = f.stall_ns
    if cover_tiles:  # the buffer's wait: accepted after the covering tile's compute end
        order = np.lexsort((pos, cta))
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        epi = np.broadcast_to(np.asarray(epilogue_ns, np.float64), (n,))
        end = (f.store_issue_ns - epi)[order]  # each tile's compute end (its store is issued one epilogue later)
        need = shift_back(end, cta[order], cover_tiles)
        wait = np.where(nbytes[order] > 0, np.maximum(f.accept_ns[order] - need, 0.0), 0.0)
        stall = stall + np.nan_to_num(wait)[inv]
    if plain_store:  # Eq. 48: plain stores of one round share the link; each completes when its round has drained
        rnd = np.unique(pos, return_inverse=True)[1]
        done = np.full(rnd.max(initial=-1) + 1, -np.inf)
        np.maximum.at(done, rnd, np.nan_to_num(f.drained_ns, nan=-np.inf))
        stall = stall + np.where(nbytes > 0, np.maximum(done[rnd] - f.store_issue_ns, 0.0), 0.0)
    return f, stall
