"""The throughput curve of ``analyze`` (benchmarks/throughput.png) from the runs in benchmarks/throughput.csv.

Each row of the CSV is one ``bench_analyze.py`` run (records, CPU seconds = user + sys of the process tree, wall
seconds, the 1-minute load average after it, the commit) or, with kind ``decode``, the decoder alone over the same
copies in one process (its CPU-ns per record). Plotted against the records: the records per CPU-second times the
machine's 2 cores (what both cores give when analyze has them to itself: the steadier figure on a shared machine),
the measured records per wall second, and the decode limit (2 cores / the decoder's CPU time per record), one per
machine the decoder was timed on (its label: the rows of a later, faster host say so).

    python benchmarks/plot_throughput.py
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORES = 2


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader((HERE / "throughput.csv").open()))
    runs = sorted((r for r in rows if r["kind"] == "analyze"), key=lambda r: float(r["records"]))
    decode = [r for r in rows if r["kind"] == "decode"]
    fig, ax = plt.subplots(figsize=(7, 5.4), dpi=120)
    for commit in dict.fromkeys(r["commit"] for r in runs):
        mine = [r for r in runs if r["commit"] == commit]
        n = [float(r["records"]) for r in mine]
        ax.plot(n, [CORES * float(r["records"]) / float(r["cpu_s"]) / 1e6 for r in mine], "o-", label=f"{commit}: records per CPU-s × {CORES} cores")
        ax.plot(n, [float(r["records"]) / float(r["wall_s"]) / 1e6 for r in mine], "x--", label=f"{commit}: measured (wall; load {min(float(r['load']) for r in mine):.0f}–{max(float(r['load']) for r in mine):.0f})")
    limits = []
    for label in dict.fromkeys(r["commit"] for r in decode):  # one limit per machine the decoder was timed on
        mine = [r for r in decode if r["commit"] == label]
        limits.append(CORES / (sum(float(r["cpu_s"]) / float(r["records"]) for r in mine) / len(mine)) / 1e6)
        ax.axhline(limits[-1], color="k", lw=1, ls="-" if len(limits) == 1 else "-.")
        ax.text(1e6, limits[-1] * 1.08, f"{label} limit ({CORES} cores): {limits[-1]:.0f} M records/s", fontsize=8)
    ax.axhline(8.0, color="g", lw=0.8, ls=":")
    ax.text(1e6, 8.0 * 1.08, "goal: 8 M records/s (250 CPU-ns per record)", fontsize=8, color="g")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(0.1, max(limits, default=8.0) * 2.5)
    ax.set_xlabel("probe records (SYNTHETIC copies of the 8 real fused-kernel dumps)")
    ax.set_ylabel("M records / s")
    ax.set_title("xstage-trace analyze, end to end (2-core machine)", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.tight_layout()
    fig.savefig(HERE / "throughput.png")


if __name__ == "__main__":
    main()
