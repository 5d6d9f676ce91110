"""xstage probes vs Proton instrumentation scopes on the same Triton kernel, one process, one run.

The kernel is the persistent bf16 GEMM of ``tools/triton_gemm.py``:
(a) ``gemm_plain`` (no probes), (b) ``gemm_instrumented`` compiled inside a Proton instrumentation
session (its two ``enter_scope``/``exit_scope`` pairs per tile become Proton records; the xstage
switch is off), (c) ``gemm_instrumented`` with the xstage probes on (two begin/end pairs per tile
at the same points, Proton off; clock reads at the points, the tile's four records stored together
after its output store). Equal probe density: four probe points per tile at the same
source points (Proton: an enter and an exit record per scope, two scopes; xstage: a begin and an
end record per span, two spans); Proton samples warp 0 only (``sampling_strategy="selective"``),
xstage writes from thread 0 of each program. Beside them, the cost breakdown of the xstage probes:
``gemm_breakdown`` with the anchors only, the counted form at two placements, the stamped form with
one store per record (after the tile's output store), the four clock reads alone, and the
persistent-loop form storing each record at its point (``triton_gemm.BREAKDOWN``). The noise
floor: ``plain_aa``, the probe-free kernel launched a second time in every trial, in the same
random order as the others (an A/A comparison).

SASS: for every variant the K loop's instruction count, R2UR moves and whether its instruction mix
is the probe-free kernel's (``xstage_trace.instrument.triton_sass``), from the cubins this run
launched.

Timing: every trial runs the variants in a fresh random order (seeded), so no variant always follows
the same one (a fixed rotation did: the A/A pair then differed by 0.1 %); each launch is preceded by a
~1 ms ``torch.cuda._sleep`` so that the host's work (Proton synchronises the stream and parses its
buffer after every launch) never shows in the device time, and CUDA events are recorded from
Triton launch hooks placed innermost (right around the driver launch). Medians over the trials.

Fidelity: each tool's longest per-program span (first to last record of one program, in the tool's
own ns) against the CUDA-event time of the same launch. xstage converts clock64 per slice from its
(%globaltimer, clock64) anchors; Proton converts cycles with its own clock assumption.

Confidence: for every overhead (and the ratio xstage / Proton) a 95 % interval from a paired
bootstrap of the trials (resampling whole trials, the ratio of the medians each time).

    python benchmarks/bench_triton_vs_proton.py --out OUT_DIR [--trials 100]

Writes OUT_DIR/triton_vs_proton.json, OUT_DIR/xstage_gemm.xsp, OUT_DIR/proton_trace_head.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import triton
import triton.profiler as proton
import triton.profiler.language as proton_lang
from triton import knobs

from xstage_trace.collectors.probe_format import decode_probe_dump
from xstage_trace.instrument import triton as xp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools/
from tools import triton_gemm as g  # noqa: E402
from xstage_trace.instrument.triton_sass import kernel_mma_loop  # noqa: E402

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 64, 8
NUM_WARPS, NUM_STAGES = 8, 3
SLEEP_CYCLES = 2_000_000  # ~1 ms at 2 GHz: keeps the GPU busy while the host enqueues a launch
BOOTSTRAP_RESAMPLES = 10_000


class LaunchTimer:
    """CUDA events recorded by Triton's launch hooks, innermost (added after Proton's own hooks:
    the enter chain runs in order, the exit chain in reverse), only while armed."""

    def __init__(self):
        self.armed = False
        self.pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def enter(self, metadata) -> None:
        if self.armed:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self.pairs.append((start, None))

    def exit(self, metadata) -> None:
        if self.armed:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pairs[-1] = (self.pairs[-1][0], end)

    def install(self) -> None:
        """(Re)install last, after a ``proton.start`` that registered Proton's hooks."""
        knobs.runtime.launch_enter_hook.remove(self.enter)
        knobs.runtime.launch_exit_hook.remove(self.exit)
        knobs.runtime.launch_enter_hook.add(self.enter)
        knobs.runtime.launch_exit_hook.add(self.exit)

    def timed(self, launch) -> int:
        """Run ``launch`` behind a sleep with the events armed; returns the index of its event pair."""
        torch.cuda._sleep(SLEEP_CYCLES)
        self.armed = True
        try:
            launch()
        finally:
            self.armed = False
        return len(self.pairs) - 1

    def ms(self, i: int) -> float:
        start, end = self.pairs[i]
        return start.elapsed_time(end)


