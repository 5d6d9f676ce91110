#!/usr/bin/env bash
# One device call: the xstage-vs-Proton Triton benchmark (benchmarks/bench_triton_vs_proton.py),
# run from the repository root. Installs the package without dependencies (torch and triton are
# already on the device machine). Results under $OUT: log.txt and bench/{triton_vs_proton.json,
# xstage_gemm.xsp, proton_trace_head.json}. TRIALS (default 30) sets the interleaved trials.
set -u
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/bench"
{
  date -u +%FT%TZ
  git rev-parse HEAD 2>/dev/null || echo "no git metadata"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -m pip install -q --no-deps --no-build-isolation -e . || echo "pip install failed"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  timeout 120 python3 benchmarks/bench_triton_vs_proton.py --out "$OUT/bench" --trials "${TRIALS:-30}"
  echo "bench rc=$?"
  nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv
} > "$OUT/log.txt" 2>&1
