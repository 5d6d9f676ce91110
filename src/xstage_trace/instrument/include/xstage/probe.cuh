// xstage/probe.cuh -- header-only device probes for xstage-trace.
//
// Include as <xstage/probe.cuh> (angle brackets: some JIT builds reject quoted includes).
// Everything below XSTAGE_TRACE compiles to nothing unless XSTAGE_TRACE is defined; the
// buffer type itself always exists so kernel signatures are the same in both builds.
//
// Usage inside a kernel (one writer warp per slice; lane 0 writes, all lanes may call):
//   XSTAGE_PROBE_OPEN(buf, role);          // slice = blockIdx.x * roles_per_cta + role
//   XSTAGE_PROBE_OPEN_IF(buf, role, pred); // same, but only warps where pred holds write
//   XSTAGE_PROBE_OPEN_ELECTED(buf, role);  // called by one elected lane (elect.sync): it writes
//   XSTAGE_BEGIN(EV_MAINLOOP, tile);
//   XSTAGE_END(EV_MAINLOOP, tile);
//   XSTAGE_MARK(EV_STORE, tile, bytes);
//   XSTAGE_END_P(EV_RS, tile, bytes);      // end record carrying a payload
//   XSTAGE_PROBE_CLOSE();                  // writes the record count and the end anchor
//
// A warp on the kernel's critical path that must not wait on any load or queue a global store (an
// MMA warp whose operand loads keep the SM's memory pipeline full) only takes timestamps and hands
// them over through shared memory; a writer off that path (e.g. the epilogue's writer lane) writes
// the records, with those timestamps, into the slice of the role they belong to:
//   __shared__ xstage::u32 stamps[4];               // declared under #ifdef XSTAGE_TRACE
//   XSTAGE_PROBE_OPEN_IF(buf, 0, warp == 0);        // hot warp: opens its slice (the anchor precedes
//   XSTAGE_STAMP(&stamps[0]);                       //   its stamps), then only stamps: clock64's low
//                                                   //   32 bits -> shared memory, nothing else
//   XSTAGE_PROBE_ATTACH_AS(mma, buf, 0, pred);      // writer: a named handle for role 0's slice
//   XSTAGE_BEGIN_AT(mma, stamps[0], EV_MAINLOOP, tile);   // also XSTAGE_END_AT, XSTAGE_MARK_AT
//   XSTAGE_PROBE_CLOSE_AS(mma);                     // the writer closes the slice (count, end anchor)
// A stamp must be written out within 2^32 cycles (about 2 s).
//
// A role that must not issue global stores in its hot loop (an MMA warp whose operand loads share
// the SM's memory pipeline with a congested remote-store epilogue) stages its records in shared
// memory instead and writes them out when the staging area is full and at close:
//   __shared__ xstage::Record trace_smem[256];
//   XSTAGE_PROBE_OPEN_SMEM(buf, role, pred, trace_smem, 256);
//
// Record and file layout: docs/probe-format.md (format version 1).
#pragma once

namespace xstage {

// Fixed-width types without <stdint.h>: NVRTC (CuPy RawKernel, DeepGEMM's NVRTC JIT) has no libc headers.
using u64 = unsigned long long;
using u32 = unsigned int;
using u16 = unsigned short;
static_assert(sizeof(u64) == 8 && sizeof(u32) == 4 && sizeof(u16) == 2, "xstage fixed-width types");

constexpr u16 kFormatVersion = 1;
constexpr u32 kRecordBytes = 16;
constexpr int kKindMark = 0;
constexpr int kKindBegin = 1;
constexpr int kKindEnd = 2;

// One probe record: 16 bytes.
//   ts_ev bits 0..47 : clock64() low 48 bits (the decoder restores the high bits from the anchor)
//   ts_ev bits 48..55: event id
//   ts_ev bits 56..57: kind (0 mark, 1 begin, 2 end)
struct __align__(16) Record {
  u64 ts_ev;
  u32 tile;
  u32 payload;
};
static_assert(sizeof(Record) == kRecordBytes, "xstage record must be 16 bytes");

// Per-slice bookkeeping written by the probes: 48 bytes.
struct SliceMeta {
  u32 count;      // records attempted (stored = min(count, capacity); overflow = rest)
  u32 closed;     // 1 once XSTAGE_PROBE_CLOSE ran
  u32 smid_open;
  u32 smid_close;
  u64 gt_open;    // %globaltimer at open
  u64 clk_open;   // clock64 at open
  u64 gt_close;
  u64 clk_close;
};
static_assert(sizeof(SliceMeta) == 48, "xstage slice meta must be 48 bytes");

// Passed by value to instrumented kernels.
struct DeviceBuffer {
  SliceMeta* meta;
  Record* records;        // num_slices * capacity records
  u32 capacity;      // records per slice
  u32 roles_per_cta; // slices per CTA
  u32 num_slices;
  u32 pad;
};

}  // namespace xstage

