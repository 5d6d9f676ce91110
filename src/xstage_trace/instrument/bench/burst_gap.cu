// burst_gap.cu -- the X-Stage calibration microbenchmark (docs/model.md §3).
//
// K producer CTAs (256 threads) each store B bytes per burst, then spin G ns on clock64 with no
// memory traffic; many bursts per launch. Three store instructions (--store):
//   stg  (default) every thread issues 16-byte st.global.v4 from registers; BURST end after the
//        __syncthreads() that follows the last store.
//   bulk the bulk-copy (TMA) path of TMA epilogues: the burst's bytes are staged once in a 32 KiB
//        shared-memory buffer, one thread issues cp.async.bulk.global.shared::cta copies of at
//        most 32 KiB each from it (ceil(B / 32 KiB) per burst), commits the group and waits until the engine has read the
//        shared memory (cp.async.bulk.wait_group.read 0, the point where an epilogue may reuse it);
//        BURST end after that wait.
//   tensor2d the 2-D tensor (TMA) store of GEMM / attention epilogues: the CTA's burst is a tile of
//        B / 256 rows x 128 bf16 columns of a row-major bf16 output N columns wide (--tensor-cols N,
//        default 7168: row stride 14336 bytes, DeepGEMM's D at N = 7168; N = 128 makes every tile
//        contiguous, the bulk kernel's layout); CTA k's tile is column block k mod (N / 128), row block
//        k / (N / 128), so the K tiles of one burst are K different blocks. One thread issues
//        cp.async.bulk.tensor.2d.global.shared::cta copies of boxes of at most 128 rows (32 KiB) from
//        the 32 KiB shared-memory stage through a CUtensorMap (cuTensorMapEncodeTiled, no swizzle;
//        L2 promotion 256 B; a second map for a last box of fewer rows), then the same commit /
//        wait_group.read 0 as bulk. Before the sweep, one launch is checked: every tile word where the
//        kernel puts it (tensor2d_check line; exit 5 on a mismatch).
// Every timestamp comes from <xstage/probe.cuh>: BURST begin before the first store, BURST end
// (payload = B) as above. One dump file and one NVTX range per launch; the label names the store
// instruction (store=stg|bulk|tensor2d) and its bytes (store_bytes); tensor2d adds row_stride_bytes.
//
//   burst_gap --dest host|local|peer --out DIR [--store stg|bulk|tensor2d] [--tensor-cols N] [--quick]
//             [--capacity N] [--device D] [--peer P]       sweep, one dump per configuration
//   burst_gap --overhead --out DIR                         kernel time, median of trials, CSV
//   burst_gap --probe-cost                                 cycles per probe (prints a line)
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I instrument/include
//        [-DXSTAGE_TRACE] -lineinfo burst_gap.cu -o burst_gap
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <xstage/host.hpp>
#include <xstage/nvtx.hpp>
#include <xstage/probe.cuh>

enum Event : uint32_t { EV_BURST = 0, EV_LAUNCH = 1, EV_PROBE = 2 };
static const std::vector<std::string> kEventNames = {"burst", "launch", "probe"};

constexpr int kThreads = 256;

