// xstage-trace adapter for FlashAttention-3 (hopper/), written for xstage-trace and placed by
// `xstage-trace instrument apply --target fa3`. The trace buffer travels in the epilogue's
// Arguments/Params (a field of ours), filled by the launch template from current(), which the
// extern "C" setter in xstage_fa3_api.h (compiled into flash_api.cpp) sets.
//
// The consumer's probe carries no register through FA3's tile loop (XSTAGE_FA3_*, below): with
// probe.cuh's Probe handle (its record count live in a register across the Q-loop) ptxas scheduled
// the 240-register consumer's softmax and GEMMs differently and the kernel ran 1.5-3.6 % slower.
// The writer is the consumer thread whose %tid.x is writer_tid; its state (where the slice's records
// start, the count, the capacity) is a 16-byte field of FA3's SharedStorage (XSTAGE_FA3_SMEM_FIELD, in
// its pipeline storage: a static __shared__ variable would shift the dynamic shared memory off the
// alignment FA3's TMA tiles need), set once at open from the kernel parameter's buffer. A site in the
// tile loop is one asm block that every consumer thread runs straight through: clock read, ld.shared
// of the state, the record stores and the count update predicated on "writer and count < capacity".
// An earlier form (a C++ `if (writer)` at each of 4 sites per tile, the buffer re-read from the
// constant bank) branched around each site, splitting the kernel's basic blocks there, and cost
// +1.2 ... +2.4 % on short tiles in HBM. Three sites per tile: mainloop begin, mainloop end + epilogue
// begin (one clock read, after the scheduler's get_next_work), epilogue end. Records and slice metadata
// are probe.cuh's (docs/probe-format.md).
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
// Tile id: batch in bits 24..31, head in bits 12..23, m block in bits 0..11. Computed in an asm volatile
// block at each probe site so that the compiler cannot compute it once and keep it in a register across
// the Q-loop (a C++ expression was merged across the sites: one more register live through the K/V
// loop, and ptxas scheduled the causal kernel's K/V loop differently, +2 % at 16 K).
template <class BlockCoord>
__device__ __forceinline__ ::xstage::u32 tile_id(BlockCoord const& block_coord) {
    ::xstage::u32 t;
    asm volatile(
        "{\n\t"
        ".reg .u32 x, y;\n\t"
        "and.b32 x, %1, 0xFFF;\n\t"
        "and.b32 y, %2, 0xFFF;\n\t"
        "shl.b32 y, y, 12;\n\t"
        "or.b32 x, x, y;\n\t"
        "shl.b32 y, %3, 24;\n\t"
        "or.b32 %0, x, y;\n\t"
        "}\n"
        : "=r"(t)
        : "r"(static_cast<::xstage::u32>(cute::get<0>(block_coord))), "r"(static_cast<::xstage::u32>(cute::get<1>(block_coord))),
          "r"(static_cast<::xstage::u32>(cute::get<2>(block_coord))));
    return t;
}
#endif

// The writer's state, in FA3's SharedStorage::PipelineStorage (16 bytes; none without probes): where the
// slice's records start (0 when this launch records nothing), the records attempted so far, the slice's
// capacity. Only the writer thread reads or writes it.
struct WriterState {
    ::xstage::u32 records_lo, records_hi, count, capacity;
    ::xstage::u64 stamp;  // clock64 at the last XSTAGE_FA3_STAMP
    ::xstage::u64 unused;
};
static_assert(sizeof(WriterState) == 32, "xstage fa3 writer state: 32 bytes");
#ifdef XSTAGE_TRACE
#define XSTAGE_FA3_SMEM_FIELD alignas(16) ::flash::xstage_fa3::WriterState xstage_state;
#else
#define XSTAGE_FA3_SMEM_FIELD
#endif

#if defined(__CUDACC__) && defined(XSTAGE_TRACE)
__device__ __forceinline__ ::xstage::u32 tid_x() {
    ::xstage::u32 t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

__device__ __forceinline__ ::xstage::u32 smem_addr(WriterState const& s) {
    return static_cast<::xstage::u32>(__cvta_generic_to_shared(&s));
}

__device__ __forceinline__ ::xstage::u32 slice_of(::xstage::DeviceBuffer const& b) {
    return ::xstage::ctaid_x() * b.roles_per_cta + kRoleConsumer;
}

__device__ __forceinline__ bool records_here(::xstage::DeviceBuffer const& b) {
    return b.meta != nullptr && slice_of(b) < b.num_slices;
}

// Once per CTA, outside the tile loop (branches are fine here): the slice metadata's open fields and the
// writer's state (records start, count 0, capacity; capacity 0 and no records when the buffer is cleared).
__device__ __forceinline__ void probe_open(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, WriterState& s) {
    if (tid_x() != writer_tid) return;
    const bool on = records_here(b);
    const ::xstage::u64 g = ::xstage::globaltimer_ns();
    const ::xstage::u64 c = ::xstage::clock_cycles();
    const ::xstage::u64 r = on ? reinterpret_cast<::xstage::u64>(b.records + static_cast<::xstage::u64>(slice_of(b)) * b.capacity) : 0;
    if (on) {
        ::xstage::SliceMeta* m = b.meta + slice_of(b);
        ::xstage::store_meta_u32(&m->smid_open, ::xstage::smid());
        ::xstage::store_meta_u64(&m->gt_open, g);
        ::xstage::store_meta_u64(&m->clk_open, c);
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(s)), "r"(static_cast<::xstage::u32>(r)),
                 "r"(static_cast<::xstage::u32>(r >> 32)), "r"(0u), "r"(on ? b.capacity : 0u));
}

