// fused_moe.cu -- reference fused kernel with the structure of a Mega-MoE Linear-2 epilogue.
//
// Persistent, one CTA per SM, warp-specialized (256 threads):
//   warps 0-3 (MMA role): per output tile, wait for a free staging slot (the measured stall, the
//     analogue of tmem_empty), run a bf16 Tensor Core mainloop (WMMA m16n16k16, fp32 accumulate)
//     for a 128x128 tile, stage the fp32 accumulators into the slot, mark it full.
//   warps 4-7 (epilogue role): wait for a full slot, convert to bf16 and store the tile: Linear-2
//     tiles to the "remote" buffer (host-mapped pinned memory: a real PCIe store path, or a peer
//     GPU), Linear-1 tiles to a local buffer; after the issuing warps' barrier, free the slot.
//   Two staging slots (double buffering) between the roles.
// Tiles come from a host-built global order (expert-wave or interleaved, docs/model.md §6);
// CTA c takes global tiles c, c+P, c+2P, ... as a persistent scheduler does.
//
// Probes (<xstage/probe.cuh>): role 0 = the MMA role (warp 0's slot wait and mainloop), role 1 = the
// epilogue (its warp 0). Per tile: slot_wait B/E, tile_info mark (kind | expert << 1 | wave << 16),
// mainloop B/E in role 0; rs B/E (remote-store span, payload bytes) or ls B/E (local store) in role 1.
// The MMA warps only take timestamps (XSTAGE_STAMP into a shared-memory ring, no load and no global
// store on their path: their operand loads keep the SM's memory pipeline full, so any load of theirs
// waits behind it); the epilogue's writer lane writes both roles' records, the MMA role's after it has
// released the tile's slot.
//
//   fused_moe --dest host|local|peer --shape S1|S2|S3|all --out DIR [--trials N] [--layout split|shared] [--no-dumps]
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I instrument/include
//        [-DXSTAGE_TRACE] fused_moe.cu -o fused_moe
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <xstage/host.hpp>
#include <xstage/nvtx.hpp>
#include <xstage/probe.cuh>

using namespace nvcuda;

enum Event : uint32_t { EV_SLOT_WAIT = 0, EV_MAINLOOP = 1, EV_RS = 2, EV_LS = 3, EV_TILE_INFO = 4 };
static const std::vector<std::string> kEventNames = {"slot_wait", "mainloop", "rs", "ls", "tile_info"};

constexpr int TILE_M = 128, TILE_N = 128;
constexpr int MMA_WARPS = 4, EPI_WARPS = 4, THREADS = 32 * (MMA_WARPS + EPI_WARPS);
constexpr int SLOTS = 2;
constexpr int KMAX = 8192;        // deepest K of any tile
constexpr int OPERAND_SETS = 4;   // distinct A/W operand sets (experts reuse them; L2-resident)
constexpr int TILE_ELEMS = TILE_M * TILE_N;
constexpr uint32_t TILE_OUT_BYTES = TILE_ELEMS * 2;  // bf16 output tile
#ifdef XSTAGE_TRACE
// MMA-side timestamps per tile (ring entry i % STAMP_RING): the MMA role writes tile i's entry from the
// start of tile i; the epilogue reads it after releasing tile i's slot and before releasing tile i+1's.
// The MMA role cannot start tile i + STAMP_RING before the epilogue has released tile
// i + STAMP_RING - 1 - SLOTS, so the entry is not overwritten while read when STAMP_RING >= SLOTS + 2.
enum Stamp { ST_SLOT_WAIT_B = 0, ST_SLOT_WAIT_E = 1, ST_MAINLOOP_B = 2, ST_MAINLOOP_E = 3, ST_COUNT = 4 };
constexpr int STAMP_RING = 4;
static_assert(STAMP_RING >= SLOTS + 2, "an MMA stamp entry must outlive the epilogue's read of it");
// The MMA role's five records of tile d from its stamps (st), written by the epilogue's writer lane.
#define FUSED_XSTAGE_MMA_RECORDS(probe, st, d)                                                                 \
  do {                                                                                                   \
    XSTAGE_BEGIN_AT(probe, (st)[ST_SLOT_WAIT_B], EV_SLOT_WAIT, (d).id);                                  \
    XSTAGE_END_AT(probe, (st)[ST_SLOT_WAIT_E], EV_SLOT_WAIT, (d).id);                                    \
    XSTAGE_MARK_AT(probe, (st)[ST_SLOT_WAIT_E], EV_TILE_INFO, (d).id, (d).kind | ((d).expert << 1) | ((d).wave << 16)); \
    XSTAGE_BEGIN_AT(probe, (st)[ST_MAINLOOP_B], EV_MAINLOOP, (d).id);                                    \
    XSTAGE_END_AT(probe, (st)[ST_MAINLOOP_E], EV_MAINLOOP, (d).id);                                      \
  } while (0)
