"""The platform model M_X = (T_iss^0(K, V), R, Q(K)) of one platform and store path (docs/model.md §1, §3).

Units: R in GB/s, which is numerically bytes per ns, so V/R is ns for V in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PlatformModel:
    """Calibrated M_X: drain rate, issue floor per (K, B), capacity, per-burst loop overhead."""

    rate_gbps: float
    issue_floor_ns: dict[tuple[int, int], float] = field(default_factory=dict)
    capacity_by_producers: dict[int, float] | None = None  # Q(K)
    loop_overhead_ns: float = 0.0
    platform: str = ""
    store_path: str = ""

    @property
    def capacity_bytes(self) -> float | None:
        """Q at the largest calibrated K (the one-number summary)."""
        if not self.capacity_by_producers:
            return None
        return float(self.capacity_by_producers[max(self.capacity_by_producers)])

    def capacity(self, producers) -> np.ndarray | None:
        """Q(K) at the nearest calibrated K, for each K given."""
        if not self.capacity_by_producers:
            return None
        ks = np.array(sorted(self.capacity_by_producers), dtype=np.float64)
        qs = np.array([self.capacity_by_producers[int(k)] for k in ks])
        K = np.atleast_1d(np.asarray(producers, dtype=np.float64))
        return qs[np.argmin(np.abs(K[:, None] - ks[None, :]), axis=1)]

    def floor_ns(self, producers, bytes_per_producer) -> np.ndarray:
        """T_iss^0 for (K, B): the calibrated value of the nearest K, log-linear in B between points.

        Outside the calibrated B range it scales linearly with B from the nearest end (issue at the
        recovered floor is bandwidth-like: a burst twice as large takes about twice as long).
        """
        K = np.atleast_1d(np.asarray(producers, dtype=np.float64))
        B = np.atleast_1d(np.asarray(bytes_per_producer, dtype=np.float64))
        K, B = np.broadcast_arrays(K, B)
        if not self.issue_floor_ns:
            raise ValueError("platform model has no issue floor points")
        keys = np.array(sorted(self.issue_floor_ns), dtype=np.float64)
        vals = np.array([self.issue_floor_ns[tuple(int(x) for x in k)] for k in keys])
        out = np.empty(K.shape)
        ks = np.unique(keys[:, 0])
        nearest = ks[np.argmin(np.abs(K.ravel()[:, None] - ks[None, :]), axis=1)].reshape(K.shape)
        for k in ks:  # one pass per calibrated K (a handful), vectorized over the queries
            sel = nearest == k
            if not sel.any():
                continue
            rows = keys[:, 0] == k
            bk, tk = keys[rows, 1], vals[rows]
            o = np.argsort(bk)
            bk, tk = bk[o], tk[o]
            q = B[sel]
            inside = np.interp(np.log(q), np.log(bk), tk)
            below = tk[0] * q / bk[0]
            above = tk[-1] * q / bk[-1]
            out[sel] = np.where(q < bk[0], below, np.where(q > bk[-1], above, inside))
        return out
