// xstage-trace adapter for DeepGEMM's sm_90 GEMM kernels (written for xstage-trace, placed by
// `xstage-trace instrument apply --target deepgemm-sm90`). Lives under deep_gemm/include so that
// DeepGEMM's JIT hashes it, the switch header and the probe header into its cache key: turning
// the probes on or off recompiles the kernels without a rebuild of the package.
#pragma once

#include <deep_gemm/xstage/config.cuh>
#include <deep_gemm/xstage/probe.cuh>

namespace xstage::dg {

// Slices per CTA (xstage::DeviceBuffer::roles_per_cta must be at least kNumRoles).
constexpr u32 kRoleMath = 0;      // thread 0 (lane 0 of math warp 0): the tile loop of the consumer warpgroups
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

#ifdef XSTAGE_TRACE

namespace xstage::dg {

// The math role's probe: the slice and record layout of <xstage/probe.cuh>, written by thread 0,
// placed so that the WGMMA warpgroups keep their schedule:
//  - nothing of the probe is live through the main loop: thread 0 writes exactly kRecordsPerTile
//    records per tile (it always reaches the epilogue), so a record's index follows from the tile's
//    iteration number, which the scheduler keeps anyway (DeepGEMM's `scheduler.current_iter`); the
//    writer test is recomputed at each write (see writer(); a count register carrying a writer bit, as
//    <xstage/probe.cuh>'s Probe has, stays live through the main loop and shifts its schedule);
//  - from the main loop's end to the tile's TMA store the math threads only read the clock (mainloop
//    end = store-wait begin, store-wait end = epilogue begin, held as 32-bit stamps); the tile's
//    other five records are written after its TMA store is issued.
constexpr u32 kRecordsPerTile = 6;

__device__ __forceinline__ u32 tid_x() {
  u32 t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

struct MathProbe {
  DeviceBuffer b;

  __device__ __forceinline__ u32 slice() const { return ctaid_x() * b.roles_per_cta + kRoleMath; }
  // Thread 0 of a CTA with a slice. A cleared buffer is all zero (num_slices 0; the setter in
  // csrc/xstage/trace_buffer.hpp refuses a null meta or records pointer otherwise), so the slice test
  // also covers "no buffer". Both operands come from asm volatile reads (%tid.x, %ctaid.x), which the
  // compiler cannot hoist: a writer predicate computed once would stay live through the main loop.
  __device__ __forceinline__ bool writer() const { return tid_x() == 0 && slice() < b.num_slices; }
  __device__ __forceinline__ void store(u32 i, u64 c, u32 event, u32 kind, u32 tile, u32 payload) const {
    if (i < b.capacity) {
      const u64 ts_ev = (c & 0xFFFFFFFFFFFFull) | ((u64)(event & 0xFF) << 48) | ((u64)(kind & 0x3) << 56);
      store_record_cs(b.records + (u64)slice() * b.capacity + i, ts_ev, tile, payload);
    }
  }

  __device__ __forceinline__ void open(const DeviceBuffer& buf) {
    b = buf;
    if (writer()) {
      const u64 g = globaltimer_ns();
      const u64 c = clock_cycles();
      SliceMeta* m = b.meta + slice();
      store_meta_u32(&m->smid_open, smid());
      store_meta_u64(&m->gt_open, g);
      store_meta_u64(&m->clk_open, c);
    }
  }

  // mainloop begin of the iter-th tile (0-based), stored at once (top of the tile loop).
  __device__ __forceinline__ void tile_begin(u32 iter, u32 tile) const {
    const u64 c = clock_cycles();
    if (writer()) store(iter * kRecordsPerTile, c, kEvMainloop, kKindBegin, tile, 0u);
  }

  // The tile's other five records, from its two clock stamps (low 32 bits) and the clock now
  // (epilogue end; payload = tile bytes).
  __device__ __forceinline__ void tile_end(u32 iter, u32 tile, u32 bytes, u32 t_mainloop_end, u32 t_store_done) const {
    const u64 now = clock_cycles();
    if (writer()) {
      const u64 mainloop_end = now - (u32)((u32)now - t_mainloop_end);
      const u64 store_done = now - (u32)((u32)now - t_store_done);
      const u32 i = iter * kRecordsPerTile;
      store(i + 1, mainloop_end, kEvMainloop, kKindEnd, tile, 0u);
      store(i + 2, mainloop_end, kEvStoreWait, kKindBegin, tile, 0u);
      store(i + 3, store_done, kEvStoreWait, kKindEnd, tile, 0u);
      store(i + 4, store_done, kEvEpilogue, kKindBegin, tile, 0u);
      store(i + 5, now, kEvEpilogue, kKindEnd, tile, bytes);
    }
  }

  // After the tile loop: tiles = the number of tiles the loop ran.
  __device__ __forceinline__ void close(u32 tiles) const {
    if (writer()) {
      const u64 g = globaltimer_ns();
      const u64 c = clock_cycles();
      SliceMeta* m = b.meta + slice();
      store_meta_u32(&m->smid_close, smid());
      store_meta_u64(&m->gt_close, g);
      store_meta_u64(&m->clk_close, c);
      store_meta_u32(&m->count, tiles * kRecordsPerTile);
      store_meta_u32(&m->closed, 1u);
    }
  }
};

}  // namespace xstage::dg

// iter: the tile loop's iteration number, 0 for the first tile (DeepGEMM: scheduler.current_iter).
#define XSTAGE_DG_MATH_OPEN(buf)        \
  ::xstage::dg::MathProbe xstage_math_; \
  xstage_math_.open((buf))
#define XSTAGE_DG_TILE_BEGIN(iter, tile) xstage_math_.tile_begin((::xstage::u32)(iter), (tile))
// A clock stamp of this tile, held (32 bits) until XSTAGE_DG_TILE_END writes the tile's records.
#define XSTAGE_DG_CLOCK(name) const ::xstage::u32 name = (::xstage::u32)::xstage::clock_cycles()
#define XSTAGE_DG_TILE_END(iter, tile, bytes, t_mainloop_end, t_store_done) \
  xstage_math_.tile_end((::xstage::u32)(iter), (tile), (::xstage::u32)(bytes), (t_mainloop_end), (t_store_done))
#define XSTAGE_DG_MATH_CLOSE(tiles) xstage_math_.close((::xstage::u32)(tiles))

#else  // probes compiled out: no code, no clock reads, arguments not evaluated

#define XSTAGE_DG_MATH_OPEN(buf) \
  do {                           \
  } while (0)
#define XSTAGE_DG_TILE_BEGIN(iter, tile) \
  do {                                   \
  } while (0)
#define XSTAGE_DG_CLOCK(name) \
  do {                        \
  } while (0)
#define XSTAGE_DG_TILE_END(iter, tile, bytes, t_mainloop_end, t_store_done) \
  do {                                                                       \
  } while (0)
#define XSTAGE_DG_MATH_CLOSE(tiles) \
  do {                              \
  } while (0)

#endif  // XSTAGE_TRACE
