"""The store path's drain rate, its accepted-ahead capacity and the load coupling, from per-round completion
timestamps (docs/model.md §3 as re-founded in §11; the bench: instrument/bench/path_drain.cu).

Inputs are the reductions of ``drain_points`` (one row per synchronized burst, one row per load round) and
the bench's rates (sustained stores and the copy engine, GB/s). Everything is a pure function of arrays.

- **R and Q** (``fit_ramp``): a burst of V bytes from an idle path with all producers together is accepted
  at max(T_iss^0, (V − Q)/R) (docs/model.md §3's isolated law): its last CTA's acceptance time t_last is linear in V
  past the knee, V = R·t_last + Q. Relative least squares (the scatter of t_last grows with it) over the
  bursts with V ≥ RAMP_MIN_VOLUME_BYTES; the
  interval of each is the 5th–95th percentile over bootstrap resamples of the volumes, each with its bursts
  (a volume's bursts share a launch; seed fixed).
- **λ** (``load_latency_ns``): the operand-load wait of the load rounds with device-memory output, median over
  rounds ≥ 1: what a load costs with no host writes pending.
- **load rate** (``fit_load_rate``): the rate at which loads released together by the drain are served (the
  only free parameter of the §11 forward model); the grid value whose forward prediction of the host load
  rounds (kernel time and median load wait, every compute phase X) has the smallest mean relative error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xstage_trace.analysis.forward import LinkModel, forward_tiles

RAMP_MIN_VOLUME_BYTES = 8e6  # past the knee (Q ≈ 1 MB on the H200 host path) by a factor of 8
BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_SEED = 0
INTERVAL_PERCENTILES = (5.0, 95.0)
LOAD_RATE_GRID_GBPS = (1000.0, 2000.0, 3000.0, 4000.0, 6000.0, 8000.0)


@dataclass(frozen=True)
class RampFit:
    """R and Q from synchronized bursts, with bootstrap intervals and the bursts used."""

    rate_gbps: float
    rate_interval_gbps: tuple[float, float]
    capacity_bytes: float
    capacity_interval_bytes: tuple[float, float]
    bursts: int


def _weighted_line(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relative least squares V = R·t + Q along the last axis (weights 1/t²: the acceptance times' scatter grows
    with t): (R, Q), arrays of the leading shape."""
    w = 1.0 / t**2
    sw = w.sum(axis=-1, keepdims=True)
    tm, vm = (w * t).sum(axis=-1, keepdims=True) / sw, (w * v).sum(axis=-1, keepdims=True) / sw
    r = (w * (t - tm) * (v - vm)).sum(axis=-1) / (w * (t - tm) ** 2).sum(axis=-1)
    return r, vm[..., 0] - r * tm[..., 0]


def fit_ramp(volume_bytes, last_accept_ns) -> RampFit:
    """R (GB/s = bytes/ns) and Q (bytes) from one ramp: per burst its volume and the time from its first
    begin to its last CTA's acceptance; bursts below RAMP_MIN_VOLUME_BYTES are left out."""
    v = np.asarray(volume_bytes, dtype=np.float64)
    t = np.asarray(last_accept_ns, dtype=np.float64)
    use = v >= RAMP_MIN_VOLUME_BYTES
    v, t = v[use], t[use]
    if len(np.unique(v)) < 2:
        raise ValueError(f"a ramp needs bursts of at least two volumes >= {RAMP_MIN_VOLUME_BYTES:.0f} bytes")
    r, q = (float(x) for x in _weighted_line(t, v))
    # cluster bootstrap: the bursts of one volume share a launch, so the volumes are resampled, each with its bursts
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    vols, member = np.unique(v, return_inverse=True)
    groups = [np.flatnonzero(member == i) for i in range(len(vols))]  # one per volume (about ten)
    size = max(len(g) for g in groups)
    padded = np.array([np.resize(g, size) for g in groups])  # a volume's bursts, repeated to one length
    pick = padded[rng.integers(0, len(vols), (BOOTSTRAP_RESAMPLES, len(vols)))].reshape(BOOTSTRAP_RESAMPLES, -1)
    ok = np.array([len(np.unique(v[row])) >= 2 for row in pick])  # a resample of one volume has no line
    rs, qs = _weighted_line(t[pick[ok]], v[pick[ok]])
    lo_r, hi_r = np.percentile(rs, INTERVAL_PERCENTILES)
    lo_q, hi_q = np.percentile(qs, INTERVAL_PERCENTILES)
    return RampFit(r, (float(min(lo_r, r)), float(max(hi_r, r))), q, (float(min(lo_q, q)), float(max(hi_q, q))), int(len(v)))


def load_latency_ns(load_wait_ns, rounds) -> float:
    """λ: the median operand-load wait over rounds ≥ 1 of load rounds whose stores go to device memory."""
    w = np.asarray(load_wait_ns, dtype=np.float64)
    return float(np.median(w[np.asarray(rounds) >= 1]))


@dataclass(frozen=True)
class LoadRoundCase:
    """One host load-round launch as the bench ran it: K CTAs × rounds, B bytes stored and load_bytes loaded per
    round, a compute phase of compute_ns (+ the round's own overhead), the measured kernel time and median load wait."""

    ctas: int
    rounds: int
    store_bytes: float
    load_bytes: float
    compute_ns: float
    overhead_ns: float
    kernel_ns: float
    load_wait_ns: float


def predict_load_rounds(case: LoadRoundCase, model: LinkModel) -> tuple[float, float]:
    """§11 forward model of one load-round launch: (kernel time, median load wait of rounds ≥ 1), ns. The bench
    loads after its store was accepted (``load_issue="accept"``); each round's compute is X + λ + overhead."""
    cta = np.repeat(np.arange(case.ctas), case.rounds)
    pos = np.tile(np.arange(case.rounds), case.ctas)
    work = np.full(len(cta), case.compute_ns + model.load_latency_ns + case.overhead_ns)
    f = forward_tiles(cta, pos, case.store_bytes, work, model, load_issue="accept", load_bytes=case.load_bytes)
    return f.kernel_ns, float(np.median(f.stall_ns[pos > 0])) + model.load_latency_ns


def fit_load_rate(cases: list[LoadRoundCase], base: LinkModel) -> tuple[float, dict[float, float]]:
    """The load rate of LOAD_RATE_GRID_GBPS whose predictions of ``cases`` have the smallest mean of |kernel
    time error| and |load wait error| / kernel time per round (relative); (rate, {rate: that error})."""
    err = {}
    for rate in LOAD_RATE_GRID_GBPS:  # six forward runs per case, each vectorised over its CTAs
        m = LinkModel(base.rate_gbps, base.capacity_bytes, base.load_latency_ns, base.issue_floor_ns, rate, base.window_ns)
        e = []
        for c in cases:
            k, w = predict_load_rounds(c, m)
            e += [abs(k / c.kernel_ns - 1), abs(w - c.load_wait_ns) / (c.kernel_ns / c.rounds)]
        err[rate] = float(np.mean(e))
    return min(err, key=err.get), err