__device__ __forceinline__ void st_v4(uint4* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ void spin_cycles(uint64_t cycles) {
  const uint64_t t0 = clock64();
  while ((uint64_t)clock64() - t0 < cycles) {
  }
}

__global__ void __launch_bounds__(kThreads) burst_kernel(uint4* dst, uint32_t vec_per_cta, int bursts,
                                                         uint64_t gap_cycles, uint32_t bytes_per_cta,
                                                         xstage::DeviceBuffer buf) {
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  uint4* mine = dst + (size_t)blockIdx.x * vec_per_cta;
  for (int b = 0; b < bursts; ++b) {
    __syncthreads();
    if (threadIdx.x < 32) XSTAGE_BEGIN(EV_BURST, b);
    const uint4 v = make_uint4(b, blockIdx.x, threadIdx.x, 0x5a5a5a5a);
    for (uint32_t i = threadIdx.x; i < vec_per_cta; i += kThreads) st_v4(mine + i, v);
    __syncthreads();
    if (threadIdx.x < 32) XSTAGE_END_P(EV_BURST, b, bytes_per_cta);
    spin_cycles(gap_cycles);
  }
  if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE();
}

constexpr uint32_t kBulkStageBytes = 32768;  // shared-memory staging buffer of the bulk kernel

// The burst loop of the TMA-store kernels (bulk, tensor2d), inlined where it stands so that each kernel
// compiles as if written out: per burst, the probe's BURST begin, thread 0 issues the copies (the macro's argument, a
// block reading the kernel's locals, src the stage's shared address), commits the group and waits until
// the engine has read the shared memory, BURST end, the gap; then the last writes' completion and the close.
#define STAGED_BURSTS(...)                                                                           \
  for (int b = 0; b < bursts; ++b) {                                                                 \
    __syncthreads();                                                                                 \
    if (threadIdx.x < 32) {                                                                          \
      XSTAGE_BEGIN(EV_BURST, b);                                                                     \
      if (threadIdx.x == 0) {                                                                        \
        __VA_ARGS__                                                                                  \
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");                                    \
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");                               \
      }                                                                                              \
      __syncwarp();                                                                                  \
      XSTAGE_END_P(EV_BURST, b, bytes_per_cta);                                                      \
    }                                                                                                \
    spin_cycles(gap_cycles);                                                                         \
  }                                                                                                  \
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); /* writes complete before exit */ \
  if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE()

// The bulk-copy twin of burst_kernel: same producers, bursts, gap and probes; the stores are
// cp.async.bulk copies of at most kBulkStageBytes each from one shared-memory buffer, issued by thread 0.
__global__ void __launch_bounds__(kThreads) burst_bulk_kernel(char* dst, int bursts, uint64_t gap_cycles,
                                                              uint32_t bytes_per_cta, xstage::DeviceBuffer buf) {
  __shared__ __align__(128) uint4 stage[kBulkStageBytes / 16];
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  for (uint32_t i = threadIdx.x; i < kBulkStageBytes / 16; i += kThreads) stage[i] = make_uint4(0, blockIdx.x, i, 0x5a5a5a5a);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes visible to the bulk copy
  const unsigned src = (unsigned)__cvta_generic_to_shared(stage);
  char* mine = dst + (size_t)blockIdx.x * bytes_per_cta;
  STAGED_BURSTS({
    for (uint32_t off = 0; off < bytes_per_cta; off += kBulkStageBytes)
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(mine + off), "r"(src),
                   "r"(min(kBulkStageBytes, bytes_per_cta - off))
                   : "memory");
  });
}

constexpr uint32_t kTileCols = 128;  // columns (bf16) of a CTA's tile in the tensor2d kernel: 256-byte row segments
constexpr uint32_t kTileRowBytes = kTileCols * 2;

// The 2-D tensor-store twin of burst_bulk_kernel: same producers, bursts, gap, probes and group handling;
// the copies are boxes of box_rows x kTileCols through `full` (and one of tail_rows through `tail`, if any);
// col_blocks tiles lie side by side in the output.
__global__ void __launch_bounds__(kThreads) burst_tensor2d_kernel(const __grid_constant__ CUtensorMap full,
                                                                  const __grid_constant__ CUtensorMap tail,
                                                                  uint32_t col_blocks, uint32_t box_rows,
                                                                  uint32_t tail_rows, int bursts,
                                                                  uint64_t gap_cycles, uint32_t bytes_per_cta,
                                                                  xstage::DeviceBuffer buf) {
  __shared__ __align__(128) uint4 stage[kBulkStageBytes / 16];
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  for (uint32_t i = threadIdx.x; i < kBulkStageBytes / 16; i += kThreads) stage[i] = make_uint4(0, blockIdx.x, i, 0x5a5a5a5a);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes visible to the tensor copy
  const unsigned src = (unsigned)__cvta_generic_to_shared(stage);
  const uint32_t rows = bytes_per_cta / kTileRowBytes;
  const int col = (int)((blockIdx.x % col_blocks) * kTileCols);
  const int row0 = (int)((blockIdx.x / col_blocks) * rows);
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(&full) : "memory");
    if (tail_rows) asm volatile("prefetch.tensormap [%0];" ::"l"(&tail) : "memory");
  }
  STAGED_BURSTS({
    const uint32_t full_rows = rows - tail_rows;
    for (uint32_t r = 0; r < full_rows; r += box_rows)
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(&full),
                   "r"(src), "r"(col), "r"(row0 + (int)r)
                   : "memory");
    if (tail_rows)
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(&tail),
                   "r"(src), "r"(col), "r"(row0 + (int)full_rows)
                   : "memory");
  });
}

