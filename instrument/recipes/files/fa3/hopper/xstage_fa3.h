// xstage-trace adapter for FlashAttention-3 (hopper/), written for xstage-trace and placed by
// `xstage-trace instrument apply --target fa3`. The trace buffer travels in the epilogue's
// Arguments/Params (a field of ours), filled by the launch template from current(), which the
// extern "C" setter in xstage_fa3_api.h (compiled into flash_api.cpp) sets.
#pragma once

#include <cuda_runtime.h>

#include "xstage/probe.cuh"

namespace flash::xstage_fa3 {

constexpr ::xstage::u32 kRoleConsumer = 0;  // lane 0 of the first consumer warp (warpgroup 1)
constexpr ::xstage::u32 kNumRoles = 1;

// Event ids; the dump's event-name table in this order: mainloop, epilogue.
constexpr ::xstage::u32 kEvMainloop = 0;  // span: the Q tile's loop over K/V blocks (QK^T, online softmax, PV)
constexpr ::xstage::u32 kEvEpilogue = 1;  // span: O (and LSE) written: smem, TMA store issued and waited

// The buffer of the next launches (host side, one per process; zero means no records).
inline ::xstage::DeviceBuffer& current() {
    static ::xstage::DeviceBuffer buffer{};
    return buffer;
}

#ifdef __CUDACC__
// Tile id: batch in bits 24..31, head in bits 12..23, m block in bits 0..11.
template <class BlockCoord>
__device__ __forceinline__ ::xstage::u32 tile_id(BlockCoord const& block_coord) {
    return (static_cast<::xstage::u32>(cute::get<2>(block_coord)) << 24) |
           ((static_cast<::xstage::u32>(cute::get<1>(block_coord)) & 0xFFFu) << 12) |
           (static_cast<::xstage::u32>(cute::get<0>(block_coord)) & 0xFFFu);
}
#endif

}  // namespace flash::xstage_fa3
