#!/usr/bin/env bash
# One GPU call: build DeepGEMM's _C for the patched tree (deepgemm-sm90 applied) and the clean tree
# in parallel, then run bench.py: clean, patched (traced + cleared, random order per trial), clean again;
# summarize.py: the probe cost per case with bootstrap intervals (overhead.{json,md}).
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
for b in patched clean; do  # real header copies, as setup.py's build_py lays them out (no symlinks)
  rm -f "$W/stage/$b/deep_gemm/include/cute" "$W/stage/$b/deep_gemm/include/cutlass"
  cp -r "$W/stage/cutlass_include/cute" "$W/stage/cutlass_include/cutlass" "$W/stage/$b/deep_gemm/include/"
done
for b in patched clean; do
  ( cd "$W/stage/$b" && DG_USE_LOCAL_VERSION=0 python3 setup.py build_ext --inplace > "$R/build_$b.log" 2>&1
    echo "rc=$?" >> "$R/build_$b.log" ) &
done
ts "building _C (patched, clean) in parallel"; wait
for b in patched clean; do
  ts "build $b: $(tail -1 "$R/build_$b.log") $(ls "$W/stage/$b/deep_gemm/"_C*.so 2>/dev/null)"
  grep -q '^rc=0$' "$R/build_$b.log" || grep -v '^\s*$' "$R/build_$b.log" | grep -iE -B2 -A8 'error' | head -60
done
diag() {  # name, env assignments...: one fp8_gemm_nt call of the clean build in a fresh process
  local name=$1; shift
  env "$@" PYTHONFAULTHANDLER=1 DG_JIT_CACHE_DIR="$W/jit_clean" PYTHONPATH="$W/stage/clean:$W/site" \
    timeout 120 python3 "$here/diag.py" $DIAG_ARGS > "$R/diag_$name.log" 2>&1
  local rc=$?; ts "diag $name rc=$rc"; grep -v '^\s*$' "$R/diag_$name.log" | tail -25; return $rc
}
HM=pluggable_mempool; XENV=""
# _C is built against g++'s libstdc++ headers; a different libstdc++ loaded first into the
# process crashed std::regex inside _C (both builds): preload the one _C was compiled for.
STDCXX=$(g++ -print-file-name=libstdc++.so.6)
if DIAG_ARGS="" diag plain X=0; then :
elif DIAG_ARGS="" diag preload LD_PRELOAD="$STDCXX"; then XENV="LD_PRELOAD=$STDCXX"
else
  DIAG_ARGS="" diag nvrtc DG_JIT_USE_NVRTC=1 && XENV="DG_JIT_USE_NVRTC=1"
  (cd "$R" && PYTHONPATH="$W/stage/clean:$W/site" DG_JIT_CACHE_DIR="$W/jit_clean" timeout 100 cuda-gdb -q -batch \
     -ex "set pagination off" -ex run -ex bt --args python3 "$here/diag.py" > "$R/diag_gdb.log" 2>&1; grep -A30 "SIGSEGV" "$R/diag_gdb.log" | head -40)
fi
DIAG_ARGS="--hostpool $W/hm.so" diag hostpool X=0 $XENV || HM=cupy_dlpack
ts "host method $HM, extra env: $XENV"
bench() {  # build, tag, extra args
  local b=$1 tag=$2; shift 2
  ts "bench $b$tag"
  env X=0 $XENV PYTHONFAULTHANDLER=1 DG_JIT_CACHE_DIR="$W/jit_$b" PYTHONPATH="$W/stage/$b:$W/site" python3 "$here/bench.py" \
    --build "$b" --tag "$tag" --out "$R" --host-alloc "$W/hm.so" --host-method "$HM" "$@" 2>&1 | tee "$R/bench_$b$tag.log" | grep -v '^\s*$'
}
bench clean "_1"
bench patched ""
bench clean "_2"
python3 "$here/summarize.py" "$R" > "$R/summarize.log" 2>&1; cat "$R/summarize.log"
tar -czf "$OUT/results.tar.gz" -C "$W" res; cp "$R"/summary_*.json "$R"/overhead.* "$OUT/" 2>/dev/null; ls -la "$OUT"
ts "done"
