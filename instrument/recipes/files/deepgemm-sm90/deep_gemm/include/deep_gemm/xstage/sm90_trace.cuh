// xstage-trace adapter for DeepGEMM's sm_90 GEMM kernels (written for xstage-trace, placed by
// `xstage-trace instrument apply --target deepgemm-sm90`). Lives under deep_gemm/include so that
// DeepGEMM's JIT hashes it, the switch header and the probe header into its cache key: turning
// the probes on or off recompiles the kernels without a rebuild of the package.
#pragma once

#include <deep_gemm/xstage/config.cuh>
#include <deep_gemm/xstage/probe.cuh>

namespace xstage::dg {

// Slices per CTA (xstage::DeviceBuffer::roles_per_cta must be at least kNumRoles).
constexpr u32 kRoleMath = 0;      // lane 0 of math warp 0: the tile loop of the consumer warpgroups
constexpr u32 kRoleProducer = 1;  // the elected lane of the TMA-load warp: scheduler order
constexpr u32 kNumRoles = 2;

// Event ids (the dump's event-name table is, in this order: mainloop, store_wait, epilogue, schedule).
constexpr u32 kEvMainloop = 0;   // span: tile start .. last k-block's WGMMA retired and promoted
constexpr u32 kEvStoreWait = 1;  // span: wait for the previous tile's TMA store to free smem D (staging slot)
constexpr u32 kEvEpilogue = 2;   // span: registers -> smem D (STSM) -> TMA store issued; payload = tile bytes
constexpr u32 kEvSchedule = 3;   // mark: the producer took this tile; payload = group index

// Tile id: m block in the high 16 bits, n block in the low 16 bits.
__device__ __forceinline__ u32 tile_id(u32 m_block_idx, u32 n_block_idx) {
  return (m_block_idx << 16) | (n_block_idx & 0xFFFFu);
}

}  // namespace xstage::dg
