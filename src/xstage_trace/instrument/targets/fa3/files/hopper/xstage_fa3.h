// xstage-trace adapter for FlashAttention-3 (hopper/), written for xstage-trace and placed by
// `xstage-trace instrument apply --target fa3`. The trace buffer travels in the epilogue's
// Arguments/Params (a field of ours), filled by the launch template from current(), which the
// extern "C" setter in xstage_fa3_api.h (compiled into flash_api.cpp) sets.
//
// The consumer's probe sites cost the consumer warps one predicated branch each. The writer (the
// consumer thread whose %tid.x is writer_tid, with a trace buffer set) is decided once, when the
// consumer starts (XSTAGE_FA3_OPEN declares the flag `xstage_fa3_writer` in the consumer's scope); the
// three sites in the tile loop test that flag and nothing else, so the other warps neither read the
// thread index, nor load the buffer's fields, nor wait: ptxas keeps the flag in a predicate register
// across the tile loop. The writer's state -- records attempted, the slice's capacity (0 when the CTA's
// slice is outside the buffer), the address of the slice's first record and one clock stamp -- is a
// 32-byte field of FA3's SharedStorage (XSTAGE_FA3_SMEM_FIELD, in its pipeline storage: a static
// __shared__ variable would shift the dynamic shared memory off the alignment FA3's TMA tiles need),
// set at open and read and written with ld.shared / st.shared, so no count or address is held in a
// register across the loop (with probe.cuh's Probe handle, the count live in a register, the
// 240-register consumer's softmax and GEMMs were scheduled differently and ran 1.5-3.6 % slower).
// Sites: the mainloop's begin writes its record (clock read, two ld.shared, the store predicated on the
// capacity, one st.shared); the mainloop's end / epilogue's begin, after the scheduler's get_next_work
// and right before the epilogue's barrier, only stamps its clock into the state (a predicated clock
// read and st.shared, no branch); the epilogue's end writes three records: the stamped clock's two
// (mainloop end, epilogue begin) and its own.
// Why the flag: every form that re-tested the thread index (or the buffer) at the site after the
// scheduler's get_next_work made ptxas re-allocate and re-schedule the causal kernel's K/V loops (their
// instructions out of place against the probes-off build; +2-3 % at long tiles on the H200); with the
// flag those loops are the probes-off build's, instruction for instruction (docs/recipes.md, fa3).
// Opt-in (-DXSTAGE_FA3_KV_STEPS=1): the K/V steps inside the mainloop's `mma` (kEvKvStep below), their sites
// testing the same flag lent to the mainloop object; the state grows by their ring.
// Records and slice metadata are probe.cuh's (docs/probe-format.md).
#pragma once

#include <cuda_runtime.h>

#include "xstage/probe.cuh"

