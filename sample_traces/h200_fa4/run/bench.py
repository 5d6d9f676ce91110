"""FlashAttention-4 sm_90 forward (bf16, head dim 128) on the GPU: the upstream build, the fa4-recipe
build with the probes off and with them on, all three loaded in one process (``variants.py``) and
timed in rotating order per trial with CUDA events; O checked against torch's SDPA in float32; the
traced build's per-tile rows saved per case.

Cases: 16 heads and 16 K tokens per launch (batch = 16384 / M: 2048 Q tiles of 128 rows) at sequence
lengths M = 1 K … 16 K, non-causal and causal, O in HBM (``local``) and in host-mapped pinned memory
(``host``: ``cudaHostAllocMapped``, viewed as a CUDA tensor through DLPack and passed as FA4's ``out=``).

    usage: python bench.py CLEAN_TREE PATCHED_TREE OUT_DIR [--trials N]
    writes OUT_DIR/{times.csv, check.csv, rows/*.npz, bench.json}
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import load_interface, variants  # noqa: E402

HEADS, HEAD_DIM, TOKENS = 16, 128, 16384
SEQLENS = (1024, 2048, 4096, 8192, 16384)
RECORD_FIELDS = 8  # xstage_probe.RECORD_FIELDS; field 7 = 1 marks a written row
WARMUP = 3
SPIN_CYCLES = 2_000_000  # ~1 ms at 1.98 GHz: the GPU is still busy when the timed call is enqueued


class HostMapped:
    """Pinned, mapped host memory (cudaHostAllocPortable | cudaHostAllocMapped) as CUDA tensors (CuPy + DLPack)."""

    def __init__(self):
        import cupy as cp

        self.cp, self._keep = cp, []

    def empty(self, shape, dtype) -> torch.Tensor:
        cp = self.cp
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        ptr = cp.cuda.runtime.hostAlloc(nbytes, 3)
        mem = cp.cuda.UnownedMemory(ptr, nbytes, None, 0)
        raw = cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
        t = torch.from_dlpack(raw).view(dtype).view(shape)
        kind = int(cp.cuda.runtime.pointerGetAttributes(ptr).type)
        if not (t.is_cuda and t.data_ptr() == ptr and kind == 1):
            raise RuntimeError(f"host-mapped tensor is not a CUDA view of pinned host memory ({t.device}, type {kind})")
        self._keep.append(raw)  # kept until the process ends
        return t


def cases():
    """(dest, causal, seqlen, batch) of every case, in run order."""
    return [(dest, causal, s, TOKENS // s) for dest in ("local", "host") for causal in (0, 1) for s in SEQLENS]


def call(interface, q, k, v, o, causal: bool, rec):
    """One FA4 forward writing into ``o`` (``rec`` as the one aux tensor, or none)."""
    return interface._flash_attn_fwd(q, k, v, causal=bool(causal), out=o, aux_tensors=None if rec is None else [rec])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clean", type=Path)
    ap.add_argument("patched", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--trials", type=int, default=50)
    args = ap.parse_args()
    out = args.out
    (out / "rows").mkdir(parents=True, exist_ok=True)
    builds = variants(args.clean, args.patched)
    iface = {}
    for v in builds:
        t0 = time.time()
        iface[v.name] = load_interface(v)
        print(f"loaded {v.name} from {v.tree} in {time.time() - t0:.1f} s", flush=True)
    prop = torch.cuda.get_device_properties(0)
    meta = {"gpu_name": prop.name, "sm_count": prop.multi_processor_count, "torch": torch.__version__,
            "trials": args.trials, "warmup": WARMUP, "spin_cycles": SPIN_CYCLES, "cases": []}
    host = HostMapped()
    times_f = open(out / "times.csv", "w", newline="")
    times = csv.writer(times_f)
    times.writerow(["dest", "seqlen", "causal", "batch", "heads", "build", "trial", "kernel_ms", "host_call_us"])
    check_f = open(out / "check.csv", "w", newline="")
    check = csv.writer(check_f)
    check.writerow(["dest", "seqlen", "causal", "batch", "heads", "build", "max_abs_err_vs_fp32", "mean_abs_err_vs_fp32",
                    "sdpa_bf16_max_abs_err_vs_fp32", "bitwise_equal_to_plain"])
    torch.manual_seed(0)
    rc = 0
    for dest, causal, s, b in cases():
        tag = f"{dest} s={s} causal={causal}"
        try:
            q, k, v = (torch.randn(b, s, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            o = {n: (torch.empty_like(q) if dest == "local" else host.empty(q.shape, q.dtype)) for n in iface}
            cfg = iface["plain"]._tile_size_fwd_sm90(HEAD_DIM, HEAD_DIM, bool(causal), False)  # FA4's own tile choice
            block_m, block_n = cfg.m_block_size, cfg.n_block_size
            rec = torch.zeros(b, HEADS, -(-s // block_m), RECORD_FIELDS, dtype=torch.int64, device="cuda")
            recs = {"plain": None, "off": rec, "traced": rec}
            t0 = time.time()
            for _ in range(WARMUP):
                for n in iface:
                    call(iface[n], q, k, v, o[n], causal, recs[n])
            torch.cuda.synchronize()
            print(f"{tag}: warm-up (compile on first case) {time.time() - t0:.1f} s", flush=True)
            # correctness: float32 SDPA reference, bf16 SDPA for scale; probe builds bitwise vs upstream
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            ref = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), is_causal=bool(causal)).transpose(1, 2)
            sdpa = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal)).transpose(1, 2)
            sdpa_err = (sdpa.float() - ref).abs().max().item()
            for n in iface:
                err = (o[n].float() - ref).abs()
                check.writerow([dest, s, causal, b, HEADS, n, f"{err.max().item():.6g}", f"{err.mean().item():.6g}",
                                f"{sdpa_err:.6g}", int(torch.equal(o[n], o["plain"]))])
            del ref, sdpa
            check_f.flush()
            names = list(iface)
            for trial in range(WARMUP + args.trials):
                order = names[trial % 3:] + names[: trial % 3]
                ev = []
                for n in order:
                    torch.cuda._sleep(SPIN_CYCLES)
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    h0 = time.perf_counter()
                    e0.record()
                    call(iface[n], q, k, v, o[n], causal, recs[n])
                    e1.record()
                    ev.append((n, e0, e1, (time.perf_counter() - h0) * 1e6))
                torch.cuda.synchronize()
                if trial >= WARMUP:
                    for n, e0, e1, host_us in ev:
                        times.writerow([dest, s, causal, b, HEADS, n, trial - WARMUP, f"{e0.elapsed_time(e1):.6f}", f"{host_us:.1f}"])
            times_f.flush()
            # the rows of one more traced launch into a zeroed buffer
            rec.zero_()
            call(iface["traced"], q, k, v, o["traced"], causal, rec)
            torch.cuda.synchronize()
            name = f"fa4_{dest}_s{s}_{'causal' if causal else 'noncausal'}"
            case = {"name": name, "dest": dest, "seqlen": s, "causal": causal, "batch": b, "heads": HEADS, "head_dim": HEAD_DIM,
                    "block_m": block_m, "block_n": block_n, "out_bytes": 2, "trial": args.trials, "o_ptr_kind": "host" if dest == "host" else "device"}
            np.savez_compressed(out / "rows" / f"{name}.npz", rows=rec.cpu().numpy(), meta=json.dumps(case))
            meta["cases"].append(case)
            print(f"{tag}: done, {int((rec[..., 7] == 1).sum())} of {rec[..., 0].numel()} rows", flush=True)
            del q, k, v, o, rec, recs
            torch.cuda.empty_cache()
        except Exception:  # one case failing must not lose the others' results
            rc = 1
            print(f"{tag}: FAILED\n{traceback.format_exc()}", flush=True)
    (out / "bench.json").write_text(json.dumps(meta, indent=1))
    times_f.close()
    check_f.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
