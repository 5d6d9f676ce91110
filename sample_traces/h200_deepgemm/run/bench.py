"""DeepGEMM sm_90 under the deepgemm-sm90 recipe on one GPU: fp8_gemm_nt and the m-grouped contiguous
FP8 GEMM at DeepSeek-V3 expert shapes, output D in local HBM and in host-mapped pinned memory.

    python bench.py --build patched --out OUT [--trials 400]  # traced and cleared-buffer launches
    python bench.py --build clean --out OUT                   # the unpatched DeepGEMM (no trace buffer at all)

Timing (CUDA events, ms), two protocols, each trial's cases and modes in a random order (seeded):
- ``single``: a GPU busy-wait (``torch.cuda._sleep``, ~1 ms) is enqueued first, then the start event,
  ONE GEMM call, the end event. The host enqueues the call while the GPU still spins, so the events
  bracket the call's kernels and not the host's launch latency (``host_us``: the enqueue time of
  event + call + event, to check that it stayed below the spin).
- ``batch``: after the same spin, ``--batch`` calls back to back between one event pair; per call.
Traced launches reset the probe buffer's slice table before the spin (outside the events; a launch
rewrites its records from slot 0, so the batch's launches all store theirs); the single-protocol traced
launches of the trials in ``--dump-trials`` are written as probe dumps. Results are checked against a
float32 reference of the unquantized inputs and, between modes and destinations, bit for bit.
Writes OUT/summary_<build><tag>.json and OUT/dumps/*.xsp; summarize.py compares the builds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
from pathlib import Path

import torch

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.time() - T0:6.1f}s] {msg}", flush=True)


# (case, kind, shape): DeepSeek-V3 MoE expert GEMMs (hidden 7168, expert intermediate 2048).
CASES = (
    ("gemm_nt_up", "gemm_nt", dict(m=8192, n=4096, k=7168)),      # gate+up projection
    ("gemm_nt_down", "gemm_nt", dict(m=8192, n=7168, k=2048)),    # down projection
    ("grouped_contig_up", "m_grouped_contiguous", dict(groups=8, m_per_group=1024, n=4096, k=7168)),
)
EVENT_NAMES = ["mainloop", "store_wait", "epilogue", "schedule"]  # deep_gemm/xstage/sm90_trace.cuh, in id order
SPIN_CYCLES = 2_000_000  # torch.cuda._sleep: ~1 ms at 1.98 GHz, longer than one call's host enqueue


def shape_name(kind: str, s: dict) -> str:
    if kind == "gemm_nt":
        return f"m{s['m']}n{s['n']}k{s['k']}"
    return f"g{s['groups']}x{s['m_per_group']}n{s['n']}k{s['k']}"


class HostMapped:
    """Torch tensors on "cuda" whose memory is cudaHostAllocMapped host memory: a MemPool over the pluggable
    allocator of host_mapped_alloc.cu, or (where that fails) CuPy's hostAlloc exported through DLPack."""

    def __init__(self, so: Path, method: str):
        self.method, self.error, self._keep = method, None, []
        if method != "pluggable_mempool":
            return
        try:
            alloc = torch.cuda.memory.CUDAPluggableAllocator(str(so), "xstage_host_mapped_alloc", "xstage_host_mapped_free")
            self.pool = torch.cuda.MemPool(alloc.allocator())
        except Exception as exc:
            self.method, self.error = "cupy_dlpack", repr(exc)[:300]

    def empty(self, shape, dtype) -> torch.Tensor:
        if self.method == "pluggable_mempool":
            try:
                with torch.cuda.use_mem_pool(self.pool):
                    return torch.empty(shape, dtype=dtype, device="cuda")
            except Exception as exc:
                self.method, self.error = "cupy_dlpack", repr(exc)[:300]
        import cupy as cp

        nbytes = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
        ptr = cp.cuda.runtime.hostAlloc(nbytes, 3)  # cudaHostAllocPortable | cudaHostAllocMapped
        mem = cp.cuda.UnownedMemory(ptr, nbytes, None, 0)
        raw = cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
        t = torch.from_dlpack(raw).view(dtype).view(shape)
        if not (t.is_cuda and t.data_ptr() == ptr):
            raise RuntimeError(f"host-mapped tensor is not a CUDA view of the pinned buffer ({t.device}, {t.data_ptr():#x} vs {ptr:#x})")
        self._keep.append(raw)  # never freed: the process ends after the run
        return t


