#!/usr/bin/env bash
# One device call: the xstage-vs-Proton Triton benchmark and FLUX's Triton GEMM-RS at world size 1
# (device-memory and host-mapped output). Run from a folder holding pkg/ (the xstage_trace package
# laid out for PYTHONPATH), pkg/benchmarks/bench_triton_vs_proton.py and flux/ (a FLUX checkout's
# python/flux_triton at the recipe's commit). Results under $OUT: log.txt, bench/*, flux.tar.
set -u
export PYTHONPATH="$PWD/pkg" PYTHONUNBUFFERED=1
mkdir -p "$OUT/bench" /tmp/fluxout
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  timeout 200 python3 pkg/benchmarks/bench_triton_vs_proton.py --out "$OUT/bench" --trials 30
  echo "bench rc=$?"
  cp -r flux /tmp/flux && python3 -m xstage_trace.instrument.recipes.flux_triton apply /tmp/flux
  for dest in device host; do
    timeout 75 python3 -m xstage_trace.instrument.recipes.flux_triton.run --flux /tmp/flux --out /tmp/fluxout \
      --dest "$dest" --summary "/tmp/fluxout/summary_$dest.json"
    echo "flux $dest rc=$?"
  done
  nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv
} > "$OUT/log.txt" 2>&1
tar -C /tmp/fluxout -cf "$OUT/flux.tar" .
