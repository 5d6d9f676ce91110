"""``flux-triton``: FLUX's Triton GEMM + ReduceScatter, NVLink variant (``python/flux_triton``), made to
run on Triton 3.6 and instrumented with the Triton probes (``xstage_trace.instrument.triton``).

Two kernels, each with its own event ids (the probe dump of each kernel names its own events):
``gemm_rs_nvlink_kernel`` (one program per output tile) and ``reduce_nvlink_kernel`` (one program
per reduce tile). Triton 3.6 needs two fixes besides the probes: the helpers of ``extra/_v3.py``
take ``_semantic`` (Triton >= 3.3) where FLUX wrote ``_builder``, and ``extra/__init__.py``
imports them outside its bare ``except`` (which hid their errors behind the Triton 2 fallback).
"""

from __future__ import annotations

from xstage_trace.instrument.recipes.model import Anchor, Event, Recipe
from xstage_trace.instrument.targets.flux.recipe import UPSTREAM

_PKG = "python/flux_triton"
_EXTRA = f"{_PKG}/extra/__init__.py"
_V3 = f"{_PKG}/extra/_v3.py"
_K = f"{_PKG}/kernels/gemm_rs.py"
_GEMM = r"^def gemm_rs_nvlink_kernel\("
_REDUCE = r"^def reduce_nvlink_kernel\("
_GEMM_END = r"^@triton\.jit\ndef reduce_nvlink_kernel\("

KERNEL_ROLES = {"gemm_rs_nvlink_kernel": "gemm_rs", "reduce_nvlink_kernel": "reduce"}


def _gemm(name: str, pattern: str, where: str, code: str, example: str) -> Anchor:
    return Anchor(f"gemm_rs.{name}", _K, pattern, where, code, example, after=_GEMM, until=_GEMM_END)


def _reduce(name: str, pattern: str, where: str, code: str, example: str) -> Anchor:
    return Anchor(f"reduce.{name}", _K, pattern, where, code, example, after=_REDUCE)


