#!/usr/bin/env bash
# One GPU call: build DeepGEMM's _C for the patched tree (deepgemm-sm90 applied) and the clean tree
# in parallel, then run bench.py: clean, patched (traced + cleared, interleaved), clean again.
# Run from a folder holding dg_trees.tar.gz (stage/{patched,clean,cutlass_include}, made by pack.sh),
# xstage_src.tar.gz (git archive of xstage-trace) and this folder's files. Results: $OUT/results.tar.gz (dumps, logs, summaries) and the summaries.
set -uo pipefail
export PYTHONUNBUFFERED=1
here=$(pwd); W=/tmp/xdg; R=$W/res; mkdir -p "$R"
ts() { echo "[$(date +%H:%M:%S)] $*"; }
ts "start on $(hostname); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
tar -xzf dg_trees.tar.gz -C "$W" && mkdir -p "$W/xstage" && tar -xzf xstage_src.tar.gz -C "$W/xstage" || { ts "unpack failed"; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target "$W/site" "$W/xstage" > "$R/pip.log" 2>&1 \
  || { ts "xstage-trace install failed"; tail -20 "$R/pip.log"; }
nvcc -O2 -shared -Xcompiler -fPIC host_mapped_alloc.cu -o "$W/hm.so" || ts "host_mapped_alloc build failed"
for b in patched clean; do
  ( cd "$W/stage/$b" && DG_USE_LOCAL_VERSION=0 python3 setup.py build_ext --inplace > "$R/build_$b.log" 2>&1
    echo "rc=$?" >> "$R/build_$b.log" ) &
done
ts "building _C (patched, clean) in parallel"; wait
for b in patched clean; do
  ts "build $b: $(tail -1 "$R/build_$b.log") $(ls "$W/stage/$b/deep_gemm/"_C*.so 2>/dev/null)"
  grep -q '^rc=0$' "$R/build_$b.log" || grep -v '^\s*$' "$R/build_$b.log" | grep -iE -B2 -A8 'error' | head -60
done
bench() {  # build, tag, extra args
  local b=$1 tag=$2; shift 2
  ts "bench $b$tag"
  DG_JIT_CACHE_DIR="$W/jit_$b" PYTHONPATH="$W/stage/$b:$W/site" python3 "$here/bench.py" --build "$b" --tag "$tag" \
    --out "$R" --host-alloc "$W/hm.so" "$@" 2>&1 | tee "$R/bench_$b$tag.log" | grep -v '^\s*$'
}
bench clean "_1"
bench patched ""
bench clean "_2"
tar -czf "$OUT/results.tar.gz" -C "$W" res; cp "$R"/summary_*.json "$OUT/" 2>/dev/null; ls -la "$OUT"
ts "done"
