// path_drain.cu -- the store path's drain rate, its accepted-ahead capacity and the load coupling, from
// per-round completion timestamps (docs/model.md §3, §11; docs/calibration-physics.md).
//
// Three measurements, 132 producer CTAs (256 threads, one per SM) storing 2-D tensor (TMA) tiles of a
// row-major bf16 output 7168 columns wide (row stride 14336 bytes, DeepGEMM's D at N = 7168; CTA k's tile at
// column block k mod 56, row block k / 56), one thread issuing cp.async.bulk.tensor.2d boxes of at most
// 128 rows x 128 columns (32 KiB) from a 32 KiB shared-memory stage:
//
//   --rates   sustained stores: 256 back-to-back tiles of B = 32 KiB per CTA (every round the same tiles,
//             the calibration bench's addressing), then the copy engine (cudaMemcpyAsync device -> the same
//             pinned host buffer, 256 MiB); 2 warm-ups, median of 7 launches timed with CUDA events each.
//             Prints `rate ...` lines and writes rates.csv.
//   --ramp    synchronized bursts: before every burst all K CTAs meet at a grid barrier (an atomic counter;
//             every CTA is resident), so each burst of V = K x B starts from an idle path with all producers
//             together; 12 bursts per launch, a recovery gap of 3 V / (30 GB/s) + 20 us after each, V from
//             1 MiB to 66 MiB. BURST begin before the first box, BURST end after cp.async.bulk.wait_group.read 0
//             (accepted: the stage may be reused), a `done` mark after cp.async.bulk.wait_group 0 (written).
//             One dump per launch, label `kernel=drain_ramp dest=D K B G_ns bursts store=tensor2d rep=N`.
//   --load    load-compute-store rounds: per round each CTA TMA-loads 4 x 32 KiB operand blocks from fresh
//             HBM addresses (cp.async.bulk global -> shared, one mbarrier), runs a compute phase of X ns whose
//             result depends on the loaded words (an LCG chain seeded by them, written into the stage), stores
//             its 32 KiB tile and waits for the engine's read; 48 rounds, X in {0, 5, 15, 40, 80, 160} us.
//             Events: LOAD span (issue -> mbarrier complete), BURST span (store issue -> read done). Label
//             `kernel=load_rounds dest=D K B G_ns=X bursts=48 store=tensor2d load_bytes=131072`.
//
//   --stream  streamed rounds: a mainloop of S load steps through 4 stage buffers (32 KiB blocks, fresh HBM addresses,
//             step j loaded when step j - 4 is done, across rounds), c ns of compute per step on each block, then the
//             tile's store, whose read is waited for only before the stage is rewritten; S = 8 and 32, several c.
//             Label `kernel=stream_rounds ... steps=S stages=4 step_ns=c`.
//
//   path_drain --dest host|local --out DIR (--rates | --ramp [--rep N] | --load | --stream)
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/xstage_trace/instrument/include -DXSTAGE_TRACE
//        -lineinfo path_drain.cu -o path_drain
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <xstage/host.hpp>
#include <xstage/probe.cuh>

enum Event : uint32_t { EV_BURST = 0, EV_LOAD = 1, EV_DONE = 2 };
static const std::vector<std::string> kEventNames = {"burst", "load", "done"};

constexpr int kThreads = 256;
constexpr uint32_t kStageBytes = 32768;   // shared-memory stage of one store box (128 rows x 256 bytes)
constexpr uint32_t kTileCols = 128;       // bf16 columns of a tile: 256-byte row segments
constexpr uint32_t kTileRowBytes = kTileCols * 2;
constexpr uint32_t kOutCols = 7168;       // bf16 columns of the output: row stride 14336 bytes
constexpr uint32_t kColBlocks = kOutCols / kTileCols;
constexpr uint32_t kLoadBlocks = 4;       // operand blocks per load round
constexpr uint32_t kLoadBlockBytes = 32768;

__device__ __forceinline__ void spin_cycles(uint64_t cycles) {
  const uint64_t t0 = clock64();
  while ((uint64_t)clock64() - t0 < cycles) {
  }
}

