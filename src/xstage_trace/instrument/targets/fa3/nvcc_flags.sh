# Sourced by compile.sh (beside it) and sample_traces/h200_fa3/run/build.sh (needs $root, the flash-attention tree): the nvcc
# flags hopper/setup.py uses for FA3's sm_90a forward with the reduced feature set, split around the
# point where each script adds its own (fa3_head ... fa3_tail).
features=""
for f in BACKWARD PAGEDKV SPLIT APPENDKV LOCAL SOFTCAP PACKGQA FP16 FP8 VARLEN CLUSTER HDIM64 HDIM96 HDIM192 HDIM256 SM8x HDIMDIFF64 HDIMDIFF192; do
  features="$features -DFLASHATTENTION_DISABLE_$f"
done
# torch.utils.cpp_extension adds --expt-relaxed-constexpr and the __CUDA_NO_HALF* defines to every nvcc call
fa3_head="--expt-relaxed-constexpr -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ -O3 -std=c++17 --use_fast_math"
fa3_tail="-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG $features -gencode arch=compute_90a,code=sm_90a -I$root/hopper -I$root/csrc/cutlass/include"