#else
#define FUSED_XSTAGE_MMA_RECORDS(probe, st, d) \
  do {                                   \
  } while (0)
#endif
constexpr int OPK = 64, OPK_LD = OPK + 8;  // shared-memory operand block: K extent and padded row
constexpr int SMEM_BYTES_GLOBAL_OPS = SLOTS * TILE_ELEMS * 4;
constexpr int SMEM_BYTES_SMEM_OPS = SMEM_BYTES_GLOBAL_OPS + 2 * TILE_M * OPK_LD * 2;

constexpr int MAX_CTA_TILES = 64;  // descriptors one CTA can hold in shared memory (the driver checks it)

struct TileDesc {
  int id;      // global tile id (output position)
  int kind;    // 0 = Linear-1 (local store), 1 = Linear-2 (remote store)
  int expert;
  int wave;
  int ksteps;  // mainloop depth in units of 16
  int out_index;  // index among tiles of its kind (output slot in that kind's buffer)
};

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The K loop of one warp's 32 x 128 slice: A is row-major (this warp's 32 rows), B column-major
// (128 columns), both with leading dimension LD; K indices wrap at KWRAP. One body for both operand
// sources; inlined at each call, so the compiler still sees which address space each pointer is in.
template <int LD, int KWRAP>
__device__ __forceinline__ void mainloop(Acc (&acc)[2][8], const __nv_bfloat16* a, const __nv_bfloat16* b, int ksteps) {
#pragma unroll 1
  for (int k = 0; k < ksteps * 16; k += 16) {
    const int kk = k % KWRAP;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::load_matrix_sync(fa[0], a + kk, LD);
    wmma::load_matrix_sync(fa[1], a + 16 * LD + kk, LD);
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      wmma::load_matrix_sync(fb, b + (size_t)(c * 16) * LD + kk, LD);
      wmma::mma_sync(acc[0][c], fa[0], fb, acc[0][c]);
      wmma::mma_sync(acc[1][c], fa[1], fb, acc[1][c]);
    }
  }
}