// All CTAs of the grid meet here: the counter reaches `target` once every CTA arrived (all are resident).
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    while (*(volatile unsigned*)counter < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

__device__ __forceinline__ void fill_stage(uint4* stage, uint32_t salt) {
  for (uint32_t i = threadIdx.x; i < kStageBytes / 16; i += kThreads) stage[i] = make_uint4(salt, blockIdx.x, i, 0x5a5a5a5a);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes visible to the tensor copy
}

// One CTA's tile of B bytes (B / 256 rows) from the stage: boxes of box_rows rows, then commit.
__device__ __forceinline__ void store_tile(const CUtensorMap* map, unsigned src, uint32_t rows, uint32_t box_rows) {
  const int col = (int)((blockIdx.x % kColBlocks) * kTileCols);
  const int row0 = (int)((blockIdx.x / kColBlocks) * rows);
  for (uint32_t r = 0; r < rows; r += box_rows)
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
                 "r"(col), "r"(row0 + (int)r)
                 : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// --ramp and the sustained part of --rates: `bursts` tiles of B bytes per CTA; with `barrier`, a recovery gap
// and a grid barrier before each burst, the burst's read wait (BURST end) and its write completion (`done`).
__global__ void __launch_bounds__(kThreads) ramp_kernel(const __grid_constant__ CUtensorMap map, uint32_t box_rows,
                                                        int bursts, uint32_t bytes_per_cta, uint64_t gap_cycles,
                                                        unsigned* barrier, xstage::DeviceBuffer buf) {
  __shared__ __align__(128) uint4 stage[kStageBytes / 16];
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  fill_stage(stage, 0);
  const unsigned src = (unsigned)__cvta_generic_to_shared(stage);
  const uint32_t rows = bytes_per_cta / kTileRowBytes;
  if (threadIdx.x == 0) asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
  for (int b = 0; b < bursts; ++b) {
    if (barrier) {
      spin_cycles(gap_cycles);
      grid_barrier(barrier, (unsigned)(b + 1) * gridDim.x);
    }
    if (threadIdx.x < 32) {
      XSTAGE_BEGIN(EV_BURST, b);
      if (threadIdx.x == 0) {
        store_tile(&map, src, rows, box_rows);
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      }
      __syncwarp();
      XSTAGE_END_P(EV_BURST, b, bytes_per_cta);
      if (barrier) {
        if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        __syncwarp();
        XSTAGE_MARK(EV_DONE, b, bytes_per_cta);
      }
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE();
}

// --load: per round, load 4 operand blocks (fresh addresses), compute X cycles on them, store the tile.
__global__ void __launch_bounds__(kThreads) load_rounds_kernel(const __grid_constant__ CUtensorMap map, const char* operands,
                                                               size_t operand_bytes, int rounds, uint64_t compute_cycles,
                                                               xstage::DeviceBuffer buf) {
  extern __shared__ __align__(128) unsigned char smem[];  // kLoadBlocks x 32 KiB operands, then the 32 KiB stage
  __shared__ __align__(8) unsigned long long mbar;
  uint4* stage = reinterpret_cast<uint4*>(smem + kLoadBlocks * kLoadBlockBytes);
  const unsigned ops = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned src = (unsigned)__cvta_generic_to_shared(stage);
  const unsigned bar = (unsigned)__cvta_generic_to_shared(&mbar);
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
  }
  __syncthreads();
  const uint32_t round_bytes = kLoadBlocks * kLoadBlockBytes;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x < 32) XSTAGE_BEGIN(EV_LOAD, r);
    if (threadIdx.x == 0) {
      const size_t off = ((size_t)r * gridDim.x + blockIdx.x) * round_bytes % operand_bytes;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(round_bytes) : "memory");
      for (uint32_t i = 0; i < kLoadBlocks; ++i)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         ops + i * kLoadBlockBytes),
                     "l"(operands + off + (size_t)i * kLoadBlockBytes), "r"(kLoadBlockBytes), "r"(bar)
                     : "memory");
    }
    uint32_t ready = 0;
    do {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(ready)
                   : "r"(bar), "r"((uint32_t)(r & 1))
                   : "memory");
    } while (!ready);
    if (threadIdx.x < 32) XSTAGE_END_P(EV_LOAD, r, round_bytes);
    // compute on what was loaded: an LCG chain seeded by this thread's loaded words, for X cycles
    const uint32_t* words = reinterpret_cast<const uint32_t*>(smem);
    uint32_t acc = words[threadIdx.x] ^ words[threadIdx.x + round_bytes / 8];
    const uint64_t t0 = clock64();
    while ((uint64_t)clock64() - t0 < compute_cycles) acc = acc * 1664525u + 1013904223u;
    for (uint32_t i = threadIdx.x; i < kStageBytes / 16; i += kThreads) stage[i] = make_uint4(acc, (uint32_t)r, blockIdx.x, i);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x < 32) {
      XSTAGE_BEGIN(EV_BURST, r);
      if (threadIdx.x == 0) {
        store_tile(&map, src, kStageBytes / kTileRowBytes, kStageBytes / kTileRowBytes);
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      }
      __syncwarp();
      XSTAGE_END_P(EV_BURST, r, kStageBytes);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE();
}

