"""A persistent bf16 GEMM in Triton, probe-free and instrumented, for the Triton probe tests and the
xstage-vs-Proton benchmark (benchmarks/bench_triton_vs_proton.py).

``gemm_plain`` has no probe code. ``gemm_instrumented`` is the same kernel with, at the same two
spans per tile (the mainloop: from the top of the tile iteration to the output values ready, the
accumulator conversion and addresses included; the store: the output store), both an xstage probe pair
(``XSTAGE`` constexpr; off: :func:`xstage_trace.instrument.triton.off_args`) and a Proton
instrumentation scope (``triton.profiler.language``; it emits code only when the kernel is compiled
inside a Proton instrumentation session). Compiled outside Proton with XSTAGE off it is the probe-free
kernel instruction for instruction (tests/test_triton_probes.py checks the PTX).

The xstage probes read the clock at the four points (``xp.stamp``) and store the tile's four
records together after its output store (``xp.put_spans_tile``, persistent-loop slots: no record
count carried through the tile loop). ``gemm_breakdown`` places xstage probes in the other forms
the benchmark times to break the cost down (anchors only; the counted form, adjacent to the K loop
or at the iteration boundaries; stamps with single-record stores; the clock reads alone; the
persistent-loop form storing each record at its point).
With every form the K loop's SASS is the probe-free one (tests/test_triton_probes.py checks the
instruction mix; docs/triton-probes.md tells how the previous probe design changed it).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.profiler import language as pl

from xstage_trace.instrument import triton as xp

EVENT_NAMES = ["mainloop", "store"]
EV_MAINLOOP = tl.constexpr(0)
EV_STORE = tl.constexpr(1)
EVENTS_PER_TILE = tl.constexpr(4)  # begin + end of each of the two events


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group) % rows, (tile % group) // rows


@triton.jit
def _mainloop(a, b, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _epilogue(c, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tile's output values, addresses and mask (everything the store needs)."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    return c + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c.dtype.element_ty), mask


@triton.jit
def gemm_plain(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               NUM_PROGRAMS: tl.constexpr):
    """C = A·B, persistent: program p computes tiles p, p + NUM_PROGRAMS, … (K a multiple of BLOCK_K)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = _mainloop(a, b, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K)
        ptrs, vals, mask = _epilogue(c, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        tl.store(ptrs, vals, mask=mask)


@triton.jit
def gemm_instrumented(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      trace_meta, trace_records, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                      TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr):
    """gemm_plain with an xstage probe pair and a Proton scope around each tile's mainloop and store."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    probe = xp.probe_open(trace_meta, trace_records, TRACE_CAP, XSTAGE)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pl.enter_scope("mainloop")
        t0 = xp.stamp(XSTAGE)
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = _mainloop(a, b, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K)
        ptrs, vals, mask = _epilogue(c, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        t1 = xp.stamp(XSTAGE)
        pl.exit_scope("mainloop")
        pl.enter_scope("store")
        t2 = xp.stamp(XSTAGE)
        tl.store(ptrs, vals, mask=mask)
        t3 = xp.stamp(XSTAGE)
        pl.exit_scope("store")
        xp.put_spans_tile(probe, tile, EV_MAINLOOP, t0, t1, 0, EV_STORE, t2, t3, BLOCK_M * BLOCK_N * 2, 0,
                          EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
    xp.probe_close_tiles(probe, num_pid_m * num_pid_n, EVENTS_PER_TILE, NUM_PROGRAMS, XSTAGE)


# FORM of gemm_breakdown for each variant of the cost breakdown (docs/triton-probes.md).
BREAKDOWN = {"xstage_anchors_only": 0, "xstage_counted_adjacent": 1, "xstage_counted_boundary": 2,
             "xstage_stamped": 3, "xstage_stamps_only": 4, "xstage_immediate": 5}


@triton.jit
def gemm_breakdown(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   trace_meta, trace_records, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                   TRACE_CAP: tl.constexpr, XSTAGE: tl.constexpr, FORM: tl.constexpr):
    """gemm_plain with xstage probes in one of the BREAKDOWN forms: 0 anchors only; 1 counted form,
    mainloop records adjacent to the K loop; 2 counted form, mainloop records at the iteration top
    and after the epilogue (gemm_instrumented's points). Forms 1 and 2 also bracket the store.
    3: gemm_instrumented's four points as clock reads (``xp.stamp``), the four records stored
    after the tile's output store (``xp.put_stamped_tile``); 4: the same four clock reads, no
    record stored, their sum kept and written as one mark record at the end, so the reads stay in the
    kernel (what the clock reads alone cost); 5: the persistent-loop form storing each record at its
    point (``xp.begin_tile`` / ``xp.end_tile``)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    probe = xp.probe_open(trace_meta, trace_records, TRACE_CAP, XSTAGE)
    clock_sum = xp.stamp(False)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        if FORM == 3 or FORM == 4:
            t0 = xp.stamp(XSTAGE)
        if FORM == 2:
            probe = xp.begin(probe, EV_MAINLOOP, tile, TRACE_CAP, XSTAGE)
        if FORM == 5:
            xp.begin_tile(probe, EV_MAINLOOP, tile, 0, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        if FORM == 1:
            probe = xp.begin(probe, EV_MAINLOOP, tile, TRACE_CAP, XSTAGE)
        acc = _mainloop(a, b, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K)
        if FORM == 1:
            probe = xp.end(probe, EV_MAINLOOP, tile, 0, TRACE_CAP, XSTAGE)
        ptrs, vals, mask = _epilogue(c, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        if FORM == 2:
            probe = xp.end(probe, EV_MAINLOOP, tile, 0, TRACE_CAP, XSTAGE)
        if FORM == 1 or FORM == 2:
            probe = xp.begin(probe, EV_STORE, tile, TRACE_CAP, XSTAGE)
        if FORM == 5:
            xp.end_tile(probe, EV_MAINLOOP, tile, 0, 1, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
            xp.begin_tile(probe, EV_STORE, tile, 2, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
        if FORM == 3 or FORM == 4:
            t1 = xp.stamp(XSTAGE)
            t2 = xp.stamp(XSTAGE)
        tl.store(ptrs, vals, mask=mask)
        if FORM == 1 or FORM == 2:
            probe = xp.end(probe, EV_STORE, tile, BLOCK_M * BLOCK_N * 2, TRACE_CAP, XSTAGE)
        if FORM == 5:
            xp.end_tile(probe, EV_STORE, tile, BLOCK_M * BLOCK_N * 2, 3, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
        if FORM == 3 or FORM == 4:
            t3 = xp.stamp(XSTAGE)
        if FORM == 3:
            xp.put_stamped_tile(probe, EV_MAINLOOP, 1, tile, 0, t0, 0, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
            xp.put_stamped_tile(probe, EV_MAINLOOP, 2, tile, 0, t1, 1, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
            xp.put_stamped_tile(probe, EV_STORE, 1, tile, 0, t2, 2, EVENTS_PER_TILE, NUM_PROGRAMS, TRACE_CAP, XSTAGE)
            xp.put_stamped_tile(probe, EV_STORE, 2, tile, BLOCK_M * BLOCK_N * 2, t3, 3, EVENTS_PER_TILE, NUM_PROGRAMS,
                                TRACE_CAP, XSTAGE)
        if FORM == 4:
            clock_sum += t0 + t1 + t2 + t3
    if FORM == 3 or FORM == 5:
        xp.probe_close_tiles(probe, num_pid_m * num_pid_n, EVENTS_PER_TILE, NUM_PROGRAMS, XSTAGE)
    else:
        if FORM == 4:
            probe = xp.mark(probe, EV_MAINLOOP, 0, clock_sum, TRACE_CAP, XSTAGE)
        xp.probe_close(probe, XSTAGE)
