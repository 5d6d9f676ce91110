#!/usr/bin/env bash
# Stage what run.sh needs on the GPU machine into DEST (default: .carry/deepgemm of the lead's checkout):
#   dg_trees.tar.gz  stage/clean: DeepGEMM as checked out; stage/patched: the same with deepgemm-sm90
#                    applied; each only what setup.py compiles and the JIT includes (setup.py, scripts/,
#                    csrc/, deep_gemm/, fmt headers), cute/cutlass headers once in stage/cutlass_include
#                    (linked as deep_gemm/include/{cute,cutlass} and third-party/cutlass/include)
#   xstage_src.tar.gz  git archive of this xstage-trace checkout's HEAD (installed there with pip --no-deps)
#   bench.py summarize.py diag.py run.sh host_mapped_alloc.cu
#   usage: pack.sh DEEPGEMM_ROOT [DEST]   (DEEPGEMM_ROOT: a clean checkout with third-party/{cutlass,fmt}/include)
set -euo pipefail
src=$(realpath "$1"); dest=${2:-/work/main/.carry/deepgemm}
here=$(cd "$(dirname "$0")" && pwd); repo=$(git -C "$here" rev-parse --show-toplevel)
cli=${XSTAGE_TRACE_CLI:-xstage-trace}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
st=$work/stage; mkdir -p "$st/cutlass_include"
cp -r "$src/third-party/cutlass/include/cute" "$src/third-party/cutlass/include/cutlass" "$st/cutlass_include/"
for b in clean patched; do
  t=$st/$b; mkdir -p "$t/third-party/fmt" "$t/third-party/cutlass"
  cp -r "$src/setup.py" "$src/scripts" "$src/csrc" "$src/deep_gemm" "$t/"
  cp -r "$src/third-party/fmt/include" "$t/third-party/fmt/"
  ln -s ../../../cutlass_include "$t/third-party/cutlass/include"
  ln -s ../../../cutlass_include/cute "$t/deep_gemm/include/cute"
  ln -s ../../../cutlass_include/cutlass "$t/deep_gemm/include/cutlass"
done
"$cli" instrument apply --target deepgemm-sm90 --src "$st/patched"
mkdir -p "$dest"
tar -czf "$dest/dg_trees.tar.gz" -C "$work" stage
git -C "$repo" archive --format=tar.gz -o "$dest/xstage_src.tar.gz" HEAD -- ':!sample_traces' ':!tests' ':!benchmarks' ':!docs'
cp "$here/bench.py" "$here/summarize.py" "$here/diag.py" "$here/run.sh" "$here/host_mapped_alloc.cu" "$dest/"
du -sh "$dest"/*