def memory_type(ptr: int) -> str:
    """cudaPointerGetAttributes' type of ``ptr``: host (pinned), device or managed."""
    import cupy as cp

    try:
        return {0: "unregistered", 1: "host", 2: "device", 3: "managed"}[int(cp.cuda.runtime.pointerGetAttributes(ptr).type)]
    except Exception as exc:
        return f"unknown ({exc!r})"[:120]


def make_inputs(dg, kind: str, s: dict, seed: int):
    """Quantized operands, the float32 reference of the unquantized product and the launch closure's args."""
    from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    g = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "gemm_nt":
        m, n, k = s["m"], s["n"], s["k"]
        a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn((n, k), device="cuda", dtype=torch.bfloat16, generator=g)
        ref = (a.float() @ b.float().t()).to(torch.bfloat16)
        a8, b8 = per_token_cast_to_fp8(a, use_ue8m0=False), per_block_cast_to_fp8(b, use_ue8m0=False)
        return dict(m=m, n=n, a=a8, b=b8, ref=ref, layout=None)
    groups, n, k = s["groups"], s["n"], s["k"]
    align = dg.get_mk_alignment_for_contiguous_layout()
    rnd = random.Random(seed)
    ms = [int(s["m_per_group"] * rnd.uniform(0.7, 1.3)) for _ in range(groups)]  # skewed routing, as DeepGEMM's tests
    aligned = [(x + align - 1) // align * align for x in ms]
    m = sum(aligned)
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn((groups, n, k), device="cuda", dtype=torch.bfloat16, generator=g)
    layout = torch.empty(m, device="cuda", dtype=torch.int32)
    ref = torch.zeros((m, n), device="cuda", dtype=torch.bfloat16)
    start = 0
    for i, (real, padded) in enumerate(zip(ms, aligned)):
        layout[start:start + real] = i
        layout[start + real:start + padded] = -1
        a[start + real:start + padded] = 0
        ref[start:start + real] = (a[start:start + real].float() @ b[i].float().t()).to(torch.bfloat16)
        start += padded
    a8 = per_token_cast_to_fp8(a, use_ue8m0=False)
    b8 = (torch.empty_like(b, dtype=torch.float8_e4m3fn), torch.empty((groups, n // 128, k // 128), device="cuda", dtype=torch.float))
    for i in range(groups):
        b8[0][i], b8[1][i] = per_block_cast_to_fp8(b[i], use_ue8m0=False)
    valid = layout >= 0
    return dict(m=m, n=n, a=a8, b=b8, ref=ref, layout=layout, valid=valid, group_ms=ms)


def launcher(dg, kind: str, x: dict, d: torch.Tensor):
    if kind == "gemm_nt":
        return lambda: dg.fp8_gemm_nt(x["a"], x["b"], d, disable_ue8m0_cast=True)
    return lambda: dg.m_grouped_fp8_gemm_nt_contiguous(x["a"], x["b"], d, x["layout"], disable_ue8m0_cast=True)


def rel_diff(d: torch.Tensor, x: dict) -> float:
    """DeepGEMM's calc_diff (1 − cosine-like similarity) over the rows that hold results."""
    dd, rr = d.double(), x["ref"].double()
    if x.get("valid") is not None:
        dd, rr = dd[x["valid"]], rr[x["valid"]]
    den = (dd * dd + rr * rr).sum()
    return float(1 - 2 * (dd * rr).sum() / den)


def kernels_of_one_call(fn) -> list[dict]:
    """The kernels one call launches (torch profiler): names and durations, to know what CUDA events time."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return [{"name": e.name[:120], "us": round(float(e.device_time_total), 2)}
                for e in prof.events() if e.device_type.name == "CUDA"]
    except Exception as exc:  # the profiler is a check, not the measurement: keep the run going
        return [{"error": repr(exc)[:200]}]


def env_info() -> dict:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,pci.bus_id,pcie.link.gen.current,pcie.link.width.current",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    return {"nvidia_smi": smi, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "nvcc": nvcc,
            "device": torch.cuda.get_device_name(), "sm_count": torch.cuda.get_device_properties(0).multi_processor_count}


def spin_duration_ms(repeats: int = 5) -> float:
    """The busy-wait's own length on this GPU (median of ``repeats``, CUDA events)."""
    out = []
    for _ in range(repeats):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.cuda._sleep(SPIN_CYCLES)
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1))
    return statistics.median(out)


def median(xs):
    return statistics.median(xs) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", choices=("patched", "clean"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trials", type=int, default=400, help="trials of the single-call protocol")
    ap.add_argument("--batch", type=int, default=10, help="calls between one event pair in the batch protocol")
    ap.add_argument("--batch-trials", type=int, default=40)
    ap.add_argument("--warmups", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20261201, help="seed of the per-trial order")
    ap.add_argument("--dump-trials", default="4,150,300")
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--host-alloc", type=Path, required=True, help="host_mapped_alloc.so")
    ap.add_argument("--tag", default="", help="suffix of the summary file (a repeated clean pass)")
    ap.add_argument("--host-method", choices=("pluggable_mempool", "cupy_dlpack"), default="pluggable_mempool")
    args = ap.parse_args()
    import deep_gemm as dg

    traced = args.build == "patched"
    log(f"deep_gemm from {Path(dg.__file__).parent}; build={args.build}; {env_info()}")
    num_sms = dg.get_num_sms()
    host = HostMapped(args.host_alloc, args.host_method)
    buf = None
    if traced:
        from xstage_trace.instrument.buffer import ProbeBuffer

        buf = ProbeBuffer(num_ctas=num_sms, roles_per_cta=int(dg._C.xstage_roles_per_cta()), capacity=args.capacity)
    modes = ("traced", "cleared") if traced else ("clean",)
    dump_trials = {int(t) for t in args.dump_trials.split(",") if t}
    (args.out / "dumps").mkdir(parents=True, exist_ok=True)

    runs = []  # one per (case, dest): tensors and closures
    for ci, (case, kind, s) in enumerate(CASES):
        x = make_inputs(dg, kind, s, seed=1234 + ci)
        for dest in ("local", "host"):
            d = torch.empty((x["m"], x["n"]), device="cuda", dtype=torch.bfloat16) if dest == "local" else host.empty((x["m"], x["n"]), torch.bfloat16)
            d.zero_()  # the m-grouped kernel leaves padding rows (layout -1) untouched: make them equal everywhere
            runs.append(dict(case=case, kind=kind, shape=shape_name(kind, s), dest=dest, x=x, d=d, fn=launcher(dg, kind, x, d),
                             mem=memory_type(d.data_ptr()), times={m: [] for m in modes}, outputs={}))
    log(f"host-mapped D through {host.method} (error before: {host.error})")
    log(f"{len(runs)} runs prepared; D memory types: {[(r['case'], r['dest'], r['mem']) for r in runs]}")

    def set_mode(mode: str) -> None:
        if mode == "traced":
            dg._C.xstage_set_trace_buffer(*buf.device_fields())
        elif mode == "cleared":
            dg._C.xstage_clear_trace_buffer()

    for r in runs:  # warm-ups (the first compiles the kernel), correctness, the kernels one call launches
        for mode in modes:
            set_mode(mode)
            for _ in range(args.warmups):
                if mode == "traced":
                    buf.reset()
                r["fn"]()
            torch.cuda.synchronize()
            r["outputs"][mode] = r["d"].clone()
        r["rel_diff"] = rel_diff(r["d"], r["x"])
        set_mode(modes[-1])
        r["kernels_per_call"] = kernels_of_one_call(r["fn"])
        log(f"warm {r['case']} dest={r['dest']}: rel diff {r['rel_diff']:.2e}; kernels per call {r['kernels_per_call']}")

    spin_ms = spin_duration_ms()
    log(f"spin of {SPIN_CYCLES} cycles: {spin_ms:.3f} ms")
    rng = random.Random(args.seed)
    for r in runs:
        r["host_us"] = {m: [] for m in modes}
        r["batch_ms"] = {m: [] for m in modes}

    def timed(r: dict, mode: str, calls: int):
        """Spin, start event, ``calls`` GEMM calls, end event (enqueued, not waited for); the enqueue time (µs)."""
        set_mode(mode)
        if mode == "traced":
            buf.reset()
        torch.cuda._sleep(SPIN_CYCLES)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        h0 = time.perf_counter()
        e0.record()
        for _ in range(calls):
            r["fn"]()
        e1.record()
        return e0, e1, (time.perf_counter() - h0) * 1e6

    for protocol, trials, calls in (("single", args.trials, 1), ("batch", args.batch_trials, args.batch)):
        for t in range(trials):
            for r in rng.sample(runs, len(runs)):
                done = [(mode, *timed(r, mode, calls)) for mode in rng.sample(modes, len(modes))]
                torch.cuda.synchronize()
                for mode, e0, e1, host_us in done:
                    if protocol == "single":
                        r["times"][mode].append(round(e0.elapsed_time(e1), 5))
                        r["host_us"][mode].append(round(host_us, 1))
                    else:
                        r["batch_ms"][mode].append(round(e0.elapsed_time(e1) / calls, 5))
                if protocol == "single" and traced and t in dump_trials:  # the buffer holds this trial's traced launch
                    label = (f"kernel=deepgemm_{r['kind']} dest={r['dest']} shape={r['shape']} layout=tma_store "
                             f"operands=fp8 epilogue=bf16 ctas={num_sms} trial={t}")
                    buf.dump(args.out / "dumps" / f"{r['case']}_{r['dest']}_t{t:03d}.xsp", EVENT_NAMES, label=label)
            if t % 100 == 99 or t == trials - 1:
                log(f"{protocol}: trial {t + 1}/{trials} done")

    summary = {"build": args.build, "env": env_info(), "num_sms": num_sms, "trials": args.trials, "warmups": args.warmups,
               "batch": args.batch, "batch_trials": args.batch_trials, "seed": args.seed, "spin_cycles": SPIN_CYCLES,
               "spin_ms": spin_ms, "timing": ("CUDA events (torch.cuda.Event), ms; times_ms: one call after a ~1 ms GPU spin; "
                                            "batch_ms: per call of `batch` back-to-back calls after the spin; "
                                            "host_us: enqueue time of event + call(s) + event"),
               "host_mapped_method": host.method,
               "host_mapped_error": host.error, "cases": []}
    for r in runs:
        row = {k: r[k] for k in ("case", "kind", "shape", "dest", "mem", "rel_diff", "kernels_per_call")}
        row["group_ms"] = r["x"].get("group_ms")
        row["d_bytes"] = r["d"].numel() * r["d"].element_size()
        row["times_ms"] = r["times"]
        row["batch_ms"] = r["batch_ms"]
        row["host_us"] = r["host_us"]
        row["median_ms"] = {m: median(v) for m, v in r["times"].items()}
        row["batch_median_ms"] = {m: median(v) for m, v in r["batch_ms"].items()}
        row["host_us_max"] = {m: max(v) for m, v in r["host_us"].items()}
        if traced:
            row["bitwise_equal_traced_cleared"] = bool(torch.equal(r["outputs"]["traced"], r["outputs"]["cleared"]))
            for key, med in (("overhead_traced_vs_cleared_pct", row["median_ms"]), ("batch_overhead_traced_vs_cleared_pct", row["batch_median_ms"])):
                row[key] = 100.0 * (med["traced"] - med["cleared"]) / med["cleared"]
        summary["cases"].append(row)
    for ci in range(0, len(runs), 2):  # the same inputs into HBM and into host memory: the same bits
        loc, hst = runs[ci], runs[ci + 1]
        summary["cases"][ci + 1]["bitwise_equal_to_local"] = bool(torch.equal(loc["outputs"][modes[-1]], hst["outputs"][modes[-1]]))
    path = args.out / f"summary_{args.build}{args.tag}.json"
    path.write_text(json.dumps(summary, indent=1))
    for row in summary["cases"]:
        log(f"{row['case']:18s} {row['dest']:5s} median ms {row['median_ms']} batch {row['batch_median_ms']} "
            f"overhead {row.get('overhead_traced_vs_cleared_pct', float('nan')):+.2f} % "
            f"(batch {row.get('batch_overhead_traced_vs_cleared_pct', float('nan')):+.2f} %) host_us max {row['host_us_max']} "
            f"diff {row['rel_diff']:.1e}")
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