namespace flash::xstage_fa3 {

constexpr ::xstage::u32 kRoleConsumer = 0;  // the first consumer thread (lane 0 of warpgroup 1's first warp)
constexpr ::xstage::u32 kNumRoles = 1;

// Event ids; the dump's event-name table in this order: mainloop, epilogue, softmax.
constexpr ::xstage::u32 kEvMainloop = 0;  // span: the Q tile's loop over K/V blocks (QK^T, online softmax, PV)
constexpr ::xstage::u32 kEvEpilogue = 1;  // span: O (and LSE) written: smem, TMA store issued and waited
constexpr ::xstage::u32 kEvKvStep = 2;    // span per K/V block n (payload n): the K/V loop's step holding n's softmax

// K/V steps (the online softmax's steps): one clock mark per K/V block n of the loop, where the writer's warpgroup
// has issued n's QK^T GEMM and waited for block n+1's V, right before it issues n+1's PV GEMM; block n's step is
// the span from its mark to the next block's (block 0's: to the loop's exit, after its softmax, before the last
// PV GEMM), so it holds block n's QK^T wait, softmax (row max, exp, row sum, O rescaled) and PV GEMM issue, and the
// next block's K and V waits. The tile's first block n_max-1 (QK^T and softmax before the loop) starts at the
// mainloop's begin. The marks go into a ring of kKvSlots slots in the writer state (stores only; block n in slot
// n % kKvSlots, so the ring ends holding blocks min(n_max-2, kKvSlots-1) ... 0 in their own slots) and are written
// as records at the epilogue's end: the tile's last min(K/V blocks, kKvSlots) steps, in the order they ran.
// Tile sampling: the marks are taken on every tile, but the ring is written out only on the writer's tiles 0, S,
// 2S, ... (S = kKvEvery, the tile's ordinal in the CTA's slice, i.e. in the scheduler order of the slice) and
// emptied before each of them; the other tiles carry no kv_step records. Every mainloop begin record carries S as
// its payload (0 in builds without K/V steps), so a reader knows which tiles must carry steps.
// Compile-time switches, off by default: -DXSTAGE_FA3_KV_STEPS=1 adds them, -DXSTAGE_FA3_KV_EVERY=S (a power of 2,
// default 8) sets the sampling period. Off, the kernel is the two-span recipe's, instruction for instruction.
#ifndef XSTAGE_FA3_KV_STEPS
#define XSTAGE_FA3_KV_STEPS 0
#endif
#ifndef XSTAGE_FA3_KV_EVERY
#define XSTAGE_FA3_KV_EVERY 8
#endif
constexpr ::xstage::u32 kKvSlots = XSTAGE_FA3_KV_STEPS ? 16 : 0;
constexpr ::xstage::u32 kKvEvery = XSTAGE_FA3_KV_STEPS ? XSTAGE_FA3_KV_EVERY : 0;
static_assert(kKvEvery == 0 || (kKvEvery & (kKvEvery - 1)) == 0, "XSTAGE_FA3_KV_EVERY must be a power of 2");
// Words of the writer state: 8, and with the K/V steps the ring (2 per slot) and the exit clock (padded to 16 bytes).
constexpr ::xstage::u32 kStateWords = 8 + (kKvSlots ? 2 * kKvSlots + 4 : 0);
constexpr ::xstage::u32 kExitWord = 8 + 2 * kKvSlots;  // with the K/V steps: the K/V loop's exit clock
constexpr ::xstage::u32 kNoBlock = 0xFFFFFFFFu;  // a ring slot holding no mark of the current tile

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

// The writer's state in FA3's SharedStorage::PipelineStorage (4 * kStateWords bytes; none without probes; words
// [6..7], the ring and the exit clock used only with the K/V steps):
// [0] records attempted, [1] the slice's capacity (0: no slice for this CTA), [2..3] its first record, [4..5] the
// clock stamp of XSTAGE_FA3_SPAN_STAMP, [6] the tiles the writer has ended (the current tile's ordinal in its slice),
// [7] the mainloop's begin clock (low 32 bits), read at the epilogue's end with the stamp in one 16-byte load;
// [8 .. 8 + 2 kKvSlots) the K/V ring, 2 words per slot (block n in slot n % kKvSlots): n's mark clock (low 32 bits), n
// (kNoBlock: empty); [kExitWord] the K/V loop's exit clock (low 32 bits). The
// mainloop's flag field (XSTAGE_FA3_MAINLOOP_FIELD, in CollectiveMainloop) is the consumer's writer flag, lent to the
// mainloop object before the tile loop so that the sites inside `mma` test it.
#ifdef XSTAGE_TRACE
#define XSTAGE_FA3_SMEM_FIELD alignas(16) ::xstage::u32 xstage_writer_state[::flash::xstage_fa3::kStateWords];
#if XSTAGE_FA3_KV_STEPS
#define XSTAGE_FA3_MAINLOOP_FIELD bool xstage_writer = false;
#else
#define XSTAGE_FA3_MAINLOOP_FIELD
#endif
#else
#define XSTAGE_FA3_SMEM_FIELD
#define XSTAGE_FA3_MAINLOOP_FIELD
#endif

#if defined(__CUDACC__) && defined(XSTAGE_TRACE)
using WriterState = ::xstage::u32[kStateWords];

__device__ __forceinline__ ::xstage::u32 tid_x() {
    ::xstage::u32 t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

// The state's 32-bit shared address (its generic address converted at each access; no register held).
__device__ __forceinline__ ::xstage::u32 state_addr(WriterState const& s) {
    return static_cast<::xstage::u32>(__cvta_generic_to_shared(&s[0]));
}

__device__ __forceinline__ void load_state(WriterState const& s, ::xstage::u32& count, ::xstage::u32& capacity,
                                           ::xstage::Record*& first) {
    ::xstage::u64 p;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%3];\n\tld.shared.u64 %2, [%3+8];"
                 : "=r"(count), "=r"(capacity), "=l"(p) : "r"(state_addr(s)));
    first = reinterpret_cast<::xstage::Record*>(p);
}

__device__ __forceinline__ void store_count(WriterState& s, ::xstage::u32 count) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(state_addr(s)), "r"(count));
}

__device__ __forceinline__ ::xstage::u32 slice_of(::xstage::DeviceBuffer const& b) {
    return ::xstage::ctaid_x() * b.roles_per_cta + kRoleConsumer;
}

