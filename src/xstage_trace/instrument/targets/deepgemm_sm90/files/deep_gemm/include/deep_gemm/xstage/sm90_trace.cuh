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
// placed so that the WGMMA warpgroups keep upstream's schedule (the tile loop's top compiles as upstream's,
// the scheduler in uniform registers; in the k-loop ptxas keeps the pipeline phase in uniform registers,
// 8 instructions more, with the k-block's first WGMMAs reordered; what the probe adds sits between the
// tile's TMA store and the loop's end):
//  - no probe code at the top of the tile loop: a tile's mainloop begins where the previous tile's
//    epilogue ended (the same clock read; the first tile's where the role opened). The begin record
//    is written in two halves: its timestamp at the previous tile's end (or at open), its tile id at
//    the tile's own end. A store at the loop's top, or a stamp held through the k-loop, moved the
//    scheduler out of DeepGEMM's uniform registers or reordered the k-loop (ptxas, sm_90a);
//  - nothing of the probe is live through the main loop but one predicate: thread 0 writes exactly
//    kRecordsPerTile records per tile (it always reaches the epilogue), so a record's index follows
//    from the tile's iteration number, which the scheduler keeps anyway (`scheduler.current_iter`);
//  - from the main loop's end to the tile's TMA store the math threads only read the clock (mainloop
//    end = store-wait begin, store-wait end = epilogue begin, held as 32-bit stamps).
constexpr u32 kRecordsPerTile = 6;

__device__ __forceinline__ u64 ts_event(u64 c, u32 event, u32 kind) {
  return (c & 0xFFFFFFFFFFFFull) | ((u64)(event & 0xFF) << 48) | ((u64)(kind & 0x3) << 56);
}

struct MathProbe {
  DeviceBuffer b;

  // Thread 0 of a CTA with a slice. A cleared buffer is all zero (num_slices 0; the setter in
  // csrc/xstage/trace_buffer.hpp refuses a null meta or records pointer otherwise), so the slice test
  // also covers "no buffer". Plain threadIdx/blockIdx: the compiler keeps the test as one predicate
  // register through the kernel, so a site costs a clock read and a branch when the buffer is cleared
  // (the test re-read at each site through asm volatile %tid.x / %ctaid.x put a chain of special-register
  // reads and constant loads on warp 0's path between two tiles).
  __device__ __forceinline__ bool writer() const {
    return threadIdx.x == 0 && blockIdx.x * b.roles_per_cta + kRoleMath < b.num_slices;
  }
  // The slice's records, from %ctaid.x read through asm volatile: computed where a record is written,
  // never held through the main loop.
  __device__ __forceinline__ Record* records() const {
    return b.records + (u64)(ctaid_x() * b.roles_per_cta + kRoleMath) * b.capacity;
  }
  __device__ __forceinline__ void store(Record* r, u32 i, u64 c, u32 event, u32 kind, u32 tile, u32 payload) const {
    if (i < b.capacity) store_record_cs(r + i, ts_event(c, event, kind), tile, payload);
  }
  // The record's first 8 bytes (timestamp, event, kind) and its last 8 (tile, payload), stored apart.
  __device__ __forceinline__ void store_ts(Record* r, u32 i, u64 c, u32 event, u32 kind) const {
    if (i < b.capacity) {
      const u64 ts_ev = ts_event(c, event, kind);
      asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(&r[i].ts_ev), "r"((u32)ts_ev), "r"((u32)(ts_ev >> 32)));
    }
  }
  __device__ __forceinline__ void store_tile(Record* r, u32 i, u32 tile, u32 payload) const {
    if (i < b.capacity) asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(&r[i].tile), "r"(tile), "r"(payload));
  }

  // Slice open; the first tile's mainloop begins here (its timestamp half).
  __device__ __forceinline__ void open(const DeviceBuffer& buf) {
    b = buf;
    if (writer()) {
      const u64 g = globaltimer_ns();
      const u64 c = clock_cycles();
      SliceMeta* m = b.meta + ctaid_x() * b.roles_per_cta + kRoleMath;
      store_meta_u32(&m->smid_open, smid());
      store_meta_u64(&m->gt_open, g);
      store_meta_u64(&m->clk_open, c);
      store_ts(records(), 0u, c, kEvMainloop, kKindBegin);
    }
  }

  // After the iter-th tile's TMA store (0-based iter): its records from its two clock stamps (low 32
  // bits) and the clock now (epilogue end; payload = tile bytes), the tile half of its mainloop-begin
  // record, and the timestamp half of the next tile's (a record past the last tile is past the count).
  __device__ __forceinline__ void tile_end(u32 iter, u32 tile, u32 bytes, u32 t_mainloop_end, u32 t_store_done) const {
    const u64 now = clock_cycles();
    if (writer()) {
      const u64 mainloop_end = now - (u32)((u32)now - t_mainloop_end);
      const u64 store_done = now - (u32)((u32)now - t_store_done);
      const u32 i = iter * kRecordsPerTile;
      Record* r = records();
      store_tile(r, i, tile, 0u);
      store(r, i + 1, mainloop_end, kEvMainloop, kKindEnd, tile, 0u);
      store(r, i + 2, mainloop_end, kEvStoreWait, kKindBegin, tile, 0u);
      store(r, i + 3, store_done, kEvStoreWait, kKindEnd, tile, 0u);
      store(r, i + 4, store_done, kEvEpilogue, kKindBegin, tile, 0u);
      store(r, i + 5, now, kEvEpilogue, kKindEnd, tile, bytes);
      store_ts(r, i + kRecordsPerTile, now, kEvMainloop, kKindBegin);
    }
  }

  // After the tile loop: tiles = the number of tiles the loop ran.
  __device__ __forceinline__ void close(u32 tiles) const {
    if (writer()) {
      const u64 g = globaltimer_ns();
      const u64 c = clock_cycles();
      SliceMeta* m = b.meta + ctaid_x() * b.roles_per_cta + kRoleMath;
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
// A clock stamp of this tile, held (32 bits) until XSTAGE_DG_TILE_END writes the tile's records.
#define XSTAGE_DG_CLOCK(name) const ::xstage::u32 name = (::xstage::u32)::xstage::clock_cycles()
#define XSTAGE_DG_TILE_END(iter, tile, bytes, t_mainloop_end, t_store_done) \
  xstage_math_.tile_end((::xstage::u32)(iter), (tile), (::xstage::u32)(bytes), (t_mainloop_end), (t_store_done))
#define XSTAGE_DG_MATH_CLOSE(tiles) xstage_math_.close((::xstage::u32)(tiles))

#else  // probes compiled out: no code, no clock reads, arguments not evaluated

#define XSTAGE_DG_MATH_OPEN(buf) \
  do {                           \
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
