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
Independent launches (the launches of a run, the what-if alternatives of §13) advance together, one pass of each per
pass, so the passes are those of the longest launch, not their sum: each launch's stores are one row of a padded
array, a row is re-sorted and its departures continued only from its first insertion on (the cumulative sums carried
bit for bit), and a load's lookup in its row is one search over keys that sort every row as one array.
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
    the predicted stall (ns); and the kernel time (ns, first compute start at 0 to the last drain): the longest
    launch's, and each launch's (``forward_tiles``' ``launch``)."""

    store_issue_ns: np.ndarray
    accept_ns: np.ndarray
    drained_ns: np.ndarray
    compute_start_ns: np.ndarray
    stall_ns: np.ndarray
    kernel_ns: float
    kernel_by_launch_ns: np.ndarray


def _departures(t_ns: np.ndarray, service_ns: np.ndarray) -> np.ndarray:
    """FIFO fluid departures f_k = max(f_{k−1}, t_k) + service_k over stores sorted by issue time t (f_{−1} = 0),
    along the last axis (one queue per row): f = S + cummax(t − S_prev), S the cumulative service."""
    s = np.cumsum(service_ns, axis=-1)
    return s + np.maximum.accumulate(t_ns - (s - service_ns), axis=-1)


def _row_keys(t_ns: np.ndarray, row: np.ndarray, row_bits: int) -> np.ndarray:
    """A uint64 per (row, time) whose order is row, then time: the row in the top ``row_bits`` bits, below it the
    time's order-preserving bit pattern without its lowest ``row_bits`` bits (times that close share a key)."""
    b = np.ascontiguousarray(np.asarray(t_ns, np.float64) + 0.0).view(np.int64)  # + 0.0: −0 keys as 0
    u = (b ^ ((b >> 63) | np.int64(-(2**63)))).view(np.uint64)
    return (np.asarray(row).astype(np.uint64) << np.uint64(64 - row_bits)) | (u >> np.uint64(row_bits))


def _rows_searchsorted(sorted_rows: np.ndarray, keys: np.ndarray, lengths: np.ndarray, row: np.ndarray, values: np.ndarray,
                       row_bits: int) -> np.ndarray:
    """``np.searchsorted(sorted_rows[r, :lengths[r]], v, side="right")`` for every (r, v) of ``row``, ``values``
    (same shape), exactly: ``keys`` (``_row_keys`` of every row, +inf after a row's values) sorts all rows as one
    array, so one search finds where a key begins and ends; among the values that share the query's key (times a
    few ulps apart) a binary search on the values themselves decides."""
    if len(lengths) == 1:
        return np.searchsorted(sorted_rows[0, : lengths[0]], values, side="right")
    width = sorted_rows.shape[1]
    q, base = _row_keys(values, row, row_bits), row * width
    flat = keys.ravel()
    right = np.searchsorted(flat, q, side="right")
    left = right.copy()  # where no key equals the query's, the left search ends where the right one does
    eq = (right > 0) & (flat[np.maximum(right - 1, 0)] == q)
    if eq.any():
        left[eq] = np.searchsorted(flat, q[eq], side="left")
    hi = np.minimum(right - base, lengths[row])
    lo = np.minimum(left - base, hi)
    tied = np.flatnonzero((lo < hi).ravel())
    if len(tied):
        t_flat, v = sorted_rows.ravel(), values.ravel()[tied]
        b = base.ravel()[tied] if np.ndim(base) else base
        l, h = lo.ravel()[tied], hi.ravel()[tied]
        for _ in range(int((h - l).max()).bit_length()):
            mid = (l + h) >> 1
            le = t_flat[b + np.minimum(mid, width - 1)] <= v
            l, h = np.where((l < h) & le, mid + 1, l), np.where((l < h) & ~le, mid, h)
        lo = lo.copy()
        lo.ravel()[tied] = l
    return lo


def _runs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of every run of equal values of ``codes`` (sorted, not empty)."""
    change = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.zeros(len(change) + 1, np.int64)
    starts[1:] = change
    lengths = np.empty_like(starts)
    lengths[:-1] = change - starts[:-1]
    lengths[-1] = len(codes) - starts[-1]
    return starts, lengths


def _segmented_departures(t_ns: np.ndarray, service_ns: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """``_departures`` restarted at every run of equal ``segment`` (sorted): each run is its own queue, the same
    arithmetic as a queue of its own (one row each of a padded array, +inf issue times and no service after a run)."""
    if len(segment) == 0 or segment[0] == segment[-1]:
        return _departures(t_ns, service_ns)
    starts, lengths = _runs(segment)
    width = int(lengths.max())
    flat = np.arange(len(segment)) + np.repeat(np.arange(len(starts)) * width - starts, lengths)  # (run, place in it)
    t2 = np.full((len(starts), width), np.inf)
    s2 = np.zeros((len(starts), width))
    t2.ravel()[flat] = t_ns
    s2.ravel()[flat] = service_ns
    return _departures(t2, s2).ravel()[flat]


def _streamed_finish(back, step_ns, steps, stages, w_t, w_k, w_n, dep, row, row_bits, lam) -> np.ndarray:
    """End of the compute of tiles whose steps D … S − 1 load while they compute (rows: tiles, S > D): step j ≥ D is
    loaded when step j − D is done, unstalled at back + (j − D + 1)·c, and arrives at max(ℓ_j + λ, F(ℓ_j)); the
    compute ends at max_j(arrival_j + (S − j)·c) (the first D arrive at back, so of those j = 0 ends last). ``w_t``,
    ``w_k``, ``w_n``, ``dep``: each launch's known stores (rows: issue times, their keys, counts) and their departures;
    ``row``: each tile's launch. The steps j ≥ D of all tiles are one flat array."""
    count = steps - stages
    tile = np.repeat(np.arange(len(back)), count)
    j = np.arange(len(tile)) - np.repeat(np.cumsum(count) - count, count) + stages[tile]
    c, r = step_ns[tile], row[tile]
    issue = back[tile] + (j - stages[tile] + 1) * c
    k = _rows_searchsorted(w_t, w_k, w_n, r, issue, row_bits) - 1
    arrive = np.maximum(issue + lam, np.where(k >= 0, dep.ravel()[r * dep.shape[1] + np.maximum(k, 0)], -np.inf)) + (steps[tile] - j) * c
    return np.maximum(np.maximum.reduceat(arrive, np.cumsum(count) - count), back + steps * step_ns)


def forward_tiles(cta, position, bytes_per_tile, compute_ns, model: LinkModel, epilogue_ns=0.0,
                  load_issue: str = "issue", load_bytes=0.0, load_lag_ns=0.0, steps=1, stages=None, launch=None) -> Forward:
    """docs/model.md §11: the forward prediction of one launch, or of several independent ones at once. ``cta``,
    ``position`` (the tile's place in its CTA's order, 0, 1, …), ``bytes_per_tile`` (bytes the tile stores through the
    path), ``compute_ns`` (its compute gap), ``epilogue_ns`` (scalar or per tile): arrays of one row per tile, any
    order. ``load_issue``: "issue" or "accept" (see the module docstring); ``load_lag_ns``: the first loads' issue
    after that point (negative: before it); ``load_bytes``: what they load (served at ``model.load_rate_gbps``);
    ``steps`` / ``stages``: per tile, its load steps and pipeline stages (streamed loads, module docstring).
    ``launch`` (per tile, any integers; default one launch): tiles of different launches share nothing, each launch
    has its own link, load server, time origin and causal passes, and its numbers are those it gets alone;
    ``Forward.kernel_ns`` is then the longest launch's, ``kernel_by_launch_ns`` each one's (ascending launch)."""
    if load_issue not in LOAD_ISSUE:
        raise ValueError(f"load_issue {load_issue!r} is not one of {LOAD_ISSUE}")
    cta = np.asarray(cta, dtype=np.int64)
    pos = np.asarray(position, dtype=np.int64)
    n = len(cta)
    lid = np.zeros(n, np.int64) if launch is None else np.unique(np.asarray(launch), return_inverse=True)[1].reshape(n)
    nbytes = np.broadcast_to(np.asarray(bytes_per_tile, dtype=np.float64), (n,))
    lag = np.broadcast_to(np.asarray(load_lag_ns, dtype=np.float64), (n,))
    n_steps = np.broadcast_to(np.asarray(steps, dtype=np.int64), (n,))
    n_stages = np.minimum(n_steps, np.broadcast_to(np.asarray(n_steps if stages is None else stages, dtype=np.int64), (n,)))
    if (n_steps < 1).any() or (n_stages < 1).any():
        raise ValueError("steps and stages must be >= 1")
    lbytes = np.broadcast_to(np.asarray(load_bytes, dtype=np.float64), (n,))
    epi = np.broadcast_to(np.asarray(epilogue_ns, dtype=np.float64), (n,))
    work = np.broadcast_to(np.asarray(compute_ns, dtype=np.float64), (n,)) + epi
    order = np.lexsort((pos, cta, lid))
    same = (np.diff(cta[order]) == 0) & (np.diff(lid[order]) == 0)
    if n and same.any() and (np.diff(pos[order])[same] <= 0).any():
        raise ValueError("two tiles of one CTA share a position")
    lam, rate, eps = float(model.load_latency_ns), float(model.rate_gbps), float(model.window_ns)
    # per (launch, CTA), in launch then CTA order: its first tile (into `order`) and its tile count
    first = np.flatnonzero(np.r_[True, ~same]) if n else np.empty(0, np.int64)
    per_cta = np.diff(np.r_[first, n])
    owner = lid[order[first]]  # each CTA's launch
    launches = int(owner.max(initial=-1)) + 1
    lfirst = np.searchsorted(owner, np.arange(launches))  # each launch's first CTA
    out = {k: np.full(n, np.nan) for k in ("issue", "accept", "drained", "start", "stall")}
    if not n:
        return Forward(out["issue"], out["accept"], out["drained"], out["start"], out["stall"], 0.0, np.empty(0))
    # per CTA: index (into `order`) of its tile whose loads are pending, and when they were issued
    cur = first.copy()
    end = first + per_cta
    # tile 0 of every CTA: loads unstalled, compute from 0
    t0 = order[first]
    out["start"][t0], out["stall"][t0] = 0.0, 0.0
    issue = work[t0]  # store issue of each CTA's current tile
    # stores known so far, one row per launch, sorted by issue time (+inf after them), as fields of one array: issue
    # time, service time, tile, the cumulative service S, the running max M of t − (S − service), the departure S + M
    width = int(np.bincount(lid).max())
    wq = np.zeros((6, launches, width))
    wq[0], wq[2] = np.inf, -1.0
    w_t, w_c, w_m, dep = wq[0], wq[3], wq[4], wq[5]
    fill = np.array([np.inf, 0.0, -1.0])[:, None, None]
    w_n = np.zeros(launches, np.int64)
    row_bits = max(launches - 1, 1).bit_length()
    w_k = _row_keys(w_t, np.arange(launches)[:, None], row_bits) if launches > 1 else None  # search keys
    column = np.zeros(n, np.int64)  # each known store's place in its launch's row
    load_free = np.zeros(launches)  # when each launch's load server has served every released load so far
    pending = np.ones(len(first), bool)  # the current tile's store is issued but not yet inserted
    load_at = np.empty(len(first))  # when each CTA's next loads are issued
    while True:
        # insert the stores issued since the last pass in issue order; a row changes from its first insertion on only,
        # so only that part is re-sorted and its departures continued from the unchanged ones before it
        if pending.any():
            new = np.flatnonzero(pending)
            idx = order[cur[new]]
            out["issue"][idx] = issue[new]
            if launches == 1:  # one row: append and re-sort it whole (fewer calls than a suffix's merge)
                k = w_n[0]
                wq[:3, 0, k:k + len(new)] = (issue[new], nbytes[idx] / rate, idx)
                rows, m = np.zeros(1, np.int64), np.array([len(new)])
                srt = np.argsort(w_t[0, :k + len(new)], kind="stable")
                wq[:3, 0, :k + len(new)] = wq[:3, 0, srt]
                dep[0, :k + len(new)] = _departures(w_t[0, :k + len(new)], wq[1, 0, :k + len(new)])  # S, M: only carried in rows
                column[wq[2, 0, :k + len(new)].astype(np.int64)] = np.arange(k + len(new))
            else:
                by = np.lexsort((issue[new], owner[new]))
                g, t_new, idx = owner[new][by], issue[new][by], idx[by]
                at = _rows_searchsorted(w_t, w_k, w_n, g, t_new, row_bits)  # after the equal ones known
                starts, m = _runs(g)
                rows, c0 = g[starts], np.minimum.reduceat(at, starts)
                kept = w_n[rows] - c0  # known stores from the first insertion on
                size = kept + m
                j = np.arange(int(size.max()))[None, :]
                cols = c0[:, None] + j
                src = rows[:, None] * width + np.minimum(cols, width - 1)
                blk = np.where(j < kept[:, None], wq[:3].reshape(3, -1)[:, src], fill)
                r_new = np.repeat(np.arange(len(rows)), m)
                blk[:, r_new, kept[r_new] + np.arange(len(g)) - starts[r_new]] = (t_new, nbytes[idx] / rate, idx)
                srt = np.argsort(blk[0], axis=1, kind="stable")  # the known ones first among equals, the new in CTA order
                bt, bs, bi = np.take_along_axis(blk, srt[None], axis=2)
                prev = rows * width + np.maximum(c0 - 1, 0)
                bc = np.cumsum(np.column_stack((np.where(c0 > 0, w_c.ravel()[prev], 0.0), bs)), axis=1)[:, 1:]
                bm = np.maximum.accumulate(np.column_stack((np.where(c0 > 0, w_m.ravel()[prev], -np.inf), bt - (bc - bs))), axis=1)[:, 1:]
                keep = j < size[:, None]
                flat = src[keep]
                wq.reshape(6, -1)[:, flat] = np.stack((bt, bs, bi, bc, bm, bc + bm))[:, keep]
                w_k.ravel()[flat] = _row_keys(bt[keep], rows[:, None].repeat(j.shape[1], 1)[keep], row_bits)
                column[bi[keep].astype(np.int64)] = cols[keep]
            w_n[rows] += m
            pending[:] = False
            # a later store inserted before an earlier-resolved one delays that one's drain and acceptance, never
            # a departure that a resolved load used (those stores were issued before the horizon it was resolved at)
            if load_issue == "accept":
                c = owner * width + column[order[cur]]
                start_at = np.maximum(w_t.ravel()[c] + model.issue_floor_ns, dep.ravel()[c] - model.capacity_bytes / rate)
                load_at = start_at + lag[order[np.minimum(cur + 1, end - 1)]]
            else:  # issued at the store's issue: only the CTAs whose store was just inserted move
                load_at[new] = issue[new] + lag[order[np.minimum(cur[new] + 1, end[new] - 1)]]
        nxt = cur + 1
        alive = nxt < end
        if not alive.any():
            break
        # every store of a launch not yet known is issued no earlier than its horizon
        nxt_tile = order[np.where(alive, nxt, cur)]
        bound = np.where(alive, load_at + work[nxt_tile], np.inf)
        horizon = np.minimum.reduceat(bound, lfirst)[owner]
        ready = alive & (load_at + eps < horizon)
        # a window longer than the shortest work: resolve a launch's earliest loads with the stores known
        none = ~np.logical_or.reduceat(ready, lfirst)[owner] if launches > 1 else np.full(len(ready), not ready.any())
        if none.any():
            earliest = np.minimum.reduceat(np.where(alive, load_at, np.inf), lfirst)[owner]
            ready |= none & alive & (load_at == earliest)
        sel = np.flatnonzero(ready)
        g = owner[sel]
        # loads return when every store issued up to the window after them has drained
        k = _rows_searchsorted(w_t, w_k, w_n, g, load_at[sel] + eps, row_bits) - 1
        drained_before = np.where(k >= 0, dep.ravel()[g * width + np.maximum(k, 0)], -np.inf)
        avail = np.maximum(load_at[sel] + lam, drained_before)
        tiles = order[nxt[sel]]
        # the released loads are served first in, first out at the load rate (HBM / L2), after the earlier ones
        by = np.lexsort((avail, g))
        done = _segmented_departures(np.maximum(avail[by], load_free[g[by]]), lbytes[tiles[by]] / model.load_rate_gbps, g[by])
        back = np.empty_like(avail)
        back[by] = done
        # streamed loads: step j >= D of the tile is loaded when step j - D is done, behind the stores issued by then
        step_ns = np.maximum(work[tiles] - epi[tiles] - lam, 0.0) / n_steps[tiles]
        last_load = back + (n_steps[tiles] - n_stages[tiles]) * step_ns
        bound[sel] = back - lam + work[tiles]
        final = last_load < np.minimum.reduceat(bound, lfirst)[g]
        # the stores its later loads wait behind are not all known: resolve a launch's earliest with those known
        if launches == 1:
            if not final.any():
                final = back == back.min()
        else:
            starts, counts = _runs(g)
            none = ~np.logical_or.reduceat(final, starts)
            if none.any():
                lowest = np.repeat(np.minimum.reduceat(back, starts), counts)
                final |= np.repeat(none, counts) & (back == lowest)
        sel, g = sel[final], g[final]
        tiles, back, step_ns = tiles[final], back[final], step_ns[final]
        if launches == 1:
            load_free[0] = max(load_free[0], float(back.max()))
        else:
            np.maximum.at(load_free, g, back)
        # a CTA computes one tile at a time: loads issued ahead of the previous tile's store (a negative lag) can
        # return early, but the compute starts no earlier than that store's issue, where the previous tile ends
        busy = issue[sel]
        back = np.maximum(back, busy + lam)
        finish = back - lam + work[tiles] - epi[tiles]
        many = n_steps[tiles] > n_stages[tiles]
        if many.any():
            finish[many] = _streamed_finish(back[many], step_ns[many], n_steps[tiles[many]], n_stages[tiles[many]],
                                            w_t, w_k, w_n, dep, g[many], row_bits, lam)
        out["start"][tiles] = back - lam
        out["stall"][tiles] = finish - np.maximum(load_at[sel], busy) - (work[tiles] - epi[tiles])
        issue[sel] = finish + epi[tiles]
        cur[sel] = nxt[sel]
        pending[sel] = True
    known = np.arange(width)[None, :] < w_n[:, None]
    w_i = wq[2][known].astype(np.int64)
    out["drained"][w_i] = dep[known]
    out["accept"][w_i] = np.maximum(w_t[known] + model.issue_floor_ns, dep[known] - model.capacity_bytes / rate)
    kernel = np.where(known, dep, -np.inf).max(axis=1)
    return Forward(out["issue"], out["accept"], out["drained"], out["start"], out["stall"], float(kernel.max()), kernel)


def forward_launch(cta, position, bytes_per_tile, compute_ns, model: LinkModel, epilogue_ns=0.0, steps=1, stages=None,
                   cover_tiles: int = 0, plain_store: bool = False, load_lag_ns=0.0, launch=None) -> tuple[Forward, np.ndarray]:
    """docs/model.md §11, Eq. 48: one launch's forward prediction (``forward_tiles``) and its per-tile stall: the load
    wait that stretches the compute, plus, for a lifecycle whose staging buffer is waited for (``cover_tiles`` ≥ 1
    compute spans cover a store), the store's acceptance beyond the end of the compute that covers it, and for plain
    stores (``plain_store``, Eq. 48: the stores of one issue round share the link and each completes when its round
    has drained) that round's drain beyond the store's issue. The prediction of ``analyze`` and every what-if
    alternative (§13) are this function of their inputs. ``launch``: several independent launches at once, as in
    ``forward_tiles`` (a round and a CTA belong to one launch)."""
    from xstage_trace.analysis.columnar import run_ids, shift_back

    cta, pos = np.asarray(cta, np.int64), np.asarray(position, np.int64)
    n = len(cta)
    nbytes = np.broadcast_to(np.asarray(bytes_per_tile, np.float64), (n,))
    offered = np.broadcast_to(np.asarray(compute_ns, np.float64), (n,))
    lid = np.zeros(n, np.int64) if launch is None else np.unique(np.asarray(launch), return_inverse=True)[1].reshape(n)
    f = forward_tiles(cta, pos, nbytes, offered, model, epilogue_ns=epilogue_ns, steps=steps, stages=stages, load_lag_ns=load_lag_ns,
                      launch=lid)
    stall = f.stall_ns
    if cover_tiles:  # the buffer's wait: accepted after the covering tile's compute end
        order = np.lexsort((pos, cta, lid))
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        epi = np.broadcast_to(np.asarray(epilogue_ns, np.float64), (n,))
        end = (f.store_issue_ns - epi)[order]  # each tile's compute end (its store is issued one epilogue later)
        need = shift_back(end, run_ids(lid[order], cta[order]), cover_tiles)
        wait = np.where(nbytes[order] > 0, np.maximum(f.accept_ns[order] - need, 0.0), 0.0)
        stall = stall + np.nan_to_num(wait)[inv]
    if plain_store:  # Eq. 48: plain stores of one round share the link; each completes when its round has drained
        rnd = np.unique(lid * (pos.max(initial=0) + 1) + pos, return_inverse=True)[1]
        done = np.full(rnd.max(initial=-1) + 1, -np.inf)
        np.maximum.at(done, rnd, np.nan_to_num(f.drained_ns, nan=-np.inf))
        stall = stall + np.where(nbytes > 0, np.maximum(done[rnd] - f.store_issue_ns, 0.0), 0.0)
    return f, stall
