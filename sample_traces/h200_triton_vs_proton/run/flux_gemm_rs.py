"""Run FLUX's Triton GEMM-RS (a checkout patched by ``instrument apply --target flux-triton``) with
xstage probes, and write dumps.

Our host driver in place of FLUX's C++ helpers (``flux.create_tensor_list``, ``flux.GroupBarrier``):
the per-rank output buffers and flag arrays come from PyTorch symmetric memory when the process runs
under ``torchrun`` with several ranks, else (world size 1) from a plain device allocation or, with
``--dest host``, from pinned host memory that the GPU writes through the mapped address (the GEMM's
tile stores then cross PCIe). The GEMM and the reduce kernel are launched in order on one stream:
the reduce spins on flags, and started beside a non-persistent GEMM it would take the SM slots the
GEMM still needs. (The several-rank path has not run yet: only one-GPU machines were lent.)

    python sample_traces/h200_triton_vs_proton/run/flux_gemm_rs.py --flux FLUX_CHECKOUT --out DIR --dest device

Writes DIR/flux_gemm_rs_<dest>_r<rank>.xsp, DIR/flux_reduce_<dest>_r<rank>.xsp and prints a JSON
summary (kernel times traced and untraced, correctness) that ``--summary FILE`` also writes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import triton

from xstage_trace.instrument import triton as xp
from xstage_trace.instrument.targets.flux_triton.recipe import event_names

GEMM_BLOCK_M, GEMM_BLOCK_N, GEMM_BLOCK_K, GROUP_M = 128, 128, 32, 8  # FLUX's GemmRSTritonNVLink settings
REDUCE_BLOCK_M, REDUCE_BLOCK_N = 128, 128
SLEEP_CYCLES = 1_000_000
GEMM_RECORDS_PER_TILE = 8  # tile_info, mainloop b/e, rs b/e, signal b/e (7), rounded up


class Buffers:
    """Output buffers and flags of every rank, as pointer tables for the GEMM-RS kernel."""

    def __init__(self, m: int, n: int, dest: str, world: int, dev: torch.device):
        if world > 1:
            import torch.distributed as dist
            import torch.distributed._symmetric_memory as symm_mem

            self.out_local = symm_mem.empty((m, n), dtype=torch.float16, device=dev)
            out_h = symm_mem.rendezvous(self.out_local, dist.group.WORLD)
            self.flags = symm_mem.empty((world,), dtype=torch.int32, device=dev)
            flag_h = symm_mem.rendezvous(self.flags, dist.group.WORLD)
            out_ptrs, flag_ptrs = list(out_h.buffer_ptrs), list(flag_h.buffer_ptrs)
        else:
            self.out_local = (torch.empty((m, n), dtype=torch.float16, pin_memory=True) if dest == "host"
                              else torch.empty((m, n), dtype=torch.float16, device=dev))
            self.flags = torch.zeros((world,), dtype=torch.int32, device=dev)
            out_ptrs, flag_ptrs = [self.out_local.data_ptr()], [self.flags.data_ptr()]
        self.out_ptrs = torch.tensor(out_ptrs, dtype=torch.int64, device=dev)
        self.flag_ptrs = torch.tensor(flag_ptrs, dtype=torch.int64, device=dev)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run untraced and traced launches interleaved, write the two dumps."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flux", type=Path, required=True, help="FLUX checkout with this recipe applied")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dest", choices=("device", "host"), default="device", help="where rank 0's output buffer lives (world size 1)")
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=4096, help="K per rank")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--summary", type=Path)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(a.flux / "python"))
    from flux_triton.kernels import gemm_rs as fk  # the patched FLUX module

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group("nccl")
        if a.dest == "host":
            raise SystemExit("--dest host is the world-size-1 variant")
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(rank)
    x = torch.randn(a.m, a.k, device=dev, dtype=torch.float16) / a.k ** 0.25
    w = torch.randn(a.k, a.n, device=dev, dtype=torch.float16) / a.k ** 0.25
    bufs = Buffers(a.m, a.n, a.dest, world, dev)
    m_per_rank = triton.cdiv(a.m, world)
    out = torch.empty((m_per_rank, a.n), dtype=torch.float16, device=dev)
    gemm_grid = triton.cdiv(a.m, GEMM_BLOCK_M) * triton.cdiv(a.n, GEMM_BLOCK_N)
    reduce_grid = triton.cdiv(m_per_rank, REDUCE_BLOCK_M) * triton.cdiv(a.n, REDUCE_BLOCK_N)
    gemm_trace = xp.TraceBuffer(gemm_grid, GEMM_RECORDS_PER_TILE)
    reduce_trace = xp.TraceBuffer(reduce_grid, 2 * world + 2)

    def launch(traced: bool) -> tuple[torch.cuda.Event, ...]:
        bufs.flags.zero_()
        if traced:
            gemm_trace.reset()
            reduce_trace.reset()
        if world > 1:
            torch.distributed.barrier()
        torch.cuda._sleep(SLEEP_CYCLES)  # queue the launches behind ~0.5 ms of GPU work: host enqueue time stays out of the events
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        ev[0].record()
        fk.gemm_rs_nvlink_kernel[(gemm_grid,)](
            x, w, bufs.out_ptrs, a.m, a.n, a.k, triton.cdiv(m_per_rank, GEMM_BLOCK_M), x.stride(0), x.stride(1),
            w.stride(0), w.stride(1), bufs.out_local.stride(0), bufs.out_local.stride(1), rank, world, bufs.flag_ptrs,
            **(gemm_trace.kernel_args() if traced else xp.off_args()), BLOCK_SIZE_M=GEMM_BLOCK_M,
            BLOCK_SIZE_N=GEMM_BLOCK_N, BLOCK_SIZE_K=GEMM_BLOCK_K, GROUP_SIZE_M=GROUP_M, num_stages=4, num_warps=4)
        ev[1].record()
        fk.reduce_nvlink_kernel[(reduce_grid,)](
            bufs.out_local, out, a.m, a.n, out.stride(0), out.stride(1), rank, world, bufs.flags,
            **(reduce_trace.kernel_args() if traced else xp.off_args()), BLOCK_M=REDUCE_BLOCK_M, BLOCK_N=REDUCE_BLOCK_N,
            GEMM_BLOCK_M=GEMM_BLOCK_M, GEMM_BLOCK_N=GEMM_BLOCK_N, num_warps=4)
        ev[2].record()
        return tuple(ev)

    for traced in (False, True):  # compile both builds
        launch(traced)
    torch.cuda.synchronize()
    runs = {False: [], True: []}
    for trial in range(a.trials):
        for traced in ((False, True) if trial % 2 == 0 else (True, False)):
            runs[traced].append(launch(traced))
    torch.cuda.synchronize()
    if world > 1:
        torch.distributed.barrier()
    summary = {"rank": rank, "world_size": world, "dest": a.dest, "m": a.m, "n": a.n, "k_per_rank": a.k,
               "gemm_programs": gemm_grid, "reduce_programs": reduce_grid, "trials": a.trials}
    for traced, evs in runs.items():
        tag = "traced" if traced else "untraced"
        summary[f"gemm_ms_{tag}"] = statistics.median(e[0].elapsed_time(e[1]) for e in evs)
        summary[f"reduce_ms_{tag}"] = statistics.median(e[1].elapsed_time(e[2]) for e in evs)
        summary[f"total_ms_{tag}"] = statistics.median(e[0].elapsed_time(e[2]) for e in evs)
    if world == 1:
        ref = (x.float() @ w.float())
        summary["max_abs_err"] = float((out.float() - ref).abs().max().item())
        summary["ref_max_abs"] = float(ref.abs().max().item())
    label = f"kernel={{}} rank={rank} world={world} dest={a.dest} M={a.m} N={a.n} K={a.k}"
    a.out.mkdir(parents=True, exist_ok=True)
    gemm_trace.dump(a.out / f"flux_gemm_rs_{a.dest}_r{rank}.xsp", event_names("gemm_rs_nvlink_kernel"),
                    label=label.format("flux_gemm_rs"), rank=rank)
    reduce_trace.dump(a.out / f"flux_reduce_{a.dest}_r{rank}.xsp", event_names("reduce_nvlink_kernel"),
                      label=label.format("flux_reduce"), rank=rank)
    text = json.dumps(summary, indent=1)
    print(text)
    if a.summary:
        a.summary.write_text(text)
    if world > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