#ifdef XSTAGE_TRACE

namespace xstage {

__device__ __forceinline__ u64 globaltimer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ u32 smid() {
  u32 s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// %ctaid.x through asm volatile: the compiler cannot hoist what depends on it out of the kernel's
// loops, so slice addresses are recomputed at each record instead of occupying registers.
__device__ __forceinline__ u32 ctaid_x() {
  u32 c;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(c));
  return c;
}

__device__ __forceinline__ u64 clock_cycles() {
  u64 c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}

// Streaming (evict-first) 16-byte store: the trace should not displace the kernel's L2 lines. No
// "memory" clobber: the kernel never reads trace memory, and the timestamps are ordered against the
// kernel's synchronization by the clock reads' own asm volatile, so the store need not fence the
// compiler's scheduling of the kernel's loads and stores.
__device__ __forceinline__ void store_record_cs(Record* dst, u64 ts_ev, u32 tile,
                                                u32 payload) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst),
               "r"((u32)ts_ev), "r"((u32)(ts_ev >> 32)), "r"(tile), "r"(payload));
}

// Slice metadata is written through asm too: a C++ store through a pointer the compiler cannot tell
// apart from the kernel's read-only inputs would stop it from reading those through the
// non-coherent (ld.global.nc) path, a change to the kernel's own loads.
__device__ __forceinline__ void store_meta_u32(u32* dst, u32 v) {
  asm volatile("st.global.u32 [%0], %1;" ::"l"(dst), "r"(v));
}
__device__ __forceinline__ void store_meta_u64(u64* dst, u64 v) {
  asm volatile("st.global.u64 [%0], %1;" ::"l"(dst), "l"(v));
}

// The low 32 bits of clock64 into shared memory (XSTAGE_STAMP): one clock read and one shared store,
// no load, no global store, nothing the kernel's own code waits for. 32 bits keep a kernel's stamp
// area small; the writer restores the high bits from its own later clock read (Probe::put_stamp).
__device__ __forceinline__ void stamp_smem(u32* dst) {
  const u64 c = clock_cycles();
  asm volatile("st.shared.u32 [%0], %1;" ::"r"((u32)__cvta_generic_to_shared(dst)), "r"((u32)c));
}

// The probe handle of one writer warp. What it carries through the kernel's loops is one register:
// n, the records attempted, with kSilent set on lanes that do not write (so "writer" needs no register
// of its own and the capacity test n < capacity also rejects them). The buffer's fields are the kernel
// parameter's (constant bank, no registers); the slice and its addresses are recomputed at each record
// from %ctaid.x read through asm volatile, which the compiler cannot hoist into a live register. Kept
// live, these values cost the reference fused kernel 6 registers and a different mainloop schedule.
struct Probe {
  static constexpr u32 kSilent = 0x80000000u;
  DeviceBuffer b;
  u32 role;
  u32 n;
  Record* stage;
  u32 flushed;
  u32 stage_cap;