RECIPE = Recipe(
    name="flux-triton",
    title="FLUX Triton GEMM + ReduceScatter (NVLink variant) on Triton 3.6: per-tile mainloop, remote store, flag signal and wait",
    architectures=("sm_90a",),
    upstream=(UPSTREAM,),
    sentinel=(_K, _V3, _EXTRA),
    roles=("gemm_rs: each program of gemm_rs_nvlink_kernel (one output tile; slice = program id)",
           "reduce: each program of reduce_nvlink_kernel (one reduce tile; slice = program id)"),
    events=(
        Event(0, "mainloop", "span", "gemm_rs", "", "the K loop of the tile (tl.dot)"),
        Event(1, "rs", "span", "gemm_rs", "tile bytes",
              "the tile's store into the owning rank's output buffer, through to its flag signal"),
        Event(2, "tile_info", "mark", "gemm_rs", "1 (remote-store epilogue)", "the tile the program computes"),
        Event(3, "signal", "span", "gemm_rs", "", "the flag increment (release at system scope)"),
        Event(0, "flag_wait", "span", "reduce", "",
              "spin on a rank's flag (tile = reduce tile x world size + the segment waited on)"),
        Event(1, "reduce", "span", "reduce", "bytes written", "the reduce tile: flag waits, loads and the store"),
    ),
    anchors=(
        Anchor("extra.import_v3", _EXTRA, r"^try:\n(?=[ \t]+from \._v3 import \*\n)", "before",
               "from ._v3 import *  # outside the bare except: errors of the Triton 3 helpers surface",
               "try:\n    from ._v3 import *"),
        Anchor("v3.semantic_param", _V3, r"\b_builder=None\b", "replace", "_semantic=None",
               "def __syncthreads(_builder=None):", count=11),
        Anchor("v3.semantic_arg", _V3, r"\b_builder=_builder\b", "replace", "_semantic=_semantic",
               "_builder=_builder,", count=14),
        Anchor("import", _K, r"^    tid,\n\)\n", "after",
               "from xstage_trace.instrument import triton as xp\n\n"
               "XS_MAINLOOP = tl.constexpr(0)\nXS_RS = tl.constexpr(1)\nXS_TILE_INFO = tl.constexpr(2)\n"
               "XS_SIGNAL = tl.constexpr(3)\nXS_FLAG_WAIT = tl.constexpr(0)\nXS_REDUCE = tl.constexpr(1)",
               "    tid,\n)"),
        _gemm("buffer_param", r"^[ \t]*barrier_ptrs,\n", "after", "trace_meta,\ntrace_records,", "    barrier_ptrs,"),
        _gemm("meta_param", r"^[ \t]*GROUP_SIZE_M: tl\.constexpr,[^\n]*\n(?=\):)", "after",
              "TRACE_CAP: tl.constexpr,\nXSTAGE: tl.constexpr,", "    GROUP_SIZE_M: tl.constexpr,  #"),
        _gemm("open", r"^[ \t]*accumulator = tl\.zeros\(\(BLOCK_SIZE_M, BLOCK_SIZE_N\), dtype=tl\.float32\)\n", "before",
              "xs_tile = pid_m * num_pid_n + pid_n\n"
              "xs = xp.probe_open(trace_meta, trace_records, TRACE_CAP, XSTAGE)\n"
              "xs = xp.mark(xs, XS_TILE_INFO, xs_tile, 1, TRACE_CAP, XSTAGE)\n"
              "xs = xp.begin(xs, XS_MAINLOOP, xs_tile, TRACE_CAP, XSTAGE)",
              "accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)"),
        _gemm("mainloop_end", r"^[ \t]*c = accumulator\.to\(tl\.float16\)\n", "before",
              "xs = xp.end(xs, XS_MAINLOOP, xs_tile, 0, TRACE_CAP, XSTAGE)", "c = accumulator.to(tl.float16)"),
        _gemm("rs_begin", r"^[ \t]*c_ptr = tl\.load\(c_ptrs \+ target_rank_id\)", "before",
              "xs = xp.begin(xs, XS_RS, xs_tile, TRACE_CAP, XSTAGE)",
              "c_ptr = tl.load(c_ptrs + target_rank_id).to(tl.pointer_type(tl.float16))"),
        _gemm("signal_begin", r"^[ \t]*arrive_inc\(barrier_ptr \+ rank,[^\n]*\n", "before",
              "xs = xp.begin(xs, XS_SIGNAL, xs_tile, TRACE_CAP, XSTAGE)", 'arrive_inc(barrier_ptr + rank, tid(axis=0), 1, "sys")'),
        _gemm("signal_end", r"^[ \t]*arrive_inc\(barrier_ptr \+ rank,[^\n]*\n", "after",
              "xs = xp.end(xs, XS_SIGNAL, xs_tile, 0, TRACE_CAP, XSTAGE)\n"
              "xs = xp.end(xs, XS_RS, xs_tile, BLOCK_SIZE_M * BLOCK_SIZE_N * 2, TRACE_CAP, XSTAGE)\n"
              "xp.probe_close(xs, XSTAGE)", 'arrive_inc(barrier_ptr + rank, tid(axis=0), 1, "sys")'),
        _reduce("buffer_param", r"^[ \t]*barrier_ptr,\n", "after", "trace_meta,\ntrace_records,", "    barrier_ptr,"),
        _reduce("meta_param", r"^[ \t]*GEMM_BLOCK_N: tl\.constexpr,\n(?=\):)", "after",
                "TRACE_CAP: tl.constexpr,\nXSTAGE: tl.constexpr,", "    GEMM_BLOCK_N: tl.constexpr,"),
        _reduce("open", r"^[ \t]*pid_n = pid % reduce_n_blocks_per_rank\n", "after",
                "xs = xp.probe_open(trace_meta, trace_records, TRACE_CAP, XSTAGE)\n"
                "xs = xp.begin(xs, XS_REDUCE, pid, TRACE_CAP, XSTAGE)", "pid_n = pid % reduce_n_blocks_per_rank"),
        _reduce("flag_wait_begin", r"^[ \t]*swizzle_rid = \(rid \+ rank\) % world_size\n", "after",
                "xs = xp.begin(xs, XS_FLAG_WAIT, pid * world_size + swizzle_rid, TRACE_CAP, XSTAGE)",
                "swizzle_rid = (rid + rank) % world_size"),
        _reduce("flag_wait_end", r"^[ \t]*__syncthreads\(\)\n(?=[ \t]*full_offs_m)", "after",
                "xs = xp.end(xs, XS_FLAG_WAIT, pid * world_size + swizzle_rid, 0, TRACE_CAP, XSTAGE)", "__syncthreads()"),
        _reduce("close", r"^[ \t]*tl\.store\(ptrs, res\)\n", "after",
                "xs = xp.end(xs, XS_REDUCE, pid, BLOCK_M * BLOCK_N * 2, TRACE_CAP, XSTAGE)\n"
                "xp.probe_close(xs, XSTAGE)", "tl.store(ptrs, res)"),
    ),
    build_notes=(
        "No build: Triton compiles at first launch. The patched kernels take trace_meta, trace_records, TRACE_CAP and "
        "XSTAGE (XSTAGE=False compiles the probes out): pass TraceBuffer(...).kernel_args() or off_args() from "
        "xstage_trace.instrument.triton; the patched module imports xstage_trace, so run with it installed. A driver "
        "that does both and writes the two dumps (the one the H200 sample ran): sample_traces/h200_triton_vs_proton/run/flux_gemm_rs.py."),
    buffer_plumbing=(
        "kernel arguments: trace_meta and trace_records (an xstage_trace.instrument.triton.TraceBuffer per kernel, one slice "
        "per program) plus the constexprs TRACE_CAP and XSTAGE."),
)


def event_names(kernel: str) -> list[str]:
    """The event names of one of the two kernels, indexed by event id (the names its probe dump carries)."""
    role = KERNEL_ROLES[kernel]
    evs = sorted((e for e in RECIPE.events if e.role == role), key=lambda e: e.id)
    return [e.name for e in evs]