// The high half of a record's ts_ev without the clock bits (docs/probe-format.md): event in bits 16..23,
// kind in 24..25.
constexpr ::xstage::u32 ev_bits(::xstage::u32 event, ::xstage::u32 kind) { return ((event & 0xFFu) << 16) | ((kind & 0x3u) << 24); }

// A probe site in the tile loop: one clock read, then one record (event/kind bits kHi0) with its
// timestamp. Every consumer thread executes it as one straight-line block of predicated instructions
// (w: the thread whose %tid.x is kWriterTid; the store also needs count < capacity): no branch, so the
// site splits none of the kernel's basic blocks, and the kernel parameters are not read. The writer's
// thread index, the event bits and the zero payload are immediates in the asm text, not register
// operands: the compiler merged register constants of several sites into one register that then lived
// through the K/V loop, and ptxas scheduled that loop differently (causal kernel +2 % at 16 K).
template <::xstage::u32 kWriterTid, ::xstage::u32 kHi0>
__device__ __forceinline__ void probe_site(WriterState& s, ::xstage::u32 tile) {
    asm volatile(
        "{\n\t"
        ".reg .pred w, q0;\n\t"
        ".reg .u32 t, rl, rh, n, cap, clo, chi, h0, n1, z;\n\t"
        ".reg .u64 c, r, a;\n\t"
        "mov.u64 c, %%clock64;\n\t"
        "mov.u32 t, %%tid.x;\n\t"
        "setp.eq.u32 w, t, %0;\n\t"
        "ld.shared.v4.u32 {rl, rh, n, cap}, [%1];\n\t"
        "mov.b64 {clo, chi}, c;\n\t"
        "and.b32 chi, chi, 0xFFFF;\n\t"
        "or.b32 h0, chi, %2;\n\t"
        "mov.u32 z, 0;\n\t"
        "mov.b64 r, {rl, rh};\n\t"
        "mad.wide.u32 a, n, 16, r;\n\t"
        "setp.lt.and.u32 q0, n, cap, w;\n\t"
        "@q0 st.global.cs.v4.u32 [a], {clo, h0, %3, z};\n\t"
        "add.u32 n1, n, 1;\n\t"
        "@w st.shared.u32 [%1+8], n1;\n\t"
        "}\n" ::"n"(kWriterTid), "r"(smem_addr(s)), "n"(kHi0), "r"(tile));
}

// The clock read of a span boundary whose records are written later, by probe_site_stamped (the writer
// keeps it in its state): one clock read and one predicated st.shared, the smallest footprint for the
// point between the mainloop and the epilogue, where the accumulators are live (a site storing two
// records there made ptxas schedule the causal kernel's K/V loop differently, +2 % at 8-16 K).
template <::xstage::u32 kWriterTid>
__device__ __forceinline__ void probe_stamp(WriterState& s) {
    asm volatile(
        "{\n\t"
        ".reg .pred w;\n\t"
        ".reg .u32 t;\n\t"
        ".reg .u64 c;\n\t"
        "mov.u64 c, %%clock64;\n\t"
        "mov.u32 t, %%tid.x;\n\t"
        "setp.eq.u32 w, t, %0;\n\t"
        "@w st.shared.u64 [%1+16], c;\n\t"
        "}\n" ::"n"(kWriterTid), "r"(smem_addr(s)));
}