  __device__ __forceinline__ u32 slice() const { return ctaid_x() * b.roles_per_cta + role; }
  __device__ __forceinline__ SliceMeta* meta() const { return b.meta + slice(); }
  __device__ __forceinline__ bool writer() const { return (n & kSilent) == 0; }

  // The handle of the slice's writer, without the open anchor (XSTAGE_PROBE_ATTACH_AS: the slice is
  // opened by the thread whose stamps it will hold).
  __device__ __forceinline__ bool attach(const DeviceBuffer& buf, u32 r, bool enabled = true,
                                         Record* smem_stage = nullptr, u32 smem_records = 0,
                                         bool elected_lane = false) {
    b = buf; role = r;
    stage = smem_stage;
    stage_cap = smem_records;
    flushed = 0;
    const bool w = enabled && (elected_lane || (threadIdx.x & 31) == 0) && slice() < b.num_slices && b.meta != nullptr;
    n = w ? 0u : kSilent;
    return w;
  }

  __device__ __forceinline__ void open(const DeviceBuffer& buf, u32 r, bool enabled = true,
                                       Record* smem_stage = nullptr, u32 smem_records = 0,
                                       bool elected_lane = false) {
    if (attach(buf, r, enabled, smem_stage, smem_records, elected_lane)) {
      const u64 g = globaltimer_ns();
      const u64 c = clock_cycles();
      SliceMeta* m = meta();
      store_meta_u32(&m->smid_open, smid());
      store_meta_u64(&m->gt_open, g);
      store_meta_u64(&m->clk_open, c);
    }
  }
  __device__ __forceinline__ Record* rec(u32 i) const { return b.records + (u64)slice() * b.capacity + i; }

  __device__ __forceinline__ void flush() {
    if (writer() && stage != nullptr) {
      for (u32 i = flushed; i < n && i < b.capacity; ++i) {
        const Record r = stage[i - flushed];
        store_record_cs(rec(i), r.ts_ev, r.tile, r.payload);
      }
    }
    flushed = n;
  }

  __device__ __forceinline__ void put(u32 event, u32 kind, u32 tile, u32 payload) {
    put_at(clock_cycles(), event, kind, tile, payload);
  }

  // A record whose timestamp was taken earlier by XSTAGE_STAMP (clock64's low 32 bits, less than 2^32
  // cycles, 2 s, ago): the high bits are restored from this thread's clock now.
  __device__ __forceinline__ void put_stamp(u32 stamp, u32 event, u32 kind, u32 tile, u32 payload) {
    const u64 now = clock_cycles();
    put_at(now - (u32)((u32)now - stamp), event, kind, tile, payload);
  }

  __device__ __forceinline__ void put_at(u64 c, u32 event, u32 kind, u32 tile, u32 payload) {
    const u64 ts_ev = (c & 0xFFFFFFFFFFFFull) | ((u64)(event & 0xFF) << 48) | ((u64)(kind & 0x3) << 56);
    if (stage != nullptr) {
      if (n - flushed == stage_cap) flush();
      if (writer()) stage[n - flushed] = Record{ts_ev, tile, payload};
    } else if (n < b.capacity) {
      store_record_cs(rec(n), ts_ev, tile, payload);
    }
    ++n;
  }

  __device__ __forceinline__ void close() {
    flush();
    if (writer()) {
      const u64 g = globaltimer_ns();
      const u64 c = clock_cycles();
      SliceMeta* m = meta();
      store_meta_u32(&m->smid_close, smid());
      store_meta_u64(&m->gt_close, g);
      store_meta_u64(&m->clk_close, c);
      store_meta_u32(&m->count, n);
      store_meta_u32(&m->closed, 1u);
    }
  }
};

}  // namespace xstage

#define XSTAGE_PROBE_OPEN(buf, role) \
  ::xstage::Probe xstage_probe_;     \
  xstage_probe_.open((buf), (role))
// Only the warps for which pred holds write (one writer warp per slice).
#define XSTAGE_PROBE_OPEN_IF(buf, role, pred) \
  ::xstage::Probe xstage_probe_;              \
  xstage_probe_.open((buf), (role), (pred))