// Measures ns per clock64 cycle against %globaltimer over ~2 ms, to convert gap ns to cycles.
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

// Cost of one probe: a loop of probes against the same loop without them.
__global__ void probe_cost_kernel(xstage::DeviceBuffer buf, int n, unsigned long long* cycles) {
  XSTAGE_PROBE_OPEN(buf, 0);
  const long long c0 = clock64();
  for (int i = 0; i < n; ++i) {
    XSTAGE_MARK(EV_PROBE, i, 16);
  }
  const long long c1 = clock64();
  XSTAGE_PROBE_CLOSE();
  if (threadIdx.x == 0) cycles[0] = (unsigned long long)(c1 - c0);
}

struct Config {
  const char* mode;  // periodic | isolated
  int K;
  uint32_t B;
  double gap_ns;
  int bursts;
};

struct Dest {
  std::string name;
  std::string store = "stg";  // store instruction: stg | bulk | tensor2d
  uint4* dev = nullptr;
  void* host = nullptr;
};

static double g_ns_per_cycle = 0.5;
static int g_device = 0;  // the GPU that runs the producers (--device)
static int g_peer = -1;   // the GPU that holds the peer buffer (--peer; default: the other one of 0/1)
static uint32_t g_tensor_cols = 7168;  // columns (bf16) of the tensor2d output (--tensor-cols)

static Dest make_dest(const std::string& name, size_t bytes) {
  Dest d;
  d.name = name;
  int ndev = 0;
  xstage::check_cuda(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
  if (name == "host") {
    xstage::check_cuda(cudaHostAlloc(&d.host, bytes, cudaHostAllocMapped), "cudaHostAlloc(mapped)");
    xstage::check_cuda(cudaHostGetDevicePointer((void**)&d.dev, d.host, 0), "cudaHostGetDevicePointer");
  } else if (name == "local") {
    xstage::check_cuda(cudaMalloc(&d.dev, bytes), "cudaMalloc(local)");
  } else if (name == "peer") {
    const int peer = g_peer >= 0 ? g_peer : (g_device == 0 ? 1 : 0);
    int can = 0;
    if (ndev >= 2 && peer < ndev && peer != g_device) cudaDeviceCanAccessPeer(&can, g_device, peer);
    if (!can) {
      std::fprintf(stderr,
                   "burst_gap: --dest peer needs two GPUs with P2P access; this machine has %d GPU(s)%s\n",
                   ndev, ndev >= 2 ? " without P2P between --device and --peer" : "");
      std::exit(4);
    }
    xstage::check_cuda(cudaSetDevice(peer), "cudaSetDevice(peer)");
    xstage::check_cuda(cudaMalloc(&d.dev, bytes), "cudaMalloc(peer)");
    xstage::check_cuda(cudaSetDevice(g_device), "cudaSetDevice(device)");
    xstage::check_cuda(cudaDeviceEnablePeerAccess(peer, 0), "cudaDeviceEnablePeerAccess");
    d.name = "peer" + std::to_string(g_device) + "to" + std::to_string(peer);  // the store path, with its direction
  } else {
    std::fprintf(stderr, "burst_gap: unknown --dest %s (host, local or peer)\n", name.c_str());
    std::exit(2);
  }
  return d;
}

static std::string label_of(const Dest& d, const Config& c) {
  char buf[256];
  const uint32_t store_bytes = d.store == "stg" ? 16 : std::min(c.B, kBulkStageBytes);  // the largest copy
  const int n = std::snprintf(buf, sizeof(buf), "dest=%s mode=%s K=%d B=%u G_ns=%.0f bursts=%d threads=%d store=%s store_bytes=%u",
                              d.name.c_str(), c.mode, c.K, c.B, c.gap_ns, c.bursts, kThreads, d.store.c_str(), store_bytes);
  if (d.store == "tensor2d") std::snprintf(buf + n, sizeof(buf) - n, " row_stride_bytes=%u", g_tensor_cols * 2);
  return buf;
}

// Bytes of the tensor2d kernel's output for a configuration: ceil(K / (N / 128)) row blocks of B / 256 rows.
static size_t tensor2d_bytes(const Config& c) {
  const uint32_t col_blocks = g_tensor_cols / kTileCols;
  return (size_t)((c.K + col_blocks - 1) / col_blocks) * (c.B / kTileRowBytes) * g_tensor_cols * 2;
}

// A CUtensorMap of the bf16 output at `base` (g_tensor_cols x rows, row-major) with boxes of kTileCols x box_rows.
static CUtensorMap tensor_map(void* base, uint64_t rows, uint32_t box_rows) {
  static decltype(&cuTensorMapEncodeTiled) encode = nullptr;
  if (!encode) {
    cudaDriverEntryPointQueryResult q;
    xstage::check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode, 12000,
                                                        cudaEnableDefault, &q),
                       "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (q != cudaDriverEntryPointSuccess || !encode) {
      std::fprintf(stderr, "burst_gap: the driver has no cuTensorMapEncodeTiled (--store tensor2d needs CUDA 12+)\n");
      std::exit(3);
    }
  }
  CUtensorMap m;
  const cuuint64_t dims[2] = {g_tensor_cols, rows};
  const cuuint64_t strides[1] = {(cuuint64_t)g_tensor_cols * 2};
  const cuuint32_t box[2] = {kTileCols, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "burst_gap: cuTensorMapEncodeTiled failed (%d) for %llu rows, box %u rows\n", (int)r,
                 (unsigned long long)rows, box_rows);
    std::exit(3);
  }
  return m;
}

