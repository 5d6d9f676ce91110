// burst_gap.cu -- the X-Stage calibration microbenchmark (docs/xstage-model.md section 3).
//
// K producer CTAs (256 threads) each store B bytes per burst, then spin G ns on clock64 with no
// memory traffic; many bursts per launch. Two store instructions (--store):
//   stg  (default) every thread issues 16-byte st.global.v4 from registers; BURST end after the
//        __syncthreads() that follows the last store.
//   bulk the bulk-copy (TMA) path of TMA epilogues: the burst's bytes are staged once in a 32 KiB
//        shared-memory buffer, one thread issues cp.async.bulk.global.shared::cta copies of at
//        most 32 KiB each from it (ceil(B / 32 KiB) per burst), commits the group and waits until the engine has read the
//        shared memory (cp.async.bulk.wait_group.read 0, the point where an epilogue may reuse it);
//        BURST end after that wait.
// Every timestamp comes from <xstage/probe.cuh>: BURST begin before the first store, BURST end
// (payload = B) as above. One dump file and one NVTX range per launch; the label names the store
// instruction (store=stg|bulk) and its bytes (store_bytes).
//
//   burst_gap --dest host|local|peer --out DIR [--store stg|bulk] [--quick] [--capacity N]
//             [--device D] [--peer P]                      sweep, one dump per configuration
//   burst_gap --overhead --out DIR                         kernel time, median of trials, CSV
//   burst_gap --probe-cost                                 cycles per probe (prints a line)
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I instrument/include
//        [-DXSTAGE_TRACE] -lineinfo burst_gap.cu -o burst_gap
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
  for (int b = 0; b < bursts; ++b) {
    __syncthreads();
    if (threadIdx.x < 32) {
      XSTAGE_BEGIN(EV_BURST, b);
      if (threadIdx.x == 0) {
        for (uint32_t off = 0; off < bytes_per_cta; off += kBulkStageBytes)
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(mine + off), "r"(src),
                       "r"(min(kBulkStageBytes, bytes_per_cta - off))
                       : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      }
      __syncwarp();
      XSTAGE_END_P(EV_BURST, b, bytes_per_cta);
    }
    spin_cycles(gap_cycles);
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // writes complete before exit
  if (threadIdx.x < 32) XSTAGE_PROBE_CLOSE();
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
  std::string store = "stg";  // store instruction: stg | bulk
  uint4* dev = nullptr;
  void* host = nullptr;
};

static double g_ns_per_cycle = 0.5;
static int g_device = 0;  // the GPU that runs the producers (--device)
static int g_peer = -1;   // the GPU that holds the peer buffer (--peer; default: the other one of 0/1)

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
  const uint32_t store_bytes = d.store == "bulk" ? std::min(c.B, kBulkStageBytes) : 16;  // the largest copy
  std::snprintf(buf, sizeof(buf), "dest=%s mode=%s K=%d B=%u G_ns=%.0f bursts=%d threads=%d store=%s store_bytes=%u",
                d.name.c_str(), c.mode, c.K, c.B, c.gap_ns, c.bursts, kThreads, d.store.c_str(), store_bytes);
  return buf;
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
    if (d.store == "bulk")
      burst_bulk_kernel<<<c.K, kThreads>>>(reinterpret_cast<char*>(d.dev), c.bursts, gap_cycles, c.B, view);
    else
      burst_kernel<<<c.K, kThreads>>>(d.dev, c.B / 16, c.bursts, gap_cycles, c.B, view);
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
    else {
      std::fprintf(stderr, "usage: burst_gap --dest host|local|peer --out DIR [--store stg|bulk] [--quick] [--capacity N] [--device D] [--peer P] | --overhead --out DIR | --probe-cost\n");
      return 2;
    }
  }
  if (store != "stg" && store != "bulk") {
    std::fprintf(stderr, "burst_gap: unknown --store %s (stg or bulk)\n", store.c_str());
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
  for (const Config& c : cfgs) max_bytes = std::max(max_bytes, (size_t)c.K * c.B);
  Dest d = make_dest(dest, max_bytes);
  d.store = store;
  {
    xstage::HostBuffer warm(cfgs[0].K, 1, 2 * cfgs[0].bursts + 8);
    launch(d, cfgs[0], &warm);  // warm-up (module load, first touch of mapped pages)
  }
  int idx = 0;
  for (const Config& c : cfgs) {
    xstage::HostBuffer tb(c.K, 1, capacity_override > 0 ? capacity_override : 2 * c.bursts + 8);
    const float ms = launch(d, c, &tb);
    char name[256];
    std::snprintf(name, sizeof(name), "%s/%s%s_%s_K%d_B%u_G%.0f.xsp", out.c_str(), d.name.c_str(),
                  store == "bulk" ? "_bulk" : "", c.mode, c.K, c.B, c.gap_ns);
    tb.write_dump(name, kEventNames, label_of(d, c), g_device, (uint32_t)g_device);
    if (++idx % 20 == 0 || idx == (int)cfgs.size())
      std::printf("%d/%zu configs, last %s %.3f ms\n", idx, cfgs.size(), name, ms);
  }
  return 0;
}
