// xstage-trace adapter for DeepGEMM's sm_100 Mega MoE kernels (written for xstage-trace, placed by
// `xstage-trace instrument apply --target deepgemm-megamoe`). Under deep_gemm/include so that the
// JIT hashes it, the switch header and the probe header into its cache key.
#pragma once

#include <deep_gemm/xstage_megamoe/config.cuh>
#include <deep_gemm/xstage_megamoe/probe.cuh>

namespace xstage::megamoe {

constexpr u32 kRoleMma = 0;       // lane 0 of the MMA issue warp (leader CTA only)
constexpr u32 kRoleEpilogue = 1;  // lane 0 of epilogue warp 0
constexpr u32 kNumRoles = 2;

// Event ids; the dump's event-name table in this order: mainloop, tmem_full_wait, epilogue, nvlink_barrier.
constexpr u32 kEvMainloop = 0;       // span: accumulator slot acquired .. last UMMA of the block issued
constexpr u32 kEvTmemFullWait = 1;   // span: epilogue waits for the block's accumulator (UMMA completion)
constexpr u32 kEvEpilogue = 2;       // span: TMEM -> registers -> stores; payload: phase (1 = Linear-2: NVLink stores)
constexpr u32 kEvNvlinkBarrier = 3;  // span: the epilogue's grid sync + cross-rank signal

__device__ __forceinline__ u32 tile_id(u32 m_block_idx, u32 n_block_idx) {
  return (m_block_idx << 16) | (n_block_idx & 0xFFFFu);
}

// Payload: phase in bit 16 (0 Linear-1, 1 Linear-2), local expert in the low 16 bits.
template <typename phase_t>
__device__ __forceinline__ u32 block_payload(const phase_t& phase, u32 local_expert_idx) {
  return (static_cast<u32>(phase) << 16) | (local_expert_idx & 0xFFFFu);
}

}  // namespace xstage::megamoe
