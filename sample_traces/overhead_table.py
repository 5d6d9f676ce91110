"""Per case, the median kernel time of each build and its ratio to the probe-free one, from a run's
times.csv (columns dest, seqlen, causal, batch, heads, build, trial, kernel_ms), plus the median of the
per-trial traced/plain ratios. Used by the FA3 and FA4 sample scripts.

    python overhead_table.py TIMES_CSV OUT_CSV plain BUILD...   (the first build is the reference)
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict


def main(times: str, out: str, builds: list[str]) -> None:
    t: dict[tuple, dict[str, dict[int, float]]] = defaultdict(dict)
    for r in csv.DictReader(open(times)):
        t[(r["dest"], int(r["seqlen"]), int(r["causal"]), r["batch"], r["heads"])].setdefault(r["build"], {})[int(r["trial"])] = float(r["kernel_ms"])
    ref, others = builds[0], builds[1:]
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dest", "seqlen", "causal", "batch", "heads", "trials", *(f"{b}_ms" for b in builds),
                    *(f"{b}_vs_{ref}" for b in others), f"traced_vs_{ref}_paired"])
        for k in sorted(t):
            b = t[k]
            med = {n: statistics.median(b[n].values()) for n in builds}
            paired = statistics.median(b["traced"][i] / b[ref][i] - 1 for i in b[ref] if i in b["traced"])
            w.writerow([*k, len(b[ref]), *(f"{med[n]:.5f}" for n in builds), *(f"{med[n] / med[ref] - 1:+.4f}" for n in others), f"{paired:+.4f}"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
