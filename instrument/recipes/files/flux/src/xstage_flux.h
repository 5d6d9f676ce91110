// xstage-trace adapter for FLUX (written for xstage-trace, placed by
// `xstage-trace instrument apply --target flux`). The trace buffer reaches the kernels through
// their Params (a field of ours, filled in to_underlying_arguments from current(), which the
// extern "C" setter in xstage_flux_api.h sets); the probe handle is a member of the epilogue
// visitor's callbacks (sm80) or of the kernel object (sm90 GatherRS), so every member function
// of that object records into the same slice.
#pragma once

#include <cuda_runtime.h>

#include "xstage/probe.cuh"

namespace bytedance::flux::xstage_flux {

// Event ids; the dump's event-name table in this order: rs_store, wait.
constexpr ::xstage::u32 kEvRsStore = 0;  // span (sm80 scatter epilogue): first epilogue step .. end_epilogue (before the flags)
constexpr ::xstage::u32 kEvWait = 1;     // span (sm90 GatherRS comm CTA): Barrier::wait_eq on the GEMM tiles of a split

inline ::xstage::DeviceBuffer& current() {
  static ::xstage::DeviceBuffer buffer{};
  return buffer;
}

}  // namespace bytedance::flux::xstage_flux

#if defined(XSTAGE_TRACE) && defined(__CUDACC__)
namespace bytedance::flux::xstage_flux {
// One slice per CTA of a 1-3D grid (roles_per_cta of the host buffer must be 1): the probe's
// slice is blockIdx.x * roles_per_cta + role, so the linear CTA id is reached through the role.
__device__ __forceinline__ void open_linear(::xstage::Probe& probe, const ::xstage::DeviceBuffer& buf, bool enabled) {
  ::xstage::DeviceBuffer one = buf;
  one.roles_per_cta = 1;
  const ::xstage::u32 linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  probe.open(one, linear - blockIdx.x, enabled);
}
}  // namespace bytedance::flux::xstage_flux
#define XSTAGE_FLUX_PROBE_MEMBER ::xstage::Probe xstage_probe_{};
#define XSTAGE_FLUX_OPEN(buf, pred) ::bytedance::flux::xstage_flux::open_linear(xstage_probe_, (buf), (pred))
#define XSTAGE_FLUX_RS_BEGIN(buf, step_idx, tile_idx, thread_idx)                               \
  if ((step_idx) == 0) {                                                                        \
    XSTAGE_FLUX_OPEN((buf), (thread_idx) / 32 == 0);                                             \
    XSTAGE_BEGIN(::bytedance::flux::xstage_flux::kEvRsStore, static_cast<::xstage::u32>(tile_idx)); \
  }
#define XSTAGE_FLUX_RS_END(tile_idx)                                                           \
  do {                                                                                         \
    XSTAGE_END(::bytedance::flux::xstage_flux::kEvRsStore, static_cast<::xstage::u32>(tile_idx)); \
    XSTAGE_PROBE_CLOSE();                                                                      \
  } while (0)
#else
#define XSTAGE_FLUX_PROBE_MEMBER
#define XSTAGE_FLUX_OPEN(buf, pred) do { } while (0)
#define XSTAGE_FLUX_RS_BEGIN(buf, step_idx, tile_idx, thread_idx) do { } while (0)
#define XSTAGE_FLUX_RS_END(tile_idx) do { } while (0)
#endif
