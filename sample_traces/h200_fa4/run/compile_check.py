"""Compile FlashAttention-4's sm_90 forward (bf16, head dim 128) without a GPU, through FA4's own
interface under torch's FakeTensorMode, for the three builds of ``variants.py`` (upstream, patched
with the probes off, patched with the probes on), non-causal and causal; keep each cubin and PTX and
report per build the registers, local memory, SASS instruction count and the clock / globaltimer
reads in the SASS (``cuobjdump``).

    usage: CUTE_DSL_ARCH=sm_90a python compile_check.py CLEAN_TREE PATCHED_TREE OUT_DIR [--cuobjdump PATH]
    (run with FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED unset: the in-memory cache of each import only)
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import load_interface, variants  # noqa: E402

# one launch's shape: the compile key does not depend on it (sequence length and batch are dynamic)
BATCH, SEQLEN, HEADS, HEAD_DIM = 2, 1024, 16, 128


def sass_stats(cubin: Path, cuobjdump: str) -> dict:
    """Registers, stack and local bytes, SASS instructions, and the clock / globaltimer reads of one cubin."""
    res = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    field = {k: int(m.group(1)) if (m := re.search(rf"{k}:(\d+)", res)) else None for k in ("REG", "STACK", "LOCAL")}
    return {"registers": field["REG"], "stack_bytes": field["STACK"], "local_bytes": field["LOCAL"],
            "sass_instructions": len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", sass, re.M)),
            "clock_reads": sass.count("SR_CLOCKLO"), "globaltimer_reads": sass.count("SR_GLOBALTIMERLO")}


def compile_one(interface, causal: bool, with_records: bool) -> None:
    """One fake-mode call of FA4's forward (the record tensor as the one aux tensor where
    ``with_records``): traces and compiles the kernel, launches nothing."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(BATCH, SEQLEN, HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        k, v, o = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
        rec = torch.zeros(BATCH, HEADS, SEQLEN // 128, 8, dtype=torch.int64, device="cuda")
        interface._flash_attn_fwd(q, k, v, causal=causal, out=o, aux_tensors=[rec] if with_records else None, _arch=90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clean", type=Path)
    ap.add_argument("patched", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump"))
    args = ap.parse_args()
    if os.environ.get("CUTE_DSL_ARCH") != "sm_90a":
        print("compile_check.py: set CUTE_DSL_ARCH=sm_90a (no GPU to ask)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    dump = Path(tempfile.mkdtemp(prefix="fa4_dsl_dump_"))
    os.environ["CUTE_DSL_DUMP_DIR"] = str(dump)
    os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
    rows = []
    for v in variants(args.clean, args.patched):
        interface = load_interface(v)
        for causal in (False, True):
            compile_one(interface, causal, with_records=v.name != "plain")
            tag = f"{v.name}_{'causal' if causal else 'noncausal'}"
            kept = sorted(dump.iterdir())
            if not any(p.suffix == ".cubin" for p in kept):
                print(f"compile_check.py: {tag}: the DSL kept no cubin in {dump}", file=sys.stderr)
                return 1
            for p in kept:
                shutil.move(str(p), args.out / f"{tag}{p.suffix}")
            row = {"build": v.name, "causal": int(causal)}
            if args.cuobjdump:
                row.update(sass_stats(args.out / f"{tag}.cubin", args.cuobjdump))
            rows.append(row)
            print(row, flush=True)
    with open(args.out / "compile.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[-1]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
