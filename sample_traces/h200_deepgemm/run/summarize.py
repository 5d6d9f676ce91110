"""Probe cost of the deepgemm-sm90 run from bench.py's summaries: per case, D destination and timing
protocol, the medians of the clean build (both passes), the patched build with the trace buffer cleared
and traced, and ratios with bootstrap 95 % intervals of the ratio of medians:

- traced / cleared: paired (the same trial indices resampled for both modes; one process, each trial's
  modes in random order back to back);
- cleared / clean and traced / clean: the two clean passes pooled, each side resampled on its own
  (separate processes, not paired);
- clean pass 2 / clean pass 1: the process-to-process floor (A/A) of the build comparison.

    usage: python summarize.py RESULTS_DIR   (summary_clean_1.json, summary_patched.json, summary_clean_2.json)
    writes RESULTS_DIR/overhead.json and RESULTS_DIR/overhead.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

RESAMPLES = 4000
PROTOCOLS = {"single": "times_ms", "batch": "batch_ms"}  # bench.py's per-protocol time lists


def ratio_interval_pct(num: np.ndarray, den: np.ndarray, paired: bool, rng: np.random.Generator) -> tuple[float, float, float]:
    """100·(median(num)/median(den) − 1) and its bootstrap 95 % percentile interval (``paired``: one index
    draw for both samples, which must then be equally long and aligned by trial)."""
    point = 100.0 * (np.median(num) / np.median(den) - 1.0)
    i = rng.integers(0, len(num), size=(RESAMPLES, len(num)))
    j = i if paired else rng.integers(0, len(den), size=(RESAMPLES, len(den)))
    boot = 100.0 * (np.median(num[i], axis=1) / np.median(den[j], axis=1) - 1.0)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(point), float(lo), float(hi)


def compare(clean_1: dict, patched: dict, clean_2: dict, seed: int = 0) -> list[dict]:
    """One row per (case, dest, protocol): medians (ms) and the four ratios (%, with intervals)."""
    rng = np.random.default_rng(seed)
    rows = []
    for c1, p, c2 in zip(clean_1["cases"], patched["cases"], clean_2["cases"]):
        assert (c1["case"], c1["dest"]) == (p["case"], p["dest"]) == (c2["case"], c2["dest"])
        for protocol, key in PROTOCOLS.items():
            a1, a2 = (np.asarray(c[key]["clean"], float) for c in (c1, c2))
            tr, cl = (np.asarray(p[key][m], float) for m in ("traced", "cleared"))
            clean = np.concatenate([a1, a2])
            row = {"case": p["case"], "shape": p["shape"], "dest": p["dest"], "protocol": protocol, "trials": len(tr),
                   "clean_1_ms": float(np.median(a1)), "clean_2_ms": float(np.median(a2)),
                   "cleared_ms": float(np.median(cl)), "traced_ms": float(np.median(tr))}
            for name, num, den, paired in (("traced_vs_cleared", tr, cl, True), ("cleared_vs_clean", cl, clean, False),
                                           ("traced_vs_clean", tr, clean, False), ("clean_2_vs_clean_1", a2, a1, False)):
                row[f"{name}_pct"], row[f"{name}_lo_pct"], row[f"{name}_hi_pct"] = ratio_interval_pct(num, den, paired, rng)
            rows.append(row)
    return rows


def _pct(row: dict, name: str) -> str:
    return f"{row[name + '_pct']:+.2f} % [{row[name + '_lo_pct']:+.2f}, {row[name + '_hi_pct']:+.2f}]"


def markdown(rows: list[dict]) -> str:
    """The table PROVENANCE.md carries."""
    out = ["| case (D) | protocol | clean ms (pass 1 / 2) | cleared ms | traced ms | traced vs cleared | cleared vs clean | "
           "clean 2 vs 1 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['case']} {r['shape']} ({r['dest']}) | {r['protocol']} ×{r['trials']} | {r['clean_1_ms']:.4f} / "
                   f"{r['clean_2_ms']:.4f} | {r['cleared_ms']:.4f} | {r['traced_ms']:.4f} | {_pct(r, 'traced_vs_cleared')} | "
                   f"{_pct(r, 'cleared_vs_clean')} | {_pct(r, 'clean_2_vs_clean_1')} |")
    return "\n".join(out) + "\n"


def main() -> int:
    res = Path(sys.argv[1])
    c1, p, c2 = (json.loads((res / f"summary_{n}.json").read_text()) for n in ("clean_1", "patched", "clean_2"))
    rows = compare(c1, p, c2)
    (res / "overhead.json").write_text(json.dumps(rows, indent=1))
    (res / "overhead.md").write_text(markdown(rows))
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