__device__ __forceinline__ void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Slot flags: acquire/release on shared memory, so that no thread waits for its own outstanding
// global stores (remote stores, probe records) just to pass a flag.
__device__ __forceinline__ int ld_acquire_smem(const int* p) {
  int v;
  asm volatile("ld.acquire.cta.shared.b32 %0, [%1];" : "=r"(v) : "r"((unsigned)__cvta_generic_to_shared(p)) : "memory");
  return v;
}
__device__ __forceinline__ int ld_relaxed_smem(const int* p) {
  int v;
  asm volatile("ld.volatile.shared.b32 %0, [%1];" : "=r"(v) : "r"((unsigned)__cvta_generic_to_shared(p)) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_smem(int* p, int v) {
  asm volatile("st.release.cta.shared.b32 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(p)), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_smem(int* p, int v) {
  asm volatile("st.volatile.shared.b32 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(p)), "r"(v) : "memory");
}

// Eight fp32 values (32-byte aligned) → eight scaled bf16 packed in a uint4.
__device__ __forceinline__ uint4 to_bf16x8(const float* p, float scale) {
  const float4 lo = *reinterpret_cast<const float4*>(p);
  const float4 hi = *reinterpret_cast<const float4*>(p + 4);
  __nv_bfloat162 q[4] = {__floats2bfloat162_rn(lo.x * scale, lo.y * scale), __floats2bfloat162_rn(lo.z * scale, lo.w * scale),
                         __floats2bfloat162_rn(hi.x * scale, hi.y * scale), __floats2bfloat162_rn(hi.z * scale, hi.w * scale)};
  return *reinterpret_cast<uint4*>(q);
}

__device__ __forceinline__ void st_v4(void* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__global__ void __launch_bounds__(THREADS, 1)
    fused_moe_kernel(const TileDesc* __restrict__ tiles, int num_tiles, const __nv_bfloat16* __restrict__ A,
                     const __nv_bfloat16* __restrict__ W, __nv_bfloat16* remote_out, __nv_bfloat16* local_out,
                     int split_smsp, int smem_operands, int tma_epilogue, xstage::DeviceBuffer buf) {
  extern __shared__ __align__(128) float slots[];  // SLOTS x TILE_M x TILE_N fp32, then the operand block
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(slots + SLOTS * TILE_ELEMS);  // 128 x OPK (+pad), row-major
  __nv_bfloat16* Ws = As + TILE_M * OPK_LD;                                            // 128 x OPK (+pad): B col-major
  __shared__ int full_seq[SLOTS];
  __shared__ int empty_seq[SLOTS];
#ifdef XSTAGE_TRACE
  __shared__ xstage::u32 mma_stamps[STAMP_RING][ST_COUNT];  // 64 bytes: both builds round the static area to the same 1664 bytes
#endif
  // Warp w runs on SM sub-partition w % 4. Layout "shared": MMA = warps 0-3, epilogue = 4-7 (each
  // sub-partition hosts one of each). Layout "split": MMA = warps {0,1,4,5}, epilogue = {2,3,6,7}
  // (no sub-partition hosts both roles).
  const int hw_warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool is_mma = split_smsp ? ((hw_warp & 2) == 0) : (hw_warp < MMA_WARPS);
  const int warp = split_smsp ? (((hw_warp >> 2) << 1) | (hw_warp & 1)) : (hw_warp % MMA_WARPS);  // index within the role
  // This CTA's tile descriptors, copied to shared memory once: no role issues a global load in its tile
  // loop. A load there waits behind the SM's backpressured remote stores (measured: the MMA warp then
  // stalled up to 105 µs before its slot-wait probe, hiding the stall from it; docs/tile-error.md).
  __shared__ TileDesc cta_tiles[MAX_CTA_TILES];
  for (int k = threadIdx.x; k < MAX_CTA_TILES; k += blockDim.x) {
    const int t = blockIdx.x + k * (int)gridDim.x;
    if (t < num_tiles) cta_tiles[k] = tiles[t];
  }
  if (threadIdx.x < SLOTS) {
    full_seq[threadIdx.x] = 0;
    empty_seq[threadIdx.x] = 0;
  }
  if (smem_operands) {  // one 128 x 64 operand block of A and W (the same in every CTA), loaded once
    const int set = 0;
    for (int e = threadIdx.x; e < TILE_M * OPK; e += THREADS) {
      const int r = e / OPK, k = e % OPK;
      As[r * OPK_LD + k] = A[(size_t)set * TILE_M * KMAX + (size_t)r * KMAX + k];
      Ws[r * OPK_LD + k] = W[(size_t)set * TILE_N * KMAX + (size_t)r * KMAX + k];
    }
  }
  __syncthreads();

  if (is_mma) {
    XSTAGE_PROBE_OPEN_IF(buf, 0, warp == 0);  // the open anchor only: the epilogue's writer writes this slice
    int i = 0;
    for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, ++i) {
      const TileDesc d = cta_tiles[i];
      const int slot = i % SLOTS, use = i / SLOTS;
      if (warp == 0) XSTAGE_STAMP(&mma_stamps[i % STAMP_RING][ST_SLOT_WAIT_B]);
      while (ld_relaxed_smem(&empty_seq[slot]) < use) {  // WAR only: no data flows back, no fence
      }
      if (warp == 0) XSTAGE_STAMP(&mma_stamps[i % STAMP_RING][ST_SLOT_WAIT_E]);
      if (warp == 0) XSTAGE_STAMP(&mma_stamps[i % STAMP_RING][ST_MAINLOOP_B]);
      const int set = d.expert % OPERAND_SETS;
      const __nv_bfloat16* a = A + (size_t)set * TILE_M * KMAX + (size_t)(warp * 32) * KMAX;
      const __nv_bfloat16* w = W + (size_t)set * TILE_N * KMAX;
      Acc acc[2][8];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) wmma::fill_fragment(acc[r][c], 0.0f);
      if (smem_operands)  // the shared-memory block, its 64 columns cycled: Tensor Cores fed from shared memory, as after a TMA load
        mainloop<OPK_LD, OPK>(acc, As + (warp * 32) * OPK_LD, Ws, d.ksteps);
      else  // streamed from global memory (L2-resident), one 16-wide K slice per step
        mainloop<KMAX, KMAX>(acc, a, w, d.ksteps);
      float* s = slots + (size_t)slot * TILE_ELEMS + (warp * 32) * TILE_N;
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) wmma::store_matrix_sync(s + r * 16 * TILE_N + c * 16, acc[r][c], TILE_N, wmma::mem_row_major);
      named_barrier(1, 32 * MMA_WARPS);
      if (warp == 1 && lane == 0) {
        XSTAGE_STAMP(&mma_stamps[i % STAMP_RING][ST_MAINLOOP_E]);  // before the release: the epilogue reads it after
        st_release_smem(&full_seq[slot], use + 1);
      }
    }
  } else {
    XSTAGE_PROBE_OPEN_IF(buf, 1, warp == 0);
    XSTAGE_PROBE_ATTACH_AS(mma_probe, buf, 0, warp == 0);  // the MMA role's records, from its stamps
    const int et = warp * 32 + lane;  // 0..127
    int i = 0;
    for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, ++i) {
      const TileDesc d = cta_tiles[i];
      const int slot = i % SLOTS, use = i / SLOTS;
      while (ld_acquire_smem(&full_seq[slot]) < use + 1) {
      }
      const bool remote = d.kind == 1;
      __nv_bfloat16* dst = (remote ? remote_out : local_out) + (size_t)d.out_index * TILE_ELEMS;
      float* s = slots + (size_t)slot * TILE_ELEMS;
      // Makes every tile's output distinct (and independent of the CTA that ran it).
      const float scale = 1.0f + 0.125f * (d.id % 7) + 0.0625f * (d.expert % 5);
      if (tma_epilogue) {
        // Convert the fp32 slot to bf16 in place (all reads, barrier, then writes), then one thread
        // hands the 32 KB tile to the bulk copy engine and waits until the engine has read it: the
        // slot is released when the remote store has been accepted, and no warp's memory queue
        // holds the stalled stores.
        uint4 v[TILE_ELEMS / 8 / (32 * EPI_WARPS)];
#pragma unroll
        for (int j = 0; j < TILE_ELEMS / 8 / (32 * EPI_WARPS); ++j) v[j] = to_bf16x8(s + (et + j * 32 * EPI_WARPS) * 8, scale);
        named_barrier(2, 32 * EPI_WARPS);
        uint4* sb = reinterpret_cast<uint4*>(s);
#pragma unroll
        for (int j = 0; j < TILE_ELEMS / 8 / (32 * EPI_WARPS); ++j) sb[et + j * 32 * EPI_WARPS] = v[j];
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        named_barrier(2, 32 * EPI_WARPS);
        if (et == 0) {
          XSTAGE_BEGIN(remote ? EV_RS : EV_LS, d.id);
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
                       "r"((unsigned)__cvta_generic_to_shared(s)), "r"(TILE_OUT_BYTES)
                       : "memory");
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
          asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
          st_relaxed_smem(&empty_seq[slot], use + 1);
          XSTAGE_END_P(remote ? EV_RS : EV_LS, d.id, TILE_OUT_BYTES);
          FUSED_XSTAGE_MMA_RECORDS(mma_probe, mma_stamps[i % STAMP_RING], d);
        }
        continue;
      }
      if (warp == 0) XSTAGE_BEGIN(remote ? EV_RS : EV_LS, d.id);
#pragma unroll 4
      for (int chunk = et; chunk < TILE_ELEMS / 8; chunk += 32 * EPI_WARPS) st_v4(dst + chunk * 8, to_bf16x8(s + chunk * 8, scale));
      named_barrier(2, 32 * EPI_WARPS);  // the issuing warps' stores are all issued
      // Free the slot (its reads ended at the barrier), then stamp the span's end: the flag write
      // waits in the same memory-instruction queue as the stores, so the span ends when the slot
      // is really released.
      if (et == 0) st_relaxed_smem(&empty_seq[slot], use + 1);
      if (warp == 0) XSTAGE_END_P(remote ? EV_RS : EV_LS, d.id, TILE_OUT_BYTES);
      if (warp == 0) FUSED_XSTAGE_MMA_RECORDS(mma_probe, mma_stamps[i % STAMP_RING], d);
    }
    if (tma_epilogue && et == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // writes complete before exit
    if (warp == 0) XSTAGE_PROBE_CLOSE_AS(mma_probe);
    if (warp == 0) XSTAGE_PROBE_CLOSE();
  }
}

// Order-independent checksum: the sum of the raw bf16 bit patterns (integers, deterministic).
__global__ void checksum_kernel(const uint16_t* p, size_t n, unsigned long long* out) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += p[i];
  atomicAdd(out, s);
}

