// xstage-trace adapter for FlashAttention-3 (hopper/), written for xstage-trace and placed by
// `xstage-trace instrument apply --target fa3`. The trace buffer travels in the epilogue's
// Arguments/Params (a field of ours), filled by the launch template from current(), which the
// extern "C" setter in xstage_fa3_api.h (compiled into flash_api.cpp) sets.
//
// The consumer's probe carries no register through FA3's tile loop (XSTAGE_FA3_*, below): with
// probe.cuh's Probe handle (its record count live in a register across the Q-loop) ptxas scheduled
// the 240-register consumer's softmax and GEMMs differently and the kernel ran 1.5-3.6 % slower.
// Here the writer is the consumer thread whose %tid.x is writer_tid (re-read at each record), the
// record count is a field of FA3's SharedStorage (XSTAGE_FA3_SMEM_FIELD, in its pipeline storage: a
// static __shared__ variable would shift the dynamic shared memory off the alignment FA3's TMA
// tiles need), read and written with ld.shared / st.shared at its 32-bit shared address (a volatile
// C++ access went through a generic address, and the schedule changed again), and the buffer is
// the kernel parameter's (constant bank); records and slice metadata are probe.cuh's
// (docs/probe-format.md).
#pragma once

#include <cuda_runtime.h>

#include "xstage/probe.cuh"

namespace flash::xstage_fa3 {

constexpr ::xstage::u32 kRoleConsumer = 0;  // the first consumer thread (lane 0 of warpgroup 1's first warp)
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

// The record count's home in FA3's SharedStorage::PipelineStorage (16 bytes; none without probes).
#ifdef XSTAGE_TRACE
#define XSTAGE_FA3_SMEM_FIELD alignas(16) ::xstage::u32 xstage_record_count;
#else
#define XSTAGE_FA3_SMEM_FIELD
#endif

#if defined(__CUDACC__) && defined(XSTAGE_TRACE)
__device__ __forceinline__ ::xstage::u32 tid_x() {
    ::xstage::u32 t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

// The record count in shared memory (its generic address converted once per access; no register held).
__device__ __forceinline__ ::xstage::u32 load_count(::xstage::u32 const& count) {
    const ::xstage::u32 a = static_cast<::xstage::u32>(__cvta_generic_to_shared(&count));
    ::xstage::u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}

__device__ __forceinline__ void store_count(::xstage::u32& count, ::xstage::u32 v) {
    const ::xstage::u32 a = static_cast<::xstage::u32>(__cvta_generic_to_shared(&count));
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(v));
}

__device__ __forceinline__ ::xstage::u32 slice_of(::xstage::DeviceBuffer const& b) {
    return ::xstage::ctaid_x() * b.roles_per_cta + kRoleConsumer;
}

__device__ __forceinline__ bool is_writer(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid) {
    return tid_x() == writer_tid && b.meta != nullptr && slice_of(b) < b.num_slices;
}

__device__ __forceinline__ void probe_open(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, ::xstage::u32& count) {
    if (!is_writer(b, writer_tid)) return;
    const ::xstage::u64 g = ::xstage::globaltimer_ns();
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::SliceMeta* m = b.meta + slice_of(b);
    m->smid_open = ::xstage::smid();
    m->gt_open = g;
    m->clk_open = c;
    store_count(count, 0u);
}

__device__ __forceinline__ void probe_put(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, ::xstage::u32& count,
                                          ::xstage::u32 event, ::xstage::u32 kind, ::xstage::u32 tile) {
    if (!is_writer(b, writer_tid)) return;
    const ::xstage::u64 c = ::xstage::clock_cycles();
    const ::xstage::u32 i = load_count(count);
    if (i < b.capacity) {
        const ::xstage::u64 ts_ev = (c & 0xFFFFFFFFFFFFull) | ((::xstage::u64)(event & 0xFF) << 48) | ((::xstage::u64)(kind & 0x3) << 56);
        ::xstage::store_record_cs(b.records + (::xstage::u64)slice_of(b) * b.capacity + i, ts_ev, tile, 0u);
    }
    store_count(count, i + 1);
}

__device__ __forceinline__ void probe_close(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, ::xstage::u32 const& count) {
    if (!is_writer(b, writer_tid)) return;
    const ::xstage::u64 g = ::xstage::globaltimer_ns();
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::SliceMeta* m = b.meta + slice_of(b);
    m->smid_close = ::xstage::smid();
    m->gt_close = g;
    m->clk_close = c;
    m->count = load_count(count);
    m->closed = 1;
}

// One clock read, two records: one span's end and the next span's begin (the mainloop's end and the
// epilogue's begin), so that the tile loop has three probe sites instead of four.
__device__ __forceinline__ void probe_put2(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, ::xstage::u32& count,
                                           ::xstage::u32 ended, ::xstage::u32 begun, ::xstage::u32 tile) {
    if (!is_writer(b, writer_tid)) return;
    const ::xstage::u64 c = ::xstage::clock_cycles();
    const ::xstage::u32 i = load_count(count);
    const ::xstage::u64 t = c & 0xFFFFFFFFFFFFull;
    if (i < b.capacity) {
        ::xstage::store_record_cs(b.records + (::xstage::u64)slice_of(b) * b.capacity + i,
                                  t | ((::xstage::u64)(ended & 0xFF) << 48) | ((::xstage::u64)::xstage::kKindEnd << 56), tile, 0u);
    }
    if (i + 1 < b.capacity) {
        ::xstage::store_record_cs(b.records + (::xstage::u64)slice_of(b) * b.capacity + i + 1,
                                  t | ((::xstage::u64)(begun & 0xFF) << 48) | ((::xstage::u64)::xstage::kKindBegin << 56), tile, 0u);
    }
    store_count(count, i + 2);
}

// buf: the DeviceBuffer (kernel parameter), writer_tid: the writer's %tid.x, count: XSTAGE_FA3_SMEM_FIELD's field
// (read and written in shared memory at each record, never held in a register across the loop)
#define XSTAGE_FA3_OPEN(buf, writer_tid, count) ::flash::xstage_fa3::probe_open((buf), (writer_tid), (count))
#define XSTAGE_FA3_BEGIN(buf, writer_tid, count, event, tile) \
    ::flash::xstage_fa3::probe_put((buf), (writer_tid), (count), (event), ::xstage::kKindBegin, (tile))
#define XSTAGE_FA3_END(buf, writer_tid, count, event, tile) \
    ::flash::xstage_fa3::probe_put((buf), (writer_tid), (count), (event), ::xstage::kKindEnd, (tile))
#define XSTAGE_FA3_SPAN_SWITCH(buf, writer_tid, count, ended, begun, tile) \
    ::flash::xstage_fa3::probe_put2((buf), (writer_tid), (count), (ended), (begun), (tile))
#define XSTAGE_FA3_CLOSE(buf, writer_tid, count) ::flash::xstage_fa3::probe_close((buf), (writer_tid), (count))
#else  // probes compiled out: no code, arguments not evaluated
#define XSTAGE_FA3_OPEN(buf, writer_tid, count) do {} while (0)
#define XSTAGE_FA3_BEGIN(buf, writer_tid, count, event, tile) do {} while (0)
#define XSTAGE_FA3_END(buf, writer_tid, count, event, tile) do {} while (0)
#define XSTAGE_FA3_SPAN_SWITCH(buf, writer_tid, count, ended, begun, tile) do {} while (0)
#define XSTAGE_FA3_CLOSE(buf, writer_tid, count) do {} while (0)
#endif

}  // namespace flash::xstage_fa3