// The flag of XSTAGE_FA3_OPEN: this thread writes the records, and a buffer is set.
__device__ __forceinline__ bool is_writer(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid) {
    return tid_x() == writer_tid && b.meta != nullptr;
}

__device__ __forceinline__ ::xstage::u64 ts_ev(::xstage::u64 clock, ::xstage::u32 event, ::xstage::u32 kind) {
    return (clock & 0xFFFFFFFFFFFFull) | ((::xstage::u64)(event & 0xFF) << 48) | ((::xstage::u64)(kind & 0x3) << 56);
}

#if XSTAGE_FA3_KV_STEPS
// The writer only: the K/V ring emptied (every slot's block kNoBlock), 16 bytes (two slots) per store.
__device__ __forceinline__ void kv_reset(WriterState& s) {
    const ::xstage::u32 a = state_addr(s);
#pragma unroll
    for (::xstage::u32 k = 0; k < kKvSlots; k += 2)
        asm volatile("st.shared.v4.u32 [%0+32], {%1, %2, %1, %2};" ::"r"(a + 8 * k), "r"(0u), "r"(kNoBlock));
}
#endif

// The writer only: the slice's open anchor and the state (capacity 0 when the CTA has no slice).
__device__ __forceinline__ void probe_open(::xstage::DeviceBuffer const& b, WriterState& s) {
    const ::xstage::u32 a = state_addr(s);
    if (slice_of(b) >= b.num_slices) {
        asm volatile("st.shared.v2.u32 [%0], {%1, %1};" ::"r"(a), "r"(0u));
        return;
    }
    const ::xstage::u64 g = ::xstage::globaltimer_ns();
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::SliceMeta* m = b.meta + slice_of(b);
    ::xstage::store_meta_u32(&m->smid_open, ::xstage::smid());
    ::xstage::store_meta_u64(&m->gt_open, g);
    ::xstage::store_meta_u64(&m->clk_open, c);
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n\tst.shared.u64 [%0+8], %3;" ::"r"(a), "r"(0u), "r"(b.capacity),
                 "l"(reinterpret_cast<::xstage::u64>(b.records + (::xstage::u64)slice_of(b) * b.capacity)));
#if XSTAGE_FA3_KV_STEPS
    kv_reset(s);  // tile 0 is sampled
    asm volatile("st.shared.u32 [%0+24], %1;" ::"r"(a), "r"(0u));
#endif
}

// The writer only, at the mainloop's begin: its record (payload: the K/V-step sampling period kKvEvery, 0 without
// K/V steps) and, with the K/V steps, its clock's low word (state [7]: the begin of the tile's first K/V step).
__device__ __forceinline__ void probe_begin(WriterState& s, ::xstage::u32 event, ::xstage::u32 tile) {
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::u32 i, capacity;
    ::xstage::Record* first;
    load_state(s, i, capacity, first);
    if (i < capacity) ::xstage::store_record_cs(first + i, ts_ev(c, event, ::xstage::kKindBegin), tile, kKvEvery);
#if XSTAGE_FA3_KV_STEPS
    asm volatile("st.shared.u32 [%0], %1;\n\tst.shared.u32 [%0+28], %2;" ::"r"(state_addr(s)), "r"(i + 1), "r"(static_cast<::xstage::u32>(c)));
#else
    store_count(s, i + 1);
#endif
}

// The writer only: the clock of a span boundary (one span's end and the next span's begin: the mainloop's
// end and the epilogue's begin), its two records written by probe_put3.
__device__ __forceinline__ void probe_stamp(WriterState& s) {
    asm volatile("st.shared.u64 [%0+16], %1;" ::"r"(state_addr(s)), "l"(::xstage::clock_cycles()));
}

#if XSTAGE_FA3_KV_STEPS
__device__ __forceinline__ ::xstage::u32 clock_lo() {
    ::xstage::u32 c;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
    return c;
}

// The writer only, inside the K/V loop: K/V block n's mark (the clock's low word and n into n's slot), and after
// the loop its exit (state [kExitWord]). Stores only: no load, nothing held in a register across the loop.
__device__ __forceinline__ void kv_mark(WriterState& s, int n) {
    asm volatile("st.shared.v2.u32 [%0+32], {%1, %2};" ::"r"(state_addr(s) + ((static_cast<::xstage::u32>(n) % kKvSlots) << 3)),
                 "r"(clock_lo()), "r"(n));
}
__device__ __forceinline__ void kv_exit(WriterState& s) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(state_addr(s) + 4 * kExitWord), "r"(clock_lo()));
}