constexpr int kMaxStages = 6;

// --stream: per round S load steps through D stage buffers (a mainloop: step j's block is loaded when step j - D is
// done, across rounds too, so the next round's first D blocks load during this round's last D steps, before its
// store), c cycles of compute on each block, then the tile's store; the store's read is waited for only before the
// stage is rewritten (the next round's epilogue). Events: LOAD span = the round's mainloop (first wait to last
// compute), BURST span = the store's issue (begin) and the wait for its read (end, one round later: tile r's end
// record is written when round r + 1 reuses the stage, the last one after the loop).
__global__ void __launch_bounds__(kThreads) stream_rounds_kernel(const __grid_constant__ CUtensorMap map, const char* operands,
                                                                 size_t operand_bytes, int rounds, int steps, int stages,
                                                                 uint64_t step_cycles, xstage::DeviceBuffer buf) {
  extern __shared__ __align__(128) unsigned char smem[];  // stages x 32 KiB blocks, then the 32 KiB stage
  __shared__ __align__(8) unsigned long long bars[kMaxStages];
  uint4* stage = reinterpret_cast<uint4*>(smem + stages * kLoadBlockBytes);
  const unsigned ops = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned src = (unsigned)__cvta_generic_to_shared(stage);
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  const long total = (long)rounds * steps;
  auto issue = [&](long g) {  // thread 0: block g into buffer g mod D, fresh HBM address
    const unsigned bar = (unsigned)__cvta_generic_to_shared(&bars[g % stages]);
    const size_t off = ((size_t)g * gridDim.x + blockIdx.x) * kLoadBlockBytes % operand_bytes;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kLoadBlockBytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     ops + (unsigned)(g % stages) * kLoadBlockBytes),
                 "l"(operands + off), "r"(kLoadBlockBytes), "r"(bar)
                 : "memory");
  };
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&bars[i])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (long g = 0; g < stages && g < total; ++g) issue(g);
  uint32_t acc = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x < 32) XSTAGE_BEGIN(EV_LOAD, r);
    for (int j = 0; j < steps; ++j) {
      const long g = (long)r * steps + j;
      const unsigned bar = (unsigned)__cvta_generic_to_shared(&bars[g % stages]);
      uint32_t ready = 0;
      do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ready)
                     : "r"(bar), "r"((uint32_t)((g / stages) & 1))
                     : "memory");
      } while (!ready);
      acc ^= reinterpret_cast<const uint32_t*>(smem + (g % stages) * kLoadBlockBytes)[threadIdx.x];
      const uint64_t t0 = clock64();
      while ((uint64_t)clock64() - t0 < step_cycles) acc = acc * 1664525u + 1013904223u;
      __syncthreads();  // every thread is done with the buffer
      if (threadIdx.x == 0 && g + stages < total) issue(g + stages);
    }
    if (threadIdx.x < 32) XSTAGE_END_P(EV_LOAD, r, (uint32_t)steps * kLoadBlockBytes);
    if (threadIdx.x < 32) {
      if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the previous tile's read
      __syncwarp();
      if (r > 0) XSTAGE_END_P(EV_BURST, r - 1, kStageBytes);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < kStageBytes / 16; i += kThreads) stage[i] = make_uint4(acc, (uint32_t)r, blockIdx.x, i);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x < 32) {
      XSTAGE_BEGIN(EV_BURST, r);
      if (threadIdx.x == 0) store_tile(&map, src, kStageBytes / kTileRowBytes, kStageBytes / kTileRowBytes);
      __syncwarp();
    }
  }
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    __syncwarp();
    XSTAGE_END_P(EV_BURST, rounds - 1, kStageBytes);
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE();
}