def _args(a, b, c):
    return (a, b, c, a.shape[0], b.shape[1], a.shape[1], a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))


def _meta(programs: int) -> dict:
    return dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, NUM_PROGRAMS=programs,
                num_warps=NUM_WARPS, num_stages=NUM_STAGES)


def mma_loop_summary(kernels: dict) -> dict:
    """Per variant: the K loop's SASS instructions, R2UR moves, uniform-datapath instructions, and
    whether its instruction mix is the probe-free kernel's (``kernels["plain"]``)."""
    loops = {name: kernel_mma_loop(k) for name, k in kernels.items()}
    base = loops["plain"].mix
    return {name: {"instructions": len(lp.instructions), "r2ur": lp.r2ur, "uniform": lp.uniform,
                   "same_mix_as_plain": lp.mix == base} for name, lp in loops.items()}


def overhead_ci95(times: dict[str, list[float]], base: str = "plain", seed: int = 0) -> dict:
    """95 % interval (percent) of each variant's overhead over ``base``, median(variant) / median(base) − 1,
    from a paired bootstrap of the trials (every resample draws whole trials, so both medians come from
    the same launches' neighbourhood); also the ratio of xstage's overhead to Proton's."""
    names = [k for k, v in times.items() if v and len(v) == len(times[base])]
    t = np.array([times[k] for k in names])  # variants × trials
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, t.shape[1], size=(BOOTSTRAP_RESAMPLES, t.shape[1]))
    med = np.median(t[:, idx], axis=2)  # variants × resamples
    over = 100.0 * (med / med[names.index(base)] - 1.0)
    out = {k: np.percentile(over[i], [2.5, 97.5]).tolist() for i, k in enumerate(names) if k != base}
    if "xstage" in names and "proton" in names:
        ratio = over[names.index("xstage")] / over[names.index("proton")]
        out["ratio_xstage_to_proton"] = np.percentile(ratio, [2.5, 97.5]).tolist()
    return out


def xstage_fidelity(dump: Path) -> dict:
    """Longest per-slice span (first → last record, ns, per-SM conversion), records, drops, clocks."""
    d = decode_probe_dump(dump, allow_overflow=True)
    r = d.records.select(["slice", "t_gt_ns"]).to_pandas()
    per = r.groupby("slice")["t_gt_ns"].agg(["min", "max"])
    sl = d.slices.to_pandas()
    ghz = 1.0 / sl["ns_per_cycle"].to_numpy()
    return {"longest_span_ns": float((per["max"] - per["min"]).max()), "records": int(len(r)),
            "dropped": int(sl["records_dropped"].sum()), "slices": int(len(sl)),
            "sm_clock_measured_ghz_median": float(np.median(ghz)), "sm_clock_measured_ghz_min": float(ghz.min()),
            "sm_clock_measured_ghz_max": float(ghz.max()), "sm_clock_nominal_ghz": d.header["sm_clock_khz"] / 1e6,
            "warnings": d.warnings}


def _chrome_events(text: str) -> list[dict]:
    """The events of a chrome trace: one JSON document, or one per line (Proton writes a line per stream)."""
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    events: list[dict] = []
    for d in docs:
        events.extend(d.get("traceEvents", []) if isinstance(d, dict) else d)
    return events


