"""Column-wise model throughput: backlog recurrence, sequence audit, stalled trajectory, stall prediction."""

from __future__ import annotations

import time

import numpy as np

from xstage_trace.analysis.recurrence import audit_sequence, backlog_bytes, byte_balance, stalled_trajectory
from xstage_trace.analysis.stall_law import predicted_stall_ns

N = 5_000_000


def best_of(fn, reps: int = 3) -> float:
    out = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    v = rng.uniform(0, 8e6, N)
    g = rng.uniform(0, 2e5, N)
    t0 = rng.uniform(100, 3000, N)
    span = rng.uniform(0, 6e4, N)
    cover = rng.uniform(0, 6e4, N)
    r, q = 67.0, 30e6
    for name, fn in [
        ("backlog q_n (Lindley closed form)", lambda: backlog_bytes(byte_balance(v, r, t0, g))),
        ("audit_sequence (rho, db, q, b_iso, guard)", lambda: audit_sequence(v, g, t0, r, q)),
        ("stalled_trajectory (clamp scan)", lambda: stalled_trajectory(v, g, t0, r, q, 120.0)),
        ("predicted_stall_ns per tile", lambda: predicted_stall_ns(span, cover)),
    ]:
        s = best_of(fn)
        print(f"{name}: {N / s / 1e6:.1f} M per s ({s * 1e3:.0f} ms for {N / 1e6:.0f} M)")


if __name__ == "__main__":
    main()