__global__ void clock_rate_kernel(unsigned long long* out) {
  unsigned long long g0, g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  } while (g1 - g0 < 2000000ull);
  const long long c1 = clock64();
  out[0] = g1 - g0;
  out[1] = (unsigned long long)(c1 - c0);
}

static double g_ns_per_cycle = 0.5;

// The bf16 output at `base`: kOutCols x rows, row-major, boxes of kTileCols x box_rows.
static CUtensorMap tensor_map(void* base, uint64_t rows, uint32_t box_rows) {
  static decltype(&cuTensorMapEncodeTiled) encode = nullptr;
  if (!encode) {
    cudaDriverEntryPointQueryResult q;
    xstage::check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode, 12000, cudaEnableDefault, &q),
                       "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (q != cudaDriverEntryPointSuccess || !encode) {
      std::fprintf(stderr, "path_drain: the driver has no cuTensorMapEncodeTiled\n");
      std::exit(3);
    }
  }
  CUtensorMap m;
  const cuuint64_t dims[2] = {kOutCols, rows};
  const cuuint64_t strides[1] = {(cuuint64_t)kOutCols * 2};
  const cuuint32_t box[2] = {kTileCols, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "path_drain: cuTensorMapEncodeTiled failed (%d)\n", (int)r);
    std::exit(3);
  }
  return m;
}

struct Output {
  void* dev = nullptr;
  void* host = nullptr;
  size_t bytes = 0;
};

static Output make_output(const std::string& dest, size_t bytes) {
  Output o;
  o.bytes = bytes;
  if (dest == "host") {
    xstage::check_cuda(cudaHostAlloc(&o.host, bytes, cudaHostAllocMapped), "cudaHostAlloc(mapped)");
    xstage::check_cuda(cudaHostGetDevicePointer(&o.dev, o.host, 0), "cudaHostGetDevicePointer");
  } else if (dest == "local") {
    xstage::check_cuda(cudaMalloc(&o.dev, bytes), "cudaMalloc(local)");
  } else {
    std::fprintf(stderr, "path_drain: unknown --dest %s (host or local)\n", dest.c_str());
    std::exit(2);
  }
  return o;
}

