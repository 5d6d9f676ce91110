#!/usr/bin/env bash
# One device call: the xstage-vs-Proton Triton benchmark (benchmarks/bench_triton_vs_proton.py) and
# FLUX's Triton GEMM-RS at world size 1 (output in device memory and in host-mapped memory), run from
# the root of an xstage-trace source tree (a `git archive` of the commit, which has no .git: pass its
# hash as COMMIT). Installs the package without dependencies (torch, triton, pandas, pyarrow are on
# the device machine). FLUX: a FLUX checkout's python/flux_triton at the recipe's commit, under
# $FLUX/python (default ../triton/flux); the recipe is applied to a copy in /tmp.
# TRIALS (default 100) sets the benchmark's interleaved trials.
#   usage (repository root, OUT set): [COMMIT=<hash>] [FLUX=DIR] bash sample_traces/h200_triton_vs_proton/run/device_triton.sh
# Results under $OUT: log.txt and results.tar (bench/{triton_vs_proton.json, xstage_gemm.xsp,
# proton_trace_head.json}, flux_ws1/{flux_gemm_rs,flux_reduce}_{device,host}_r0.xsp, summary_*.json).
set -u
export PYTHONUNBUFFERED=1
FLUX="${FLUX:-../triton/flux}"
R=/tmp/xstage_results
mkdir -p "$R/bench" "$R/flux_ws1"
{
  date -u +%FT%TZ
  echo "xstage-trace commit ${COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -m pip install -q --no-deps --no-build-isolation -e . || echo "pip install failed"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  timeout 240 python3 benchmarks/bench_triton_vs_proton.py --out "$R/bench" --trials "${TRIALS:-100}"
  echo "bench rc=$?"
  rm -rf /tmp/flux && cp -r "$FLUX" /tmp/flux && python3 -m xstage_trace instrument apply --target flux-triton --src /tmp/flux
  for dest in device host; do
    timeout 90 python3 sample_traces/h200_triton_vs_proton/run/flux_gemm_rs.py --flux /tmp/flux --out "$R/flux_ws1" \
      --dest "$dest" --trials 30 --summary "$R/flux_ws1/summary_$dest.json"
    echo "flux $dest rc=$?"
  done
  nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv
  date -u +%FT%TZ
} > "$OUT/log.txt" 2>&1
tar -C "$R" -cf "$OUT/results.tar" .