struct Shape {
  std::string name;
  int k1, k2;  // mainloop depth (x16) of Linear-1 and Linear-2 tiles
};
// --shapes "S1:256:64,S2:256:160,S3:256:512" overrides these (name:k1:k2, depths in units of 16).
// S1: short Linear-2 mainloop (drain-limited in the expert-wave schedule); S2: medium; S3: the
// negative control, whose Linear-2 mainloop is longer than the drain time of an aligned burst.
static std::vector<Shape> kShapes = {{"S1", 256, 16}, {"S2", 256, 64}, {"S3", 256, 320}};

// Skewed routing: rows (m-blocks) per expert within each wave.
static const std::vector<std::vector<int>> kWaveRows = {{6, 3, 2, 1}, {5, 4, 2, 1}};
static int N1_PER_ROW = 132;  // Linear-1 tiles per row (--n1-per-row)
static int N2_PER_ROW = 176;  // Linear-2 tiles per row (--n2-per-row)

// Expert-wave order: all Linear-1 tiles of a wave, then its Linear-2 tiles. Interleaved
// (Algorithm 1): emit a Linear-2 tile only when the Linear-1 stream leads by >= D rows, else a ready
// Linear-1 tile; when Linear-1 is exhausted, drain Linear-2.
static std::vector<TileDesc> build_schedule(const Shape& s, bool interleaved, int lead_rows) {
  // Tile identity (id, output slot) is fixed at creation, so both orders compute and store the
  // same tiles at the same places; only the order differs.
  std::vector<TileDesc> out;
  int id = 0, n1 = 0, n2 = 0;
  for (int w = 0; w < (int)kWaveRows.size(); ++w) {
    std::vector<TileDesc> l1, l2;
    std::vector<int> l1_row, l2_row;
    int row = 0;
    for (int e = 0; e < (int)kWaveRows[w].size(); ++e)
      for (int r = 0; r < kWaveRows[w][e]; ++r, ++row) {
        const int expert = w * 16 + e;
        for (int n = 0; n < N1_PER_ROW; ++n) {
          l1.push_back({id++, 0, expert, w, s.k1, n1++});
          l1_row.push_back(row);
        }
        for (int n = 0; n < N2_PER_ROW; ++n) {
          l2.push_back({id++, 1, expert, w, s.k2, n2++});
          l2_row.push_back(row);
        }
      }
    if (!interleaved) {
      out.insert(out.end(), l1.begin(), l1.end());
      out.insert(out.end(), l2.begin(), l2.end());
      continue;
    }
    size_t i1 = 0, i2 = 0;
    while (i1 < l1.size() || i2 < l2.size()) {
      const int l1_rows_done = i1 == l1.size() ? row : l1_row[i1];  // rows whose L1 tiles are all emitted
      const bool l2_ready = i2 < l2.size() && (i1 == l1.size() || l1_rows_done - l2_row[i2] >= lead_rows);
      out.push_back(l2_ready ? l2[i2++] : l1[i1++]);
    }
  }
  return out;
}