// Rows of the output that K tiles of B bytes need: ceil(K / 56) row blocks of B / 256 rows.
static uint64_t rows_for(int K, uint32_t B) { return (uint64_t)((K + kColBlocks - 1) / kColBlocks) * (B / kTileRowBytes); }

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  xstage::check_cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static void run_rates(const std::string& dest, const std::string& out) {
  const int K = 132, bursts = 256;
  const uint32_t B = 32768;
  const size_t memcpy_bytes = (size_t)256 << 20;
  Output o = make_output(dest, std::max((size_t)rows_for(K, B) * kOutCols * 2, memcpy_bytes));
  const CUtensorMap map = tensor_map(o.dev, rows_for(K, B), B / kTileRowBytes);
  void* src = nullptr;
  xstage::check_cuda(cudaMalloc(&src, memcpy_bytes), "cudaMalloc(memcpy src)");
  xstage::check_cuda(cudaMemset(src, 0x3c, memcpy_bytes), "cudaMemset(src)");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> store_ms, copy_ms;
  for (int t = 0; t < 9; ++t) {
    cudaEventRecord(e0);
    ramp_kernel<<<K, kThreads>>>(map, B / kTileRowBytes, bursts, B, 0, nullptr, xstage::DeviceBuffer{});
    cudaEventRecord(e1);
    xstage::check_cuda(cudaGetLastError(), "ramp_kernel launch");
    const float ms = elapsed_ms(e0, e1);
    if (t >= 2) store_ms.push_back(ms);
  }
  void* dst = dest == "host" ? o.host : o.dev;
  for (int t = 0; t < 9; ++t) {
    cudaEventRecord(e0);
    xstage::check_cuda(cudaMemcpyAsync(dst, src, memcpy_bytes, dest == "host" ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice),
                       "cudaMemcpyAsync");
    cudaEventRecord(e1);
    const float ms = elapsed_ms(e0, e1);
    if (t >= 2) copy_ms.push_back(ms);
  }
  const double store_gbps = (double)K * B * bursts / (median(store_ms) * 1e6);
  const double copy_gbps = (double)memcpy_bytes / (median(copy_ms) * 1e6);
  std::printf("rate dest=%s sustained_tensor2d_gbps=%.3f (K=%d B=%u bursts=%d median of %zu, %.4f ms) copy_engine_gbps=%.3f (%zu MiB, median of %zu, %.4f ms)\n",
              dest.c_str(), store_gbps, K, B, bursts, store_ms.size(), median(store_ms), copy_gbps, memcpy_bytes >> 20, copy_ms.size(),
              median(copy_ms));
  FILE* f = std::fopen((out + "/rates_" + dest + ".csv").c_str(), "w");
  std::fprintf(f, "dest,what,bytes,trials,ms_median,ms_min,ms_max,gbps\n");
  std::sort(store_ms.begin(), store_ms.end());
  std::sort(copy_ms.begin(), copy_ms.end());
  std::fprintf(f, "%s,sustained_tensor2d,%zu,%zu,%.5f,%.5f,%.5f,%.4f\n", dest.c_str(), (size_t)K * B * bursts, store_ms.size(), median(store_ms),
               store_ms.front(), store_ms.back(), store_gbps);
  std::fprintf(f, "%s,copy_engine,%zu,%zu,%.5f,%.5f,%.5f,%.4f\n", dest.c_str(), memcpy_bytes, copy_ms.size(), median(copy_ms), copy_ms.front(),
               copy_ms.back(), copy_gbps);
  std::fclose(f);
}

// Every 16-byte word of every CTA's tile of the last ramp launch (B bytes, boxes of box_rows rows) holds the stage
// word its box row came from: {0, CTA, index, 0x5a5a5a5a}. Prints one line; exits 5 on a mismatch.
static void check_ramp_output(const Output& o, int K, uint32_t B, uint32_t box_rows, const std::string& dest) {
  const uint64_t rows = rows_for(K, B);
  std::vector<uint4> v(rows * kOutCols * 2 / 16);
  xstage::check_cuda(cudaMemcpy(v.data(), o.dev, v.size() * 16, cudaMemcpyDefault), "cudaMemcpy(check)");
  const uint32_t words_per_row = kOutCols * 2 / 16, words_per_seg = kTileRowBytes / 16, tile_rows = B / kTileRowBytes;
  size_t bad = 0, checked = 0;
  for (int k = 0; k < K; ++k)
    for (uint32_t r = 0; r < tile_rows; ++r)
      for (uint32_t c = 0; c < words_per_seg; ++c) {
        const uint64_t row = (uint64_t)(k / kColBlocks) * tile_rows + r;
        const uint4 w = v[row * words_per_row + (k % kColBlocks) * words_per_seg + c];
        bad += !(w.x == 0 && w.y == (uint32_t)k && w.z == (r % box_rows) * words_per_seg + c && w.w == 0x5a5a5a5au);
        ++checked;
      }
  std::printf("ramp_check dest=%s B=%u words=%zu mismatched=%zu %s\n", dest.c_str(), B, checked, bad, bad ? "FAIL" : "ok");
  if (bad) std::exit(5);
}

