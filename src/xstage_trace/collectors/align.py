"""Common time axis: probe %globaltimer ns → nsys ns (docs/nsys-formats.md §1).

Every dump is one kernel launch, so its probe span (slice open to close anchors) must lie inside
that kernel's nsys interval. A (dump, kernel) pair therefore allows offsets in
[dump_end − kernel_end, dump_start − kernel_start]. Matching: the offset proposed by some kernel
for the first dump that places the most dumps inside a kernel (with a small slack, since CUPTI
re-synchronises its clocks). Fit: a line offset(t) = c0 + c1·t through the matched
pairs' feasible intervals, placed as deep inside all of them as possible (a small linear program, solved
exactly on its piecewise-linear margin function; c1 is the drift between the clocks). Residual: the worst distance by which a matched dump leaves
its kernel under the fitted line (0 when all fit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MATCH_SLACK_NS = 20_000.0
DRIFT_IDENTIFIED_PPM = 1.0
PLAUSIBLE_OFFSET_NS = 1e6  # CUPTI vs %globaltimer on the captures seen: well under a millisecond
MAX_TIED = 64  # candidate offsets that place as many dumps as the best, tried when the best leaves a residual


@dataclass
class Alignment:
    """probe-clock ns → kernel-clock ns: t_kernel = t_probe − (offset_ns + drift·(t_probe − t_ref_ns))."""

    offset_ns: float
    drift: float  # dimensionless slope of the offset (ns per ns)
    t_ref_ns: float
    residual_ns: float
    dumps_matched: int
    dumps_total: int
    kernel_of_dump: np.ndarray  # index into the kernels given, -1 where unmatched
    drift_range: tuple[float, float] | None = None  # feasible slopes (every matched dump inside its kernel)

    def to_kernel_clock(self, t_probe_ns: np.ndarray) -> np.ndarray:
        """Map probe-clock times onto the kernel (nsys) clock."""
        return t_probe_ns - (self.offset_ns + self.drift * (t_probe_ns - self.t_ref_ns))

    @property
    def drift_identified(self) -> bool:
        """True when the dumps pin the drift down to ±DRIFT_IDENTIFIED_PPM (a narrow feasible-slope range)."""
        if self.drift_range is None:
            return False
        lo, hi = self.drift_range
        return (hi - lo) / 2.0 <= DRIFT_IDENTIFIED_PPM * 1e-6

    def as_dict(self) -> dict:
        """The manifest's alignment entry: drift only when identified, else null with its feasible range."""
        rng = [self.drift_range[0] * 1e6, self.drift_range[1] * 1e6] if self.drift_range else None
        return {
            "offset_ns": self.offset_ns,
            "drift_ppm": (rng[0] + rng[1]) / 2.0 if self.drift_identified else None,
            "drift_uncertainty_ppm": (rng[1] - rng[0]) / 2.0 if self.drift_identified else None,
            "drift_range_ppm": rng,
            "residual_ns": self.residual_ns,
            "dumps_matched": self.dumps_matched,
            "dumps_total": self.dumps_total,
        }


def _match(offset: np.ndarray, a: np.ndarray, b: np.ndarray, ks: np.ndarray, ke: np.ndarray, slack: float) -> np.ndarray:
    """For offsets (rows) × dumps (columns): index of a kernel holding the dump, -1 if none."""
    j = np.searchsorted(ks, (a[None, :] - offset[:, None] + slack).ravel(), side="right").reshape(len(offset), len(a)) - 1
    ok = (j >= 0) & (ke[np.maximum(j, 0)] >= b[None, :] - offset[:, None] - slack)
    return np.where(ok, j, -1)