int main(int argc, char** argv) {
  std::string dest = "host", out = ".", shape_arg = "all";
  int trials = 21, lead_rows = 1, split_smsp = 1, smem_operands = 1, tma_epilogue = 1;
  int device = 0, peer = -1;  // this process's GPU (its rank) and, for --dest peer, the GPU holding the remote buffer
  bool dumps = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dest" && i + 1 < argc) dest = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--shape" && i + 1 < argc) shape_arg = argv[++i];
    else if (a == "--trials" && i + 1 < argc) trials = std::atoi(argv[++i]);
    else if (a == "--lead-rows" && i + 1 < argc) lead_rows = std::atoi(argv[++i]);
    else if (a == "--no-dumps") dumps = false;
    else if (a == "--layout" && i + 1 < argc) split_smsp = std::string(argv[++i]) == "split";
    else if (a == "--operands" && i + 1 < argc) smem_operands = std::string(argv[++i]) == "smem";
    else if (a == "--epilogue" && i + 1 < argc) tma_epilogue = std::string(argv[++i]) == "tma";
    else if (a == "--device" && i + 1 < argc) device = std::atoi(argv[++i]);
    else if (a == "--peer" && i + 1 < argc) peer = std::atoi(argv[++i]);
    else if (a == "--n1-per-row" && i + 1 < argc) N1_PER_ROW = std::atoi(argv[++i]);
    else if (a == "--n2-per-row" && i + 1 < argc) N2_PER_ROW = std::atoi(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc) {
      kShapes.clear();
      std::string list = argv[++i], item;
      for (size_t pos = 0; pos <= list.size(); ++pos) {
        if (pos == list.size() || list[pos] == ',') {
          char nm[32];
          int k1, k2;
          if (std::sscanf(item.c_str(), "%31[^:]:%d:%d", nm, &k1, &k2) == 3) kShapes.push_back({nm, k1, k2});
          item.clear();
        } else {
          item += list[pos];
        }
      }
    }
    else {
      std::fprintf(stderr, "usage: fused_moe --dest host|local|peer --shape S1|S2|S3|all --out DIR [--trials N] [--lead-rows D] [--layout split|shared] [--operands smem|global] [--epilogue tma|stg] [--device D] [--peer P] [--shapes S:k1:k2,...] [--n1-per-row N] [--n2-per-row N] [--no-dumps]\n");
      return 2;
    }
  }