static void run_ramp(const std::string& dest, const std::string& out, int rep) {
  const int K = 132, bursts = 12;
  const std::vector<uint32_t> Bs = {8192, 16384, 32768, 65536, 98304, 131072, 196608, 262144, 393216, 524288};
  const uint32_t Bmax = Bs.back();
  Output o = make_output(dest, rows_for(K, Bmax) * kOutCols * 2);
  unsigned* barrier = nullptr;
  xstage::check_cuda(cudaMalloc(&barrier, sizeof(unsigned)), "cudaMalloc(barrier)");
  const double drain_guess_gbps = dest == "host" ? 30.0 : 1000.0;
  for (uint32_t B : Bs) {
    const uint32_t box_rows = std::min(B, kStageBytes) / kTileRowBytes;
    const CUtensorMap map = tensor_map(o.dev, rows_for(K, B), box_rows);
    const double V = (double)K * B;
    const double gap_ns = V / drain_guess_gbps * 3.0 + 20000.0;
    xstage::HostBuffer tb(K, 1, 3 * bursts + 8);
    xstage::check_cuda(cudaMemset(barrier, 0, sizeof(unsigned)), "cudaMemset(barrier)");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    ramp_kernel<<<K, kThreads>>>(map, box_rows, bursts, B, (uint64_t)(gap_ns / g_ns_per_cycle), barrier, tb.view());
    cudaEventRecord(e1);
    xstage::check_cuda(cudaGetLastError(), "ramp_kernel launch");
    const float ms = elapsed_ms(e0, e1);
    char label[256], name[512];
    std::snprintf(label, sizeof(label), "kernel=drain_ramp dest=%s K=%d B=%u G_ns=%.0f bursts=%d threads=%d store=tensor2d store_bytes=%u row_stride_bytes=%u rep=%d",
                  dest.c_str(), K, B, gap_ns, bursts, kThreads, std::min(B, kStageBytes), kOutCols * 2, rep);
    std::snprintf(name, sizeof(name), "%s/ramp_%s_K%d_B%u_rep%d.xsp", out.c_str(), dest.c_str(), K, B, rep);
    tb.write_dump(name, kEventNames, label, 0, 0);
    std::printf("ramp dest=%s B=%u V=%.0f rep=%d kernel_ms=%.3f\n", dest.c_str(), B, V, rep, ms);
    if (B == Bmax) check_ramp_output(o, K, B, box_rows, dest);
  }
}

// Every 16-byte word of every CTA's tile holds what the last round's stage put there: {acc, last round, CTA, stage
// index}. Prints one line; exits 5 on a mismatch.
static void check_load_output(const Output& o, int K, int rounds, const std::string& dest) {
  const uint64_t rows = rows_for(K, kStageBytes);
  std::vector<uint4> v(rows * kOutCols * 2 / 16);
  xstage::check_cuda(cudaMemcpy(v.data(), o.dev, v.size() * 16, cudaMemcpyDefault), "cudaMemcpy(check)");
  const uint32_t words_per_row = kOutCols * 2 / 16, words_per_seg = kTileRowBytes / 16, tile_rows = kStageBytes / kTileRowBytes;
  size_t bad = 0, checked = 0;
  for (int k = 0; k < K; ++k)
    for (uint32_t r = 0; r < tile_rows; ++r)
      for (uint32_t c = 0; c < words_per_seg; ++c) {
        const uint64_t row = (uint64_t)(k / kColBlocks) * tile_rows + r;
        const uint4 w = v[row * words_per_row + (k % kColBlocks) * words_per_seg + c];
        bad += !(w.y == (uint32_t)(rounds - 1) && w.z == (uint32_t)k && w.w == r * words_per_seg + c);
        ++checked;
      }
  std::printf("load_check dest=%s words=%zu mismatched=%zu %s\n", dest.c_str(), checked, bad, bad ? "FAIL" : "ok");
  if (bad) std::exit(5);
}