// The clock whose low word is `lo`, read at most 2^32 cycles before the 64-bit clock `now`.
__device__ __forceinline__ ::xstage::u64 widen(::xstage::u32 lo, ::xstage::u64 now) {
    return now - static_cast<::xstage::u32>(static_cast<::xstage::u32>(now) - lo);
}

// The writer only, at the epilogue's end of a sampled tile: the tile's K/V steps from the ring as begin/end records
// of kEvKvStep (payload: the block), in the order the blocks ran (descending n); returns the records attempted after
// them. The ring was emptied before the tile; its loop marked blocks n_max-2 ... 0, the last of which are in their own
// slots, so the filled slots are 0 ... marks-1 holding blocks 0 ... marks-1 (marks = min(n_max-1, kKvSlots)). Step b
// spans b's mark to b-1's (block 0's: to the loop's exit); the first step recorded is block top = min(marks,
// kKvSlots-1), which begins at the mainloop's begin (begin_lo) when it had no mark (b == marks: the tile's first
// block). One loop over the recorded steps, a slot load and two record stores each (a compact read-out: fully
// unrolled over the 16 slots it ran slower on the H200).
__device__ __forceinline__ ::xstage::u32 put_kv_steps(WriterState& s, ::xstage::u32 i, ::xstage::u32 capacity, ::xstage::Record* first,
                                                      ::xstage::u64 now, ::xstage::u32 begin_lo, ::xstage::u32 tile) {
    const ::xstage::u32 a = state_addr(s);
    ::xstage::u32 marks = 0, exit_lo;
#pragma unroll
    for (::xstage::u32 k = 0; k < kKvSlots; k += 2) {
        ::xstage::u32 n0, n1;
        asm volatile("ld.shared.u32 %0, [%2+36];\n\tld.shared.u32 %1, [%2+44];" : "=r"(n0), "=r"(n1) : "r"(a + 8 * k));
        marks += (n0 != kNoBlock) + (n1 != kNoBlock);
    }
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(exit_lo) : "r"(a + 4 * kExitWord));
    const ::xstage::u32 top = min(marks, kKvSlots - 1);
    ::xstage::u32 begin = begin_lo;
    if (top < marks) asm volatile("ld.shared.u32 %0, [%1+32];" : "=r"(begin) : "r"(a + 8 * top));
#pragma unroll 1
    for (::xstage::u32 b = top + 1; b-- > 0;) {
        ::xstage::u32 end = exit_lo;
        if (b > 0) asm volatile("ld.shared.u32 %0, [%1+24];" : "=r"(end) : "r"(a + 8 * b));  // slot b-1's clock
        if (i < capacity) ::xstage::store_record_cs(first + i, ts_ev(widen(begin, now), kEvKvStep, ::xstage::kKindBegin), tile, b);
        if (i + 1 < capacity) ::xstage::store_record_cs(first + i + 1, ts_ev(widen(end, now), kEvKvStep, ::xstage::kKindEnd), tile, b);
        i += 2;
        begin = end;
    }
    return i;
}
#endif

// The writer only: the stamped boundary's two records (`ended`'s end, `begun`'s begin) and, at this
// clock, the end of `event`; first, with the K/V steps and on a sampled tile, the ring's records.
__device__ __forceinline__ void probe_put3(WriterState& s, ::xstage::u32 ended, ::xstage::u32 begun, ::xstage::u32 event,
                                           ::xstage::u32 tile) {
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::u32 i, capacity;
    ::xstage::Record* first;
    load_state(s, i, capacity, first);
#if XSTAGE_FA3_KV_STEPS
    ::xstage::u32 stamp_lo, stamp_hi, ordinal, begin_lo;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4+16];" : "=r"(stamp_lo), "=r"(stamp_hi), "=r"(ordinal), "=r"(begin_lo)
                 : "r"(state_addr(s)));
    const ::xstage::u64 stamp = (static_cast<::xstage::u64>(stamp_hi) << 32) | stamp_lo;
    // a sampled tile (ordinal a multiple of kKvEvery) writes its steps; the ring is emptied before the next sampled one
    if ((ordinal & (kKvEvery - 1)) == 0) i = put_kv_steps(s, i, capacity, first, c, begin_lo, tile);
    if (((ordinal + 1) & (kKvEvery - 1)) == 0) kv_reset(s);
    asm volatile("st.shared.u32 [%0+24], %1;" ::"r"(state_addr(s)), "r"(ordinal + 1));