// Inside a branch that only one elected lane of the warp runs (`if (cute::elect_one_sync())`).
#define XSTAGE_PROBE_OPEN_ELECTED(buf, role) \
  ::xstage::Probe xstage_probe_;             \
  xstage_probe_.open((buf), (role), true, nullptr, 0u, true)
// Records staged in shared memory (smem: xstage::Record[smem_records]), written out when full and at close.
#define XSTAGE_PROBE_OPEN_SMEM(buf, role, pred, smem, smem_records) \
  ::xstage::Probe xstage_probe_;                                    \
  xstage_probe_.open((buf), (role), (pred), (smem), (smem_records))
#define XSTAGE_BEGIN(event, tile) xstage_probe_.put((event), ::xstage::kKindBegin, (tile), 0u)
#define XSTAGE_END(event, tile) xstage_probe_.put((event), ::xstage::kKindEnd, (tile), 0u)
#define XSTAGE_END_P(event, tile, payload) \
  xstage_probe_.put((event), ::xstage::kKindEnd, (tile), (::xstage::u32)(payload))
#define XSTAGE_MARK(event, tile, payload) \
  xstage_probe_.put((event), ::xstage::kKindMark, (tile), (::xstage::u32)(payload))
#define XSTAGE_PROBE_CLOSE() xstage_probe_.close()
// Timestamps handed over through shared memory, and records written with them (see the top).
#define XSTAGE_STAMP(smem_u32_ptr) ::xstage::stamp_smem(smem_u32_ptr)
#define XSTAGE_PROBE_ATTACH_AS(name, buf, role, pred) \
  ::xstage::Probe name;                               \
  name.attach((buf), (role), (pred))
#define XSTAGE_BEGIN_AT(name, stamp, event, tile) name.put_stamp((stamp), (event), ::xstage::kKindBegin, (tile), 0u)
#define XSTAGE_END_AT(name, stamp, event, tile) name.put_stamp((stamp), (event), ::xstage::kKindEnd, (tile), 0u)
#define XSTAGE_MARK_AT(name, stamp, event, tile, payload) \
  name.put_stamp((stamp), (event), ::xstage::kKindMark, (tile), (::xstage::u32)(payload))
#define XSTAGE_PROBE_CLOSE_AS(name) name.close()

#else  // probes compiled out: no code, no clock reads, arguments not evaluated

#define XSTAGE_PROBE_OPEN(buf, role) \
  do {                               \
  } while (0)
#define XSTAGE_PROBE_OPEN_IF(buf, role, pred) \
  do {                                        \
  } while (0)
#define XSTAGE_PROBE_OPEN_ELECTED(buf, role) \
  do {                                       \
  } while (0)
#define XSTAGE_PROBE_OPEN_SMEM(buf, role, pred, smem, smem_records) \
  do {                                                              \
  } while (0)
#define XSTAGE_BEGIN(event, tile) \
  do {                            \
  } while (0)
#define XSTAGE_END(event, tile) \
  do {                          \
  } while (0)
#define XSTAGE_END_P(event, tile, payload) \
  do {                                     \
  } while (0)
#define XSTAGE_MARK(event, tile, payload) \
  do {                                    \
  } while (0)
#define XSTAGE_PROBE_CLOSE() \
  do {                       \
  } while (0)
#define XSTAGE_STAMP(smem_u32_ptr) \
  do {                             \
  } while (0)
#define XSTAGE_PROBE_ATTACH_AS(name, buf, role, pred) \
  do {                                                \
  } while (0)
#define XSTAGE_BEGIN_AT(name, stamp, event, tile) \
  do {                                            \
  } while (0)
#define XSTAGE_END_AT(name, stamp, event, tile) \
  do {                                          \
  } while (0)
#define XSTAGE_MARK_AT(name, stamp, event, tile, payload) \
  do {                                                    \
  } while (0)
#define XSTAGE_PROBE_CLOSE_AS(name) \
  do {                              \
  } while (0)

#endif  // XSTAGE_TRACE
