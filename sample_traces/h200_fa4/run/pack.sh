#!/usr/bin/env bash
# Stage one FA4 device run (CPU machine) in two carry folders of at most ~37 MB each, since the CuTe DSL
# wheels (~100 MB; the cu13 one's 193 MB .so packs to 63.5 MB as xz) exceed one device call's 64 MiB
# with the repository beside them. Call 1 carries DEST/fa4a (the first part of the xz stream), call 2,
# within the machine's warm window, carries DEST/fa4b (the rest, the small wheels, the two flash-attention
# trees and this folder's scripts) and runs `bash .carry/fa4b/run.sh` (see run.sh for the first call).
#   usage: pack.sh UPSTREAM_GIT_DIR WHEEL_DIR DEST   (run from the repository root, its .venv holding xstage-trace)
# UPSTREAM_GIT_DIR: a (bare) flash-attention clone at the commit to trace; WHEEL_DIR: nvidia_cutlass_dsl 4.8.1
# (+ _libs_base, _libs_core, _libs_cu13 cp312), quack_kernels, apache_tvm_ffi, torch_c_dlpack_ext wheels.
set -euo pipefail
git_dir=$(realpath "$1"); wheels=$(realpath "$2"); dest=$(realpath -m "$3"); here=$(dirname "$(realpath "$0")")
cli=${XSTAGE_TRACE_CLI:-.venv/bin/xstage-trace}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# the two trees: upstream flash_attn/cute only (flash_attn/__init__ would import FA2's CUDA extension)
for t in clean patched; do
  mkdir -p "$work/trees/$t/flash_attn"
  git --git-dir="$git_dir" archive HEAD flash_attn/cute | tar -x -C "$work/trees/$t"
done
"$cli" instrument apply --target fa4 --src "$work/trees/patched"
git --git-dir="$git_dir" rev-parse HEAD > "$work/trees/upstream_commit.txt"
git rev-parse HEAD > "$work/trees/xstage_commit.txt"
tar -czf "$work/trees.tar.gz" -C "$work/trees" .
# the cu13 libs wheel as an xz'd tar of its unpacked tree (made once; reused when WHEEL_DIR has it)
cu13=$(ls "$wheels"/nvidia_cutlass_dsl_libs_cu13-*.whl)
if [ ! -s "$wheels/cu13.tar.xz" ]; then
  mkdir "$work/cu13" && (cd "$work/cu13" && unzip -q "$cu13")
  tar -cf - -C "$work/cu13" . | xz -T2 -9e > "$wheels/cu13.tar.xz.tmp" && mv "$wheels/cu13.tar.xz.tmp" "$wheels/cu13.tar.xz"
fi
rm -rf "$dest/fa4a" "$dest/fa4b"; mkdir -p "$dest/fa4a" "$dest/fa4b/whl"
for w in "$wheels"/*.whl; do [ "$w" = "$cu13" ] || cp "$w" "$dest/fa4b/whl/"; done
cp "$work/trees.tar.gz" "$here"/{run.sh,bench.py,variants.py,compile_check.py} "$dest/fa4b/"
# split the xz stream so that both folders weigh about the same
total=$(( $(stat -c %s "$wheels/cu13.tar.xz") + $(du -cb "$dest/fa4b" | tail -1 | cut -f1) ))
first=$(( total / 2 ))
head -c "$first" "$wheels/cu13.tar.xz" > "$dest/fa4a/cu13.tar.xz.part1"
tail -c +$(( first + 1 )) "$wheels/cu13.tar.xz" > "$dest/fa4b/cu13.tar.xz.part2"
sha256sum "$wheels/cu13.tar.xz" | cut -d' ' -f1 > "$dest/fa4b/cu13.tar.xz.sha256"
du -sb "$dest/fa4a" "$dest/fa4b"