static void run_load(const std::string& dest, const std::string& out) {
  const int K = 132, rounds = 48;
  const uint32_t B = kStageBytes;
  const size_t operand_bytes = (size_t)1 << 30;  // > 48 rounds x 132 CTAs x 128 KiB: every round's operands fresh
  Output o = make_output(dest, rows_for(K, B) * kOutCols * 2);
  const CUtensorMap map = tensor_map(o.dev, rows_for(K, B), B / kTileRowBytes);
  char* operands = nullptr;
  xstage::check_cuda(cudaMalloc(&operands, operand_bytes), "cudaMalloc(operands)");
  xstage::check_cuda(cudaMemset(operands, 0x5b, operand_bytes), "cudaMemset(operands)");
  const int smem = kLoadBlocks * kLoadBlockBytes + kStageBytes;
  xstage::check_cuda(cudaFuncSetAttribute(load_rounds_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "cudaFuncSetAttribute");
  const std::vector<double> Xs = {0, 5000, 15000, 40000, 80000, 160000};
  FILE* f = std::fopen((out + "/load_rounds_" + dest + ".csv").c_str(), "w");
  std::fprintf(f, "dest,K,B,compute_ns,rounds,kernel_ms\n");
  for (double X : Xs) {
    xstage::HostBuffer warm(K, 1, 4 * rounds + 8);
    load_rounds_kernel<<<K, kThreads, smem>>>(map, operands, operand_bytes, rounds, (uint64_t)(X / g_ns_per_cycle), warm.view());
    xstage::check_cuda(cudaDeviceSynchronize(), "load_rounds warm-up");
    xstage::HostBuffer tb(K, 1, 4 * rounds + 8);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    load_rounds_kernel<<<K, kThreads, smem>>>(map, operands, operand_bytes, rounds, (uint64_t)(X / g_ns_per_cycle), tb.view());
    cudaEventRecord(e1);
    xstage::check_cuda(cudaGetLastError(), "load_rounds_kernel launch");
    const float ms = elapsed_ms(e0, e1);
    char label[256], name[512];
    std::snprintf(label, sizeof(label), "kernel=load_rounds dest=%s K=%d B=%u G_ns=%.0f bursts=%d threads=%d store=tensor2d store_bytes=%u row_stride_bytes=%u load_bytes=%u",
                  dest.c_str(), K, B, X, rounds, kThreads, B, kOutCols * 2, kLoadBlocks * kLoadBlockBytes);
    std::snprintf(name, sizeof(name), "%s/load_%s_K%d_X%.0f.xsp", out.c_str(), dest.c_str(), K, X);
    tb.write_dump(name, kEventNames, label, 0, 0);
    std::fprintf(f, "%s,%d,%u,%.0f,%d,%.5f\n", dest.c_str(), K, B, X, rounds, ms);
    check_load_output(o, K, rounds, dest);
    std::printf("load dest=%s X=%.0f ns kernel_ms=%.4f store_gbps=%.2f\n", dest.c_str(), X, ms, (double)K * B * rounds / (ms * 1e6));
  }
  std::fclose(f);
}

static void run_stream(const std::string& dest, const std::string& out) {
  const int K = 132, rounds = 48;
  const uint32_t B = kStageBytes;
  const size_t operand_bytes = (size_t)1 << 30;
  Output o = make_output(dest, rows_for(K, B) * kOutCols * 2);
  const CUtensorMap map = tensor_map(o.dev, rows_for(K, B), B / kTileRowBytes);
  char* operands = nullptr;
  xstage::check_cuda(cudaMalloc(&operands, operand_bytes), "cudaMalloc(operands)");
  xstage::check_cuda(cudaMemset(operands, 0x5b, operand_bytes), "cudaMemset(operands)");
  const int stages = 4;
  const int smem = stages * kLoadBlockBytes + kStageBytes;
  xstage::check_cuda(cudaFuncSetAttribute(stream_rounds_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "cudaFuncSetAttribute");
  struct Case { int steps; double step_ns; };
  const Case cases[] = {{8, 500}, {8, 2000}, {8, 8000}, {32, 500}, {32, 1500}, {32, 4000}};
  FILE* f = std::fopen((out + "/stream_rounds_" + dest + ".csv").c_str(), "w");
  std::fprintf(f, "dest,K,B,steps,stages,step_ns,rounds,kernel_ms\n");
  for (const Case& c : cases) {
    const uint64_t cyc = (uint64_t)(c.step_ns / g_ns_per_cycle);
    xstage::HostBuffer warm(K, 1, 4 * rounds + 8);
    stream_rounds_kernel<<<K, kThreads, smem>>>(map, operands, operand_bytes, rounds, c.steps, stages, cyc, warm.view());
    xstage::check_cuda(cudaDeviceSynchronize(), "stream_rounds warm-up");
    xstage::HostBuffer tb(K, 1, 4 * rounds + 8);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    stream_rounds_kernel<<<K, kThreads, smem>>>(map, operands, operand_bytes, rounds, c.steps, stages, cyc, tb.view());
    cudaEventRecord(e1);
    xstage::check_cuda(cudaGetLastError(), "stream_rounds_kernel launch");
    const float ms = elapsed_ms(e0, e1);
    char label[320], name[512];
    std::snprintf(label, sizeof(label), "kernel=stream_rounds dest=%s K=%d B=%u G_ns=%.0f bursts=%d threads=%d store=tensor2d store_bytes=%u row_stride_bytes=%u steps=%d stages=%d step_ns=%.0f load_bytes=%u",
                  dest.c_str(), K, B, c.steps * c.step_ns, rounds, kThreads, B, kOutCols * 2, c.steps, stages, c.step_ns, kLoadBlockBytes);
    std::snprintf(name, sizeof(name), "%s/stream_%s_S%d_c%.0f.xsp", out.c_str(), dest.c_str(), c.steps, c.step_ns);
    tb.write_dump(name, kEventNames, label, 0, 0);
    std::fprintf(f, "%s,%d,%u,%d,%d,%.0f,%d,%.5f\n", dest.c_str(), K, B, c.steps, stages, c.step_ns, rounds, ms);
    std::printf("stream dest=%s S=%d c=%.0f ns kernel_ms=%.4f store_gbps=%.2f\n", dest.c_str(), c.steps, c.step_ns, ms, (double)K * B * rounds / (ms * 1e6));
    check_load_output(o, K, rounds, dest);
  }
  std::fclose(f);
}

int main(int argc, char** argv) {
  std::string dest = "host", out = ".", what;
  int rep = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dest" && i + 1 < argc) dest = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--rep" && i + 1 < argc) rep = std::atoi(argv[++i]);
    else if (a == "--rates" || a == "--ramp" || a == "--load" || a == "--stream") what = a;
    else {
      std::fprintf(stderr, "usage: path_drain --dest host|local --out DIR (--rates | --ramp [--rep N] | --load | --stream)\n");
      return 2;
    }
  }
  if (what.empty()) {
    std::fprintf(stderr, "path_drain: say --rates, --ramp, --load or --stream\n");
    return 2;
  }
  {
    unsigned long long* d;
    unsigned long long h[2];
    cudaMalloc(&d, sizeof(h));
    clock_rate_kernel<<<1, 1>>>(d);
    xstage::check_cuda(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), "clock_rate_kernel");
    cudaFree(d);
    g_ns_per_cycle = (double)h[0] / (double)h[1];
    std::printf("ns_per_cycle %.5f\n", g_ns_per_cycle);
  }
  if (what == "--rates") run_rates(dest, out);
  else if (what == "--ramp") run_ramp(dest, out, rep);
  else if (what == "--load") run_load(dest, out);
  else run_stream(dest, out);
  return 0;
}
