"""CLI start-up time: wall time of whole ``xstage-trace`` processes (hyperfine-style: warm-up runs,
then N timed runs; min / median / mean ± sd), and where the import time goes (``python -X importtime``
self times summed per top-level package).

    python benchmarks/bench_startup.py [--runs 20] [--bin .venv/bin/xstage-trace]
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {
    "python -c pass (interpreter floor)": [sys.executable, "-c", "pass"],
    "--help": ["{bin}", "--help"],
    "model --help": ["{bin}", "model", "--help"],
    "model burst --json": ["{bin}", "model", "burst", "--rate-gbps", "52", "--issue-floor-us", "2.6", "--producers", "132",
                           "--bytes-per-producer", "32768", "--gap-us", "2", "--json"],
    "model burst (table)": ["{bin}", "model", "burst", "--rate-gbps", "52", "--issue-floor-us", "2.6", "--producers", "132",
                            "--bytes-per-producer", "32768", "--gap-us", "2"],
    "model stall --json": ["{bin}", "model", "stall", "--span-us", "50.4", "--cover-us", "7.6", "--json"],
    "model qloop --json": ["{bin}", "model", "qloop", "--sigma-us", "3", "--producers", "132", "--rate-gbps", "52",
                           "--issue-floor-us", "2.6", "--json"],
    "model interleave --json": ["{bin}", "model", "interleave", "--volume-bytes", "5767168", "--mainloop-l1-us", "98",
                                "--mainloop-l2-us", "7.6", "--n1", "132", "--n2", "176", "--issue-floor-us", "2.6",
                                "--rate-gbps", "52", "--json"],
    "model partition --json": ["{bin}", "model", "partition", "--tokens-per-expert", "512,480,256,128", "--tokens", "1376",
                               "--hidden", "4096", "--reduction", "1024", "--splits", "4", "--ranks", "8", "--json"],
    "collection --help": ["{bin}", "collection", "--help"],
}
# What each command imports, attributed to top-level packages.
IMPORT_PROFILES = ["--help", "model burst --json", "model partition --json"]


def timed_runs(argv: list[str], runs: int, warmup: int = 3, env: dict | None = None) -> tuple[list[float], list[float]]:
    """(wall s, CPU s = user + sys of the process) of ``runs`` executions after ``warmup`` untimed
    ones; fails loudly on a non-zero exit. CPU time stays meaningful on a loaded machine."""
    walls, cpus = [], []
    for i in range(warmup + runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        run_env = dict(os.environ, COLUMNS="120", **(env or {}))
        run_env.pop("PYTHONDONTWRITEBYTECODE", None)  # an install keeps its bytecode: time the start-up, not the compiler
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=run_env)
        dt = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
        if i >= warmup:
            walls.append(dt)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def import_profile(argv: list[str]) -> dict[str, float]:
    """Self import time (ms) per top-level package for one run of ``argv`` under ``-X importtime``."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "xstage_trace", *argv[1:]], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, check=True)
    per_pkg: dict[str, float] = collections.defaultdict(float)
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cum, name = line[len("import time:"):].split("|")
        per_pkg[name.strip().split(".")[0].lstrip("_") or name.strip()] += int(self_us) / 1e3
    return dict(per_pkg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--bin", default=str(Path(sys.executable).parent / "xstage-trace"))
    args = ap.parse_args()
    print(f"| command | wall min s | wall median s | wall mean ± sd s | CPU median s |  ({args.runs} runs after 3 warm-ups)")
    print("|---|---|---|---|---|")
    for name, argv in COMMANDS.items():
        argv = [a.replace("{bin}", args.bin) for a in argv]
        t, cpu = timed_runs(argv, args.runs)
        print(f"| `{name}` | {min(t):.3f} | {statistics.median(t):.3f} | {statistics.mean(t):.3f} ± {statistics.stdev(t):.3f} | {statistics.median(cpu):.3f} |")
    t, cpu = timed_runs([args.bin, "--help"], args.runs, env={"TYPER_USE_RICH": "0"})
    print(f"| `--help` with TYPER_USE_RICH=0 (plain click help: what rich costs) | {min(t):.3f} | {statistics.median(t):.3f} | "
          f"{statistics.mean(t):.3f} ± {statistics.stdev(t):.3f} | {statistics.median(cpu):.3f} |")
    for name in IMPORT_PROFILES:
        reps = [import_profile(["xstage-trace", *COMMANDS[name][1:]]) for _ in range(5)]
        pkgs = sorted({p for r in reps for p in r}, key=lambda p: -statistics.median(r.get(p, 0.0) for r in reps))
        total = statistics.median(sum(r.values()) for r in reps)
        top = ", ".join(f"{p} {statistics.median(r.get(p, 0.0) for r in reps):.0f}" for p in pkgs[:8])
        print(f"imports of `{name}` (median of 5, ms of self time): total {total:.0f}; {top}")


if __name__ == "__main__":
    main()