#else
    ::xstage::u64 stamp;
    asm volatile("ld.shared.u64 %0, [%1+16];" : "=l"(stamp) : "r"(state_addr(s)));
#endif
    if (i < capacity) ::xstage::store_record_cs(first + i, ts_ev(stamp, ended, ::xstage::kKindEnd), tile, 0u);
    if (i + 1 < capacity) ::xstage::store_record_cs(first + i + 1, ts_ev(stamp, begun, ::xstage::kKindBegin), tile, 0u);
    if (i + 2 < capacity) ::xstage::store_record_cs(first + i + 2, ts_ev(c, event, ::xstage::kKindEnd), tile, 0u);
    store_count(s, i + 3);
}

__device__ __forceinline__ void probe_close(::xstage::DeviceBuffer const& b, ::xstage::u32 writer_tid, WriterState const& s) {
    if (!is_writer(b, writer_tid) || slice_of(b) >= b.num_slices) return;
    const ::xstage::u64 g = ::xstage::globaltimer_ns();
    const ::xstage::u64 c = ::xstage::clock_cycles();
    ::xstage::u32 count;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(count) : "r"(state_addr(s)));
    ::xstage::SliceMeta* m = b.meta + slice_of(b);
    ::xstage::store_meta_u32(&m->smid_close, ::xstage::smid());
    ::xstage::store_meta_u64(&m->gt_close, g);
    ::xstage::store_meta_u64(&m->clk_close, c);
    ::xstage::store_meta_u32(&m->count, count);
    ::xstage::store_meta_u32(&m->closed, 1u);
}

// buf: the DeviceBuffer (kernel parameter); writer_tid: the writer's %tid.x; state: XSTAGE_FA3_SMEM_FIELD's field.
// XSTAGE_FA3_OPEN declares `xstage_fa3_writer` (the consumer's scope, around the tile loop), which the
// sites read.
#define XSTAGE_FA3_OPEN(buf, writer_tid, state)                                              \
    const bool xstage_fa3_writer = ::flash::xstage_fa3::is_writer((buf), (writer_tid)); \
    if (xstage_fa3_writer) ::flash::xstage_fa3::probe_open((buf), (state))
#define XSTAGE_FA3_BEGIN(state, event, tile) \
    if (xstage_fa3_writer) ::flash::xstage_fa3::probe_begin((state), (event), (tile))
#define XSTAGE_FA3_SPAN_STAMP(state) \
    if (xstage_fa3_writer) ::flash::xstage_fa3::probe_stamp((state))
#define XSTAGE_FA3_END_STAMPED(state, ended, begun, event, tile) \
    if (xstage_fa3_writer) ::flash::xstage_fa3::probe_put3((state), (ended), (begun), (event), (tile))
#define XSTAGE_FA3_CLOSE(buf, writer_tid, state) ::flash::xstage_fa3::probe_close((buf), (writer_tid), (state))
#if XSTAGE_FA3_KV_STEPS
// The consumer's flag lent to the mainloop object (its XSTAGE_FA3_MAINLOOP_FIELD), for the sites inside `mma`.
#define XSTAGE_FA3_LEND_FLAG(mainloop) (mainloop).xstage_writer = xstage_fa3_writer
#define XSTAGE_FA3_KV_MARK(state, n) if (this->xstage_writer) ::flash::xstage_fa3::kv_mark((state), (n))
#define XSTAGE_FA3_KV_EXIT(state) if (this->xstage_writer) ::flash::xstage_fa3::kv_exit((state))
#else
#define XSTAGE_FA3_LEND_FLAG(mainloop) do {} while (0)
#define XSTAGE_FA3_KV_MARK(state, n) do {} while (0)
#define XSTAGE_FA3_KV_EXIT(state) do {} while (0)
#endif
#else  // probes compiled out: no code, arguments not evaluated
#define XSTAGE_FA3_OPEN(buf, writer_tid, state) do {} while (0)
#define XSTAGE_FA3_BEGIN(state, event, tile) do {} while (0)
#define XSTAGE_FA3_SPAN_STAMP(state) do {} while (0)
#define XSTAGE_FA3_END_STAMPED(state, ended, begun, event, tile) do {} while (0)
#define XSTAGE_FA3_CLOSE(buf, writer_tid, state) do {} while (0)
#define XSTAGE_FA3_LEND_FLAG(mainloop) do {} while (0)
#define XSTAGE_FA3_KV_MARK(state, n) do {} while (0)
#define XSTAGE_FA3_KV_EXIT(state) do {} while (0)
#endif

}  // namespace flash::xstage_fa3