def proton_fidelity(trace_path: Path, head_path: Path) -> dict:
    """Proton's chrome trace of one launch: scope events, longest per-(pid, tid) span (µs → ns)."""
    text = trace_path.read_text()
    head_path.write_text(json.dumps({"file": trace_path.name, "bytes": len(text), "start": text[:4000]}, indent=1))
    events = _chrome_events(text)
    xs = [e for e in events if e.get("ph") == "X" and any(s in str(e.get("name", "")) for s in g.EVENT_NAMES)]
    head_path.write_text(json.dumps({"file": trace_path.name, "bytes": len(text), "events_total": len(events),
                                     "scope_events": len(xs), "first_events": events[:40], "first_scope_events": xs[:40]},
                                    indent=1))
    spans: dict = {}
    for e in xs:  # one pass over a few thousand events
        key = (e.get("pid"), e.get("tid"))
        lo, hi = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
        a, b = spans.get(key, (lo, hi))
        spans[key] = (min(a, lo), max(b, hi))
    longest_us = max((b - a for a, b in spans.values()), default=float("nan"))
    return {"scope_events": len(xs), "lanes": len(spans), "longest_span_ns": longest_us * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=8192)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    programs = torch.cuda.get_device_properties(dev).multi_processor_count
    a = torch.randn(args.m, args.k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.k, args.n, device=dev, dtype=torch.bfloat16)
    c_plain, c_x, c_p = (torch.empty(args.m, args.n, device=dev, dtype=torch.bfloat16) for _ in range(3))
    tiles = triton.cdiv(args.m, BLOCK_M) * triton.cdiv(args.n, BLOCK_N)
    per_tile = g.EVENTS_PER_TILE.value
    expected_records = tiles * per_tile
    capacity = triton.cdiv(tiles, programs) * per_tile
    buf = xp.TraceBuffer(programs, capacity)
    meta = _meta(programs)
    result: dict = {"shape_mnk": [args.m, args.n, args.k], "tiles": tiles, "programs": programs,
                    "events_per_tile": per_tile, "expected_records": expected_records,
                    "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "triton": triton.__version__,
                    "errors": {}}

    launch_plain = lambda: g.gemm_plain[(programs,)](*_args(a, b, c_plain), **meta)  # noqa: E731
    launch_x = lambda: g.gemm_instrumented[(programs,)](*_args(a, b, c_x), **buf.kernel_args(), **meta)  # noqa: E731
    bufs = {name: xp.TraceBuffer(programs, capacity) for name in g.BREAKDOWN}
    breakdown = {name: (lambda form=form, bb=bufs[name]: g.gemm_breakdown[(programs,)](*_args(a, b, c_x), **bb.kernel_args(),
                                                                                      FORM=form, **meta))
                 for name, form in g.BREAKDOWN.items()}
    launch_p = lambda: g.gemm_instrumented[(programs,)](*_args(a, b, c_p), **xp.off_args(), **meta)  # noqa: E731
    compiled = {name: launch() for name, launch in  # compile outside any Proton session
                (("plain", launch_plain), ("xstage", launch_x), *breakdown.items())}
    torch.cuda.synchronize()
    ref = (a.float() @ b.float())
    result["max_rel_err_plain"] = float(((c_plain.float() - ref).abs().max() / ref.abs().max()).item())
    result["xstage_output_identical"] = bool(torch.equal(c_plain, c_x))

    proton_lang.enable_semantic("triton")  # Proton 3.6 instruments Gluon only unless told
    mode = proton.mode.Default(sampling_strategy="selective", sampling_options="0")
    timer = LaunchTimer()
    timer.install()
    times: dict[str, list[float]] = {"plain": [], "plain_aa": [], "proton": [], "xstage": [], **{k: [] for k in breakdown}}
    try:
        session = proton.start(str(args.out / "proton_timing"), data="tree", backend="instrumentation", mode=mode)
        timer.install()
        kernel_p = launch_p()  # compile + load inside the session
        torch.cuda.synchronize()
        result["proton_output_identical"] = bool(torch.equal(c_plain, c_p))
        result["proton_profile_scratch_bytes_per_program"] = int(kernel_p.metadata.profile_scratch_size)
        compiled["proton"] = kernel_p
        proton.deactivate(session)
        order = [("plain", launch_plain), ("proton", launch_p), ("xstage", launch_x), ("plain_aa", launch_plain),
                 *breakdown.items()]
        idx: dict[str, list[int]] = {k: [] for k in times}
        t0 = time.time()
        rng = np.random.default_rng(0)
        for trial in range(args.trials):
            for i in rng.permutation(len(order)):
                name, launch = order[i]
                if name == "xstage":
                    buf.reset()
                if name in breakdown:
                    bufs[name].reset()
                if name == "proton":
                    proton.activate(session)
                    idx[name].append(timer.timed(launch))
                    proton.deactivate(session)
                else:
                    idx[name].append(timer.timed(launch))
        torch.cuda.synchronize()
        result["timing_wall_s"] = time.time() - t0
        for k, ii in idx.items():
            times[k] = [timer.ms(i) for i in ii]
        proton.finalize(session)
    except Exception:  # the comparison still reports xstage if Proton breaks, with Proton's error
        result["errors"]["proton_timing"] = traceback.format_exc(limit=4)
        torch.cuda.synchronize()
    if not times["plain"]:  # Proton failed before the trials: time (a) and (c) alone
        for trial in range(args.trials):
            for name, launch in (("plain", launch_plain), ("xstage", launch_x), ("plain_aa", launch_plain),
                                 *breakdown.items())[::1 if trial % 2 == 0 else -1]:
                if name == "xstage":
                    buf.reset()
                if name in breakdown:
                    bufs[name].reset()
                times[name].append(timer.ms(timer.timed(launch)))
        torch.cuda.synchronize()
    try:
        result["sass_mma_loop"] = mma_loop_summary(compiled)
    except Exception:
        result["errors"]["sass_mma_loop"] = traceback.format_exc(limit=4)
    result["trials"] = len(times["plain"])
    result["kernel_ms_median"] = {k: (statistics.median(v) if v else None) for k, v in times.items()}
    result["kernel_ms_all"] = times
    base = result["kernel_ms_median"]["plain"]
    for k in times:
        m = result["kernel_ms_median"][k]
        if k != "plain":
            result[f"overhead_{k}_pct"] = None if m is None else 100.0 * (m - base) / base
    result["overhead_ci95_pct"] = overhead_ci95(times)
    result["noise_floor_pct"] = result["overhead_plain_aa_pct"]
    if result.get("overhead_proton_pct"):
        result["ratio_xstage_to_proton"] = result["overhead_xstage_pct"] / result["overhead_proton_pct"]

    # xstage: the last timed launch's dump (its buffer was reset before it)
    try:
        dump = args.out / "xstage_gemm.xsp"
        buf.dump(dump, g.EVENT_NAMES, label=f"kernel=triton_gemm M={args.m} N={args.n} K={args.k} programs={programs} tool=xstage")
        fx = xstage_fidelity(dump)
        t_x_ms = times["xstage"][-1]
        result["xstage"] = fx | {"kernel_ms_event": t_x_ms, "buffer_bytes": buf.nbytes,
                                 "bytes_per_event": buf.nbytes / max(fx["records"], 1), "record_bytes": 16}
        result["dropped_xstage"] = int(expected_records - fx["records"])
        result["span_err_xstage_pct"] = 100.0 * (fx["longest_span_ns"] / (t_x_ms * 1e6) - 1.0)
    except Exception:
        result["errors"]["xstage_fidelity"] = traceback.format_exc(limit=4)

    # the breakdown variants' dumps of their last timed launch: records, drops, span (not kept)
    result["breakdown_fidelity"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, bb in bufs.items():
            try:
                fb = xstage_fidelity(bb.dump(Path(tmp) / f"{name}.xsp", g.EVENT_NAMES))
                span = fb["longest_span_ns"] / (times[name][-1] * 1e6) - 1.0 if fb["records"] else float("nan")
                result["breakdown_fidelity"][name] = {"records": fb["records"], "dropped": fb["dropped"],
                                                      "span_err_pct": 100.0 * span}
            except Exception:
                result["errors"][f"fidelity_{name}"] = traceback.format_exc(limit=4)

    # Proton fidelity: a fresh session with exactly one launch, written as a chrome trace
    try:
        g.gemm_instrumented.device_caches.clear()  # reload the kernel so the new session registers it
        launch_x()  # recompile (disk cache) the xstage variant outside Proton, so the session sees one kernel
        torch.cuda.synchronize()
        session = proton.start(str(args.out / "proton_fidelity"), data="trace", backend="instrumentation", mode=mode)
        timer.install()
        i = timer.timed(launch_p)
        torch.cuda.synchronize()
        proton.finalize(session, "chrome_trace")
        traces = sorted(glob.glob(str(args.out / "proton_fidelity*")))
        fp = proton_fidelity(Path(traces[0]), args.out / "proton_trace_head.json")
        t_p_ms = timer.ms(i)
        expected_scope_events = tiles * 2
        scratch = result.get("proton_profile_scratch_bytes_per_program", 0) * programs
        result["proton"] = fp | {"kernel_ms_event": t_p_ms, "trace_file": Path(traces[0]).name,
                                 "expected_scope_events": expected_scope_events, "buffer_bytes": scratch,
                                 "bytes_per_event": scratch / max(2 * fp["scope_events"], 1)}
        result["dropped_proton"] = int(expected_scope_events - fp["scope_events"])
        result["span_err_proton_pct"] = 100.0 * (fp["longest_span_ns"] / (t_p_ms * 1e6) - 1.0)
        for p in traces:  # the full trace is regenerable and large; the head is kept
            Path(p).unlink()
    except Exception:
        result["errors"]["proton_fidelity"] = traceback.format_exc(limit=4)
    for p in glob.glob(str(args.out / "proton_timing*")):
        Path(p).unlink()
    (args.out / "triton_vs_proton.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result.items() if k not in ("kernel_ms_all",)}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
