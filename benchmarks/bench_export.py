"""Timeline export throughput over the sample fused-kernel run (spans + counter samples per second).

Builds the run once with analyze (nsys export cached beside the report), then times the timeline
model, the Perfetto protobuf writer and the Chrome JSON writer (best of 3)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from xstage_trace import open_run
from xstage_trace.collectors.nsys_names import METRIC_PATTERNS
from xstage_trace.reports.chrome_export import write_chrome
from xstage_trace.reports.perfetto_export import write_perfetto
from xstage_trace.reports.trace_model import build_timeline
from xstage_trace.pipeline.runner import analyze_inputs

ROOT = Path(__file__).resolve().parents[1] / "sample_traces"


def best_of(n, fn):
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    traced = ROOT / "h200_fused_moe" / "traced"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        analyze_inputs([next(traced.glob("*.nsys-rep")), traced], run_dir, calibration=ROOT / "h200_calibration" / "calibration_host.json")
        run = open_run(run_dir)
        metrics = [n for n, _ in METRIC_PATTERNS]
        t_model, tl = best_of(3, lambda: build_timeline(run, metrics=metrics))
        items = len(tl.spans) + len(tl.counters)
        print(f"timeline model: {len(tl.spans)} spans, {len(tl.counters)} counter samples in {t_model:.2f} s")
        for name, writer, suffix in (("perfetto", write_perfetto, ".pftrace"), ("chrome", write_chrome, ".json")):
            out = Path(tmp) / f"trace{suffix}"
            t, _ = best_of(3, lambda: writer(tl, out))
            print(f"{name}: {items / t / 1e3:.0f} k items/s ({t:.2f} s, {out.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