#ifdef XSTAGE_TRACE
  const bool traced = true;
#else
  const bool traced = false;
  dumps = false;
#endif
  xstage::check_cuda(cudaSetDevice(device), "cudaSetDevice(--device)");
  if (peer < 0) peer = device == 0 ? 1 : 0;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, device);
  const int ctas = prop.multiProcessorCount;

  // Operands: random bf16, L2-resident (OPERAND_SETS sets of A: 128 x KMAX and W: 128 x KMAX).
  const size_t opn = (size_t)OPERAND_SETS * TILE_M * KMAX;
  std::vector<__nv_bfloat16> hA(opn), hW(opn);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  __nv_bfloat16 *dA, *dW;
  cudaMalloc(&dA, opn * 2);
  cudaMalloc(&dW, opn * 2);
  for (auto& x : hA) x = __float2bfloat16(U(rng));
  cudaMemcpy(dA, hA.data(), opn * 2, cudaMemcpyHostToDevice);
  for (auto& x : hW) x = __float2bfloat16(U(rng) * 0.05f);
  cudaMemcpy(dW, hW.data(), opn * 2, cudaMemcpyHostToDevice);
  // CPU reference of one tile (fp64), to check the kernel's output: C = scale * sum_k A[r][k] W[c][k].
  auto check_tile = [&](const TileDesc& d, const __nv_bfloat16* dev_out) -> double {
    std::vector<__nv_bfloat16> got(TILE_ELEMS);
    cudaMemcpy(got.data(), dev_out + (size_t)d.out_index * TILE_ELEMS, TILE_ELEMS * 2, cudaMemcpyDeviceToHost);
    const int set = smem_operands ? 0 : d.expert % OPERAND_SETS;
    const double scale = 1.0 + 0.125 * (d.id % 7) + 0.0625 * (d.expert % 5);
    double num = 0, den = 0;
    for (int r = 0; r < TILE_M; ++r)
      for (int c = 0; c < TILE_N; ++c) {
        double acc = 0;
        for (int k = 0; k < d.ksteps * 16; ++k) {
          const int kk = smem_operands ? k % OPK : k;
          acc += (double)__bfloat162float(hA[(size_t)set * TILE_M * KMAX + (size_t)r * KMAX + kk]) *
                 (double)__bfloat162float(hW[(size_t)set * TILE_N * KMAX + (size_t)c * KMAX + kk]);
        }
        const double ref = acc * scale, diff = (double)__bfloat162float(got[r * TILE_N + c]) - ref;
        num += diff * diff;
        den += ref * ref;
      }
    return std::sqrt(num / den);
  };

  size_t rows_total = 0;
  for (auto& w : kWaveRows)
    for (int r : w) rows_total += r;
  const size_t max_l2 = rows_total * N2_PER_ROW, max_l1 = rows_total * N1_PER_ROW;
  __nv_bfloat16 *remote = nullptr, *local = nullptr;
  void* host_remote = nullptr;
  const size_t remote_bytes = max_l2 * TILE_OUT_BYTES;
  if (dest == "host") {
    xstage::check_cuda(cudaHostAlloc(&host_remote, remote_bytes, cudaHostAllocMapped), "cudaHostAlloc");
    cudaHostGetDevicePointer((void**)&remote, host_remote, 0);
  } else if (dest == "local") {
    xstage::check_cuda(cudaMalloc(&remote, remote_bytes), "cudaMalloc(remote)");
  } else if (dest == "peer") {
    int n = 0, can = 0;
    cudaGetDeviceCount(&n);
    if (n >= 2 && peer < n && peer != device) cudaDeviceCanAccessPeer(&can, device, peer);
    if (!can) {
      std::fprintf(stderr, "fused_moe: --dest peer needs two GPUs with P2P access; this machine has %d GPU(s)\n", n);
      return 4;
    }
    cudaSetDevice(peer);
    xstage::check_cuda(cudaMalloc(&remote, remote_bytes), "cudaMalloc(peer)");
    cudaSetDevice(device);
    xstage::check_cuda(cudaDeviceEnablePeerAccess(peer, 0), "cudaDeviceEnablePeerAccess");
  } else {
    std::fprintf(stderr, "fused_moe: unknown --dest %s\n", dest.c_str());
    return 2;
  }
  xstage::check_cuda(cudaMalloc(&local, max_l1 * TILE_OUT_BYTES), "cudaMalloc(local)");
  const int smem = smem_operands ? SMEM_BYTES_SMEM_OPS : SMEM_BYTES_GLOBAL_OPS;
  xstage::check_cuda(cudaFuncSetAttribute(fused_moe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem attr");
  unsigned long long* dsum;
  cudaMalloc(&dsum, sizeof(unsigned long long));

  const std::string rank_tag = dest == "peer" ? "_rank" + std::to_string(device) : "";
  const std::string csv = out + "/fused_times_" + dest + rank_tag + (split_smsp ? "_split" : "_shared") + (smem_operands ? "_smem" : "_global") + (traced ? "_on" : "_off") + ".csv";
  FILE* f = std::fopen(csv.c_str(), "w");
  std::fprintf(f, "dest,layout,operands,shape,schedule,traced,k1,k2,tiles,l1_tiles,l2_tiles,ctas,trials,kernel_ms_median,kernel_ms_p10,kernel_ms_p90,checksum_remote,checksum_local\n");
  for (const Shape& s : kShapes) {
    if (shape_arg != "all" && shape_arg != s.name) continue;
    const std::string opname_s = std::string(smem_operands ? "smem" : "global") + (tma_epilogue ? "_tma" : "_stg");
    const char* opname = opname_s.c_str();
    unsigned long long ref_sum[2] = {0, 0};
    for (int inter = 0; inter < 2; ++inter) {
      std::vector<TileDesc> sched = build_schedule(s, inter, lead_rows);
      int n_l2 = 0;
      for (auto& d : sched) n_l2 += d.kind;
      TileDesc* dt;
      cudaMalloc(&dt, sched.size() * sizeof(TileDesc));
      cudaMemcpy(dt, sched.data(), sched.size() * sizeof(TileDesc), cudaMemcpyHostToDevice);
      const uint32_t per_cta = (uint32_t)((sched.size() + ctas - 1) / ctas);
      if (per_cta > (uint32_t)MAX_CTA_TILES) {
        std::fprintf(stderr, "fused_moe: %u tiles per CTA exceed MAX_CTA_TILES = %d (raise it in fused_moe.cu)\n", per_cta, MAX_CTA_TILES);
        std::exit(2);
      }
      xstage::HostBuffer tb(ctas, 2, per_cta * 5 + 16);
      const char* sched_name = inter ? "interleaved" : "wave";
      char label[256];
      std::snprintf(label, sizeof(label), "kernel=fused_moe rank=%d dest=%s shape=%s schedule=%s layout=%s operands=%s epilogue=%s k1=%d k2=%d tiles=%zu l2_tiles=%d ctas=%d lead_rows=%d control=%d",
                    device, dest.c_str(), s.name.c_str(), sched_name, split_smsp ? "split" : "shared", smem_operands ? "smem" : "global", tma_epilogue ? "tma" : "stg", s.k1 * 16, s.k2 * 16, sched.size(), n_l2, ctas, lead_rows,
                    (dest == "local" || s.name == "S3") ? 1 : 0);
      std::vector<float> ms;
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      for (int tr = -2; tr < trials; ++tr) {  // two warm-up launches
        tb.reset();
        {
          xstage::NvtxRange range(label);
          cudaEventRecord(e0);
          fused_moe_kernel<<<ctas, THREADS, smem>>>(dt, (int)sched.size(), dA, dW, remote, local, split_smsp, smem_operands, tma_epilogue, traced ? tb.view() : xstage::DeviceBuffer{});
          cudaEventRecord(e1);
          xstage::check_cuda(cudaGetLastError(), "fused_moe_kernel launch");
          xstage::check_cuda(cudaEventSynchronize(e1), "fused_moe_kernel");
        }
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (tr >= 0) ms.push_back(t);
      }
      if (dumps) {
        char name[512];
        std::snprintf(name, sizeof(name), "%s/fused_%s%s_%s_%s_%s_%s.xsp", out.c_str(), dest.c_str(), rank_tag.c_str(), s.name.c_str(), sched_name, split_smsp ? "split" : "shared", opname);
        tb.write_dump(name, kEventNames, label, device, (uint32_t)device);
      }
      {  // every trial's kernel time, for the median over trials of the max across ranks
        FILE* ft = std::fopen((out + "/fused_trials_" + dest + rank_tag + (traced ? "_on" : "_off") + ".csv").c_str(), "a");
        std::fseek(ft, 0, SEEK_END);
        if (std::ftell(ft) == 0) std::fprintf(ft, "rank,dest,shape,schedule,traced,trial,kernel_ms\n");
        for (size_t tr = 0; tr < ms.size(); ++tr)
          std::fprintf(ft, "%d,%s,%s,%s,%d,%zu,%.5f\n", device, dest.c_str(), s.name.c_str(), sched_name, traced, tr, ms[tr]);
        std::fclose(ft);
      }
      unsigned long long sums[2];
      for (int which = 0; which < 2; ++which) {
        cudaMemset(dsum, 0, sizeof(unsigned long long));
        const size_t n = (which == 0 ? (size_t)n_l2 : sched.size() - n_l2) * TILE_ELEMS;
        checksum_kernel<<<264, 256>>>((const uint16_t*)(which == 0 ? remote : local), n, dsum);
        cudaMemcpy(&sums[which], dsum, sizeof(sums[which]), cudaMemcpyDeviceToHost);
      }
      if (inter == 0) {
        // Correctness against the CPU for the first Linear-1 and Linear-2 tile of this shape.
        const TileDesc* first[2] = {nullptr, nullptr};
        for (const auto& d : sched)
          if (!first[d.kind]) first[d.kind] = &d;
        for (int kind = 0; kind < 2; ++kind) {
          const double rel = check_tile(*first[kind], kind ? remote : local);
          std::printf("check %s tile %d (%s): rel_err %.2e\n", s.name.c_str(), first[kind]->id, kind ? "linear2" : "linear1", rel);
          if (!(rel < 2e-2)) {
            std::fprintf(stderr, "fused_moe: WRONG RESULT for %s tile %d: rel_err %.3e\n", s.name.c_str(), first[kind]->id, rel);
            return 6;
          }
        }
        ref_sum[0] = sums[0];
        ref_sum[1] = sums[1];
      } else if (sums[0] != ref_sum[0] || sums[1] != ref_sum[1]) {
        std::fprintf(stderr, "fused_moe: CHECKSUM MISMATCH between schedules for %s: %llu/%llu vs %llu/%llu\n", s.name.c_str(),
                     sums[0], sums[1], ref_sum[0], ref_sum[1]);
        return 5;
      }
      std::sort(ms.begin(), ms.end());
      const float med = ms[ms.size() / 2], p10 = ms[ms.size() / 10], p90 = ms[(ms.size() * 9) / 10];
      std::fprintf(f, "%s,%s,%s,%s,%s,%d,%d,%d,%zu,%zu,%d,%d,%zu,%.5f,%.5f,%.5f,%llu,%llu\n", dest.c_str(), split_smsp ? "split" : "shared", opname, s.name.c_str(), sched_name,
                   traced, s.k1 * 16, s.k2 * 16, sched.size(), sched.size() - n_l2, n_l2, ctas, ms.size(), med, p10, p90,
                   sums[0], sums[1]);
      std::printf("%s %s %s %-11s traced=%d median %.3f ms (p10 %.3f, p90 %.3f) checksum %llu/%llu\n", dest.c_str(), opname, s.name.c_str(),
                  sched_name, traced, med, p10, p90, sums[0], sums[1]);
      cudaFree(dt);
    }
  }
  std::fclose(f);
  return 0;
}