// Three records of one tile: two at the stamped clock (kHi0, kHi1: one span's end, the next span's
// begin), then one at this site's clock read (kHi2).
template <::xstage::u32 kWriterTid, ::xstage::u32 kHi0, ::xstage::u32 kHi1, ::xstage::u32 kHi2>
__device__ __forceinline__ void probe_site_stamped(WriterState& s, ::xstage::u32 tile) {
    asm volatile(
        "{\n\t"
        ".reg .pred w, q0, q1, q2;\n\t"
        ".reg .u32 t, rl, rh, n, cap, clo, chi, slo, shi, h0, h1, h2, n1, n2, n3, z;\n\t"
        ".reg .u64 c, r, a;\n\t"
        "mov.u64 c, %%clock64;\n\t"
        "mov.u32 t, %%tid.x;\n\t"
        "setp.eq.u32 w, t, %0;\n\t"
        "ld.shared.v4.u32 {rl, rh, n, cap}, [%1];\n\t"
        "ld.shared.v2.u32 {slo, shi}, [%1+16];\n\t"
        "mov.b64 {clo, chi}, c;\n\t"
        "and.b32 chi, chi, 0xFFFF;\n\t"
        "and.b32 shi, shi, 0xFFFF;\n\t"
        "or.b32 h0, shi, %2;\n\t"
        "or.b32 h1, shi, %3;\n\t"
        "or.b32 h2, chi, %4;\n\t"
        "mov.u32 z, 0;\n\t"
        "mov.b64 r, {rl, rh};\n\t"
        "mad.wide.u32 a, n, 16, r;\n\t"
        "add.u32 n1, n, 1;\n\t"
        "add.u32 n2, n, 2;\n\t"
        "add.u32 n3, n, 3;\n\t"
        "setp.lt.and.u32 q0, n, cap, w;\n\t"
        "setp.lt.and.u32 q1, n1, cap, w;\n\t"
        "setp.lt.and.u32 q2, n2, cap, w;\n\t"
        "@q0 st.global.cs.v4.u32 [a], {slo, h0, %5, z};\n\t"
        "@q1 st.global.cs.v4.u32 [a+16], {slo, h1, %5, z};\n\t"
        "@q2 st.global.cs.v4.u32 [a+32], {clo, h2, %5, z};\n\t"
        "@w st.shared.u32 [%1+8], n3;\n\t"
        "}\n" ::"n"(kWriterTid), "r"(smem_addr(s)), "n"(kHi0), "n"(kHi1), "n"(kHi2), "r"(tile));
}

// Once per CTA, after the tile loop: the slice metadata's close fields and the records attempted.
__device__ __forceinline__ void probe_close(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, WriterState const& s) {
    if (tid_x() != writer_tid || !records_here(b)) return;
    const ::xstage::u64 g = ::xstage::globaltimer_ns();
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::u32 n;
    asm volatile("ld.shared.u32 %0, [%1+8];" : "=r"(n) : "r"(smem_addr(s)));
    ::xstage::SliceMeta* m = b.meta + slice_of(b);
    ::xstage::store_meta_u32(&m->smid_close, ::xstage::smid());
    ::xstage::store_meta_u64(&m->gt_close, g);
    ::xstage::store_meta_u64(&m->clk_close, c);
    ::xstage::store_meta_u32(&m->count, n);
    ::xstage::store_meta_u32(&m->closed, 1u);
}

// buf: the DeviceBuffer (kernel parameter; read at open and close only), writer_tid: the writer's %tid.x (a constant),
// state: XSTAGE_FA3_SMEM_FIELD's field. SPAN_SWITCH ends one span and begins the next at one clock read.
#define XSTAGE_FA3_OPEN(buf, writer_tid, state) ::flash::xstage_fa3::probe_open((buf), (writer_tid), (state))
#define XSTAGE_FA3_BEGIN(writer_tid, state, event, tile) \
    ::flash::xstage_fa3::probe_site<(writer_tid), ::flash::xstage_fa3::ev_bits((event), ::xstage::kKindBegin)>((state), (tile))
#define XSTAGE_FA3_END(writer_tid, state, event, tile) \
    ::flash::xstage_fa3::probe_site<(writer_tid), ::flash::xstage_fa3::ev_bits((event), ::xstage::kKindEnd)>((state), (tile))
#define XSTAGE_FA3_STAMP(writer_tid, state) ::flash::xstage_fa3::probe_stamp<(writer_tid)>((state))
#define XSTAGE_FA3_END_STAMPED(writer_tid, state, ended, begun, event, tile)                                  \
    ::flash::xstage_fa3::probe_site_stamped<(writer_tid), ::flash::xstage_fa3::ev_bits((ended), ::xstage::kKindEnd), \
                                            ::flash::xstage_fa3::ev_bits((begun), ::xstage::kKindBegin),          \
                                            ::flash::xstage_fa3::ev_bits((event), ::xstage::kKindEnd)>((state), (tile))
#define XSTAGE_FA3_CLOSE(buf, writer_tid, state) ::flash::xstage_fa3::probe_close((buf), (writer_tid), (state))
#else  // probes compiled out: no code, arguments not evaluated
#define XSTAGE_FA3_OPEN(buf, writer_tid, state) do {} while (0)
#define XSTAGE_FA3_BEGIN(writer_tid, state, event, tile) do {} while (0)
#define XSTAGE_FA3_END(writer_tid, state, event, tile) do {} while (0)
#define XSTAGE_FA3_STAMP(writer_tid, state) do {} while (0)
#define XSTAGE_FA3_END_STAMPED(writer_tid, state, ended, begun, event, tile) do {} while (0)
#define XSTAGE_FA3_CLOSE(buf, writer_tid, state) do {} while (0)
#endif

}  // namespace flash::xstage_fa3
