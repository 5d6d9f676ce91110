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
__device__ __forceinline__ bool attach_linear(::xstage::Probe& probe, const ::xstage::DeviceBuffer& buf, bool enabled) {
  ::xstage::DeviceBuffer one = buf;
  one.roles_per_cta = 1;
  const ::xstage::u32 linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return probe.attach(one, linear - blockIdx.x, enabled);
}
// The slice's open anchors, as Probe::open writes them.
__device__ __forceinline__ void write_open(::xstage::SliceMeta* m) {
  const ::xstage::u64 g = ::xstage::globaltimer_ns();
  const ::xstage::u64 c = ::xstage::clock_cycles();
  ::xstage::store_meta_u32(&m->smid_open, ::xstage::smid());
  ::xstage::store_meta_u64(&m->gt_open, g);
  ::xstage::store_meta_u64(&m->clk_open, c);
}
__device__ __forceinline__ void open_linear(::xstage::Probe& probe, const ::xstage::DeviceBuffer& buf, bool enabled) {
  if (attach_linear(probe, buf, enabled)) write_open(probe.meta());
}
// The sm80 handle lives in the epilogue visitor's callbacks, which cutlass builds once per tile
// (get_callbacks in each epilogue call), and a stream-K CTA can run several tiles' epilogues (its
// data-parallel tiles at a stride, stream-K tiles, reduction blocks). So each epilogue resumes the
// slice where the CTA's previous one closed it: the writer loads the count that close stored (0 at
// the first epilogue of a launch, ProbeBuffer.reset() having zeroed the slice table) and writes the
// open anchors (SM, globaltimer, clock) only then; the close anchors are the last epilogue's.
__device__ __forceinline__ void open_resume(::xstage::Probe& probe, const ::xstage::DeviceBuffer& buf, bool enabled) {
  if (attach_linear(probe, buf, enabled)) {
    ::xstage::SliceMeta* m = probe.meta();
    ::xstage::u32 done;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(done) : "l"(&m->count));
    if (done == 0) write_open(m);
    probe.n = done;
  }
}
}  // namespace bytedance::flux::xstage_flux
#define XSTAGE_FLUX_PROBE_MEMBER ::xstage::Probe xstage_probe_{};
#define XSTAGE_FLUX_OPEN(buf, pred) ::bytedance::flux::xstage_flux::open_linear(xstage_probe_, (buf), (pred))
#define XSTAGE_FLUX_RS_BEGIN(buf, step_idx, tile_idx, thread_idx)                               \
  if ((step_idx) == 0) {                                                                        \
    ::bytedance::flux::xstage_flux::open_resume(xstage_probe_, (buf), (thread_idx) / 32 == 0);   \
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