static float launch(const Dest& d, const Config& c, xstage::HostBuffer* tb) {
  const uint64_t gap_cycles = (uint64_t)(c.gap_ns / g_ns_per_cycle);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  if (tb) tb->reset();
  const std::string label = label_of(d, c);
  {
    xstage::NvtxRange range(label.c_str());
    cudaEventRecord(e0);
    const xstage::DeviceBuffer view = tb ? tb->view() : xstage::DeviceBuffer{};
    if (d.store == "bulk") {
      burst_bulk_kernel<<<c.K, kThreads>>>(reinterpret_cast<char*>(d.dev), c.bursts, gap_cycles, c.B, view);
    } else if (d.store == "tensor2d") {
      const uint32_t rows = c.B / kTileRowBytes;
      const uint32_t box_rows = std::min(c.B, kBulkStageBytes) / kTileRowBytes;
      const uint32_t tail_rows = rows % box_rows;
      const uint64_t total_rows = tensor2d_bytes(c) / (g_tensor_cols * 2);
      const CUtensorMap full = tensor_map(d.dev, total_rows, box_rows);
      const CUtensorMap tail = tail_rows ? tensor_map(d.dev, total_rows, tail_rows) : full;
      burst_tensor2d_kernel<<<c.K, kThreads>>>(full, tail, g_tensor_cols / kTileCols, box_rows, tail_rows, c.bursts,
                                               gap_cycles, c.B, view);
    } else {
      burst_kernel<<<c.K, kThreads>>>(d.dev, c.B / 16, c.bursts, gap_cycles, c.B, view);
    }
    cudaEventRecord(e1);
    xstage::check_cuda(cudaGetLastError(), "burst_kernel launch");
    xstage::check_cuda(cudaEventSynchronize(e1), "burst_kernel");
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

// Checks that one tensor2d launch put every CTA's tile where burst_tensor2d_kernel places it: the output
// (zeroed first) holds, at each 16-byte word of CTA k's tile, the stage word {0, k, i, 0x5a5a5a5a} its
// box row and column came from, and nothing outside the tiles. Prints one line; exits 5 on a mismatch.
static void check_tensor2d(const Dest& d) {
  const Config c = {"check", 132, 49152, 0, 1};  // 3 row blocks, a 128-row box and a 64-row tail box
  const size_t bytes = tensor2d_bytes(c);
  xstage::check_cuda(cudaMemset(d.dev, 0, bytes), "cudaMemset(check)");
  xstage::HostBuffer tb(c.K, 1, 2 * c.bursts + 8);
  launch(d, c, &tb);
  std::vector<uint4> out(bytes / 16);
  xstage::check_cuda(cudaMemcpy(out.data(), d.dev, bytes, cudaMemcpyDefault), "cudaMemcpy(check)");
  const uint32_t rows = c.B / kTileRowBytes, box_rows = kBulkStageBytes / kTileRowBytes;
  const uint32_t words_per_row = g_tensor_cols * 2 / 16, words_per_seg = kTileRowBytes / 16;
  const uint32_t col_blocks = g_tensor_cols / kTileCols;
  size_t bad = 0, tile_words = 0;
  for (size_t w = 0; w < out.size(); ++w) {
    const uint32_t r = (uint32_t)(w / words_per_row), cw = (uint32_t)(w % words_per_row);
    const uint32_t k = (r / rows) * col_blocks + cw / words_per_seg;
    const bool in_tile = k < (uint32_t)c.K;
    const uint32_t lr = r % rows, i = (lr % box_rows) * words_per_seg + cw % words_per_seg;
    const uint4 v = out[w];
    const bool ok = in_tile ? (v.x == 0 && v.y == k && v.z == i && v.w == 0x5a5a5a5au)
                            : (v.x == 0 && v.y == 0 && v.z == 0 && v.w == 0);
    bad += !ok;
    tile_words += in_tile;
  }
  std::printf("tensor2d_check dest=%s cols=%u K=%d B=%u tile_words=%zu mismatched=%zu %s\n", d.name.c_str(),
              g_tensor_cols, c.K, c.B, tile_words, bad, bad ? "FAIL" : "ok");
  if (bad) std::exit(5);
}

static std::vector<Config> sweep(const std::string& dest, bool quick) {
  std::vector<Config> out;
  const double drain_guess_gbps = dest == "host" ? 30.0 : dest == "peer" ? 100.0 : 1000.0;  // conservative: gaps ≫ V/R
  std::vector<int> Ks = quick ? std::vector<int>{132} : std::vector<int>{33, 66, 132};
  std::vector<uint32_t> Bs = quick ? std::vector<uint32_t>{8192, 32768}
                                   : std::vector<uint32_t>{2048, 8192, 32768, 131072};
  std::vector<double> Gs = quick ? std::vector<double>{0, 2000, 8000, 32000}
                                 : std::vector<double>{0, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000};
  for (int K : Ks)
    for (uint32_t B : Bs)
      for (double G : Gs) out.push_back({"periodic", K, B, G, 64});
  std::vector<uint32_t> iso = quick ? std::vector<uint32_t>{8192, 32768, 131072}
                                    : std::vector<uint32_t>{2048, 4096, 8192, 16384, 24576, 32768, 49152,
                                                            65536, 98304, 131072, 196608, 262144, 393216, 524288};
  std::vector<int> isoK = quick ? std::vector<int>{132} : std::vector<int>{66, 132};
  for (int K : isoK)
    for (uint32_t B : iso) {
      const double V = (double)K * B;
      const double gap = V / drain_guess_gbps * 3.0 + 20000.0;  // ns: B/(GB/s) = ns
      out.push_back({"isolated", K, B, gap, 16});
    }
  return out;
}

int main(int argc, char** argv) {
  std::string dest = "host", out = ".", store = "stg";
  bool quick = false, overhead = false, probe_cost = false;
  int capacity_override = 0;  // > 0: records per slice (to show overflow accounting on real runs)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dest" && i + 1 < argc) dest = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--store" && i + 1 < argc) store = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--overhead") overhead = true;
    else if (a == "--probe-cost") probe_cost = true;
    else if (a == "--capacity" && i + 1 < argc) capacity_override = std::atoi(argv[++i]);
    else if (a == "--device" && i + 1 < argc) g_device = std::atoi(argv[++i]);
    else if (a == "--peer" && i + 1 < argc) g_peer = std::atoi(argv[++i]);
    else if (a == "--tensor-cols" && i + 1 < argc) g_tensor_cols = (uint32_t)std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: burst_gap --dest host|local|peer --out DIR [--store stg|bulk|tensor2d] [--tensor-cols N] [--quick] [--capacity N] [--device D] [--peer P] | --overhead --out DIR | --probe-cost\n");
      return 2;
    }
  }
  if (store != "stg" && store != "bulk" && store != "tensor2d") {
    std::fprintf(stderr, "burst_gap: unknown --store %s (stg, bulk or tensor2d)\n", store.c_str());
    return 2;
  }
  if (g_tensor_cols < kTileCols || g_tensor_cols % kTileCols != 0) {
    std::fprintf(stderr, "burst_gap: --tensor-cols %u is not a positive multiple of %u\n", g_tensor_cols, kTileCols);
    return 2;
  }
  xstage::check_cuda(cudaSetDevice(g_device), "cudaSetDevice(--device)");
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
#ifdef XSTAGE_TRACE
  const bool traced = true;
#else
  const bool traced = false;
#endif

  if (probe_cost) {
    const int n = 4096;
    xstage::HostBuffer tb(1, 1, n);
    unsigned long long* d;
    unsigned long long cyc = 0;
    cudaMalloc(&d, sizeof(cyc));
    for (int rep = 0; rep < 3; ++rep) probe_cost_kernel<<<1, 32>>>(tb.view(), n, d);
    xstage::check_cuda(cudaMemcpy(&cyc, d, sizeof(cyc), cudaMemcpyDeviceToHost), "probe_cost_kernel");
    std::printf("probe_cost traced=%d probes=%d cycles=%llu cycles_per_probe=%.2f\n", traced, n, cyc,
                (double)cyc / n);
    return 0;
  }

  if (overhead) {
    // Same workload with probes compiled in or out (two builds); kernel time by CUDA events.
    Dest d = make_dest("local", (size_t)132 * 131072);
    xstage::HostBuffer tb(132, 1, 2 * 64 + 8);
    const Config cases[] = {{"periodic", 132, 32768, 2000, 64}, {"periodic", 132, 8192, 8000, 64},
                            {"periodic", 132, 131072, 0, 64}};
    const std::string path = out + "/overhead_" + (traced ? "on" : "off") + ".csv";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fprintf(f, "traced,K,B,gap_ns,bursts,trials,kernel_ms_median\n");
    for (const Config& c : cases) {
      std::vector<float> ms;
      for (int t = 0; t < 5; ++t) launch(d, c, &tb);  // warm-up
      for (int t = 0; t < 41; ++t) ms.push_back(launch(d, c, &tb));
      std::sort(ms.begin(), ms.end());
      std::fprintf(f, "%d,%d,%u,%.0f,%d,%zu,%.5f\n", traced, c.K, c.B, c.gap_ns, c.bursts, ms.size(),
                   ms[ms.size() / 2]);
      std::printf("overhead traced=%d K=%d B=%u G=%.0f median_ms=%.5f\n", traced, c.K, c.B, c.gap_ns,
                  ms[ms.size() / 2]);
    }
    std::fclose(f);
    return 0;
  }

  if (!traced) {
    std::fprintf(stderr, "burst_gap: the sweep needs a build with -DXSTAGE_TRACE\n");
    return 2;
  }
  const std::vector<Config> cfgs = sweep(dest, quick);
  size_t max_bytes = 0;
  for (const Config& c : cfgs) max_bytes = std::max(max_bytes, store == "tensor2d" ? tensor2d_bytes(c) : (size_t)c.K * c.B);
  Dest d = make_dest(dest, max_bytes);
  d.store = store;
  if (store == "tensor2d") check_tensor2d(d);
  {
    xstage::HostBuffer warm(cfgs[0].K, 1, 2 * cfgs[0].bursts + 8);
    launch(d, cfgs[0], &warm);  // warm-up (module load, first touch of mapped pages)
  }
  // file-name suffix: the store instruction, and a tensor2d output width other than the default's
  const std::string suffix = store == "stg" ? std::string()
                             : "_" + store + (store == "tensor2d" && g_tensor_cols != 7168 ? "_c" + std::to_string(g_tensor_cols) : "");
  int idx = 0;
  for (const Config& c : cfgs) {
    xstage::HostBuffer tb(c.K, 1, capacity_override > 0 ? capacity_override : 2 * c.bursts + 8);
    const float ms = launch(d, c, &tb);
    char name[256];
    std::snprintf(name, sizeof(name), "%s/%s%s_%s_K%d_B%u_G%.0f.xsp", out.c_str(), d.name.c_str(),
                  suffix.c_str(), c.mode, c.K, c.B, c.gap_ns);
    tb.write_dump(name, kEventNames, label_of(d, c), g_device, (uint32_t)g_device);
    if (++idx % 20 == 0 || idx == (int)cfgs.size())
      std::printf("%d/%zu configs, last %s %.3f ms\n", idx, cfgs.size(), name, ms);
  }
  return 0;
}