def _lower_envelope(slope: np.ndarray, intercept: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lines min_i(slope_i·x + intercept_i) is made of, left to right (slopes falling), and the x where each
    next one takes over (the convex-hull trick; one pass over the lines sorted by slope, a few per dump)."""
    order = np.lexsort((intercept, -slope))  # slopes falling; of equal slopes the lowest line first
    a, b = slope[order], intercept[order]
    keep = np.ones(len(a), bool)
    keep[1:] = a[1:] != a[:-1]  # of equal slopes only the lowest can be on the envelope
    a, b = a[keep], b[keep]
    hull: list[int] = []
    for i in range(len(a)):
        while len(hull) >= 2:
            j, k = hull[-2], hull[-1]
            # line k is never the minimum when line i takes over from j no later than k does
            if (b[i] - b[j]) * (a[j] - a[k]) <= (b[k] - b[j]) * (a[j] - a[i]):
                hull.pop()
            else:
                break
        hull.append(i)
    a, b = a[hull], b[hull]
    return a, b, (b[1:] - b[:-1]) / (a[:-1] - a[1:])


def _margin_function(t: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """2·m(c1) = min_i(hi_i − c1·t_i) − max_i(lo_i − c1·t_i), the room a line of slope c1 leaves inside every
    interval (concave, piecewise linear), and the slopes where it bends (sorted)."""
    ua, ub, ux = _lower_envelope(-t, hi)
    la, lb, lx = _lower_envelope(t, -lo)  # max_i(lo_i − c·t_i) = −min_i(t_i·c − lo_i)

    def room(c: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=np.float64)
        upper = (ua[None, :] * c[:, None] + ub[None, :]).min(axis=1)
        lower = -(la[None, :] * c[:, None] + lb[None, :]).min(axis=1)
        return upper - lower

    return room, np.unique(np.concatenate([ux, lx]))


def _max_margin_line(t: np.ndarray, lo: np.ndarray, hi: np.ndarray, fit_drift: bool) -> tuple[float, float, float]:
    """The line c0 + c1·t that lies deepest inside every interval [lo_i, hi_i] (the linear program: maximise the
    margin m with lo_i + m ≤ c0 + c1·t_i ≤ hi_i − m); m < 0 when no line fits all. Solved exactly: for a slope c1
    the best c0 is midway between min_i(hi_i − c1·t_i) and max_i(lo_i − c1·t_i) and the margin half their distance,
    a concave piecewise-linear function of c1 whose maximum lies where it bends (``_margin_function``); no
    interval allows more than half its width, so m ≤ min_i (hi_i − lo_i)/2. Where the narrowest interval alone
    binds, every slope of a range gives that margin: the middle of the range. Without drift, c1 = 0."""
    c1 = 0.0
    if fit_drift:
        room, bends = _margin_function(t, lo, hi)
        if len(bends):
            f = room(bends)
            top = np.flatnonzero(f >= f.max() - 8 * np.spacing(float(np.max(np.abs(np.concatenate([lo, hi]))))))
            c1 = float((bends[top[0]] + bends[top[-1]]) / 2.0)  # where one interval binds alone, a range of slopes is optimal: its middle
    upper, lower = float(np.min(hi - c1 * t)), float(np.max(lo - c1 * t))
    return (upper + lower) / 2.0, c1, (upper - lower) / 2.0


def _slope_range(t: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float] | None:
    """The smallest and largest slope c1 of a line c0 + c1·t inside every [lo_i, hi_i]: the ends of the slopes
    where the margin function (``_margin_function``) is ≥ 0, each found on the linear piece where it crosses 0
    (beyond the outer bends the function falls at (max t − min t) per unit of slope on either side). None when
    no line fits all intervals or the times do not spread."""
    if len(t) < 2 or np.ptp(t) <= 0:
        return None
    room, bends = _margin_function(t, lo, hi)
    if not len(bends):
        return None
    f = room(bends)
    top = int(np.argmax(f))
    if f[top] < 0:
        return None
    spread = float(np.ptp(t))

    def end(side: int) -> float:
        idx = np.arange(top, -1, -1) if side < 0 else np.arange(top, len(bends))
        below = np.flatnonzero(f[idx] < 0)
        if not len(below):  # past the outermost bend
            k = idx[-1]
            return float(bends[k] + side * f[k] / spread)
        k_out, k_in = idx[below[0]], idx[below[0] - 1]
        return float(bends[k_in] + (bends[k_out] - bends[k_in]) * f[k_in] / (f[k_in] - f[k_out]))

    return end(-1), end(1)


def align_dumps(dump_start: np.ndarray, dump_end: np.ndarray, kern_start: np.ndarray, kern_end: np.ndarray,
                slack_ns: float = MATCH_SLACK_NS) -> Alignment:
    """Fit the probe→nsys clock mapping of one device from dump spans and kernel intervals (ns)."""
    a = np.asarray(dump_start, dtype=np.float64)
    b = np.asarray(dump_end, dtype=np.float64)
    order = np.argsort(kern_start)
    ks = np.asarray(kern_start, dtype=np.float64)[order]
    ke = np.asarray(kern_end, dtype=np.float64)[order]
    d0 = int(np.argmin(a))
    cands = np.flatnonzero(ke - ks >= (b[d0] - a[d0]) - 2 * slack_ns)
    best, best_n, tied = None, -1, []
    per_chunk = max(1, 4_000_000 // max(len(a), 1))
    for start in range(0, len(cands), per_chunk):  # chunks of candidate offsets, each vectorized
        c = cands[start : start + per_chunk]
        offs = (a[d0] - ks[c] + b[d0] - ke[c]) / 2.0
        n = (_match(offs, a, b, ks, ke, slack_ns) >= 0).sum(axis=1)
        i = int(np.argmax(n))
        if n[i] > best_n:
            best, best_n, tied = float(offs[i]), int(n[i]), []
        if n[i] == best_n:
            tied += offs[n == best_n][:MAX_TIED].tolist()
    if best is None or best_n == 0:
        return Alignment(float("nan"), 0.0, 0.0, float("nan"), 0, len(a), np.full(len(a), -1))
    first = _fit(best, a, b, ks, ke, order, slack_ns)
    if (first.residual_ns == 0.0 and abs(first.offset_ns) <= PLAUSIBLE_OFFSET_NS) or len(tied) < 2:
        return first
    # A few dumps can sit inside several kernels (within the match slack, or one dump inside any long
    # enough kernel). When the first such offset leaves a dump outside under every line, or lies further
    # off than the clocks of a capture do, the offsets whose kernels hold every dump (a common offset
    # exists: the kernels' intervals meet) decide: the one nearest zero, then the deepest.
    tied = np.unique(np.asarray(tied[:MAX_TIED]))
    k = _match(tied, a, b, ks, ke, slack_ns)
    lo = np.where(k >= 0, b[None, :] - ke[np.maximum(k, 0)], -np.inf).max(axis=1)
    hi = np.where(k >= 0, a[None, :] - ks[np.maximum(k, 0)], np.inf).min(axis=1)
    feasible = hi - lo >= -slack_ns
    if not feasible.any():
        return first
    pick = np.flatnonzero(feasible)[np.lexsort((-(hi - lo)[feasible], np.abs((lo + hi) / 2)[feasible]))[0]]
    alt = _fit(float(tied[pick]), a, b, ks, ke, order, slack_ns)
    better = (alt.dumps_matched, -alt.residual_ns, -abs(alt.offset_ns)) > (first.dumps_matched, -first.residual_ns, -abs(first.offset_ns))
    return alt if better else first


def _fit(offset0: float, a, b, ks, ke, order, slack_ns: float) -> Alignment:
    """The alignment whose matching is the kernels holding each dump under ``offset0`` (± the slack)."""
    k = _match(np.array([offset0]), a, b, ks, ke, slack_ns)[0]
    m = k >= 0
    lo = b[m] - ke[k[m]]
    hi = a[m] - ks[k[m]]
    t = (a[m] + b[m]) / 2.0
    t_ref = float(t.min())
    offset, drift, margin = _max_margin_line(t - t_ref, lo, hi, fit_drift=m.sum() >= 3 and np.ptp(t) > 0)
    if margin < 0 and m.sum() == 2 and np.ptp(t) > 0:  # two dumps far apart: the clocks' drift may be what separates them
        offset, drift, margin = _max_margin_line(t - t_ref, lo, hi, fit_drift=True)
    residual = float(max(-margin, 0.0))
    kernel_of_dump = np.full(len(a), -1)
    kernel_of_dump[m] = order[k[m]]
    rng = _slope_range(t - t_ref, lo, hi) if residual == 0.0 else None
    return Alignment(float(offset), float(drift), t_ref, residual, int(m.sum()), len(a), kernel_of_dump, rng)
